//! The book's generated reference pages: the command line (from the clap definition),
//! the drop reasons (from the engine's table, with what to do about each) and the metrics
//! (from a rendered exposition). The tests compare them with the committed pages in
//! `docs/src/reference/`, so a verb, a flag, a reason or a metric cannot be missing.

use std::fmt::Write;

use engine::DropReason;

/// The line under each generated page's title.
fn generated_note(from: &str) -> String {
    format!(
        "<!-- Generated from {from} by `QUICKNAT_BLESS=1 cargo test -p quicknat reference`; \
         do not edit. -->\n\n"
    )
}

/// Text safe inside a markdown table cell, on one line.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The command line reference: every verb (and sub-verb) with its usage, arguments and
/// options, as clap has them.
pub fn cli_markdown(cmd: clap::Command) -> String {
    let mut cmd = cmd.bin_name("quicknat");
    cmd.build();
    let mut out = String::from("# Command line\n\n");
    out.push_str(&generated_note(
        "the clap definition in crates/quicknat/src/main.rs",
    ));
    out.push_str(
        "Every verb of `quicknat` with its arguments. `quicknat help VERB` and \
         `man quicknat` say the same; the control verbs (`status`, `sessions`, `trace`, \
         `drain`, `bindings`, `pool`, `census`, `stats`, `reload`, `ila`) talk to a running gateway over its \
         control socket.\n\n",
    );
    for sub in visible(&cmd) {
        let _ = writeln!(
            out,
            "- [`quicknat {}`](#quicknat-{}): {}",
            sub.get_name(),
            sub.get_name(),
            first_line(sub.get_about())
        );
    }
    for sub in visible(&cmd) {
        verb(&mut out, sub, &format!("quicknat {}", sub.get_name()), 2);
    }
    out
}

/// The sub-verbs a user types (clap's generated `help` verb aside).
fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

fn first_line(s: Option<&clap::builder::StyledStr>) -> String {
    s.map(|s| s.to_string().lines().next().unwrap_or("").to_owned())
        .unwrap_or_default()
}

/// One verb's section, then its sub-verbs' at the next heading level.
fn verb(out: &mut String, cmd: &clap::Command, path: &str, level: usize) {
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut usage = cmd.clone().bin_name(path);
    let usage = usage.render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = write!(
        out,
        "\n{} `{path}`\n\n{}\n\n```text\n{usage}\n```\n",
        "#".repeat(level),
        about.trim()
    );
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .collect();
    if !args.is_empty() {
        out.push_str("\n| Argument | Meaning | Default |\n|---|---|---|\n");
        for a in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                cell(&arg_name(a)),
                cell(&arg_help(a)),
                cell(&arg_default(a))
            );
        }
    }
    for sub in visible(cmd) {
        verb(out, sub, &format!("{path} {}", sub.get_name()), level + 1);
    }
}

/// `--config <FILE>`, `-w, --workers <N>` or `<INPUT>`, in backticks.
fn arg_name(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
    let takes_value = a.get_action().takes_values();
    let mut flags = Vec::new();
    if let Some(s) = a.get_short() {
        flags.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        flags.push(format!("--{l}"));
    }
    let name = match (flags.is_empty(), takes_value) {
        (true, _) => value,
        (false, true) => format!("{} {value}", flags.join(", ")),
        (false, false) => flags.join(", "),
    };
    format!("`{name}`")
}

