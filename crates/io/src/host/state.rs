//! What a gateway changed on the host, recorded where a restart finds it: one state file
//! per network namespace ([`netns_id`]) and interface set under [`STATE_DIR`], locked (`flock`) while
//! the gateway lives. The kernel drops the lock when the process dies, however it dies;
//! the file stays, with the offloads' settings from before the gateway changed them, for
//! the next start on those interfaces to restore.
//!
//! Why a state file and a fixed table name both: the nftables table lives in the
//! network namespace and its name (`quicknat_<if1>_<if2>`) is all a restart needs to
//! find it, even where /run was wiped; the offloads' previous settings exist nowhere
//! else once they are changed, so they are written down before the change. The lock also
//! keeps a second gateway off interfaces a live one uses (it would replace the live
//! one's table).

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::lock::InterfaceLock;
use super::{tool, OFFLOAD_FEATURES};

/// Where gateways keep their state files.
pub const STATE_DIR: &str = "/run/quicknat";

/// The `ethtool -k` name of each of [`OFFLOAD_FEATURES`].
const LONG_NAMES: [(&str, &str); 5] = [
    ("tx", "tx-checksumming"),
    ("tso", "tcp-segmentation-offload"),
    ("gso", "generic-segmentation-offload"),
    ("gro", "generic-receive-offload"),
    ("lro", "large-receive-offload"),
];

/// The settings of the offloads `offloads_off` changes, on one interface (only those
/// not fixed by the device), as `ethtool -k` showed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadSettings {
    /// The interface.
    pub ifname: String,
    /// Each changeable feature (its `ethtool -K` name) and whether it was on.
    pub features: Vec<(String, bool)>,
}

impl OffloadSettings {
    /// Reads `ifname`'s settings (`ethtool -k`).
    pub fn read(ifname: &str) -> io::Result<Self> {
        Ok(Self::parse(ifname, &super::ethtool_show("-k", ifname)?))
    }

    /// The settings in `ethtool -k` output `text`.
    pub fn parse(ifname: &str, text: &str) -> Self {
        let mut features = Vec::new();
        for (short, long) in LONG_NAMES {
            debug_assert!(OFFLOAD_FEATURES.contains(&short));
            let value = text.lines().find_map(|l| {
                l.trim_start()
                    .strip_prefix(long)
                    .and_then(|r| r.strip_prefix(':'))
            });
            if let Some(v) = value {
                let v = v.trim();
                if !v.contains("[fixed]") {
                    features.push((short.to_owned(), v.starts_with("on")));
                }
            }
        }
        OffloadSettings {
            ifname: ifname.to_owned(),
            features,
        }
    }

