//! The forward guard: an nftables table (family `inet`) whose chain at the forward hook
//! drops, and counts, every packet the kernel would route that arrived on one of the
//! gateway's interfaces.
//!
//! While the gateway runs it takes every transit packet before the kernel would forward
//! it (AF_XDP redirects at XDP, the tc program at tc ingress, AF_PACKET's ingress table
//! drops the kernel's copy), so the guard sees only what the gateway left to the kernel.
//! What it is for is the time the gateway is *not* there: a process killed with SIGKILL
//! takes its XDP link, its TCX link and its sockets with it, and with
//! `net.ipv4.ip_forward=1` the kernel would then route the inside network's packets
//! out, untranslated. The table is kernel state, so it outlives the process: until the
//! next start replaces it (and reads what it dropped) or a clean stop removes it, the
//! interfaces fail closed.
//!
//! Why this mechanism: per-interface `net.ipv4.conf.IF.forwarding=0` would do for IPv4
//! only (IPv6 forwarding is decided by `net.ipv6.conf.all.forwarding` alone), and an
//! ingress drop would also take the frames the engine's protocol-bound sockets read after
//! the tc program. The forward hook sees neither the gateway's frames nor the host's own
//! traffic, and one `inet` table covers both families. Each interface is guarded for the
//! IP version the gateway translates there only (a NAT44 gateway on a dual-stack router
//! leaves IPv6 to the kernel, as the AF_PACKET ingress table does). It matches the
//! interfaces by index (`iif`), so altnames and renames do not get around it, and it does
//! not match what the kernel forwards *to* them from other interfaces.

use std::io;
use std::io::Write;
use std::process::{Command, Stdio};

use super::tool;

/// Packets and bytes a guard's counter saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Packets the guard dropped.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The forward guard of one gateway's interfaces (see the module doc). Removed on drop:
/// a clean stop gives the interfaces back to the kernel as they were.
#[derive(Debug)]
pub struct ForwardGuard {
    table: String,
}

impl ForwardGuard {
    /// Installs the guard table `table` (family inet) on `ifaces` (device, IP version
    /// translated there: 4 or 6), in one nftables transaction that also replaces a table of that name a dead gateway left,
    /// so the interfaces are never unguarded in between. Returns what the leftover table
    /// had dropped while no gateway ran, if there was one.
    pub fn install(table: &str, ifaces: &[(&str, u8)]) -> io::Result<(Self, Option<Dropped>)> {
        let leftover = counters(table)?;
        nft_script(&script(table, ifaces))?;
        Ok((
            ForwardGuard {
                table: table.to_owned(),
            },
            leftover,
        ))
    }

    /// The nftables table's name (family inet).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// What the guard has dropped so far (None if its table is gone).
    pub fn dropped(&self) -> io::Result<Option<Dropped>> {
        counters(&self.table)
    }

    /// Removes the table now (as dropping does, but saying how it went).
    pub fn remove(mut self) -> io::Result<bool> {
        remove(&std::mem::take(&mut self.table))
    }
}

impl Drop for ForwardGuard {
    fn drop(&mut self) {
        if !self.table.is_empty() {
            let _ = remove(&self.table);
        }
    }
}

/// Deletes the inet table `table` if there is one: whether there was.
pub fn remove(table: &str) -> io::Result<bool> {
    super::deleted(nft_script(&format!("delete table inet {table}\n")))
}

/// The counters of the inet table `table`, if it exists.
fn counters(table: &str) -> io::Result<Option<Dropped>> {
    let out = Command::new(tool("nft"))
        .args(["list", "table", "inet", table])
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return if err.contains("No such file or directory") {
            Ok(None)
        } else {
            Err(io::Error::other(format!(
                "nft list table inet {table}: {}",
                err.trim()
            )))
        };
    }
    Ok(Some(parse_counters(&String::from_utf8_lossy(&out.stdout))))
}

/// The sum of every `counter packets N bytes M` in `nft list` output.
pub fn parse_counters(text: &str) -> Dropped {
    let mut d = Dropped::default();
    let words: Vec<&str> = text.split_whitespace().collect();
    for w in words.windows(5) {
        if let ["counter", "packets", p, "bytes", b] = w {
            d.packets += p.parse::<u64>().unwrap_or(0);
            d.bytes += b.parse::<u64>().unwrap_or(0);
        }
    }
    d
}

/// The nftables script that (re)creates the guard: `add` then `delete` makes a missing
/// table's deletion a no-op, and the whole script is one transaction.
pub fn script(table: &str, ifaces: &[(&str, u8)]) -> String {
    let rules: String = ifaces
        .iter()
        .map(|(dev, family)| {
            let nfproto = if *family == 6 { "ipv6" } else { "ipv4" };
            format!(
                "\t\tiif \"{dev}\" meta nfproto {nfproto} counter drop comment \"quicknat: no untranslated transit traffic\"\n"
            )
        })
        .collect();
    format!(
        "add table inet {table}\n\
         delete table inet {table}\n\
         table inet {table} {{\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority -500; policy accept;\n\
         {rules}\
         \t}}\n\
         }}\n"
    )
}

/// Runs `nft -f -` with `script` on its standard input; its complaint as the error.
fn nft_script(script: &str) -> io::Result<()> {
    let mut child = Command::new(tool("nft"))
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "nft -f: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
