//! Test support shared by the backends' live tests: network namespaces the tests create,
//! run code inside, and always delete (also when a test panics). Compiled for tests only.

use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::thread;

/// Runs `ip ARGS`; whether it succeeded.
pub(crate) fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the tests run as root (namespaces need it).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// Whether iproute2's `ip` is installed.
pub(crate) fn has_iproute2() -> bool {
    Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Namespaces created by a test, deleted on drop.
#[derive(Debug)]
pub(crate) struct Namespaces {
    /// Their names, in creation order.
    pub names: Vec<String>,
}

impl Namespaces {
    /// Creates `names` (each with `lo` up). Panics if `ip` refuses; whatever was created
    /// is deleted again by the drop.
    pub(crate) fn create(names: &[String]) -> Self {
        let mut ns = Namespaces { names: Vec::new() };
        for n in names {
            assert!(ip(&["netns", "add", n]), "ip netns add {n}");
            ns.names.push(n.clone());
            assert!(ip(&["-n", n, "link", "set", "lo", "up"]), "lo up in {n}");
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Moves the calling thread into the network namespace named `ns`.
pub(crate) fn enter(ns: &str) -> io::Result<()> {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}"))?;
    // SAFETY: `file` is an open netns file for the duration of the call; setns only
    // changes the calling thread's namespace and touches no memory of ours.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs `f` in a new thread inside namespace `ns`.
pub(crate) fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let ns = ns.to_owned();
    thread::spawn(move || {
        enter(&ns).unwrap_or_else(|e| panic!("setns into {ns}: {e}"));
        f()
    })
}

/// Joins a test thread, re-raising its panic with the original message.
pub(crate) fn join<T>(h: thread::JoinHandle<T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}
