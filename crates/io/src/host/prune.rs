//! Pruning what gateways in deleted network namespaces left under the state directory.
//!
//! A gateway killed in a namespace that is then deleted leaves its state file and its
//! interface locks behind, and no later start can ever match them: their namespace's
//! interfaces (whose offloads the state file would restore) are gone with it. Each file
//! records the inode of its namespace (`netns INO`); a file whose namespace is no longer
//! alive and that no process holds locked is removed. A namespace is alive while a
//! process is in it (`/proc/PID/ns/net`) or it is mounted (`ip netns add` bind-mounts it:
//! `nsfs` in `/proc/self/mountinfo`). An inode can be reused by a new namespace after
//! the old one is gone, so a reused one only keeps a stale file longer, never removes a
//! live one's.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::lock::open_locked;

/// The inode of the calling thread's network namespace.
pub fn netns_inode() -> io::Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// The `netns INO` line every state and lock file carries.
pub(super) fn netns_line() -> String {
    netns_inode().map_or_else(|_| String::new(), |ino| format!("netns {ino}\n"))
}

/// The inodes of every network namespace alive now: those of processes and those mounted.
pub fn live_netns_inodes() -> HashSet<u64> {
    let mut live: HashSet<u64> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::metadata(e.path().join("ns/net")).ok())
        .map(|m| m.ino())
        .collect();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    live.extend(mounted_netns(&mounts));
    live
}

/// The namespace inodes of the `nsfs` mounts in `mountinfo` text (root `net:[INO]`).
pub fn mounted_netns(mountinfo: &str) -> impl Iterator<Item = u64> + '_ {
    mountinfo.lines().filter_map(|l| {
        let root = l.split_whitespace().nth(3)?;
        root.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
    })
}

/// Removes from `dir` every `.state` and `.lock` file whose recorded namespace is not in
/// `live` and that no process holds locked; returns what it removed. Files without a
/// `netns` line are left alone.
pub fn prune_stale(dir: &Path, live: &HashSet<u64>) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        let ours = matches!(
            path.extension().and_then(|x| x.to_str()),
            Some("state" | "lock")
        );
        if !ours {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let ns = text
            .lines()
            .find_map(|l| l.strip_prefix("netns "))
            .and_then(|n| n.trim().parse::<u64>().ok());
        if ns.is_none_or(|ino| live.contains(&ino)) {
            continue;
        }
        // Removed while locked, so no start takes it between the check and the unlink.
        if let Ok((_file, Ok(()))) = open_locked(dir, &path) {
            if std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounted_namespaces_are_read_from_mountinfo() {
        let text = "36 25 0:4 net:[4026532281] /run/netns/qh-gw rw shared:17 - nsfs nsfs rw\n\
                    22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    37 25 0:4 net:[4026532400] /run/netns/qh-srv rw shared:18 - nsfs nsfs rw\n";
        let got: Vec<u64> = mounted_netns(text).collect();
        assert_eq!(got, vec![4026532281, 4026532400]);
    }

    #[test]
    fn our_namespace_is_alive() {
        let live = live_netns_inodes();
        assert!(live.contains(&netns_inode().unwrap()), "{live:?}");
    }

    #[test]
    fn only_unlocked_files_of_dead_namespaces_go() {
        let dir = std::env::temp_dir().join(format!("qn-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let me = netns_inode().unwrap();
        let live: HashSet<u64> = [me].into();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let dead_state = write("cookie9-quicknat_a_b.state", "pid 7\nnetns 1\n");
        let dead_lock = write("cookie9-if3.lock", "pid 7 ifname a\nnetns 1\n");
        let alive = write(
            "cookie1-quicknat_c_d.state",
            &format!("pid 8\nnetns {me}\n"),
        );
        let unknown = write("cookie2-quicknat_e_f.state", "pid 9\n");
        let other = write("notes.txt", "netns 1\n");
        let held = write("cookie9-if4.lock", "pid 7 ifname b\nnetns 1\n");
        let (_f, locked) = open_locked(&dir, &held).unwrap();
        locked.unwrap();
        let mut removed = prune_stale(&dir, &live);
        removed.sort();
        let mut want = vec![dead_lock, dead_state];
        want.sort();
        assert_eq!(removed, want);
        for kept in [&alive, &unknown, &other, &held] {
            assert!(kept.exists(), "{}", kept.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
