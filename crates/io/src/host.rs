//! Host setup around the interfaces a gateway's ports use, kept apart from the ports
//! themselves: turning an interface's offloads off ([`offloads_off`], with `ethtool`) and
//! the nftables netdev ingress table that keeps the kernel from also routing what the
//! gateway forwards ([`IngressFilter`], with `nft`), and the nftables forward guard that
//! keeps the kernel from routing the gateway's interfaces' traffic untranslated when the
//! gateway is gone ([`ForwardGuard`], `host/guard.rs`). They run external tools in the calling
//! thread's network namespace and report what happened instead of logging it: the caller
//! decides what an operator is told.
//!
//! Also the process's own standing on the host, which tools and tests ask about: whether it
//! runs as root ([`is_root`]), its open-file limit ([`raise_open_file_limit`]) and the
//! calling thread's network namespace ([`enter_netns`]). These are plain syscalls, the
//! module's only `unsafe`, each block with its `// SAFETY:` line.
//!
//! `nft` and `ethtool` are run from a fixed list of system directories ([`tool`]), never
//! through `PATH`. What a gateway changed on the host is recorded under [`STATE_DIR`]
//! ([`HostState`], `host/state.rs`), so a restart after a crash finds and undoes it: the
//! ingress table has a fixed name per interface set ([`table_name`]) and the offloads'
//! previous settings are restored ([`OffloadSettings`]).
//!
//! This module never touches packets and never decides policy (which interfaces, which
//! families, which namespace): the caller passes that in.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

mod guard;
mod leftover;
mod lock;
mod prune;
pub mod rxhash;
mod state;
pub use guard::{Dropped, ForwardGuard};
pub use leftover::{detach_leftover_programs, legacy_attach, TC_PROGRAM, XDP_PROGRAM};
pub use lock::InterfaceLock;
pub use prune::{live_netns_inodes, prune_stale};
pub use state::{HostState, OffloadSettings, STATE_DIR};

/// Where [`tool`] looks for `nft` and `ethtool`, in order: system directories only.
pub const TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// The absolute path of the system tool `name` in the first of [`TOOL_DIRS`] that has
/// it (never found through `PATH`, which whoever starts the gateway controls); the bare
/// name (which then fails to run, NotFound) where none has it.
pub fn tool(name: &str) -> PathBuf {
    TOOL_DIRS
        .iter()
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(format!("/nonexistent/{name}")))
}

/// The `ethtool -K` features [`offloads_off`] turns off: receive merging (GRO, LRO),
/// segmentation (TSO, GSO) and transmit checksumming.
pub const OFFLOAD_FEATURES: [&str; 5] = ["gro", "lro", "tso", "gso", "tx"];

/// What [`offloads_off`] did to one interface.
#[derive(Debug)]
pub enum Offloads {
    /// `ethtool` succeeded (or said nothing): the offloads are off.
    Off,
    /// `ethtool` ran and complained (a feature fixed on this device, an unknown
    /// interface): its message. Some offloads may still be on.
    Partly(String),
    /// `ethtool` could not run: the offloads are as they were.
    Untouched(io::Error),
}

/// Turns GRO, LRO, TSO, GSO and tx checksumming off on `ifname`
/// (`ethtool -K IF gro off lro off tso off gso off tx off`): a gateway that translates
/// whole frames cannot send on the 64 KiB super-packets receive merging would hand it,
/// and a veth peer's partial checksums cost it a software pass per frame.
pub fn offloads_off(ifname: &str) -> Offloads {
    offloads_off_with(&tool("ethtool"), ifname)
}

fn offloads_off_with(ethtool: &std::path::Path, ifname: &str) -> Offloads {
    let mut args = vec!["-K", ifname];
    for f in OFFLOAD_FEATURES {
        args.extend([f, "off"]);
    }
    match Command::new(ethtool).args(&args).output() {
        Ok(o) if o.status.success() || o.stderr.is_empty() => Offloads::Off,
        Ok(o) => Offloads::Partly(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Offloads::Untouched(e),
    }
}

/// The kernel driver behind `ifname` (`ethtool -i IF`: "veth", "virtio_net", "ice"...).
pub fn driver(ifname: &str) -> io::Result<String> {
    parse_driver(&ethtool_show("-i", ifname)?)
        .ok_or_else(|| io::Error::other(format!("ethtool -i {ifname}: no driver line")))
}

/// The output of `ethtool FLAG IF` (a query such as `-i` or `-k`), or its error message.
fn ethtool_show(flag: &str, ifname: &str) -> io::Result<String> {
    let out = Command::new(tool("ethtool"))
        .args([flag, ifname])
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ethtool {flag} {ifname}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `driver:` line of `ethtool -i`'s output.
fn parse_driver(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("driver:"))
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty())
}

/// An nftables netdev ingress table that drops transit IP traffic after AF_PACKET has
/// taken its copy (packet taps run before the ingress hook), so the kernel does not also
/// route and discard every packet the gateway forwards. Traffic for the host's own
/// addresses, broadcast, multicast and link-local still reaches the kernel, and so does
/// every other protocol (ARP, the family not translated on a device). Removed on drop.
#[derive(Debug)]
pub struct IngressFilter {
    table: String,
}

