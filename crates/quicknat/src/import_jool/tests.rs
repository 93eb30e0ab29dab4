//! Tests of `quicknat import jool`: Jool's own examples converted and loaded, every
//! unmappable key listed, malformed input refused with its JSON path, and no input that
//! panics the importer.

use super::*;
use engine::any::ModeConfig;
use engine::config::Filtering;
use proptest::prelude::*;
use std::time::Duration;

/// The NAT64 example of Jool's documentation, "Atomic Configuration" (docs/en/config-atomic.md
/// in NICMx/Jool, https://nicmx.github.io/Jool/en/config-atomic.html#nat64), without
/// its links.
const JOOL_NAT64: &str = r#"{
	"comment": "Sample full NAT64 configuration.",

	"instance": "instance name",
	"framework": "netfilter",

	"global": {
		"pool6": "64:ff9b::/96",

		"manually-enabled": false,

		"zeroize-traffic-class": true,
		"override-tos": false,
		"tos": 254,
		"mtu-plateaus": [1, 2, 3, 4, 5, 6],
		"maximum-simultaneous-opens": 16,
		"source-icmpv6-errors-better": true,
		"handle-rst-during-fin-rcv": true,
		"f-args": 10,

		"logging-bib": true,
		"logging-session": true,

		"address-dependent-filtering": true,
		"drop-icmpv6-info": true,
		"drop-externally-initiated-tcp": true,

		"udp-timeout": "1:00:00",
		"tcp-est-timeout": "10:00:00",
		"tcp-trans-timeout": "5:00",
		"icmp-timeout": "5:30",

		"ss-enabled": true,
		"ss-flush-asap": false,
		"ss-flush-deadline": 1000,
		"ss-capacity": 256,
		"ss-max-payload": 600
	},

	"pool4": [
		{
			"mark": 1,
			"protocol": "UDP",
			"prefix": "192.0.2.1",
			"port range": "61001-62000",
			"max-iterations": 1500
		}, {
			"comment": "mark, port range and max-iterations are optional.",
			"protocol": "TCP",
			"prefix": "192.0.2.2/31"
		}, {
			"mark": 1,
			"protocol": "ICMP",
			"prefix": "192.0.2.1/32",
			"port range": "1000-2000"
		}
	],

	"bib": [
		{
			"protocol": "TCP",
			"ipv6 address": "2001:db8::1#80",
			"ipv4 address": "192.0.2.2#80"
		}, {
			"protocol": "UDP",
			"ipv6 address": "2001:db8::2#10000",
			"ipv4 address": "192.0.2.1#61500"
		}, {
			"protocol": "ICMP",
			"ipv6 address": "2001:db8:AAAA::1#44",
			"ipv4 address": "192.0.2.1#1044"
		}
	]
}"#;

/// The SIIT example of the same page
/// (https://nicmx.github.io/Jool/en/config-atomic.html#siit), without its links.
const JOOL_SIIT: &str = r#"{
	"comment": "Sample full SIIT configuration.",

	"instance": "instance name",
	"framework": "netfilter",

	"global": {
		"comment": "pool6 and the RFC6791v4 pool belong here, ever since Jool 4.",
		"pool6": "64:ff9b::/96",
		"manually-enabled": false,
		"zeroize-traffic-class": true,
		"override-tos": false,
		"tos": 254,
		"mtu-plateaus": [1, 2, 3, 4, 5, 6],
		"amend-udp-checksum-zero": true,
		"eam-hairpin-mode": "simple",
		"randomize-rfc6791-addresses": false,
		"rfc6791v6-prefix": null,
		"rfc6791v4-prefix": null
	},

	"eamt": [
		{
			"comment": {
				"text": "Here's a compound comment.",
				"more": "Its type is not checked, after all.",
				"date": "2019-01-06",
				"whatever": 1234
			},
			"ipv6 prefix": "2001:db8:1::/128",
			"ipv4 prefix": "192.0.2.0"
		}, {
			"ipv6 prefix": "2001:db8:2::",
			"ipv4 prefix": "192.0.2.1/32"
		}, {
			"ipv6 prefix": "2001:db8:3::/124",
			"ipv4 prefix": "192.0.2.16/28"
		}
	],

	"comment": "This comment is relevant to denylist4 maybe.",
	"denylist4": [
		"198.51.100.0",
		"198.51.100.2/32",
		"198.51.100.32/27"
	]
}"#;

