//! One core's private data cache, read from the machine at start-up for the engine's
//! staged batches (`engine::nat44::set_private_cache`): a session table that fits in it
//! is not staged. Linux describes each CPU's caches under
//! `/sys/devices/system/cpu/cpu0/cache/index*/` (`level`, `type`, `size`,
//! `shared_cpu_list`); the private one is the largest data or unified cache of level 2 or
//! more that no other CPU shares.

use std::path::Path;

/// Where Linux lists CPU 0's caches.
pub const SYSFS_CPU0_CACHES: &str = "/sys/devices/system/cpu/cpu0/cache";

/// One core's private data cache in bytes, from the cache directory `dir` (normally
/// [`SYSFS_CPU0_CACHES`]); `None` when it cannot be read or no such cache is listed.
pub fn private_cache_bytes(dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(dir).ok()?;
    let read = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).ok();
    entries
        .filter_map(|e| {
            let d = e.ok()?.path();
            let level: u32 = read(&d, "level")?.trim().parse().ok()?;
            let kind = read(&d, "type")?;
            let kind = kind.trim();
            let private = one_cpu(read(&d, "shared_cpu_list")?.trim());
            let data = kind == "Data" || kind == "Unified";
            (level >= 2 && data && private).then_some(())?;
            parse_size(read(&d, "size")?.trim())
        })
        .max()
}

/// A sysfs cache size: bytes with an optional `K`, `M` or `G` suffix (binary units, as
/// the kernel writes them: "1024K").
pub fn parse_size(s: &str) -> Option<usize> {
    let (num, unit) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(unit)
}

/// Whether a sysfs CPU list ("0", "0-1", "0,2") names exactly one CPU.
pub fn one_cpu(list: &str) -> bool {
    !list.is_empty() && list.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_lists_parse() {
        assert_eq!(parse_size("1024K"), Some(1 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert!(one_cpu("0"));
        assert!(one_cpu("17"));
        assert!(!one_cpu("0-1"));
        assert!(!one_cpu("0,2"));
        assert!(!one_cpu(""));
    }

    /// A cache directory laid out as Linux does: the largest private data or unified
    /// cache of level >= 2 is chosen; shared, instruction and level-1 caches are not.
    #[test]
    fn picks_the_largest_private_cache() {
        let dir = std::env::temp_dir().join(format!("qn-cpucache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let caches = [
            ("index0", "1", "Data", "48K", "0"),
            ("index1", "1", "Instruction", "32K", "0"),
            ("index2", "2", "Unified", "2048K", "0"),
            ("index3", "3", "Unified", "32768K", "0-15"),
        ];
        for (name, level, kind, size, shared) in caches {
            let d = dir.join(name);
            std::fs::create_dir_all(&d).expect("temp dir");
            for (f, v) in [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", shared),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).expect("temp file");
            }
        }
        assert_eq!(private_cache_bytes(&dir), Some(2 << 20));
        // Without a private level-2 cache there is nothing to say.
        std::fs::remove_dir_all(dir.join("index2")).expect("remove");
        assert_eq!(private_cache_bytes(&dir), None);
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            private_cache_bytes(&dir),
            None,
            "a missing directory is None"
        );
    }
}