fn arg_help(a: &clap::Arg) -> String {
    let mut help = a
        .get_long_help()
        .or(a.get_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let mut notes = Vec::new();
    if !values.is_empty() {
        notes.push(format!("One of {}.", values.join(", ")));
    }
    if a.is_required_set() {
        notes.push("Required.".to_owned());
    }
    if matches!(
        a.get_action(),
        clap::ArgAction::Append | clap::ArgAction::Count
    ) {
        notes.push("May be repeated.".to_owned());
    }
    if !notes.is_empty() && !help.is_empty() && !help.ends_with('.') {
        help.push('.');
    }
    for n in notes {
        if !help.is_empty() {
            help.push(' ');
        }
        help.push_str(&n);
    }
    help
}

fn arg_default(a: &clap::Arg) -> String {
    let d: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    d.join(", ")
}

/// Why a drop happens and what an operator can do about it, for every reason.
fn remedy(r: DropReason) -> &'static str {
    use DropReason as D;
    match r {
        D::Truncated | D::Malformed | D::BadIpChecksum => {
            "Damaged or hostile packets. A steady count points at a faulty link or NIC \
             (check its error counters) or at a scan; nothing to configure."
        }
        D::NotIpv4 => {
            "An IPv6 (or other) packet reached a mode that translates IPv4 only. Check what \
             routes to this interface; IPv6 needs a NAT64 or SIIT gateway."
        }
        D::NotIpv6 => {
            "An IPv4 (or other) packet reached the IPv6 side of a translator. Check the \
             routes and which interface is `inside` and which `outside`."
        }
        D::Fragment => {
            "Fragments the NAT cannot follow: of an untranslated protocol, of an ICMP error, \
             of SCTP (its CRC32c covers the whole packet, which a new port changes), or a \
             first fragment too short to hold the ports (RFC 1858). Usually an attack; \
             otherwise fix the sender's MTU so it does not fragment (SCTP endpoints fragment \
             at their own layer when their path MTU discovery works)."
        }
        D::FragmentOutOfOrder => {
            "A later fragment came before its first and could not be held: \
             `fragment_hold_bytes = 0`, or on a hairpin's second pass. Set \
             `fragment_hold_bytes` above 0 to hold reordered fragments."
        }
        D::FragmentHeld => {
            "Not a loss: a later fragment arrived before its first and waits for it (virtual \
             reassembly); it is sent right after the first. Those whose first never comes \
             are counted again as `fragment_expired`."
        }
        D::FragmentExpired => {
            "Held fragments whose datagram's first fragment did not come within \
             `fragment_timeout`: the first was lost (the sender resends), or a flood of \
             orphan fragments. Raise `fragment_timeout` only if first fragments arrive late."
        }
        D::FragmentHoldFull => {
            "A source past its sixteenth of `fragment_hold_bytes`, or held fragments pushed \
             out, oldest first, by newer ones when the hold is full: usually a flood of \
             orphan fragments. Raise `fragment_hold_bytes` if legitimate traffic reorders \
             much; in-order fragments are never affected."
        }
        D::FragmentOverlap => {
            "Fragments overlapping others of their datagram, or a TCP fragment inside the TCP \
             header (RFC 5722, RFC 1858, RFC 3128): an evasion attack or a broken sender. \
             Nothing to configure."
        }
        D::FragmentTooMany => {
            "A datagram cut into more than 64 fragments: an attack, or a sender with a tiny \
             MTU. Nothing to configure."
        }
        D::FragmentTableFull => {
            "More fragmented datagrams in flight than `max_fragment_records`. Raise it, or \
             look for a fragment flood from one source."
        }
        D::UnsupportedProtocol => {
            "SIIT, CLAT and NAT64 refuse ICMPv6 carried in IPv4 and ICMPv4 carried in IPv6 \
             (RFC 7915 §4.4, §5.4: answered Protocol Unreachable or dropped). NAT44 and NAT64 \
             translate every other IP protocol, those without ports by address only."
        }
        D::AddressOnlyInUse => {
            "Two inside hosts on one public address used the same port-less protocol (ESP, \
             GRE, ...) to the same remote: the second waits until the first's session \
             expires (`[timeouts] other`). Use NAT-T (IPsec over UDP), give such hosts \
             static NAT, or a larger pool."
        }
        D::PptpCallsFull => {
            "Inside PPTP clients hold 4096 calls at once, or one inside host 256: a \
             control message opening another is dropped until one ends (its sender \
             retransmits). Look for a client opening calls without ending them; the table \
             forgets a call idle for `[timeouts] other`."
        }
        D::UnsupportedIcmp => {
            "An ICMP type that is neither a query the NAT tracks (echo) nor an error it \
             translates (router advertisements, redirects, obsolete types). Normal in small \
             numbers."
        }
        D::TtlExpired => {
            "The TTL or hop limit ran out here; the gateway answers Time Exceeded (rate \
             limited). A routing loop if it grows: check the routes to and from the pool."
        }
        D::NoRule => {
            "No `[[nat44.rule]]`, static NAT or port forward covers the inside source. Add \
             the source's prefix to a rule, or find why it has an unexpected address."
        }
        D::NoMapping => {
            "Inbound to a public address and port with no binding: unsolicited traffic \
             (scans, replies after a session expired). Expected on a CGN; add a port \
             forward or static binding if a service must be reachable, or raise the \
             protocol's timeout if replies arrive after it."
        }
        D::Filtered => {
            "A binding exists but its filtering refuses this remote endpoint. Use \
             `filtering = \"endpoint-independent\"` if peer-to-peer applications need it \
             (RFC 4787 REQ-8)."
        }
        D::PoolExhausted => {
            "The inside host's public address has no free port (paired pooling keeps a host \
             on one address). Add pool addresses, widen `ports`, shorten `port_reuse_hold` \
             or the timeouts; `quicknat pool` shows each address's use."
        }
        D::TableFull => {
            "The session table holds `max_sessions`: new flows are refused, established \
             ones continue. Raise `max_sessions` (restart; `check-config` prints the \
             memory) or lower the timeouts; look for a flood with `quicknat census`."
        }
        D::SubscriberLimit => {
            "An inside host holds `max_sessions_per_host` sessions or `max_ports_per_host` \
             ports. Raise the limit if the host is legitimate (a server behind the NAT), or \
             find what it is opening."
        }
        D::IcmpErrorNoSession => {
            "An ICMP error about a packet of no session (late, or forged). Expected in \
             small numbers."
        }
        D::IcmpErrorMalformed => {
            "An ICMP error whose quoted packet cannot be parsed. Damaged or forged."
        }
        D::WrongDirection => {
            "A packet matched a session from the wrong side: an outside host using an inside \
             address (spoofing) or a routing mistake that sends inside traffic to the \
             outside interface."
        }
        D::HairpinDisabled => {
            "An inside host sent to a public address of the NAT while `hairpinning = false`. \
             Turn hairpinning on, or use split-horizon DNS."
        }
        D::NoAddressMapping => {
            "An address with no translation: outside `pref64` and every explicit address \
             mapping, or a non-global IPv4 address under the well-known prefix (RFC 6052 \
             §3.1). Check `pref64`, the EAM table and the DNS64's prefix."
        }
        D::FragmentNeeded => {
            "An IPv4 packet with DF set does not fit the IPv6 side once translated; the \
             sender was told the MTU (Fragmentation Needed). Persistent counts mean a sender \
             ignores PMTUD (ICMP filtered on its way): clamp TCP MSS, or raise the MTUs."
        }
        D::PacketTooBig => {
            "A packet does not fit the next hop; the sender was answered Packet Too Big. \
             As above: PMTUD should settle it, or clamp MSS."
        }
        D::NeedsFragmentation => {
            "An IPv4 packet without DF is too big for the IPv6 MTU and cannot be \
             fragmented. Set `lowest_ipv6_mtu` / `ipv6_mtu` to what the IPv6 path carries."
        }
        D::FragmentedIcmp => {
            "Fragmented ICMP messages are not translated (RFC 7915). Nothing to configure."
        }
        D::UdpZeroChecksum => {
            "IPv4 UDP with checksum zero cannot be translated as is. Set \
             `udp_zero_checksum = \"compute\"` in the mode's options to translate it."
        }
        D::Ipv6UdpZeroChecksum => {
            "IPv6 UDP with checksum zero (only legal in tunnels, RFC 6935). Set \
             `ipv6_udp_zero_checksum = \"compute\"` if such tunnels cross the translator."
        }
        D::SourceRouted => {
            "An IPv4 source route option or an IPv6 Routing header with segments left: not \
             translated (RFC 7915). Expected to be rare; usually hostile."
        }
        D::IcmpErrorAboutError => {
            "An ICMP error quoting an ICMP error: never answered or translated (RFC 1122)."
        }
        D::NoHeadroom => {
            "The frame buffer had no room for the translated headers: a defect in quicknat's \
             I/O. Please report it with `quicknat status` and the backend in use."
        }
        D::LocatorMismatch => {
            "An ILA packet's destination locator differs from its identifier's mapping. \
             Check the mappings (`quicknat ila list`) against the sender's."
        }
        D::TooBig => {
            "An IPv4 packet without DF is too big for the next hop in a mode that does not \
             fragment. Raise the next hop's MTU or lower the sender's."
        }
        D::SynHeld => {
            "An unsolicited inbound TCP SYN is held for a possible simultaneous open (RFC \
             5382 REQ-4); answered later if none comes. Set \
             `drop_externally_initiated_tcp = true` to drop them at once."
        }
        D::SynHoldFull => {
            "More unsolicited inbound SYNs than `max_simultaneous_opens`: a SYN scan or \
             flood. Nothing to do unless simultaneous opens (peer-to-peer) fail."
        }
        D::Icmpv6InfoFiltered => {
            "ICMPv6 informational messages dropped as `drop_icmpv6_info = true` asks."
        }
        D::TcpRstOutOfWindow => {
            "A TCP RST outside the window the session has seen: an off-path guess (RFC \
             5961). Nothing to do."
        }
    }
}

