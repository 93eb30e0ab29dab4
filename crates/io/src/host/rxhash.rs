//! The NIC's receive hash fields (RSS) per flow type: what `ethtool -n IF rx-flow-hash
//! FLOW` reports, and the gateway's change to hash TCP and UDP by addresses *and ports*
//! (`ethtool -N IF rx-flow-hash FLOW sdfn`), where the driver allows it.
//!
//! Many NICs hash IPv6 (and some IPv4 UDP) by addresses only by default. Then every flow
//! between one pair of hosts (a CGN's subscribers behind one upstream address, a NAT64's
//! clients talking to one IPv4 server through one pool address) lands on one queue, so
//! one core takes the receive work, the tc fast path, and on AF_XDP one worker takes
//! every packet. With the ports in the hash they spread like independent flows.
//!
//! [`check`] reads the four TCP/UDP flow types and, for each lacking the ports, sets
//! `sdfn`; [`RxHashCheck::restore`] puts the previous fields back (at the gateway's exit).
//! A driver without the ethtool operation (veth, most virtual devices) is reported as
//! such and left alone.

use std::process::Command;

/// The flow types checked, as `ethtool` names them.
pub const FLOWS: [&str; 4] = ["tcp4", "udp4", "tcp6", "udp6"];

/// Source and destination address, source and destination port: `ethtool`'s letters.
pub const WANTED: &str = "sdfn";

/// One flow type's fields before and after the check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowHash {
    /// `tcp4`, `udp4`, `tcp6` or `udp6`.
    pub flow: &'static str,
    /// The fields the NIC hashed at start-up, as `ethtool` letters (`""`: none).
    pub before: String,
    /// The fields it hashes now (`before` where nothing was changed).
    pub now: String,
    /// Why the ports could not be added, when they were wanted and not added.
    pub error: Option<String>,
}

/// What [`check`] found and did on one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RxHashCheck {
    /// The driver has no receive-hash settings (`ethtool -n` fails: veth, tun, ...).
    Unsupported(String),
    /// Per flow type.
    Flows(Vec<FlowHash>),
}

/// The `ethtool` letters of one `ethtool -n IF rx-flow-hash FLOW` output: `s` IP source,
/// `d` IP destination, `f` L4 bytes 0-1 (source port), `n` L4 bytes 2-3 (destination
/// port), and the rarer `m` (L2 destination), `v` (VLAN tag), `t` (L3 protocol); `""` for
/// `None`. A field this function does not know (a newer ethtool's) is `?`: such a flow
/// type is left alone, since its fields could not be put back. `None` when the text is
/// not such an output.
pub fn parse_fields(text: &str) -> Option<String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if !lines
        .next()?
        .contains("use these fields for computing Hash flow key")
    {
        return None;
    }
    let mut letters = String::new();
    for l in lines {
        let c = match l {
            "None" => continue,
            "L2DA" => 'm',
            "VLAN tag" => 'v',
            "L3 proto" => 't',
            "IP SA" => 's',
            "IP DA" => 'd',
            _ if l.starts_with("L4 bytes 0 & 1") => 'f',
            _ if l.starts_with("L4 bytes 2 & 3") => 'n',
            _ => '?',
        };
        letters.push(c);
    }
    Some(letters)
}

/// Why a flow type lacking the ports is not changed, if it is not: its fields could not
/// be put back as they were (none, which `ethtool -N` cannot set, or a field unknown here).
fn not_restorable(fields: &str) -> Option<&'static str> {
    if fields.is_empty() {
        Some("not changed: the NIC hashes no fields, which could not be put back at exit")
    } else if fields.contains('?') {
        Some("not changed: a field unknown to quicknat, which could not be put back at exit")
    } else {
        None
    }
}

/// Whether `fields` already include both addresses and both ports.
pub fn has_ports(fields: &str) -> bool {
    WANTED.chars().all(|c| fields.contains(c))
}

/// `ethtool ARGS`: stdout, or the tool's error message.
fn ethtool(args: &[&str]) -> Result<String, String> {
    let out = Command::new(super::tool("ethtool"))
        .args(args)
        .output()
        .map_err(|e| format!("ethtool: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(if err.is_empty() {
        format!("ethtool {} exited {}", args.join(" "), out.status)
    } else {
        err
    })
}

fn read(ifname: &str, flow: &str) -> Result<String, String> {
    let text = ethtool(&["-n", ifname, "rx-flow-hash", flow])?;
    parse_fields(&text)
        .ok_or_else(|| format!("ethtool -n {ifname} rx-flow-hash {flow}: unexpected output"))
}

/// Reads the receive hash fields of TCP and UDP over IPv4 and IPv6 on `ifname`, and sets
/// `sdfn` on each flow type that lacks the ports (when `change`), reading the result back.
pub fn check(ifname: &str, change: bool) -> RxHashCheck {
    let mut flows = Vec::with_capacity(FLOWS.len());
    for flow in FLOWS {
        let before = match read(ifname, flow) {
            Ok(f) => f,
            // The driver has no receive-hash operation at all: the first read says so.
            Err(e) if flows.is_empty() => return RxHashCheck::Unsupported(e),
            Err(e) => {
                flows.push(FlowHash {
                    flow,
                    before: String::new(),
                    now: String::new(),
                    error: Some(e),
                });
                continue;
            }
        };
        let mut h = FlowHash {
            flow,
            now: before.clone(),
            before,
            error: None,
        };
        if change && !has_ports(&h.before) {
            if let Some(why) = not_restorable(&h.before) {
                h.error = Some(why.into());
            } else {
                match ethtool(&["-N", ifname, "rx-flow-hash", flow, WANTED]) {
                    Ok(_) => match read(ifname, flow) {
                        Ok(now) => h.now = now,
                        // Set, but not read back: taken as set, so it is put back at exit.
                        Err(e) => {
                            h.now = WANTED.into();
                            h.error = Some(format!("set, then not read back: {e}"));
                        }
                    },
                    Err(e) => h.error = Some(e),
                }
            }
        }
        flows.push(h);
    }
    RxHashCheck::Flows(flows)
}