fn conv(text: &str) -> Result<Imported, ImportError> {
    import(text, "jool.json", &Options::default())
}

fn load(toml: &str) -> quicknat::config::Config {
    quicknat::config::load_str_on(toml, "out.toml", &Default::default())
        .unwrap_or_else(|e| panic!("the output does not load: {e}\n{toml}"))
}

/// The note about `path`, of `kind`.
fn has(out: &Imported, kind: NoteKind, path: &str) -> bool {
    out.notes.iter().any(|n| n.kind == kind && n.path == path)
}

fn error(text: &str) -> String {
    match conv(text) {
        Ok(o) => panic!("accepted:\n{}", o.toml),
        Err(e) => e.to_string(),
    }
}

#[test]
fn import_jool_nat64_example() {
    let out = conv(JOOL_NAT64).unwrap();
    assert_eq!(out.mode, JoolMode::Nat64);
    let cfg = load(&out.toml);
    let ModeConfig::Nat64(c) = &cfg.mode else {
        panic!("not nat64: {:?}", cfg.mode)
    };
    assert_eq!(c.pref64.to_string(), "64:ff9b::/96");
    let pool: Vec<String> = c.pool4.iter().map(ToString::to_string).collect();
    assert_eq!(pool, ["192.0.2.1/32", "192.0.2.2/31"]);
    // One range covering UDP's 61001-62000, TCP's default 61001-65535 and ICMP's 1000-2000.
    assert_eq!((c.ports.first, c.ports.last), (1000, 65535));
    assert_eq!(c.filtering, Filtering::AddressDependent);
    assert_eq!(c.max_simultaneous_opens, 16);
    assert!(c.drop_icmpv6_info);
    assert!(c.drop_externally_initiated_tcp);
    assert_eq!(c.timeouts.udp, Duration::from_secs(3600));
    assert_eq!(c.timeouts.tcp_established, Duration::from_secs(36000));
    assert_eq!(c.timeouts.tcp_transitory, Duration::from_secs(300));
    assert_eq!(c.timeouts.icmp, Duration::from_secs(330));
    assert_eq!(c.options.traffic_class, Some(0));
    assert_eq!(
        c.options.tos, None,
        "override-tos is false: tos has no effect"
    );
    assert!(
        c.options.translate_udp_zero_csum,
        "Jool's NAT64 always computes"
    );
    // TCP and UDP static BIB entries; the ICMP one has no equivalent.
    let statics: Vec<String> = c
        .static_bindings
        .iter()
        .map(|b| format!("{:?} {} {}", b.protocol, b.public, b.inside))
        .collect();
    assert_eq!(
        statics,
        [
            "Tcp 192.0.2.2:80 [2001:db8::1]:80",
            "Udp 192.0.2.1:61500 [2001:db8::2]:10000"
        ]
    );
    for path in [
        "bib[3]",
        "global.f-args",
        "global.mtu-plateaus",
        "global.manually-enabled",
        "global.tos",
        "global.ss-enabled",
        "global.ss-flush-asap",
        "global.ss-flush-deadline",
        "global.ss-capacity",
        "global.ss-max-payload",
        "pool4[1].mark",
        "pool4[1].max-iterations",
        "pool4[3].mark",
    ] {
        assert!(has(&out, NoteKind::NotImported, path), "{path} not listed");
        assert!(
            out.toml.contains(&format!("# not imported: {path} = ")),
            "{path} not in the header:\n{}",
            out.toml
        );
    }
    for path in [
        "pool4",
        "global.logging-bib",
        "global.logging-session",
        "global.tcp-est-timeout",
    ] {
        assert!(
            has(&out, NoteKind::Approximate, path),
            "{path} not approximate"
        );
    }
    assert!(has(
        &out,
        NoteKind::BuiltIn,
        "global.handle-rst-during-fin-rcv"
    ));
    assert!(has(
        &out,
        NoteKind::BuiltIn,
        "global.source-icmpv6-errors-better"
    ));
    // The logging table waits for a destination.
    assert!(out.toml.contains("# events = [\"binding\", \"session\"]"));
    assert!(out
        .toml
        .contains("# not imported: global.f-args = 10 (no equivalent"));
    // The placeholders are said to be placeholders.
    assert!(out.toml.contains("edit the placeholders"));
    // Notes are wrapped for reading (only a long value may stick out).
    assert!(out.toml.lines().all(|l| l.len() <= 100), "{}", out.toml);
}