/// The drop reasons page: every reason's label, meaning, and what to do about it.
pub fn drops_markdown() -> String {
    let mut out = String::from("# Drop reasons\n\n");
    out.push_str(&generated_note(
        "the engine's drop-reason table (crates/engine/src/verdict.rs)",
    ));
    out.push_str(
        "Every packet quicknat does not forward is counted under one of these reasons: \
         `quicknat stats` shows the counts (total and per worker) with each reason's \
         meaning, the metrics export them as `quicknat_dropped_packets_total{reason=\"...\"}`, \
         and the label is the same everywhere.\n\n\
         | Reason | Meaning | Cause and what to do |\n|---|---|---|\n",
    );
    for r in DropReason::ALL {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            r.as_str(),
            cell(r.explain()),
            cell(remedy(*r))
        );
    }
    out
}

/// The metrics page: every family the gateway exports, with its type, labels and HELP.
pub fn metrics_markdown() -> String {
    // The families the gateway appends when `[routing]` and the fast path are on.
    let routes = runtime::routing::RouteStatus::new(&runtime::routing::RoutingConfig::default());
    let fast = runtime::live::FastPathStatus::fixed(Default::default());
    let text = runtime::routing::append_metrics(
        runtime::metrics::render(&every_family()),
        &(routes.metrics_text() + &fast.metrics_text()),
    );
    let mut out = String::from("# Metrics\n\n");
    out.push_str(&generated_note(
        "the gateway's metrics exposition (crates/runtime/src/metrics)",
    ));
    out.push_str(
        "What `GET /metrics` on `[gateway] metrics` serves, in the OpenMetrics text format. \
         Counters carry the `_total` suffix on their samples.\n\n\
         | Metric | Type | Labels | Meaning |\n|---|---|---|---|\n",
    );
    for family in families(&text) {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            family.name,
            family.kind,
            family
                .labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", "),
            cell(&family.help)
        );
    }
    out
}

