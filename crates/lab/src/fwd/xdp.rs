//! Loads `bpf/xdp_fwd.c` (compiled by build.rs) with aya: `tc_fwd` at both gateway
//! interfaces' tc ingress hook (TCX links), or `xdp_fwd` on both gateway
//! interfaces, each redirecting through its own one-entry devmap to the other, or
//! `xdp_pass` on a veth peer. Native (driver) mode only: a generic-mode XDP forwarder
//! would be no floor of anything. The programs are attached by BPF links that live as
//! long as the returned handles (and the process: a SIGKILL detaches them too).

use anyhow::{bail, Context, Result};
use aya::maps::{Array, DevMap};
use aya::programs::{tc, SchedClassifier, TcAttachType, Xdp, XdpMode};
use aya::Ebpf;

use super::{ifindex, ipv4_of, Hop};

/// The compiled program, or empty when clang was missing at build time.
static XDP_FWD_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp_fwd.o"));

/// Whether this build carries the XDP forwarder (clang was found at build time).
pub fn built_with_bpf() -> bool {
    !XDP_FWD_OBJ.is_empty()
}

/// A loaded, attached program; dropping it detaches it.
pub struct Attached {
    _ebpf: Ebpf,
}

fn load() -> Result<Ebpf> {
    if !built_with_bpf() {
        bail!("quicknat-lab was built without clang: no XDP forwarder (install clang and rebuild)");
    }
    Ebpf::load(XDP_FWD_OBJ).context("loading bpf/xdp_fwd.o")
}

fn attach(ebpf: &mut Ebpf, prog: &str, ifname: &str) -> Result<()> {
    let idx = ifindex(ifname)?;
    let p: &mut Xdp = ebpf
        .program_mut(prog)
        .with_context(|| format!("no program {prog} in xdp_fwd.o"))?
        .try_into()
        .with_context(|| format!("{prog}: not an XDP program"))?;
    p.load().with_context(|| format!("loading {prog}"))?;
    p.attach_to_if_index(idx, XdpMode::Driver)
        .with_context(|| format!("attaching {prog} to {ifname} in native mode"))?;
    Ok(())
}

/// The six MAC bytes as the program reads them: the first six bytes of a u64 in memory.
fn mac_word(m: [u8; 6]) -> u64 {
    u64::from_ne_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
}

/// Fills `cfg` for the forwarder on `names[i]`: frames leave by `names[1 - i]` towards
/// `hops[1 - i]` (the MACs, the ingress address, the egress index for `tc_fwd`).
fn set_cfg(ebpf: &mut Ebpf, names: &[String; 2], hops: &[Hop; 2], i: usize) -> Result<()> {
    let out = 1 - i;
    let map = ebpf.map_mut("cfg").context("no cfg map")?;
    let mut cfg: Array<_, u64> = Array::try_from(map).context("cfg")?;
    let local = ipv4_of(&names[i]).map_or(0, |a| u32::from_ne_bytes(a.octets()));
    cfg.set(0, mac_word(hops[out].dst), 0)?;
    cfg.set(1, mac_word(hops[out].src), 0)?;
    cfg.set(2, u64::from(local), 0)?;
    cfg.set(3, u64::from(ifindex(&names[out])?), 0)?;
    Ok(())
}

/// `xdp_fwd` on `names[i]` for i in 0..2, frames leaving by `names[1 - i]` towards
/// `hops[1 - i]`.
pub fn attach_forwarder(names: &[String; 2], hops: &[Hop; 2]) -> Result<[Attached; 2]> {
    let one = |i: usize| -> Result<Attached> {
        let out = 1 - i;
        let mut ebpf = load()?;
        {
            let map = ebpf.map_mut("tx_port").context("no tx_port map")?;
            let mut dev: DevMap<_> = DevMap::try_from(map).context("tx_port")?;
            dev.set(0, ifindex(&names[out])?, None, 0)
                .with_context(|| format!("tx_port -> {}", names[out]))?;
        }
        set_cfg(&mut ebpf, names, hops, i)?;
        attach(&mut ebpf, "xdp_fwd", &names[i])?;
        Ok(Attached { _ebpf: ebpf })
    };
    Ok([one(0)?, one(1)?])
}

/// `tc_fwd` at the tc ingress hook of `names[i]` for i in 0..2, skbs leaving by
/// `names[1 - i]` towards `hops[1 - i]` (`bpf_redirect`, GSO super-packets as they are).
/// Attached by TCX links (Linux >= 6.6), or a clsact qdisc's filter on older kernels.
pub fn attach_tc_forwarder(names: &[String; 2], hops: &[Hop; 2]) -> Result<[Attached; 2]> {
    let one = |i: usize| -> Result<Attached> {
        let mut ebpf = load()?;
        set_cfg(&mut ebpf, names, hops, i)?;
        // Older kernels attach through a clsact qdisc; it may be there already.
        let _ = tc::qdisc_add_clsact(&names[i]);
        let p: &mut SchedClassifier = ebpf
            .program_mut("tc_fwd")
            .context("no program tc_fwd in xdp_fwd.o")?
            .try_into()
            .context("tc_fwd: not a tc program")?;
        p.load().context("loading tc_fwd")?;
        p.attach(&names[i], TcAttachType::Ingress)
            .with_context(|| format!("attaching tc_fwd to {}'s ingress", names[i]))?;
        Ok(Attached { _ebpf: ebpf })
    };
    Ok([one(0)?, one(1)?])
}

/// `xdp_pass` on `ifname`.
pub fn attach_pass(ifname: &str) -> Result<Attached> {
    let mut ebpf = load()?;
    attach(&mut ebpf, "xdp_pass", ifname)?;
    Ok(Attached { _ebpf: ebpf })
}
