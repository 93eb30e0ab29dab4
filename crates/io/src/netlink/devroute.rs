//! Routes that announce rather than forward: `PREFIX dev DEV table T proto P metric M`,
//! added and deleted over rtnetlink. A routing daemon learns them from table
//! `T` (BIRD: `protocol kernel { kernel table T; learn; }`) and exports them by BGP; no
//! `ip rule` points at that table, so the kernel never forwards by them.

use std::io;
use std::net::IpAddr;

use super::parse::sys;
use super::Netlink;

/// The routing table the announced routes go to by default (not used for forwarding).
pub const TABLE_ANNOUNCE: u32 = 250;

/// The `rtm_protocol` announced routes carry by default: 250, unassigned in
/// `/etc/iproute2/rt_protos` (which an operator may name `quicknat`), so the daemon and
/// `ip route show proto 250` tell them from every other route.
pub const PROTO_QUICKNAT: u8 = 250;

/// `RTA_PRIORITY`: the route's metric (BIRD's `krt_metric`).
const RTA_PRIORITY: u16 = 6;
/// `RTN_UNICAST`.
const RTN_UNICAST: u8 = 1;
/// `RT_SCOPE_LINK`: a route on a device with no gateway, as `ip route add ... dev X` makes.
const RT_SCOPE_LINK: u8 = 253;
/// `RT_TABLE_UNSPEC`: the table is given by `RTA_TABLE` (ids above 255 need it).
const RT_TABLE_UNSPEC: u8 = 0;

/// One announced route: `dst/prefix_len dev ifindex table table proto protocol metric metric`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevRoute {
    /// The prefix (host bits zero).
    pub dst: IpAddr,
    /// Its length, 0..=32 or 0..=128.
    pub prefix_len: u8,
    /// The device the route points at.
    pub ifindex: u32,
    /// The routing table.
    pub table: u32,
    /// `rtm_protocol`.
    pub protocol: u8,
    /// The metric (`RTA_PRIORITY`).
    pub metric: u32,
}

impl DevRoute {
    /// The `struct rtmsg` and attributes of a request about this route.
    fn message(&self, scope: u8) -> ([u8; sys::RTMSG_LEN], Vec<(u16, Vec<u8>)>) {
        let (family, dst) = match self.dst {
            IpAddr::V4(a) => (sys::AF_INET, a.octets().to_vec()),
            IpAddr::V6(a) => (sys::AF_INET6, a.octets().to_vec()),
        };
        // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
        let mut fixed = [0u8; sys::RTMSG_LEN];
        fixed[0] = family;
        fixed[1] = self.prefix_len;
        fixed[4] = u8::try_from(self.table).unwrap_or(RT_TABLE_UNSPEC);
        fixed[5] = self.protocol;
        fixed[6] = scope;
        fixed[7] = RTN_UNICAST;
        let mut attrs = vec![
            (sys::RTA_TABLE, self.table.to_ne_bytes().to_vec()),
            (sys::RTA_OIF, self.ifindex.to_ne_bytes().to_vec()),
            (RTA_PRIORITY, self.metric.to_ne_bytes().to_vec()),
        ];
        if self.prefix_len > 0 {
            attrs.insert(0, (sys::RTA_DST, dst));
        }
        (fixed, attrs)
    }
}

impl Netlink {
    /// Adds `route`, or replaces the route of the same prefix, table and metric
    /// (`ip route replace`), so announcing twice is harmless.
    pub fn add_dev_route(&mut self, route: &DevRoute) -> io::Result<()> {
        let (fixed, attrs) = route.message(RT_SCOPE_LINK);
        let attrs: Vec<(u16, &[u8])> = attrs.iter().map(|(t, p)| (*t, &p[..])).collect();
        self.request_ack(
            sys::RTM_NEWROUTE,
            sys::NLM_F_CREATE | sys::NLM_F_REPLACE,
            &fixed,
            &attrs,
        )
    }

    /// Deletes `route`; a route that is not there (any more) is not an error, so
    /// withdrawing twice is harmless.
    pub fn del_dev_route(&mut self, route: &DevRoute) -> io::Result<()> {
        // RT_SCOPE_NOWHERE (255) in a delete request means "any scope".
        let (fixed, attrs) = route.message(255);
        let attrs: Vec<(u16, &[u8])> = attrs.iter().map(|(t, p)| (*t, &p[..])).collect();
        match self.request_ack(sys::RTM_DELROUTE, 0, &fixed, &attrs) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESRCH | libc::ENOENT)) => Ok(()),
            r => r,
        }
    }
}
