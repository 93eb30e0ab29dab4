//! The fast path's hook on the AF_PACKET backend: a tc program per link (io::tcfast) whose
//! maps the session driver ([`super::fastpath`]) fills exactly as it fills the XDP
//! program's, and its claim filter on every worker's receive socket of that link.

use io::afpacket::PacketPort;
use io::tcfast::TcFastPath;

use super::Link;

/// Attaches the tc program to both links (maps of `entries` flow directions each) and its
/// claim filter to each worker's receive socket there.
pub(super) fn hooks(
    links: &[Link; 2],
    ports: &[[PacketPort; 2]],
    entries: u32,
) -> std::io::Result<[TcFastPath; 2]> {
    let hook = |i: usize| -> std::io::Result<TcFastPath> {
        let h = TcFastPath::attach(&links[i].name, entries)?;
        for worker in ports {
            h.claim(&worker[i])?;
        }
        Ok(h)
    };
    Ok([hook(0)?, hook(1)?])
}