impl RxHashCheck {
    /// Puts back the fields [`check`] changed on `ifname`; what failed, per flow type.
    pub fn restore(&self, ifname: &str) -> Vec<String> {
        let RxHashCheck::Flows(flows) = self else {
            return Vec::new();
        };
        flows
            .iter()
            .filter(|h| h.now != h.before)
            .filter_map(|h| {
                ethtool(&["-N", ifname, "rx-flow-hash", h.flow, &h.before])
                    .err()
                    .map(|e| format!("{}: {e}", h.flow))
            })
            .collect()
    }

    /// The flow types changed, as `tcp6 sd -> sdfn` (empty: nothing changed).
    pub fn changed(&self) -> Vec<String> {
        match self {
            RxHashCheck::Flows(flows) => flows
                .iter()
                .filter(|h| h.now != h.before)
                .map(|h| format!("{} {} -> {}", h.flow, letters(&h.before), h.now))
                .collect(),
            RxHashCheck::Unsupported(_) => Vec::new(),
        }
    }

    /// The flow types still hashed without ports, with why they were not changed.
    pub fn lacking(&self) -> Vec<String> {
        match self {
            RxHashCheck::Flows(flows) => flows
                .iter()
                .filter(|h| !has_ports(&h.now))
                .map(|h| {
                    let why = h
                        .error
                        .as_deref()
                        .map_or(String::new(), |e| format!(" ({e})"));
                    format!("{} {}{why}", h.flow, letters(&h.now))
                })
                .collect(),
            RxHashCheck::Unsupported(_) => Vec::new(),
        }
    }
}

/// Letters as shown to an operator: `none` for none.
fn letters(f: &str) -> &str {
    if f.is_empty() {
        "none"
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SD: &str = "UDP over IPV6 flows use these fields for computing Hash flow key:
IP SA
IP DA

";
    const SDFN: &str = "TCP over IPV6 flows use these fields for computing Hash flow key:
IP SA
IP DA
L4 bytes 0 & 1 [TCP/UDP src port]
L4 bytes 2 & 3 [TCP/UDP dst port]
";
    // virtio_net without the RSS feature.
    const NONE: &str = "TCP over IPV6 flows use these fields for computing Hash flow key:
None
";

    #[test]
    fn ethtool_output_reads_as_its_letters() {
        assert_eq!(parse_fields(SD).as_deref(), Some("sd"));
        assert_eq!(parse_fields(SDFN).as_deref(), Some("sdfn"));
        assert_eq!(parse_fields(NONE).as_deref(), Some(""));
        let newer = format!("{SDFN}IPv6 Flow Label\n");
        assert_eq!(parse_fields(&newer).as_deref(), Some("sdfn?"));
        assert_eq!(
            parse_fields("Cannot get RX network flow hashing options: Operation not supported"),
            None
        );
        assert_eq!(parse_fields(""), None);
    }

    #[test]
    fn only_addresses_and_both_ports_count_as_ports() {
        assert!(has_ports("sdfn"));
        assert!(has_ports("msdfnv"));
        assert!(!has_ports("sd"));
        assert!(!has_ports("sdf"));
        assert!(!has_ports(""));
    }

    #[test]
    fn fields_that_could_not_be_put_back_are_left_alone() {
        assert!(not_restorable("").is_some());
        assert!(not_restorable("sd?").is_some());
        assert_eq!(not_restorable("sd"), None);
        assert_eq!(not_restorable("msdv"), None);
    }

    #[test]
    fn what_was_changed_and_what_still_lacks_ports() {
        let c = RxHashCheck::Flows(vec![
            FlowHash {
                flow: "tcp4",
                before: "sdfn".into(),
                now: "sdfn".into(),
                error: None,
            },
            FlowHash {
                flow: "udp6",
                before: "sd".into(),
                now: "sdfn".into(),
                error: None,
            },
            FlowHash {
                flow: "tcp6",
                before: String::new(),
                now: String::new(),
                error: Some("Operation not supported".into()),
            },
        ]);
        assert_eq!(c.changed(), ["udp6 sd -> sdfn"]);
        assert_eq!(c.lacking(), ["tcp6 none (Operation not supported)"]);
        let u = RxHashCheck::Unsupported("no".into());
        assert!(u.changed().is_empty() && u.lacking().is_empty() && u.restore("x").is_empty());
    }

    #[test]
    fn a_veth_has_no_receive_hash_settings() {
        // Needs root, `ip` and `ethtool`; skipped otherwise.
        if !super::super::tool("ethtool").is_file() {
            return;
        }
        let Some(lab) = crate::testnet::VethLab::new("rxh", "rxh", 83) else {
            return;
        };
        let r = crate::testnet::spawn_in(&lab.a, || check("rxh0", true));
        match crate::testnet::join(r) {
            RxHashCheck::Unsupported(e) => assert!(e.contains("not supported"), "{e}"),
            other => panic!("veth: {other:?}"),
        }
    }
}
