//! One owner per interface: a gateway holds an exclusive `flock` on a lock file per
//! interface it uses, named after the network namespace and the interface's *index*, so
//! every name that resolves to the device (its name, an altname, a name it is renamed
//! to) meets the same lock. The kernel drops the lock when the process dies, however it
//! dies; a file left behind holds no lock and is simply taken over.
//!
//! A refusal names the owner's pid (written into the file under the lock). Taking over a
//! file that its owner unlinks between our open and our `flock` would give two owners
//! (each on a different inode), so a lock counts only if the path still names the file
//! that was locked.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The exclusive lock on one interface, held while the gateway lives; dropping it (a
/// clean exit) removes the file.
#[derive(Debug)]
pub struct InterfaceLock {
    path: PathBuf,
    _file: File,
}

impl InterfaceLock {
    /// Locks interface `ifindex` (called `ifname` in this configuration) of the network
    /// namespace `netns` ([`super::state::netns_id`]) in `dir`. Fails with `AddrInUse`,
    /// naming the owner's pid and the name it uses, while another live process holds it.
    pub fn acquire_in(dir: &Path, netns: &str, ifindex: u32, ifname: &str) -> io::Result<Self> {
        let path = dir.join(format!("{netns}-if{ifindex}.lock"));
        // A few rounds at most: each retry means an owner just left.
        for _ in 0..8 {
            let (mut file, locked) = open_locked(dir, &path)?;
            if let Err(e) = locked {
                if e.kind() != io::ErrorKind::WouldBlock {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("locking {}: {e}", path.display()),
                    ));
                }
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "interface {ifname} (index {ifindex}) belongs to another quicknat ({}; {})",
                        owner(&text),
                        path.display()
                    ),
                ));
            }
            // The file locked must still be the one the path names.
            let same = std::fs::metadata(&path)
                .is_ok_and(|m| file.metadata().is_ok_and(|f| f.ino() == m.ino()));
            if !same {
                continue;
            }
            file.set_len(0)?;
            file.rewind()?;
            write!(
                file,
                "pid {} ifname {ifname}\n{}",
                std::process::id(),
                super::prune::netns_line()
            )?;
            return Ok(InterfaceLock { path, _file: file });
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "interface {ifname} (index {ifindex}): {} keeps changing owner",
                path.display()
            ),
        ))
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens (creating it, mode 0600, in `dir` made with mode 0700 if missing) the file
/// `path` and tries to lock it exclusively without waiting: the file, and whether the
/// lock was taken (`WouldBlock` while another open file holds it).
pub(super) fn open_locked(dir: &Path, path: &Path) -> io::Result<(File, io::Result<()>)> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    // SAFETY: flock takes a descriptor `file` keeps open and integers; it touches no
    // memory of ours.
    let locked = if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    Ok((file, locked))
}

/// "pid N, as NAME" from a lock file's `pid N ifname NAME` line.
fn owner(text: &str) -> String {
    let mut w = text.split_whitespace();
    match (w.next(), w.next(), w.next(), w.next()) {
        (Some("pid"), Some(pid), Some("ifname"), Some(name)) => format!("pid {pid}, as {name}"),
        (Some("pid"), Some(pid), ..) => format!("pid {pid}"),
        _ => "pid ?".to_owned(),
    }
}

impl Drop for InterfaceLock {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the descriptor.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("qn-iflock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_owner_is_refused_by_index_whatever_the_name() {
        let d = dir("second");
        let first = InterfaceLock::acquire_in(&d, "cookie1", 7, "eth1").unwrap();
        // The same device through another of its names.
        let e = InterfaceLock::acquire_in(&d, "cookie1", 7, "uplink").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let msg = e.to_string();
        assert!(msg.contains("interface uplink (index 7)"), "{msg}");
        assert!(
            msg.contains(&format!("pid {}, as eth1", std::process::id())),
            "{msg}"
        );
        // Another device, or the same index in another namespace, is free.
        let other = InterfaceLock::acquire_in(&d, "cookie1", 8, "eth2").unwrap();
        let elsewhere = InterfaceLock::acquire_in(&d, "cookie2", 7, "eth1").unwrap();
        drop((other, elsewhere));
        let path = first.path().to_owned();
        drop(first);
        assert!(!path.exists(), "a clean exit removes the file");
        let again = InterfaceLock::acquire_in(&d, "cookie1", 7, "uplink").unwrap();
        drop(again);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_left_without_a_lock_is_taken_over() {
        let d = dir("left");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cookie1-if3.lock"), "pid 1 ifname gone\n").unwrap();
        let l = InterfaceLock::acquire_in(&d, "cookie1", 3, "eth0").unwrap();
        let text = std::fs::read_to_string(l.path()).unwrap();
        assert!(
            text.starts_with(&format!("pid {} ifname eth0\nnetns ", std::process::id())),
            "{text}"
        );
        drop(l);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_owner_line_is_read_as_written() {
        assert_eq!(owner("pid 42 ifname g-in\n"), "pid 42, as g-in");
        assert_eq!(owner("pid 42\n"), "pid 42");
        assert_eq!(owner(""), "pid ?");
    }
}