impl IngressFilter {
    /// Installs the table [`table_name`] of `ifaces`: on each of `ifaces` (device, IP
    /// version translated there: 4 or 6), a chain at ingress priority -500 dropping that
    /// family unless its destination is in `local` / `local6` or broadcast, multicast or
    /// link-local. A table of that name left by a dead gateway is replaced (the caller
    /// holds the [`HostState`] lock of these interfaces, so it is no live one's). On an
    /// error the part already installed is removed again.
    pub fn install(
        ifaces: &[(&str, u8)],
        local: &[Ipv4Addr],
        local6: &[Ipv6Addr],
    ) -> io::Result<Self> {
        let names: Vec<&str> = ifaces.iter().map(|(n, _)| *n).collect();
        let table = table_name(&names);
        remove_table(&table)?;
        let mut steps = commands(&table, ifaces, local, local6).into_iter();
        if let Some(add_table) = steps.next() {
            nft(&add_table)?;
        }
        // From here on, dropping `f` deletes the table (and all it holds).
        let f = IngressFilter { table };
        for step in steps {
            nft(&step)?;
        }
        Ok(f)
    }

    /// The nftables table's name ([`table_name`], family netdev).
    pub fn table(&self) -> &str {
        &self.table
    }
}

impl IngressFilter {
    /// Removes the table now (as dropping does, but saying how it went).
    pub fn remove(mut self) -> io::Result<bool> {
        remove_table(&std::mem::take(&mut self.table))
    }
}

impl Drop for IngressFilter {
    fn drop(&mut self) {
        if !self.table.is_empty() {
            let _ = remove_table(&self.table);
        }
    }
}

/// The name of the ingress table of a gateway on the interfaces `ifnames`:
/// `quicknat_<if1>_<if2>`, the same for every run on that interface set in a network
/// namespace (so a restart finds what a killed gateway left), with characters nft does
/// not take in a name replaced by `_`.
pub fn table_name(ifnames: &[&str]) -> String {
    let mut t = String::from("quicknat");
    for n in ifnames {
        t.push('_');
        t.extend(n.chars().map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        }));
    }
    t
}

/// Deletes the netdev table `table` if there is one: whether there was.
pub fn remove_table(table: &str) -> io::Result<bool> {
    deleted(nft(&["delete", "table", "netdev", table].map(String::from)))
}

/// What an `nft delete` said: whether there was something to delete (a missing table is
/// not an error).
fn deleted(r: io::Result<()>) -> io::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.to_string().contains("No such file or directory") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs `nft ARGS`; its complaint as the error.
fn nft(args: &[String]) -> io::Result<()> {
    let out = Command::new(tool("nft")).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The `nft` commands that build the table, in order (the first adds the table).
fn commands(
    table: &str,
    ifaces: &[(&str, u8)],
    local: &[Ipv4Addr],
    local6: &[Ipv6Addr],
) -> Vec<Vec<String>> {
    let set = |mut keep: Vec<String>, always: [&str; 2]| {
        keep.extend(always.map(String::from));
        format!("{{ {} }}", keep.join(", "))
    };
    let set4 = set(
        local.iter().map(Ipv4Addr::to_string).collect(),
        ["255.255.255.255", "224.0.0.0/4"],
    );
    let set6 = set(
        local6.iter().map(Ipv6Addr::to_string).collect(),
        ["fe80::/10", "ff00::/8"],
    );
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cmds = vec![words(&["add", "table", "netdev", table])];
    for (i, (dev, family)) in ifaces.iter().enumerate() {
        let chain = format!("in{i}");
        let hook = format!("{{ type filter hook ingress device \"{dev}\" priority -500; }}");
        cmds.push(words(&["add", "chain", "netdev", table, &chain, &hook]));
        let (proto, field, keep) = if *family == 4 {
            ("ip", "ip", &set4)
        } else {
            ("ip6", "ip6", &set6)
        };
        cmds.push(words(&[
            "add", "rule", "netdev", table, &chain, "meta", "protocol", proto, field, "daddr",
            "!=", keep, "drop",
        ]));
    }
    cmds
}

/// Whether the process runs as root (effective user id 0): what network namespaces,
/// packet sockets and nftables need.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) to at least `need`, or to the
/// hard limit if that is lower (opening more then fails with EMFILE, for the caller to
/// report). Never lowers it.
pub fn raise_open_file_limit(need: u64) -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on 64-bit Linux; the cast only matters where it is narrower.
    let need = need as libc::rlim_t;
    if lim.rlim_cur >= need {
        return Ok(());
    }
    lim.rlim_cur = need.min(lim.rlim_max);
    // SAFETY: `lim` is a live rlimit; setrlimit only reads it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread (only it) into the network namespace `name` made by
/// `ip netns add` (`/var/run/netns/NAME`): the sockets it opens from then on, and the
/// threads it spawns, live there. Needs root (CAP_SYS_ADMIN).
pub fn enter_netns(name: &str) -> io::Result<()> {
    let path = format!("/var/run/netns/{name}");
    let file = std::fs::File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {path}: {e}")))?;
    // SAFETY: `file` is an open descriptor for the duration of the call (the kernel checks
    // that it is a network namespace); setns changes only the calling thread's namespace
    // and touches no memory of ours.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns into {path}: {e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