#[test]
fn import_jool_siit_example() {
    let out = conv(JOOL_SIIT).unwrap();
    assert_eq!(out.mode, JoolMode::Siit);
    let cfg = load(&out.toml);
    let ModeConfig::Siit(c) = &cfg.mode else {
        panic!("not siit: {:?}", cfg.mode)
    };
    assert_eq!(
        c.pref64.map(|p| p.to_string()).as_deref(),
        Some("64:ff9b::/96")
    );
    let eam: Vec<String> = c
        .eam
        .iter()
        .map(|e| format!("{} {}", e.ipv4, e.ipv6))
        .collect();
    assert_eq!(
        eam,
        [
            "192.0.2.0/32 2001:db8:1::/128",
            "192.0.2.1/32 2001:db8:2::/128",
            "192.0.2.16/28 2001:db8:3::/124"
        ]
    );
    assert_eq!(c.eam_hairpin.as_str(), "simple");
    assert!(c.icmp_error_source.is_none());
    assert!(c.options.translate_udp_zero_csum);
    assert_eq!(c.options.traffic_class, Some(0));
    assert_eq!(c.options.tos, None);
    for path in [
        "denylist4[1]",
        "denylist4[2]",
        "denylist4[3]",
        "global.manually-enabled",
        "global.tos",
        "global.mtu-plateaus",
        "global.randomize-rfc6791-addresses",
    ] {
        assert!(has(&out, NoteKind::NotImported, path), "{path} not listed");
    }
    assert!(has(&out, NoteKind::Approximate, "global.rfc6791v4-prefix"));
    assert!(has(&out, NoteKind::BuiltIn, "global.rfc6791v6-prefix"));
}

#[test]
fn import_jool_siit_rfc6791_pool_and_tos() {
    let out = conv(
        r#"{"instance": "x", "framework": "netfilter",
            "global": {"pool6": "2001:db8:64::/96", "rfc6791v4-prefix": "192.0.0.8/32",
                       "override-tos": true, "tos": 32, "lowest-ipv6-mtu": 1400,
                       "eam-hairpin-mode": "none"}}"#,
    )
    .unwrap();
    // Nothing but common globals and an SIIT one: rfc6791v4-prefix tells SIIT.
    assert_eq!(out.mode, JoolMode::Siit);
    let cfg = load(&out.toml);
    let ModeConfig::Siit(c) = &cfg.mode else {
        panic!()
    };
    assert!(c.icmp_error_source.is_some());
    assert!(out.toml.contains("icmp_error_source = \"192.0.0.8\""));
    assert_eq!(c.options.tos, Some(32));
    assert_eq!(c.options.lowest_ipv6_mtu, 1400);
    assert_eq!(c.eam_hairpin.as_str(), "off");
    // override-tos without tos: Jool's default tos, 0.
    let out = conv(r#"{"global": {"pool6": "64:ff9b::/96", "override-tos": true, "eam-hairpin-mode": "intrinsic"}}"#).unwrap();
    assert!(out.toml.contains("tos = 0"), "{}", out.toml);
}

#[test]
fn import_jool_unknown_keys_are_listed() {
    let out = conv(
        r#"{"instance": "x", "framework": "iptables", "frobnicate": [1, 2],
            "global": {"pool6": "64:ff9b::/96", "trace": true, "udp-timeout": "2:00.500"},
            "pool4": [{"protocol": "tcp", "prefix": "192.0.2.0/30", "port range": "1-65535",
                       "colour": "blue"}]}"#,
    )
    .unwrap();
    for path in ["frobnicate", "global.trace", "pool4[1].colour"] {
        assert!(has(&out, NoteKind::NotImported, path), "{path} not listed");
    }
    assert!(has(&out, NoteKind::Approximate, "framework"));
    // 2 minutes 0.5 seconds: rounded up, said so.
    assert!(has(&out, NoteKind::Approximate, "global.udp-timeout"));
    assert!(out.toml.contains("udp = 121"));
    // UDP and ICMP had no pool4 entry.
    assert!(out
        .notes
        .iter()
        .any(|n| n.path == "pool4" && n.why.contains("no entry for UDP, ICMP")));
    load(&out.toml);
}

