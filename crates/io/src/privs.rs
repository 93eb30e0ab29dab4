//! The process's privileges: giving up what a running gateway no longer needs
//! ([`restrict`]: `no_new_privs`, the capability bounding set, the permitted and
//! effective sets), who is at the other end of a local socket ([`peer_cred`]) and a Unix
//! socket that is never reachable by others, not even for an instant
//! ([`bind_private_unix`]).
//!
//! Capabilities and `no_new_privs` belong to a thread: [`restrict`] changes the calling
//! thread only, and the threads it spawns afterwards inherit that. Call it before
//! spawning the threads that run on, and in every thread that stays.
//!
//! This module never decides policy (which capabilities, which peers): the caller
//! passes that in. Each `unsafe` block has its `// SAFETY:` line.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::sys::{cvt, getsockopt};

/// `CAP_SETPCAP`: changing the capability bounding set.
const CAP_SETPCAP: u32 = 8;

/// `CAP_NET_ADMIN`: rtnetlink neighbour probes, and on the way out `nft delete table`
/// and `ethtool -K` (restoring offloads).
pub const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`: opening packet and raw sockets (not needed to use open ones).
pub const CAP_NET_RAW: u32 = 13;

/// The credentials of the process at the other end of a Unix socket, as the kernel
/// recorded them when it connected (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// Who connected to `s`: its credentials (`SO_PEERCRED`).
pub fn peer_cred(s: &UnixStream) -> io::Result<PeerCred> {
    let (c, len) = getsockopt::<libc::ucred>(s.as_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED)?;
    if len < std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::other("SO_PEERCRED: short answer"));
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}

/// The supplementary groups of the process at the other end of `s` when it connected
/// (`SO_PEERGROUPS`, Linux >= 4.13; at most 256).
pub fn peer_groups(s: &UnixStream) -> io::Result<Vec<u32>> {
    let (g, len) =
        getsockopt::<[libc::gid_t; 256]>(s.as_fd(), libc::SOL_SOCKET, libc::SO_PEERGROUPS)?;
    let n = (len / std::mem::size_of::<libc::gid_t>()).min(g.len());
    Ok(g[..n].to_vec())
}

/// A listening Unix stream socket at `path` whose file has mode `mode` (e.g. 0o600)
/// from the moment it exists: the socket's own mode is set (`fchmod`) before `bind`
/// creates the file, whatever the umask (which can only take bits away). The mode is
/// checked after binding; a file with more bits than `mode` is removed and an error.
pub fn bind_private_unix(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    // fchmod on the unbound socket: unix_bind creates the file with this mode & ~umask.
    let file = std::fs::File::from(OwnedFd::from(sock));
    file.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
    let sock = socket2::Socket::from(OwnedFd::from(file));
    sock.bind(&socket2::SockAddr::unix(path)?)?;
    let got = std::fs::symlink_metadata(path)?.permissions().mode() & 0o777;
    if got & !mode != 0 {
        let _ = std::fs::remove_file(path);
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: created with mode {got:o}, wanted at most {mode:o}",
                path.display()
            ),
        ));
    }
    sock.listen(128)?;
    Ok(UnixListener::from(OwnedFd::from(sock)))
}

/// The highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`).
fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
        .min(63)
}

/// `prctl(option, arg2, 0, 0, 0)`.
fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl options used here (PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP) take
    // integers only and touch no memory of ours.
    cvt(unsafe { libc::prctl(option, arg2, 0 as libc::c_ulong, 0 as libc::c_ulong, 0) }).map(drop)
}