    /// Puts the settings back (`ethtool -K IF tx on tso on ...`).
    pub fn restore(&self) -> io::Result<()> {
        if self.features.is_empty() {
            return Ok(());
        }
        let mut args = vec!["-K".to_owned(), self.ifname.clone()];
        for (f, on) in &self.features {
            args.push(f.clone());
            args.push(if *on { "on" } else { "off" }.to_owned());
        }
        let out = Command::new(tool("ethtool")).args(&args).output()?;
        if out.status.success() || out.stderr.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "ethtool {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// One line of the state file: `offloads IF tx=on tso=off ...`.
    fn line(&self) -> String {
        let mut l = format!("offloads {}", self.ifname);
        for (f, on) in &self.features {
            l.push_str(&format!(" {f}={}", if *on { "on" } else { "off" }));
        }
        l
    }

    /// The settings a [`line`](Self::line) wrote, if `l` is one.
    fn from_line(l: &str) -> Option<Self> {
        let mut w = l.split_whitespace();
        if w.next()? != "offloads" {
            return None;
        }
        let ifname = w.next()?.to_owned();
        let features = w
            .map(|kv| {
                let (k, v) = kv.split_once('=')?;
                OFFLOAD_FEATURES
                    .contains(&k)
                    .then(|| (k.to_owned(), v == "on"))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(OffloadSettings { ifname, features })
    }
}

/// `SO_NETNS_COOKIE` (Linux >= 5.14; asm-generic, x86 and arm alike).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The calling thread's network namespace: `cookie<N>`, its cookie (never reused while
/// the machine runs, so a state file of a deleted namespace never matches a new one),
/// or on older kernels `net<inode>` (an inode can be reused after the namespace is gone).
pub fn netns_id() -> io::Result<String> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    match crate::sys::getsockopt::<u64>(&s, libc::SOL_SOCKET, SO_NETNS_COOKIE) {
        Ok((cookie, 8)) => Ok(format!("cookie{cookie}")),
        _ => Ok(format!(
            "net{}",
            std::fs::metadata("/proc/thread-self/ns/net")?.ino()
        )),
    }
}

/// The locked state file of one gateway (network namespace and interface set). Dropping
/// it (a clean exit) removes the file; a crash leaves it for the next start.
#[derive(Debug)]
pub struct HostState {
    path: PathBuf,
    file: File,
    leftover: Vec<OffloadSettings>,
    left_by: Option<u32>,
    /// Remove the file on drop (false only in tests that play a crash).
    remove: bool,
    /// One per interface: no other gateway may use them, by any of their names.
    locks: Vec<InterfaceLock>,
}

impl HostState {
    /// The state of a gateway on `ifaces` (name, index) in the calling thread's network
    /// namespace, under [`STATE_DIR`], with each interface locked by its index first
    /// ([`InterfaceLock`]): fails (`AddrInUse`, naming the owner's pid) while another
    /// gateway uses one of them, under whatever name.
    pub fn acquire(ifaces: &[(&str, u32)]) -> io::Result<Self> {
        let netns = netns_id()?;
        let dir = Path::new(STATE_DIR);
        let locks = ifaces
            .iter()
            .map(|&(name, index)| InterfaceLock::acquire_in(dir, &netns, index, name))
            .collect::<io::Result<Vec<_>>>()?;
        let names: Vec<&str> = ifaces.iter().map(|(n, _)| *n).collect();
        let key = format!("{netns}-{}", super::table_name(&names));
        let mut s = Self::acquire_in(dir, &key)?;
        s.locks = locks;
        Ok(s)
    }

    /// The state file `dir/KEY.state` (`dir` made with mode 0700 if missing), locked;
    /// what a dead gateway left in it is kept for [`leftover`](Self::leftover). Fails
    /// (`AddrInUse`) while a live gateway holds it.
    pub fn acquire_in(dir: &Path, key: &str) -> io::Result<Self> {
        let path = dir.join(format!("{key}.state"));
        let (mut file, locked) = super::lock::open_locked(dir, &path)?;
        let mut text = String::new();
        if let Err(e) = locked {
            let _ = file.read_to_string(&mut text);
            let pid = text.lines().find_map(|l| l.strip_prefix("pid "));
            return Err(if e.kind() == io::ErrorKind::WouldBlock {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another quicknat (pid {}) runs on these interfaces",
                        path.display(),
                        pid.unwrap_or("?")
                    ),
                )
            } else {
                io::Error::new(e.kind(), format!("locking {}: {e}", path.display()))
            });
        }
        file.read_to_string(&mut text)?;
        let leftover = text
            .lines()
            .filter_map(OffloadSettings::from_line)
            .collect();
        let left_by = text
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .and_then(|p| p.trim().parse().ok());
        let mut s = HostState {
            path,
            file,
            leftover,
            left_by,
            remove: true,
            locks: Vec::new(),
        };
        // Until this run records its own, the dead one's settings stay written down.
        let keep = s.leftover.clone();
        s.record(&keep)?;
        Ok(s)
    }

    /// The offload settings a gateway that did not exit cleanly recorded (the ones from
    /// before it changed them), taken: the caller restores them.
    pub fn leftover(&mut self) -> Vec<OffloadSettings> {
        std::mem::take(&mut self.leftover)
    }

