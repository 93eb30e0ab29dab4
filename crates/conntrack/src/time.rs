//! Time as the engine sees it: a monotonic count of nanoseconds the caller hands in.

use std::ops::Add;
use std::time::Duration;

/// A point in time, in nanoseconds from an arbitrary origin chosen by the caller
/// (a pcap's epoch, a worker's monotonic clock, a test's fake clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin.
    pub const ZERO: Timestamp = Timestamp(0);

    /// From nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Self(n)
    }

    /// From whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        Self(s.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_and_since_never_underflows() {
        let t = Timestamp::from_nanos(u64::MAX - 1);
        assert_eq!((t + Duration::from_secs(5)).as_nanos(), u64::MAX);
        assert_eq!(Timestamp::ZERO.saturating_since(t), Duration::ZERO);
        assert_eq!(
            Timestamp::from_secs(3).saturating_since(Timestamp::from_secs(1)),
            Duration::from_secs(2)
        );
    }
}