/// The calling thread's capability sets (effective, permitted, inheritable), as bit
/// masks (`capget`).
pub fn capabilities() -> io::Result<(u64, u64, u64)> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: `hdr` is a live header and `data` two live, writable `CapData` (version 3
    // takes two); the kernel writes nothing else.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    cvt(ret as libc::c_int)?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ))
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Leaves the calling thread (and the threads it spawns from now on) only the
/// capabilities `keep` (numbers, e.g. [`CAP_NET_ADMIN`]) and no way to gain others:
/// `no_new_privs` set (no set-uid or file capabilities on exec), every other capability
/// dropped from the bounding set (a program it runs as root gets at most `keep`), and
/// the effective and permitted sets cut to `keep` (inheritable and so ambient emptied).
/// The user id stays what it was. Without `CAP_SETPCAP` the bounding set stays as it is
/// (see the comment inside).
pub fn restrict(keep: &[u32]) -> io::Result<()> {
    let mask = keep
        .iter()
        .filter(|&&c| c < 64)
        .fold(0u64, |m, &c| m | 1 << c);
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
        .map_err(|e| io::Error::new(e.kind(), format!("PR_SET_NO_NEW_PRIVS: {e}")))?;
    // Without CAP_SETPCAP (a service started as a user with ambient capabilities) the
    // bounding set cannot be cut; not being root, what it runs gains nothing from it, and
    // no_new_privs keeps set-uid programs from adding any.
    let (effective, _, _) = capabilities()?;
    let can_cut_bounding = effective & (1 << CAP_SETPCAP) != 0;
    for cap in 0..=cap_last_cap() {
        if can_cut_bounding && mask & (1 << cap) == 0 {
            match prctl(libc::PR_CAPBSET_DROP, cap.into()) {
                Ok(()) => {}
                // A capability this kernel does not know.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("dropping capability {cap} from the bounding set: {e}"),
                    ))
                }
            }
        }
    }
    let (_, permitted, _) = capabilities()?;
    let keep = mask & permitted;
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let half = |shift: u32| CapData {
        effective: (keep >> shift) as u32,
        permitted: (keep >> shift) as u32,
        inheritable: 0,
    };
    let data = [half(0), half(32)];
    // SAFETY: `hdr` is a live header and `data` two live `CapData` (version 3 takes
    // two), which capset only reads.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    cvt(ret as libc::c_int)
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("capset: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_private_socket_is_born_with_its_mode_whatever_the_umask() {
        let dir = std::env::temp_dir().join(format!("qn-privs-{}", std::process::id()));
        let _ = std::fs::create_dir(&dir);
        let path = dir.join("s.sock");
        // SAFETY: umask takes an integer and cannot fail.
        let old = unsafe { libc::umask(0) };
        let l = bind_private_unix(&path, 0o600);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let l = l.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        // It works, and the peer is us.
        let mut c = UnixStream::connect(&path).unwrap();
        let (s, _) = l.accept().unwrap();
        let cred = peer_cred(&s).unwrap();
        assert_eq!(cred.pid as u32, std::process::id());
        // SAFETY: geteuid/getegid take no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!((cred.uid, cred.gid), (uid, gid));
        assert!(peer_groups(&s).is_ok());
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        (&s).read_exact(&mut b).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn capabilities_are_read() {
        let (eff, perm, _) = capabilities().unwrap();
        assert_eq!(eff & !perm, 0, "effective within permitted");
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let eff_proc = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(eff, eff_proc);
    }

    #[test]
    fn restrict_leaves_only_what_is_kept_in_this_thread() {
        let (_, perm, _) = capabilities().unwrap();
        if perm & (1 << CAP_NET_ADMIN) == 0 {
            eprintln!("skipping: needs CAP_NET_ADMIN");
            return;
        }
        let before = capabilities().unwrap();
        let inner = std::thread::spawn(|| {
            restrict(&[CAP_NET_ADMIN]).unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let field = |k: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            // A thread spawned now inherits it.
            let child = std::thread::spawn(capabilities).join().unwrap().unwrap();
            (
                capabilities().unwrap(),
                field("NoNewPrivs:"),
                field("CapBnd:"),
                child,
            )
        })
        .join()
        .unwrap();
        let only = 1u64 << CAP_NET_ADMIN;
        assert_eq!(inner.0, (only, only, 0));
        assert_eq!(inner.1, "1");
        assert_eq!(u64::from_str_radix(&inner.2, 16).unwrap(), only);
        assert_eq!(inner.3, (only, only, 0));
        assert_eq!(capabilities().unwrap(), before, "other threads keep theirs");
    }
}