#[test]
fn import_jool_other_mode_keys_are_listed() {
    let out = import(
        r#"{"instance": "x", "framework": "netfilter",
            "global": {"pool6": "64:ff9b::/96", "amend-udp-checksum-zero": true},
            "eamt": [{"ipv4 prefix": "192.0.2.0/24", "ipv6 prefix": "2001:db8::/120"}],
            "pool4": [{"protocol": "UDP", "prefix": "198.51.100.0/24"}]}"#,
        "jool.json",
        &Options {
            mode: Some(JoolMode::Nat64),
            inside: Some("v6net".into()),
            outside: Some("v4net".into()),
            ..Options::default()
        },
    )
    .unwrap();
    assert!(has(
        &out,
        NoteKind::NotImported,
        "global.amend-udp-checksum-zero"
    ));
    assert!(has(&out, NoteKind::NotImported, "eamt"));
    let siit = import(
        r#"{"global": {"pool6": "64:ff9b::/96"}, "bib": [],
            "pool4": [{"protocol": "UDP", "prefix": "198.51.100.0/24"}]}"#,
        "jool.json",
        &Options {
            mode: Some(JoolMode::Siit),
            ..Options::default()
        },
    )
    .unwrap();
    assert!(has(&siit, NoteKind::NotImported, "pool4"));
    assert!(has(&siit, NoteKind::NotImported, "bib"));
    assert!(out.toml.contains("inside = \"v6net\""));
    assert!(!out.toml.contains("placeholders"));
    let cfg = load(&out.toml);
    assert_eq!(cfg.gateway.unwrap().inside, "v6net");
}

#[test]
fn import_jool_pool4_from_the_command_line() {
    let text = r#"{"instance": "x", "framework": "netfilter", "global": {"pool6": "64:ff9b::/96",
                   "logging-bib": false}}"#;
    let e = error(text);
    assert!(e.contains("pool4: empty") && e.contains("--pool4"), "{e}");
    let out = import(
        text,
        "jool.json",
        &Options {
            pool4: vec!["203.0.113.0/29".into()],
            ..Options::default()
        },
    )
    .unwrap();
    let cfg = load(&out.toml);
    let ModeConfig::Nat64(c) = &cfg.mode else {
        panic!()
    };
    assert_eq!(c.pool4[0].to_string(), "203.0.113.0/29");
}