/// A sample in which every optional family is present.
fn every_family() -> runtime::metrics::Sample {
    use runtime::metrics::{BuildInfo, Sample};
    Sample {
        workers: vec![Default::default()],
        occupancy: Some(Default::default()),
        reaper_lag: Some(Default::default()),
        build: Some(BuildInfo::now("af_packet", "nat44")),
        census: Some(Default::default()),
        pool: vec![engine::introspect::PoolAddrUsage {
            addr: std::net::Ipv4Addr::new(203, 0, 113, 1),
            ports_per_proto: 0,
            taken: Default::default(),
            bindings: 0,
            subscribers: 0,
            blocks_held: 0,
        }],
        ..Sample::default()
    }
}

/// One metric family of an exposition.
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: Vec<String>,
}

/// The families of an OpenMetrics text, with the label names their samples use.
fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_owned(),
                kind: String::new(),
                help: help.to_owned(),
                labels: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (out.last_mut(), rest.split_once(' ')) {
                f.kind = kind.to_owned();
            }
        } else if let (Some(f), Some((_, labels))) = (out.last_mut(), line.split_once('{')) {
            for pair in labels.split('}').next().unwrap_or("").split(',') {
                if let Some((l, _)) = pair.split_once('=') {
                    if !f.labels.iter().any(|x| x == l) {
                        f.labels.push(l.to_owned());
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed page at `path` (from the repository root) is `generated`; with
    /// `QUICKNAT_BLESS=1` it is written instead.
    fn check_generated(path: &str, generated: &str) {
        let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path);
        if std::env::var_os("QUICKNAT_BLESS").is_some() {
            std::fs::write(&full, generated).unwrap_or_else(|e| panic!("{path}: {e}"));
            return;
        }
        let committed = std::fs::read_to_string(&full).unwrap_or_default();
        assert!(
            committed == generated,
            "{path} differs from what the code generates: run \
             `QUICKNAT_BLESS=1 cargo test -p quicknat reference` and commit it"
        );
    }

    #[test]
    fn reference_pages_are_the_generated_ones() {
        use clap::CommandFactory;
        check_generated(
            "docs/src/reference/cli.md",
            &cli_markdown(crate::Cli::command()),
        );
        check_generated("docs/src/reference/drop-reasons.md", &drops_markdown());
        check_generated("docs/src/reference/metrics.md", &metrics_markdown());
    }

    #[test]
    fn the_cli_page_names_every_verb_and_flag() {
        use clap::CommandFactory;
        let page = cli_markdown(crate::Cli::command());
        for sub in crate::Cli::command().get_subcommands() {
            assert!(page.contains(&format!("`quicknat {}`", sub.get_name())));
            for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(l) = a.get_long() {
                    assert!(
                        page.contains(&format!("--{l}")),
                        "{}: --{l}",
                        sub.get_name()
                    );
                }
            }
        }
    }

    #[test]
    fn the_metrics_page_has_every_family_with_help() {
        let fams = families(&runtime::metrics::render(&every_family()));
        assert!(fams.len() > 10, "{} families", fams.len());
        for f in &fams {
            assert!(!f.help.is_empty() && !f.kind.is_empty(), "{}", f.name);
        }
        assert!(fams
            .iter()
            .any(|f| f.name == "quicknat_dropped_packets" && f.labels == ["reason"]));
    }
}