    /// The process id of the gateway that left the state file behind, if one did.
    pub fn left_by(&self) -> Option<u32> {
        self.left_by
    }

    /// Writes this process's id and `offloads` (the settings to restore) to the file,
    /// replacing what it held.
    pub fn record(&mut self, offloads: &[OffloadSettings]) -> io::Result<()> {
        let mut text = format!("pid {}\n{}", std::process::id(), super::prune::netns_line());
        for o in offloads {
            text.push_str(&o.line());
            text.push('\n');
        }
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())?;
        self.file.sync_data()
    }

    /// Lets go of the lock but leaves the file for the next start (something could not
    /// be undone).
    pub fn keep(mut self) {
        self.remove = false;
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HostState {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the descriptor.
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETHTOOL_K: &str = "Features for veth0:
rx-checksumming: on
tx-checksumming: on
\ttx-checksum-ipv4: off [fixed]
tcp-segmentation-offload: off
\ttx-tcp-segmentation: off
generic-segmentation-offload: on
generic-receive-offload: off
large-receive-offload: off [fixed]
";

    #[test]
    fn the_network_namespace_has_a_cookie() {
        let id = netns_id().unwrap();
        assert!(id.starts_with("cookie") || id.starts_with("net"), "{id}");
        assert_eq!(netns_id().unwrap(), id, "stable");
    }

    #[test]
    fn settings_parse_and_round_trip_through_the_state_file() {
        let s = OffloadSettings::parse("veth0", ETHTOOL_K);
        let want: Vec<(String, bool)> =
            [("tx", true), ("tso", false), ("gso", true), ("gro", false)]
                .map(|(f, on)| (f.to_owned(), on))
                .to_vec();
        assert_eq!(s.features, want, "lro is fixed: left alone");
        assert_eq!(s.line(), "offloads veth0 tx=on tso=off gso=on gro=off");
        assert_eq!(OffloadSettings::from_line(&s.line()), Some(s));
        assert_eq!(OffloadSettings::from_line("pid 7"), None);
        assert_eq!(OffloadSettings::from_line("offloads x rm=-rf"), None);
    }

    #[test]
    fn a_dead_gateways_state_is_found_and_a_live_ones_refused() {
        let dir = std::env::temp_dir().join(format!("qn-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let settings = OffloadSettings::parse("veth0", ETHTOOL_K);
        let mut a = HostState::acquire_in(&dir, "k").unwrap();
        assert!(a.leftover().is_empty());
        assert_eq!(a.left_by(), None);
        a.record(std::slice::from_ref(&settings)).unwrap();
        // A live holder: refused, naming it (flock locks belong to the open file, so a
        // second open in this process conflicts like another process would).
        let e = HostState::acquire_in(&dir, "k").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        assert!(
            HostState::acquire_in(&dir, "other").is_ok(),
            "other interfaces"
        );
        // A crash: the lock goes with the descriptor, the file stays.
        let path = a.path().to_owned();
        a.remove = false;
        drop(a);
        assert!(path.exists());
        // The lock goes with the last descriptor of the open file: a child another test
        // thread forks in this instant holds a copy until its exec closes it (O_CLOEXEC),
        // so the lock is awaited (bounded), not assumed gone at once.
        let t = std::time::Instant::now();
        let mut b = loop {
            match HostState::acquire_in(&dir, "k") {
                Err(e)
                    if e.kind() == io::ErrorKind::AddrInUse
                        && t.elapsed() < std::time::Duration::from_secs(5) =>
                {
                    std::thread::yield_now()
                }
                r => break r.unwrap(),
            }
        };
        assert_eq!(b.left_by(), Some(std::process::id()));
        assert_eq!(b.leftover(), vec![settings]);
        drop(b);
        assert!(!path.exists(), "a clean exit removes the file");
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