#[test]
fn import_jool_errors_name_the_path() {
    let cases: &[(&str, &str)] = &[
        ("{\"instance\": ", "jool.json: not valid JSON"),
        (
            "[1, 2]",
            "jool.json: the top level: [1, 2] is an array, not an object",
        ),
        (
            r#"{"framework": "netfilter", "global": {"pool6": "64:ff9b::/96"},
                "eamt": [{"ipv4 prefix": "192.0.2.0/32", "ipv6 prefix": "2001:db8::/128"},
                         {"ipv4 prefix": "192.0.2.300/32", "ipv6 prefix": "2001:db8::1/128"}]}"#,
            "jool.json: eamt[2].ipv4 prefix: \"192.0.2.300/32\" is not an IPv4 prefix",
        ),
        (
            r#"{"eamt": [{"ipv4 prefix": "192.0.2.0/24", "ipv6 prefix": "2001:db8::/64"}]}"#,
            "jool.json: eamt[1]: 192.0.2.0/24 and 2001:db8::/64 have suffixes of different lengths",
        ),
        (
            r#"{"eamt": [{"ipv4 prefix": "192.0.2.0/24", "ipv6 prefix": "2001:db8::/120"},
                         {"ipv4 prefix": "192.0.2.128/25", "ipv6 prefix": "2001:db8:1::/121"}]}"#,
            "jool.json: eamt[2]: 192.0.2.128/25 <-> 2001:db8:1::/121 overlaps eamt[1]",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.1", "port range": "70000-70001"}]}"#,
            "jool.json: pool4[1].port range: \"70000-70001\" is not a port range",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.1", "port range": "2000-1000"}]}"#,
            "jool.json: pool4[1].port range: \"2000-1000\" is not a port range: 2000 is after 1000",
        ),
        (
            r#"{"pool4": [{"protocol": "TCP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.pool6: missing: a NAT64 instance needs pool6",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/95"}, "pool4": []}"#,
            "jool.json: global.pool6: \"64:ff9b::/95\" is not an RFC 6052 prefix",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96", "udp-timeout": 300},
                "pool4": [{"protocol": "UDP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.udp-timeout: 300 is a number, not a string",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96", "tcp-est-timeout": "2:xx:00"},
                "pool4": [{"protocol": "UDP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.tcp-est-timeout: \"2:xx:00\" is not a time as [[HH:]MM:]SS[.mmm]",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96", "drop-icmpv6-info": "yes"},
                "pool4": [{"protocol": "UDP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.drop-icmpv6-info: \"yes\" is a string, not true or false",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96", "maximum-simultaneous-opens": -1},
                "pool4": [{"protocol": "UDP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.maximum-simultaneous-opens: -1 is not an integer",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "SCTP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: pool4[1].protocol: \"SCTP\" is not TCP, UDP or ICMP",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.1"}],
                "bib": [{"protocol": "TCP", "ipv6 address": "2001:db8::1#80",
                         "ipv4 address": "198.51.100.1#80"}]}"#,
            "jool.json: bib[1].ipv4 address: 198.51.100.1 is not in pool4",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.1"}],
                "bib": [{"protocol": "TCP", "ipv6 address": "2001:db8::1",
                         "ipv4 address": "192.0.2.1#80"}]}"#,
            "jool.json: bib[1].ipv6 address: \"2001:db8::1\" is not IPV6#PORT",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"}, "pool4": "192.0.2.1"}"#,
            "jool.json: pool4: \"192.0.2.1\" is a string, not an array",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"}, "Pool4": [], "pool4": []}"#,
            "appears twice",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"}}"#,
            "nothing in the file tells a NAT64 instance from a SIIT one",
        ),
        (
            r#"{"pool4": [], "eamt": []}"#,
            "NAT64 settings (pool4) and SIIT settings (eamt)",
        ),
        (
            r#"{"framework": "nftables", "eamt": []}"#,
            "jool.json: framework: \"nftables\" is not \"netfilter\" or \"iptables\"",
        ),
        (r#"{"eamt": []}"#, "neither global.pool6 nor an eamt entry"),
        (
            r#"{"global": {"pool6": "64:ff9b::/96"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.0/30"}],
                "bib": [{"protocol": "TCP", "ipv6 address": "2001:db8::1#80",
                         "ipv4 address": "192.0.2.1#80"},
                        {"protocol": "TCP", "ipv6 address": "2001:db8::2#80",
                         "ipv4 address": "192.0.2.1#80"}]}"#,
            "jool.json: bib[2]: binds an endpoint bib[1] already binds",
        ),
        (
            r#"{"global": {"pool6": "64:ff9b::/96", "icmp-timeout": "0:00"},
                "pool4": [{"protocol": "TCP", "prefix": "192.0.2.1"}]}"#,
            "jool.json: global.icmp-timeout: \"0:00\" is zero",
        ),
    ];
    for (text, want) in cases {
        let e = error(text);
        assert!(e.contains(want), "{text}\n  gave: {e}\n  want: {want}");
    }
}

#[test]
fn import_jool_check_config_warnings_are_noted() {
    let out = conv(
        r#"{"global": {"pool6": "64:ff9b::/96", "udp-timeout": "1:00"},
            "pool4": [{"protocol": "UDP", "prefix": "192.0.2.1"}]}"#,
    )
    .unwrap();
    let w = out
        .notes
        .iter()
        .find(|n| n.kind == NoteKind::Warning)
        .expect("no check-config note");
    assert!(w.why.starts_with("nat64.timeouts.udp = 60 s"), "{}", w.why);
    assert!(out
        .toml
        .contains("# check-config warns: nat64.timeouts.udp = 60 s"));
}

#[test]
fn import_jool_times() {
    assert_eq!(parse_jool_time("10"), Ok(10_000));
    assert_eq!(parse_jool_time("5:00"), Ok(300_000));
    assert_eq!(parse_jool_time("1:00:00"), Ok(3_600_000));
    assert_eq!(parse_jool_time("2:04:00.5"), Ok(7_440_500));
    assert_eq!(parse_jool_time("0:01.250"), Ok(1_250));
    for bad in [
        "",
        ":",
        "1:2:3:4",
        "1.",
        "1.2345",
        "-1",
        "a",
        "1:-2",
        "99999999999999:00",
    ] {
        assert!(parse_jool_time(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(parse_port_range("1024-65535"), Ok((1024, 65535)));
    assert_eq!(parse_port_range("80"), Ok((80, 80)));
    assert!(parse_port_range("1-65536").is_err());
    assert_eq!(
        parse_taddr::<Ipv4Addr>("192.0.2.1#80"),
        Some((Ipv4Addr::new(192, 0, 2, 1), 80))
    );
}

#[test]
fn import_jool_pool4_prefixes_merge() {
    let p = |s: &str| s.parse::<Ipv4Prefix>().unwrap();
    let merged = merge_prefixes(vec![
        p("192.0.2.1/32"),
        p("192.0.2.0/28"),
        p("192.0.2.0/28"),
        p("198.51.100.0/24"),
        p("198.51.100.7"),
    ]);
    assert_eq!(merged, [p("192.0.2.0/28"), p("198.51.100.0/24")]);
}

// -- no input panics the importer --

/// Keys Jool knows, so that generated files reach deep into the importer.
const KEYS: &[&str] = &[
    "instance",
    "framework",
    "global",
    "eamt",
    "denylist4",
    "pool4",
    "bib",
    "pool6",
    "pool6791",
    "comment",
    "pool6",
    "protocol",
    "prefix",
    "port range",
    "mark",
    "max-iterations",
    "ipv6 address",
    "ipv4 address",
    "ipv6 prefix",
    "ipv4 prefix",
    "udp-timeout",
    "tcp-est-timeout",
    "tcp-trans-timeout",
    "icmp-timeout",
    "lowest-ipv6-mtu",
    "tos",
    "override-tos",
    "zeroize-traffic-class",
    "mtu-plateaus",
    "eam-hairpin-mode",
    "rfc6791v4-prefix",
    "rfc6791v6-prefix",
    "maximum-simultaneous-opens",
    "address-dependent-filtering",
    "logging-bib",
    "ss-enabled",
    "f-args",
];

/// Strings that parse as something Jool means.
const STRINGS: &[&str] = &[
    "64:ff9b::/96",
    "2001:db8:64::/96",
    "2001:db8::/120",
    "2001:db8::1#80",
    "192.0.2.0/24",
    "192.0.2.1",
    "192.0.2.1#80",
    "192.0.2.0/28",
    "1024-65535",
    "0-65535",
    "80",
    "5:00",
    "0",
    "1:00:00.500",
    "TCP",
    "udp",
    "ICMP",
    "netfilter",
    "iptables",
    "simple",
    "none",
    "auto",
    "infinity",
];

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u32..70000).prop_map(Value::from),
        prop::sample::select(vec![0.5f64, -1.0, 1e300, 10.0]).prop_map(Value::from),
        prop::sample::select(STRINGS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            4 => prop::sample::select(KEYS).prop_map(String::from),
            1 => ".{0,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any JSON value, with each mode: an answer (a TOML that loaded, or an error), never
    /// a panic.
    #[test]
    fn import_jool_never_panics(v in json_value()) {
        let text = v.to_string();
        for mode in [None, Some(JoolMode::Nat64), Some(JoolMode::Siit)] {
            let opts = Options { mode, ..Options::default() };
            if let Ok(out) = import(&text, "any.json", &opts) {
                // What the importer hands out, quicknat loads.
                prop_assert!(quicknat::config::load_str_on(&out.toml, "x", &Default::default()).is_ok());
            }
        }
    }

    /// Any text at all.
    #[test]
    fn import_jool_never_panics_on_text(text in ".{0,200}") {
        let _ = import(&text, "any.json", &Options::default());
    }

    /// Jool-shaped files with random parts: the same.
    #[test]
    fn import_jool_never_panics_on_jool_shapes(
        global in prop::collection::vec((prop::sample::select(KEYS), json_value()), 0..8),
        pool4 in prop::collection::vec(json_value(), 0..4),
        bib in prop::collection::vec(json_value(), 0..3),
        eamt in prop::collection::vec(json_value(), 0..3),
    ) {
        let mut g = serde_json::Map::new();
        g.insert("pool6".into(), "64:ff9b::/96".into());
        for (k, v) in global {
            g.insert(k.into(), v);
        }
        let nat64 = serde_json::json!({
            "instance": "i", "framework": "netfilter", "global": g.clone(),
            "pool4": pool4, "bib": bib,
        });
        let siit = serde_json::json!({
            "instance": "i", "framework": "netfilter", "global": g, "eamt": eamt,
        });
        for v in [nat64, siit] {
            let _ = import(&v.to_string(), "any.json", &Options::default());
        }
    }
}
