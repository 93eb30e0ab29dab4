//! Unit tests: the example file loads, and every kind of mistake is reported with the
//! right line, field path and reason.

use std::time::Duration;

use super::*;

/// One valid rule, to which each test appends its mistake.
const BASE: &str = r#"[nat44]
hairpinning = true

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.0/28"]
"#;

/// The 1-based line of the first line of `text` containing `needle`.
fn line_with(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("test text lacks {needle:?}"))
}

/// Loads `text`, expecting an error; checks its line (of `needle`), field and message.
fn expect_err(text: &str, needle: &str, field: &str, message: &str) -> ConfigFileError {
    let e = load_str(text, "t.toml").expect_err("config should be rejected");
    assert_eq!(e.origin, "t.toml");
    assert_eq!(e.line, Some(line_with(text, needle)), "line of {e}");
    assert_eq!(e.field.as_deref(), Some(field), "field of {e}");
    assert!(e.message.contains(message), "message of {e}");
    e
}

#[test]
fn example_file_loads_with_defaults() {
    let c = load_str(DEFAULT_CONFIG, DEFAULT_CONFIG_ORIGIN).expect("example is valid");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let mut want = Nat44Config::default();
    want.rules.push(DynamicRule {
        inside: "10.0.0.0/24".parse().unwrap(),
        pool: vec!["203.0.113.0/28".parse().unwrap()],
        ports: PortRange::new(1024, 65535).unwrap(),
    });
    assert_eq!(c.nat44(), Some(&want));
}

#[test]
fn every_field_is_read() {
    let text = r#"
[nat44]
filtering = "address-and-port-dependent"
hairpinning = false
port_preservation = false
port_reuse_hold = 30
max_sessions = 1000
decrement_ttl = false

[nat44.timeouts]
udp = 301
tcp_established = 7441
tcp_transitory = 241
tcp_closed = 11
icmp = 61

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = "203.0.113.0/28"
ports = "2000-3000"

[[nat44.rule]]
inside = "10.1.0.0/16"
pool = ["198.51.100.0/30", "198.51.100.9"]

[[nat44.static]]
inside = "10.0.0.100"
public = "192.0.2.100"

[[nat44.forward]]
protocol = "udp"
public = "203.0.113.1:5353"
inside = "10.0.0.20:53"
"#;
    let c = load_str(text, "t.toml")
        .expect("valid")
        .nat44()
        .cloned()
        .unwrap();
    assert_eq!(c.filtering, Filtering::AddressAndPortDependent);
    assert!(!c.hairpinning && !c.port_preservation && !c.decrement_ttl);
    assert_eq!(c.port_reuse_hold, Duration::from_secs(30));
    assert_eq!(c.max_sessions, 1000);
    assert_eq!(c.timeouts.udp, Duration::from_secs(301));
    assert_eq!(c.timeouts.tcp_established, Duration::from_secs(7441));
    assert_eq!(c.timeouts.tcp_transitory, Duration::from_secs(241));
    assert_eq!(c.timeouts.tcp_closed, Duration::from_secs(11));
    assert_eq!(c.timeouts.icmp, Duration::from_secs(61));
    assert_eq!(c.rules.len(), 2);
    assert_eq!(c.rules[0].ports, PortRange::new(2000, 3000).unwrap());
    assert_eq!(c.rules[1].pool.len(), 2);
    assert_eq!(c.rules[1].pool[1].len(), 32);
    assert_eq!(c.static_nat[0].public, Ipv4Addr::new(192, 0, 2, 100));
    assert_eq!(c.port_forwards[0].protocol, L4Proto::Udp);
    assert_eq!(c.port_forwards[0].inside.port(), 53);
}

#[test]
fn syntax_error_names_the_line() {
    let text = format!("{BASE}\n[nat44.timeouts\nudp = 300\n");
    let e = load_str(&text, "t.toml").unwrap_err();
    assert_eq!(e.line, Some(line_with(&text, "[nat44.timeouts")));
    assert_eq!(e.field, None);
    assert_eq!(
        e.to_string(),
        format!(
            "t.toml:{}: invalid table header: expected `.`, `]`",
            e.line.unwrap()
        )
    );
}

#[test]
fn unknown_key_is_an_error() {
    let text = format!("{BASE}\n[nat44.timeouts]\nudpp = 300\n");
    expect_err(&text, "udpp", "nat44.timeouts.udpp", "unknown field `udpp`");
    let text = "[nat44]\nhairpining = true\n";
    expect_err(text, "hairpining", "nat44.hairpining", "unknown field");
    let text = format!("{BASE}\n[nat45]\n");
    expect_err(&text, "nat45", "nat45", "unknown field `nat45`");
    let text = format!("{BASE}\n[[nat44.rule]]\ninside = \"10.1.0.0/24\"\npool = \"198.51.100.0/28\"\nport = \"1-2\"\n");
    expect_err(
        &text,
        "port =",
        "nat44.rule[2].port",
        "unknown field `port`",
    );
}

#[test]
fn unknown_key_in_inline_table() {
    let text = "[nat44]\nrule = [{ inside = \"10.0.0.0/24\", pool = \"192.0.2.0/28\", prots = \"1-2\" }]\n";
    expect_err(
        text,
        "prots",
        "nat44.rule[1].prots",
        "unknown field `prots`",
    );
}

#[test]
fn bad_prefix() {
    let text = BASE.replace("\"10.0.0.0/24\"", "\"10.0.0/24\"");
    expect_err(
        &text,
        "10.0.0/24",
        "nat44.rule[1].inside",
        "\"10.0.0/24\": \"10.0.0\" is not an IPv4 address",
    );
    let text = BASE.replace("\"10.0.0.0/24\"", "\"10.0.0.0/x\"");
    expect_err(
        &text,
        "10.0.0.0/x",
        "nat44.rule[1].inside",
        "not a prefix length",
    );
}

#[test]
fn host_bits_set() {
    let text = BASE.replace("203.0.113.0/28", "203.0.113.1/28");
    expect_err(
        &text,
        "203.0.113.1/28",
        "nat44.rule[1].pool",
        "has host bits set (did you mean 203.0.113.0/28?)",
    );
}

#[test]
fn prefix_too_long_points_at_the_list_element() {
    let text = format!("{BASE}\n[[nat44.rule]]\ninside = \"10.1.0.0/24\"\npool = [\"198.51.100.0/28\",\n        \"203.0.113.0/33\"]\n");
    let e = expect_err(
        &text,
        "/33",
        "nat44.rule[2].pool",
        "prefix length /33 is longer than 32",
    );
    assert_eq!(
        e.to_string(),
        "t.toml:11: nat44.rule[2].pool: \"203.0.113.0/33\": prefix length /33 is longer than 32"
    );
}

#[test]
fn bad_port_range() {
    let text = format!("{BASE}ports = \"2000-1000\"\n");
    expect_err(
        &text,
        "ports",
        "nat44.rule[1].ports",
        "\"2000-1000\": range 2000-1000 is empty",
    );
    let text = format!("{BASE}ports = \"0-100\"\n");
    expect_err(&text, "ports", "nat44.rule[1].ports", "port 0");
    let text = format!("{BASE}ports = \"1024-70000\"\n");
    expect_err(
        &text,
        "ports",
        "nat44.rule[1].ports",
        "\"70000\" is not a port number",
    );
}

#[test]
fn overlapping_rules() {
    let text =
        format!("{BASE}\n[[nat44.rule]]\ninside = \"10.1.0.0/24\"\npool = \"203.0.113.8/29\"\n");
    expect_err(
        &text,
        "203.0.113.8/29",
        "nat44.rule[2].pool",
        "overlaps pool 203.0.113.0/28 of rule 1",
    );
    let text =
        format!("{BASE}\n[[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"198.51.100.0/28\"\n");
    let needle = "inside = \"10.0.0.0/24\"\npool = \"198";
    let e = load_str(&text, "t.toml").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("nat44.rule[2].inside"));
    assert_eq!(
        e.line,
        Some(text[..text.find(needle).unwrap()].lines().count() + 1)
    );
    assert!(e.message.contains("already used by rule 1"), "{e}");
}

#[test]
fn static_address_inside_a_pool() {
    let text =
        format!("{BASE}\n[[nat44.static]]\ninside = \"10.0.0.100\"\npublic = \"203.0.113.5\"\n");
    expect_err(
        &text,
        "203.0.113.5",
        "nat44.static[1].public",
        "lies in the dynamic pool of rule 1",
    );
}

#[test]
fn duplicate_forward() {
    let fwd = "\n[[nat44.forward]]\nprotocol = \"tcp\"\npublic = \"203.0.113.1:8080\"\n";
    let text = format!("{BASE}{fwd}inside = \"10.0.0.20:80\"\n{fwd}inside = \"10.0.0.21:80\"\n");
    let e = load_str(&text, "t.toml").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("nat44.forward[2].public"));
    let second = text.rfind("public = ").unwrap();
    assert_eq!(e.line, Some(text[..second].lines().count() + 1));
    assert!(e.message.contains("already forwarded by forward 1"), "{e}");
}

#[test]
fn bad_forward_values() {
    let text = format!("{BASE}\n[[nat44.forward]]\nprotocol = \"dccp\"\npublic = \"203.0.113.1:8080\"\ninside = \"10.0.0.20:80\"\n");
    expect_err(
        &text,
        "dccp",
        "nat44.forward[1].protocol",
        "must be \"tcp\", \"udp\" or \"sctp\"",
    );
    let text = format!("{BASE}\n[[nat44.forward]]\nprotocol = \"tcp\"\npublic = \"203.0.113.1\"\ninside = \"10.0.0.20:80\"\n");
    expect_err(
        &text,
        "public =",
        "nat44.forward[1].public",
        "not an IPv4 address and port",
    );
}

#[test]
fn zero_timeout() {
    let text = format!("{BASE}\n[nat44.timeouts]\nudp = 300\ntcp_closed = 0\n");
    expect_err(
        &text,
        "tcp_closed",
        "nat44.timeouts.tcp_closed",
        "timeout of 0",
    );
}

#[test]
fn missing_required_field() {
    let text = format!("{BASE}\n[[nat44.rule]]\ninside = \"10.1.0.0/24\"\n");
    let e = load_str(&text, "t.toml").unwrap_err();
    let header = text.rfind("[[nat44.rule]]").unwrap();
    assert_eq!(e.line, Some(text[..header].lines().count() + 1));
    assert_eq!(e.field.as_deref(), Some("nat44.rule[2]"));
    assert!(e.message.contains("missing field `pool`"), "{e}");
}

#[test]
fn missing_field_line_is_the_table_header() {
    let text = format!("{BASE}\n[[nat44.static]]\ninside = \"10.0.0.100\"\n");
    let e = expect_err(
        &text,
        "[[nat44.static]]",
        "nat44.static[1]",
        "missing field `public`",
    );
    assert_eq!(e.line, Some(line_with(&text, "[[nat44.static]]")));
}

#[test]
fn wrong_type() {
    let text = BASE.replace("hairpinning = true", "hairpinning = \"yes\"");
    expect_err(
        &text,
        "hairpinning",
        "nat44.hairpinning",
        "invalid type: string \"yes\", expected a boolean",
    );
    let text = format!("{BASE}\n[nat44.timeouts]\nudp = \"5m\"\n");
    expect_err(&text, "5m", "nat44.timeouts.udp", "expected u64");
    let text = format!("{BASE}\n[nat44.timeouts]\nicmp = -1\n");
    expect_err(&text, "icmp", "nat44.timeouts.icmp", "expected u64");
    let text = BASE.replace("pool = [\"203.0.113.0/28\"]", "pool = [3]");
    expect_err(
        &text,
        "pool",
        "nat44.rule[1].pool",
        "invalid type: integer `3`",
    );
}

#[test]
fn bad_filtering() {
    let text = BASE.replace("hairpinning = true", "filtering = \"full-cone\"");
    expect_err(
        &text,
        "full-cone",
        "nat44.filtering",
        "\"full-cone\": must be \"endpoint-independent\"",
    );
}

#[test]
fn nothing_to_translate() {
    let e = load_str("[nat44]\nhairpinning = true\n", "t.toml").unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("nat44.rule")));
    let e = load_str("", "t.toml").unwrap_err();
    assert_eq!((e.line, e.field.as_deref()), (None, Some("nat44.rule")));
    assert!(
        e.to_string().starts_with("t.toml: nat44.rule: no NAT rule"),
        "{e}"
    );
}

#[test]
fn timeout_below_rfc_minimum_is_a_warning() {
    let text = format!("{BASE}\n[nat44.timeouts]\nudp = 60\nicmp = 30\n");
    let c = load_str(&text, "t.toml").expect("below-minimum timeouts are allowed");
    assert_eq!(c.nat44().unwrap().timeouts.udp, Duration::from_secs(60));
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    let udp = line_with(&text, "udp = 60");
    assert!(
        c.warnings[0].starts_with(&format!("t.toml:{udp}: nat44.timeouts.udp = 60 s")),
        "{:?}",
        c.warnings
    );
    assert!(c.warnings[1].contains("RFC 5508"), "{:?}", c.warnings);
}

#[test]
fn display_omits_absent_parts() {
    let e = ConfigFileError {
        origin: "gw.toml".into(),
        line: None,
        field: None,
        message: "cannot read".into(),
    };
    assert_eq!(e.to_string(), "gw.toml: cannot read");
    let e = ConfigFileError {
        line: Some(3),
        field: Some("nat44.x".into()),
        ..e
    };
    assert_eq!(e.to_string(), "gw.toml:3: nat44.x: cannot read");
}

#[test]
fn unreadable_file() {
    let path = std::env::temp_dir().join("quicknat-config-test-does-not-exist.toml");
    let e = load_file(&path).unwrap_err();
    assert_eq!(e.line, None);
    assert!(e.message.contains("cannot read"), "{e}");
}

#[test]
fn line_of_counts_from_one() {
    assert_eq!(locate::line_of("a\nb\nc", 0), 1);
    assert_eq!(locate::line_of("a\nb\nc", 2), 2);
    assert_eq!(locate::line_of("a\nb\nc", 99), 3);
}

// ---- IPv4/IPv6 translation modes ----

#[test]
fn siit_section_loads_with_eam_and_options() {
    let text = r#"
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.168.255.10/32", ipv6 = "2001:db8:1::10/128" } ]
icmp_error_source = "192.0.0.8"

[siit.options]
ipv6_mtu = 1400
udp_zero_checksum = "compute"
"#;
    let c = load_str(text, "t.toml").unwrap();
    let engine::any::ModeConfig::Siit(s) = c.mode else {
        panic!("expected siit, got {:?}", c.mode.name());
    };
    assert_eq!(s.eam.len(), 1);
    assert_eq!(s.options.ipv6_mtu, 1400);
    assert!(s.options.translate_udp_zero_csum);
    assert_eq!(
        s.icmp_error_source,
        Some(Ipv4Addr::new(192, 0, 0, 8).into())
    );
    assert!(s.icmp_errors, "RFC 7915 §4.4: sent unless turned off");
    assert_eq!(s.eam_hairpin, engine::siit::EamHairpin::Intrinsic);
}

// ---- gateway-originated ICMP errors, RFC 6791 pool, EAM hairpinning ----

#[test]
fn siit_error_pool_hairpin_mode_and_icmp_errors_switch() {
    let text = r#"
[siit]
pref64 = "2001:db8:64::/96"
icmp_error_source = ["203.0.113.64/30", "192.0.0.8"]
eam_hairpin = "simple"

[siit.options]
icmp_errors = false
"#;
    let c = load_str(text, "t.toml").unwrap();
    let engine::any::ModeConfig::Siit(s) = c.mode else {
        panic!("expected siit, got {:?}", c.mode.name());
    };
    let pool = s.icmp_error_source.expect("a pool");
    assert_eq!(pool.to_string(), "203.0.113.64/30, 192.0.0.8");
    assert!(!s.icmp_errors);
    assert_eq!(s.eam_hairpin, engine::siit::EamHairpin::Simple);
    let text = "[clat]
ipv4 = \"192.0.0.2/32\"
ipv6 = \"2001:db8:aaaa::2/128\"
                plat = \"64:ff9b::/96\"
[clat.options]
icmp_errors = false
";
    let engine::any::ModeConfig::Clat(c) = load_str(text, "t.toml").unwrap().mode else {
        panic!("expected clat");
    };
    assert!(!c.icmp_errors);
    let text = "[nat64]
pool4 = \"203.0.113.1/32\"
[nat64.options]
icmp_errors = false
";
    let engine::any::ModeConfig::Nat64(n) = load_str(text, "t.toml").unwrap().mode else {
        panic!("expected nat64");
    };
    assert!(!n.icmp_errors);
}

#[test]
fn siit_error_pool_and_hairpin_errors_name_the_field() {
    let text = "[siit]
pref64 = \"2001:db8:64::/96\"
eam_hairpin = \"always\"
";
    expect_err(text, "always", "siit.eam_hairpin", "intrinsic");
    let text = "[siit]
pref64 = \"2001:db8:64::/96\"
                icmp_error_source = [\"192.0.0.8\", \"192.0.2.0/33\"]
";
    expect_err(text, "/33", "siit.icmp_error_source", "192.0.2.0/33");
    let text = "[siit]
pref64 = \"2001:db8:64::/96\"
icmp_error_source = []
";
    expect_err(text, "icmp_error_source", "siit.icmp_error_source", "empty");
    let text = "[siit]
pref64 = \"2001:db8:64::/96\"
[siit.options]
icmp_errors = \"yes\"
";
    let e = load_str(text, "t.toml").expect_err("a string is not a bool");
    assert_eq!(e.line, Some(line_with(text, "icmp_errors")), "{e}");
}

#[test]
fn siit_errors_name_the_entry() {
    let text = r#"
[siit]
pref64 = "2001:db8:64::/96"
eam = [
  { ipv4 = "10.0.0.0/24", ipv6 = "2001:db8:1::/120" },
  { ipv4 = "10.0.0.128/25", ipv6 = "2001:db8:2::/121" },
]
"#;
    expect_err(text, "10.0.0.128/25", "siit.eam[2]", "overlaps");
    let text = "[siit]\npref64 = \"2001:db8:64::/97\"\n";
    expect_err(text, "/97", "siit.pref64", "97");
    let text = "[siit]\neam = [ { ipv4 = \"10.0.0.0/24\", ipv6 = \"2001:db8::/64\" } ]\n";
    expect_err(
        text,
        "2001:db8::/64",
        "siit.eam[1].ipv6",
        "suffixes of different lengths",
    );
    let text = "[siit]\npref64 = \"64:ff9b::/96\"\n[siit.options]\nipv6_mtu = 1000\n";
    expect_err(text, "ipv6_mtu", "siit.options.ipv6_mtu", "1280");
}

#[test]
fn translator_mtu_df_and_tos_settings_load_with_rfc_defaults() {
    use xlat::siit::DfPolicy;
    // RFC 7915 defaults when nothing is set: next hops the links', lowest IPv6 MTU 1280,
    // DF by the 1260-byte rule, TOS / Traffic Class copied.
    let c = load_str("[siit]\npref64 = \"2001:db8:64::/96\"\n", "t.toml").unwrap();
    let engine::any::ModeConfig::Siit(s) = c.mode else {
        panic!("expected siit");
    };
    let o = s.options;
    assert_eq!(
        (o.ipv6_mtu, o.ipv4_mtu, o.lowest_ipv6_mtu),
        (65535, 65535, 1280)
    );
    assert_eq!((o.df, o.tos, o.traffic_class), (DfPolicy::Rfc, None, None));
    assert!(o.tos_to_traffic_class);
    let text = r#"
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
[nat64.options]
ipv6_mtu = 9000
ipv4_mtu = 1400
lowest_ipv6_mtu = 1400
df = "clear"
tos = 32
traffic_class = 0
"#;
    let c = load_str(text, "t.toml").unwrap();
    let engine::any::ModeConfig::Nat64(n) = c.mode else {
        panic!("expected nat64");
    };
    let o = n.options;
    assert_eq!(
        (o.ipv6_mtu, o.ipv4_mtu, o.lowest_ipv6_mtu),
        (9000, 1400, 1400)
    );
    assert_eq!(
        (o.df, o.tos, o.traffic_class),
        (DfPolicy::Clear, Some(32), Some(0))
    );
    let text = "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\nplat = \"64:ff9b::/96\"\n[clat.options]\ndf = \"set\"\n";
    let c = load_str(text, "t.toml").unwrap();
    let engine::any::ModeConfig::Clat(s) = c.mode else {
        panic!("expected clat");
    };
    assert_eq!(s.options.df, DfPolicy::Set);
}

#[test]
fn translator_mtu_df_and_tos_errors_name_file_line_and_field() {
    let head = "[siit]\npref64 = \"64:ff9b::/96\"\n[siit.options]\n";
    let e = expect_err(
        &format!("{head}lowest_ipv6_mtu = 1200\n"),
        "lowest_ipv6_mtu",
        "siit.options.lowest_ipv6_mtu",
        "1280",
    );
    assert!(e.to_string().contains("t.toml"), "{e}");
    expect_err(
        &format!("{head}df = \"sometimes\"\n"),
        "df =",
        "siit.options.df",
        "\"rfc\"",
    );
    expect_err(
        &format!("{head}tos = 256\n"),
        "tos =",
        "siit.options.tos",
        "between 0 and 255",
    );
    let clat = "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\nplat = \"64:ff9b::/96\"\n[clat.options]\n";
    expect_err(
        &format!("{clat}traffic_class = 300\n"),
        "traffic_class",
        "clat.options.traffic_class",
        "between 0 and 255",
    );
}

#[test]
fn clat_section_loads() {
    let text = r#"
[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "64:ff9b::/96"
"#;
    let c = load_str(text, "t.toml").unwrap();
    assert_eq!(c.mode.name(), "clat");
}

#[test]
fn nat64_section_loads_and_errors_are_located() {
    let text = r#"
[nat64]
pref64 = "64:ff9b::/96"
pool4 = ["203.0.113.1/32"]
ports = "1024-65535"
max_sessions = 1000

[nat64.timeouts]
udp = 301

[[nat64.static]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "[2001:db8::80]:80"
"#;
    let c = load_str(text, "t.toml").unwrap();
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!(n.max_sessions, 1000);
    assert_eq!(n.timeouts.udp, Duration::from_secs(301));
    assert_eq!(n.static_bindings.len(), 1);
    let bad = text.replace("[2001:db8::80]:80", "2001:db8::80");
    expect_err(
        &bad,
        "2001:db8::80",
        "nat64.static[1].inside",
        "IPv6 address and port",
    );
    let bad = text.replace(
        "pool4 = [\"203.0.113.1/32\"]",
        "pool4 = [\"203.0.113.1/33\"]",
    );
    expect_err(&bad, "/33", "nat64.pool4", "longer than 32");
    let bad = text.replace("203.0.113.1:8080", "198.51.100.1:8080");
    expect_err(
        &bad,
        "198.51.100.1:8080",
        "nat64.static[1].public",
        "not in pool4",
    );
}

#[test]
fn one_mode_per_file() {
    let text = format!("{BASE}\n[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\nplat = \"64:ff9b::/96\"\n");
    expect_err(
        &text,
        "[clat]",
        "clat",
        "one translation mode per configuration file",
    );
}

#[test]
fn example_mode_files_load() {
    for (name, text, mode) in [
        (
            "nat64.toml",
            include_str!("../../../../examples/nat64.toml"),
            "nat64",
        ),
        (
            "clat.toml",
            include_str!("../../../../examples/clat.toml"),
            "clat",
        ),
        (
            "siit.toml",
            include_str!("../../../../examples/siit.toml"),
            "siit",
        ),
    ] {
        let c = load_str(text, name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.mode.name(), mode);
    }
}

#[test]
fn fragment_settings_are_read_and_checked() {
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nfragment_timeout = 5\nmax_fragment_records = 100\n",
    );
    let c = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let n = c.nat44().unwrap();
    assert_eq!(n.fragment_timeout, Duration::from_secs(5));
    assert_eq!(n.max_fragment_records, 100);
    let bad = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nfragment_timeout = 0\n",
    );
    expect_err(
        &bad,
        "fragment_timeout",
        "nat44.fragment_timeout",
        "between 1 and 60",
    );
}

#[test]
fn nat64_fragment_settings() {
    let text = "[nat64]\npref64 = \"2001:db8:64::/96\"\npool4 = [\"203.0.113.1/32\"]\nfragment_timeout = 7\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!(n.fragment_timeout, Duration::from_secs(7));
    let bad = text.replace("fragment_timeout = 7", "max_fragment_records = 0");
    expect_err(
        &bad,
        "max_fragment_records",
        "nat64.max_fragment_records",
        "between 1",
    );
}

#[test]
fn gateway_link_addresses_and_mtus() {
    let text = format!(
        "{BASE}\n[gateway]\ninside = \"in0\"\noutside = \"out0\"\n\
         inside_addresses = [\"10.0.0.1\", \"fd00::1\"]\noutside_addresses = [\"198.51.100.1\"]\n\
         outside_mtu = 1400\n"
    );
    let c = load_str(&text, "t.toml").unwrap();
    let g = c.gateway.expect("[gateway] read");
    let e = g.egress();
    assert_eq!(e.links[0].addr4, Some("10.0.0.1".parse().unwrap()));
    assert_eq!(e.links[0].addr6, Some("fd00::1".parse().unwrap()));
    assert_eq!(e.links[1].addr4, Some("198.51.100.1".parse().unwrap()));
    assert_eq!(e.links[1].addr6, None);
    assert_eq!((e.links[0].mtu, e.links[1].mtu), (None, Some(1400)));
    let bad = text.replace("\"fd00::1\"", "\"10.0.0.9\"");
    expect_err(
        &bad,
        "inside_addresses",
        "gateway.inside_addresses[2]",
        "one address per family",
    );
    let bad = text.replace("\"fd00::1\"", "\"fd00::x\"");
    expect_err(
        &bad,
        "inside_addresses",
        "gateway.inside_addresses[2]",
        "not an IPv4 or IPv6 address",
    );
    let bad = text.replace("outside_mtu = 1400", "outside_mtu = 40");
    expect_err(
        &bad,
        "outside_mtu",
        "gateway.outside_mtu",
        "between 68 and 65535",
    );
}

// Who may use the control socket.
#[test]
fn gateway_control_group() {
    let text = format!(
        "{BASE}\n[gateway]\ninside = \"in0\"\noutside = \"out0\"\ncontrol_group = \"quicknat\"\n"
    );
    let g = load_str(&text, "t.toml").unwrap().gateway.unwrap();
    assert_eq!(g.control_group.as_deref(), Some("quicknat"));
    let root_only = format!("{BASE}\n[gateway]\ninside = \"in0\"\noutside = \"out0\"\n");
    let g = load_str(&root_only, "t.toml").unwrap().gateway.unwrap();
    assert_eq!(g.control_group, None, "default: root only");
    let bad = text.replace("\"quicknat\"", "\"a:b\"");
    expect_err(
        &bad,
        "control_group",
        "gateway.control_group",
        "not a group name or number",
    );
}

#[test]
fn engine_errors_of_every_mode_name_the_file_line_and_field() {
    // NAT64: a static binding outside pool4 (checked by the engine, located by path).
    let text = r#"
[nat64]
pool4 = ["203.0.113.0/30"]

[[nat64.static]]
protocol = "tcp"
public = "198.51.100.9:80"
inside = "[2001:db8::80]:80"
"#;
    expect_err(
        text,
        "198.51.100.9",
        "nat64.static[1].public",
        "is not in pool4",
    );
    // NAT64 timeouts below RFC minimums are warnings with their line, as for NAT44.
    let text = "[nat64]\npool4 = [\"203.0.113.0/30\"]\n[nat64.timeouts]\nudp = 60\n";
    let c = load_str(text, "t.toml").unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with("t.toml:4: nat64.timeouts.udp = 60 s"),
        "{:?}",
        c.warnings
    );
}

// ---- ipv6_udp_zero_checksum (RFC 8200 §8.1) ----

#[test]
fn ipv6_udp_zero_checksum_defaults_to_drop_and_parses_in_every_mode() {
    let c = load_str("[siit]\npref64 = \"2001:db8:64::/96\"\n", "t.toml").unwrap();
    let engine::any::ModeConfig::Siit(s) = c.mode else {
        panic!("expected siit");
    };
    assert!(!s.options.compute_ipv6_udp_zero_csum);
    for (head, opts) in [
        ("[siit]\npref64 = \"2001:db8:64::/96\"\n", "[siit.options]"),
        (
            "[clat]\nipv4 = \"192.0.0.2/32\"\nipv6 = \"2001:db8:aaaa::2/128\"\nplat = \"64:ff9b::/96\"\n",
            "[clat.options]",
        ),
        ("[nat64]\npool4 = [\"203.0.113.0/30\"]\n", "[nat64.options]"),
    ] {
        let text = format!("{head}{opts}\nipv6_udp_zero_checksum = \"compute\"\n");
        let c = load_str(&text, "t.toml").unwrap();
        let o = match c.mode {
            engine::any::ModeConfig::Siit(s) | engine::any::ModeConfig::Clat(s) => {
                s.options
            }
            engine::any::ModeConfig::Nat64(n) => n.options,
            m => panic!("unexpected mode {:?}", m.name()),
        };
        assert!(o.compute_ipv6_udp_zero_csum, "{opts}");
        // The IPv4 setting is its own.
        assert!(!o.translate_udp_zero_csum, "{opts}");
    }
}

#[test]
fn ipv6_udp_zero_checksum_error_names_file_line_field() {
    let text = "[nat64]\npool4 = [\"203.0.113.0/30\"]\n[nat64.options]\nipv6_udp_zero_checksum = \"ignore\"\n";
    expect_err(
        text,
        "\"ignore\"",
        "nat64.options.ipv6_udp_zero_checksum",
        "\"drop\" or \"compute\"",
    );
}

/// RFC 5382 REQ-4 / RFC 6146 §3.5.2.2-§3.5.3 settings: read in both modes, RFC defaults
/// (hold up to 10, externally initiated TCP and ICMPv6 informational not dropped), a
/// bound on `max_simultaneous_opens` named by file, line and field.
#[test]
fn simultaneous_open_settings_are_read_and_checked() {
    let c = load_str(BASE, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let n = c.nat44().unwrap();
    assert_eq!(
        (n.max_simultaneous_opens, n.drop_externally_initiated_tcp),
        (10, false)
    );
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nmax_simultaneous_opens = 3\ndrop_externally_initiated_tcp = true\n",
    );
    let c = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let n = c.nat44().unwrap();
    assert_eq!(
        (n.max_simultaneous_opens, n.drop_externally_initiated_tcp),
        (3, true)
    );
    let bad = text.replace("opens = 3", "opens = 5000");
    expect_err(
        &bad,
        "max_simultaneous_opens",
        "nat44.max_simultaneous_opens",
        "between 0 and 4096",
    );

    let text = "[nat64]\npref64 = \"2001:db8:64::/96\"\npool4 = [\"203.0.113.1/32\"]\n\
                max_simultaneous_opens = 0\ndrop_externally_initiated_tcp = true\n\
                drop_icmpv6_info = true\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!(n.max_simultaneous_opens, 0);
    assert!(n.drop_externally_initiated_tcp && n.drop_icmpv6_info);
    let bad = text.replace("opens = 0", "opens = 99999");
    expect_err(
        &bad,
        "max_simultaneous_opens",
        "nat64.max_simultaneous_opens",
        "between 0 and 4096",
    );
}

// -- ICMP error budget --

#[test]
fn icmp_error_rates_are_read_and_bounded() {
    use engine::config::IcmpRate;
    let c = load_str(BASE, "t.toml").unwrap();
    assert_eq!(c.nat44().unwrap().icmp_rate, IcmpRate::default());
    let text = BASE.replace(
        "hairpinning = true",
        "icmp_error_rate = 500\nicmp_error_rate_per_source = 7",
    );
    let c = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.nat44().unwrap().icmp_rate,
        IcmpRate {
            global: 500,
            per_source: 7
        }
    );
    expect_err(
        &text.replace("= 7", "= 4294967296"),
        "icmp_error_rate_per_source",
        "nat44.icmp_error_rate_per_source",
        "between 0 (none) and 1000000",
    );

    let text = "[nat64]\npool4 = [\"203.0.113.1/32\"]\n\n[nat64.options]\n\
                icmp_error_rate = 0\nicmp_error_rate_per_source = 3\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!(
        n.icmp_rate,
        IcmpRate {
            global: 0,
            per_source: 3
        }
    );
    expect_err(
        &text.replace("rate = 0", "rate = 1000001"),
        "icmp_error_rate =",
        "nat64.options.icmp_error_rate",
        "between 0 (none) and 1000000",
    );
    let text =
        "[siit]\npref64 = \"64:ff9b::/96\"\n\n[siit.options]\nicmp_error_rate_per_source = 9\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Siit(s) = &c.mode else {
        panic!("expected siit");
    };
    assert_eq!(s.icmp_rate.per_source, 9);
}

// -- sizes that cannot run, memory against the machine --

/// `max_sessions` values the tables cannot index (2^63-1 would be out of bounds in
/// chain.rs, 2^62 a capacity overflow, 10^12 an allocation abort) are refused by
/// check-config with the file, line and field; the session table indexes 2^31-1.
#[test]
fn max_sessions_beyond_what_the_tables_index_is_refused() {
    for v in [
        "9223372036854775807",
        "4611686018427387904",
        "1000000000000",
        "2147483648",
    ] {
        let text = BASE.replace("hairpinning = true", &format!("max_sessions = {v}"));
        expect_err(
            &text,
            "max_sessions",
            "nat44.max_sessions",
            "at most 2147483647",
        );
    }
    let text = "[nat64]\npool4 = [\"203.0.113.1/32\"]\nmax_sessions = 1000000000000\n";
    expect_err(text, "max_sessions", "nat64.max_sessions", "too large");
}

#[test]
fn machine_reads_mem_available_from_meminfo() {
    let m = Machine::from_meminfo(
        "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:   2097152 kB\n",
    );
    assert_eq!(m.mem_available, Some(2 << 30));
    assert_eq!(
        Machine::from_meminfo("MemTotal: 5 kB\n").mem_available,
        None
    );
}

/// Held against the machine: tables that cannot fit are refused at the line of the
/// setting that sizes the largest one, and tables taking more than half are a warning;
/// without a known machine only the structural bounds apply.
#[test]
fn tables_that_cannot_fit_the_machine_are_refused() {
    let gib = 1u64 << 30;
    let machine = |g: u64| Machine {
        mem_available: Some(g * gib),
        ..Machine::default()
    };
    // 100M sessions: about 11 GiB.
    let text = BASE.replace("hairpinning = true", "max_sessions = 100000000");
    let big = load_str(&text, "t.toml").unwrap().memory.total();
    assert!(big > 10 * gib && big < 12 * gib, "{big}");
    let e = load_str_on(&text, "t.toml", &machine(4)).unwrap_err();
    assert_eq!(e.line, Some(line_with(&text, "max_sessions")));
    assert_eq!(e.field.as_deref(), Some("nat44.max_sessions"), "{e}");
    assert!(
        e.message
            .contains("more than the 4.0 GiB of memory available"),
        "{e}"
    );
    let c = load_str_on(&text, "t.toml", &machine(16)).unwrap();
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert!(
        c.warnings[0].starts_with("t.toml:2: nat44.max_sessions makes the tables grow to"),
        "{:?}",
        c.warnings
    );
    assert!(load_str_on(&text, "t.toml", &machine(32))
        .unwrap()
        .warnings
        .is_empty());

    // The setting that costs the most is named: here a NAT64's IPv6 host table and
    // sessions (max_sessions), there an ILA table (max_mappings).
    let text = "[nat64]\npool4 = [\"203.0.113.1/32\"]\nmax_sessions = 200000000\n";
    let e = load_str_on(text, "t.toml", &machine(8)).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("nat64.max_sessions"), "{e}");
    let text = "[ila]\nsir_prefix = \"2001:db8:1::/64\"\nmax_mappings = 16777216\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let ila = c.memory.total();
    assert!(ila > (1 << 28), "{ila}");
    let e = load_str_on(
        text,
        "t.toml",
        &Machine {
            mem_available: Some(ila - 1),
            ..Machine::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("ila.max_mappings"), "{e}");
}

/// The CPU time this thread has run (`/proc/thread-self/schedstat`, nanoseconds, updated
/// at scheduler ticks): unlike the wall clock, not inflated while other processes hold
/// the cores. Good to a few milliseconds: measure longer windows than that.
fn on_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Static mappings are validated by sorting and bisection, not by a pairwise scan for
/// repeats and a scan of the pools per mapping. Structural check,
/// no absolute time on a shared machine: the same number of entries validated as 24 lists
/// of 20k or 6 lists of 80k costs about the same CPU time when validation is n log n,
/// four times as much when it is quadratic (fastest of several alternating runs).
#[test]
fn static_mapping_validation_is_not_quadratic() {
    let cfg = |n: u32| {
        let mut c = load_str(BASE, "t.toml").unwrap().nat44().unwrap().clone();
        for i in 0..n {
            c.static_nat.push(StaticNat {
                inside: Ipv4Addr::from(0x0a01_0000 + i),
                public: Ipv4Addr::from(0xc000_0000 + i),
            });
            c.port_forwards.push(PortForward {
                protocol: L4Proto::Tcp,
                public: SocketAddrV4::new(
                    Ipv4Addr::from(0xc633_6400 + i / 60_000),
                    1 + (i % 60_000) as u16,
                ),
                inside: SocketAddrV4::new(Ipv4Addr::from(0x0a02_0000 + i), 80),
            });
        }
        c
    };
    let (small, large) = (cfg(20_000), cfg(80_000));
    let cost = |c: &Nat44Config, reps: usize| {
        let before = on_cpu();
        let wall = std::time::Instant::now();
        for _ in 0..reps {
            c.validate().unwrap_or_else(|e| panic!("{e}"));
        }
        match (before, on_cpu()) {
            (Some(a), Some(b)) if b > a => b - a,
            _ => wall.elapsed(),
        }
    };
    let (mut a, mut b) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        a = a.min(cost(&small, 24));
        b = b.min(cost(&large, 6));
    }
    let ratio = b.as_secs_f64() / a.as_secs_f64().max(1e-9);
    assert!(
        ratio < 3.0,
        "6 x 80k / 24 x 20k validation cost ratio {ratio:.2} ({b:?} vs {a:?}); quadratic is 4"
    );
}

/// Through the file: a repeat deep in a long list is found, naming the first entry it
/// repeats (as the pairwise scan did).
#[test]
fn a_repeated_static_mapping_names_the_first() {
    use std::fmt::Write;
    let mut t = BASE.to_owned();
    for i in 0..2000u32 {
        let inside = Ipv4Addr::from(0x0a01_0000 + i);
        let public = Ipv4Addr::from(0xc000_0000 + i);
        let _ = write!(
            t,
            "[[nat44.static]]\ninside = \"{inside}\"\npublic = \"{public}\"\n"
        );
    }
    let mut dup = t.clone();
    dup.push_str("[[nat44.static]]\ninside = \"10.1.0.7\"\npublic = \"198.51.100.1\"\n");
    let e = load_str(&dup, "t.toml").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("nat44.static[2001].inside"), "{e}");
    assert!(
        e.message.contains("already mapped by static mapping 8"),
        "{e}"
    );
    t.push_str("[[nat44.static]]\ninside = \"10.9.0.1\"\npublic = \"192.0.0.9\"\n");
    let e = load_str(&t, "t.toml").unwrap_err();
    assert_eq!(e.field.as_deref(), Some("nat44.static[2001].public"), "{e}");
    assert!(
        e.message.contains("already used by static mapping 10"),
        "{e}"
    );
    // A public address in a pool is found by bisection of the sorted pools.
    let t = format!(
        "{BASE}[[nat44.rule]]\ninside = \"10.9.0.0/24\"\npool = \"198.51.100.0/24\"\n\
         [[nat44.static]]\ninside = \"10.8.0.1\"\npublic = \"198.51.100.77\"\n"
    );
    let e = load_str(&t, "t.toml").unwrap_err();
    assert!(
        e.message.contains("lies in the dynamic pool of rule 2"),
        "{e}"
    );
}

/// Per-subscriber limits, on by default, read in both modes, 0 for
/// unlimited, out-of-range values named by file, line and field.
#[test]
fn subscriber_limits_are_read_and_checked() {
    let c = load_str(BASE, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let n = c.nat44().unwrap();
    assert_eq!(
        (n.max_sessions_per_host, n.max_ports_per_host),
        (10_000, 4_096)
    );
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nmax_sessions_per_host = 0\nmax_ports_per_host = 512\n",
    );
    let c = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let n = c.nat44().unwrap();
    assert_eq!((n.max_sessions_per_host, n.max_ports_per_host), (0, 512));
    expect_err(
        &text.replace("host = 512", "host = 70000"),
        "max_ports_per_host",
        "nat44.max_ports_per_host",
        "between 0 (unlimited) and 65536",
    );
    expect_err(
        &text.replace(
            "max_sessions_per_host = 0",
            "max_sessions_per_host = 4294967296",
        ),
        "max_sessions_per_host",
        "nat44.max_sessions_per_host",
        "between 0 (unlimited) and 4294967295",
    );
    let text = "[nat64]\npref64 = \"2001:db8:64::/96\"\npool4 = [\"203.0.113.1/32\"]\n\
                max_sessions_per_host = 50\nmax_ports_per_host = 0\nport_preservation = false\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!((n.max_sessions_per_host, n.max_ports_per_host), (50, 0));
    assert!(!n.port_preservation);
    expect_err(
        &text.replace("host = 0", "host = 65537"),
        "max_ports_per_host",
        "nat64.max_ports_per_host",
        "between 0 (unlimited) and 65536",
    );
}

// --- TCP half-open timeouts ---

#[test]
fn tcp_half_open_timeouts_are_read_and_bounded() {
    let text = format!("{BASE}\n[nat44.timeouts]\ntcp_syn_sent = 30\ntcp_syn_recv = 20\n");
    let c = load_str(&text, "t.toml").unwrap().nat44().cloned().unwrap();
    let t = &c.timeouts;
    assert_eq!(t.tcp_syn_sent, Duration::from_secs(30));
    assert_eq!(t.tcp_syn_recv, Duration::from_secs(20));
    let d = load_str(BASE, "t.toml").unwrap().nat44().cloned().unwrap();
    let t = &d.timeouts;
    assert_eq!(
        t.tcp_syn_sent,
        Duration::from_secs(120),
        "Linux conntrack's default"
    );
    assert_eq!(t.tcp_syn_recv, Duration::from_secs(60));
    assert_eq!(t.tcp_closed, Duration::from_secs(240), "RFC 7857 §2.2");
    let text = format!("{BASE}\n[nat44.timeouts]\ntcp_syn_recv = 241\n");
    expect_err(
        &text,
        "tcp_syn_recv",
        "nat44.timeouts.tcp_syn_recv",
        "at most 240 s",
    );
}

// -- metrics: the Prometheus listener's address --
#[test]
fn gateway_metrics_address() {
    let gw = "[gateway]\ninside = \"in0\"\noutside = \"out0\"\n";
    let off = load_str(&format!("{BASE}\n{gw}"), "t.toml").unwrap();
    assert_eq!(off.gateway.unwrap().metrics, None, "off by default");
    let text = format!("{BASE}\n{gw}metrics = \"127.0.0.1:9464\"\n");
    let g = load_str(&text, "t.toml").unwrap().gateway.unwrap();
    assert_eq!(g.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    let v6 = text.replace("127.0.0.1:9464", "[::1]:9100");
    let g = load_str(&v6, "t.toml").unwrap().gateway.unwrap();
    assert_eq!(g.metrics, Some("[::1]:9100".parse().unwrap()));
    for (bad, why) in [
        ("localhost:9464", "not an IP address and port"),
        ("127.0.0.1", "not an IP address and port"),
        ("127.0.0.1:70000", "not an IP address and port"),
        ("::1:9464", "not an IP address and port"),
        ("127.0.0.1:0", "port 0"),
    ] {
        let e = expect_err(
            &text.replace("127.0.0.1:9464", bad),
            "metrics =",
            "gateway.metrics",
            why,
        );
        assert!(e.to_string().contains(bad), "{e}");
    }
}

// ---- logging: log_level, log_format ----

#[test]
fn gateway_log_level_and_format() {
    use crate::logging::{LogFormat, LogSettings};
    let gw = "\n[gateway]\ninside = \"in0\"\noutside = \"out0\"\n";
    let c = load_str(&format!("{BASE}{gw}"), "t.toml").unwrap();
    assert_eq!(c.logging, LogSettings::default());
    let c = load_str(
        &format!("{BASE}{gw}log_level = \"warn,quicknat=debug\"\nlog_format = \"json\"\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.logging.level.as_deref(), Some("warn,quicknat=debug"));
    assert_eq!(c.logging.format, LogFormat::Json);
    let text = format!("{BASE}{gw}log_format = \"xml\"\n");
    expect_err(
        &text,
        "log_format",
        "gateway.log_format",
        "\"text\" or \"json\"",
    );
    let text = format!("{BASE}{gw}log_level = \"info,[{{{{\"\n");
    expect_err(&text, "log_level", "gateway.log_level", "not a level");
}

// -- [logging] (NAT event logging) --

#[test]
fn logging_is_off_by_default_and_read_when_written() {
    let c = load_str(BASE, "t.toml").unwrap();
    assert!(!c.natlog.enabled());
    let text = format!(
        "{BASE}\n[gateway]\ninside = \"a\"\noutside = \"b\"\n\n[logging]\nevents = [\"binding\", \"session\", \"limits\"]\nipfix = \"192.0.2.9:4739\"\nsyslog = \"[2001:db8::9]:514\"\ntemplate_refresh = 30\ntemplate_refresh_messages = 50\nobservation_domain = 9\nmax_message = 1200\nsyslog_facility = 23\nsyslog_severity = 5\nqueue = 4096\n"
    );
    let c = load_str(&text, "t.toml").unwrap();
    let n = &c.natlog;
    use engine::events::EventClass::*;
    assert!(n.events.has(Binding) && n.events.has(Session) && n.events.has(Limits));
    assert!(!n.events.has(Block));
    assert_eq!(n.ipfix, Some("192.0.2.9:4739".parse().unwrap()));
    assert_eq!(n.syslog, Some("[2001:db8::9]:514".parse().unwrap()));
    assert_eq!(n.template_refresh, Duration::from_secs(30));
    assert_eq!(
        (
            n.template_refresh_messages,
            n.observation_domain,
            n.max_message
        ),
        (50, 9, 1200)
    );
    assert_eq!(
        (n.syslog_facility, n.syslog_severity, n.queue),
        (23, 5, 4096)
    );
    assert_eq!(c.gateway.unwrap().natlog, *n);
}

#[test]
fn logging_mistakes_name_the_line_and_field() {
    let with = |body: &str| format!("{BASE}\n[logging]\n{body}\n");
    let t = with("events = [\"binding\", \"sessions\"]\nipfix = \"192.0.2.9:4739\"");
    expect_err(&t, "sessions", "logging.events", "\"sessions\": expected");
    let t = with("events = [\"binding\"]\nipfix = \"192.0.2.9\"");
    expect_err(&t, "ipfix =", "logging.ipfix", "expected address:port");
    let t = with("events = [\"binding\"]");
    expect_err(&t, "events =", "logging.events", "sent nowhere");
    let t = with("events = [\"binding\"]\nsyslog = \"192.0.2.9:514\"\nsyslog_severity = 8");
    expect_err(
        &t,
        "syslog_severity",
        "logging.syslog_severity",
        "between 0 and 7",
    );
    let t = with("events = [\"binding\"]\nipfix = \"192.0.2.9:4739\"\nmax_message = 100");
    expect_err(&t, "max_message", "logging.max_message", "between 512");
    let t = with("event = [\"binding\"]");
    expect_err(&t, "event =", "logging.event", "unknown field");
}

// -- NAT64 subscribers by prefix --

#[test]
fn nat64_subscriber_prefix_len_is_read_and_bounded() {
    let base = "[nat64]\npool4 = [\"203.0.113.1/32\"]\n";
    let nat64 = |text: &str| match load_str(text, "t.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .mode
    {
        engine::any::ModeConfig::Nat64(n) => n,
        _ => panic!("expected nat64"),
    };
    assert_eq!(nat64(base).subscriber_prefix_len, 64, "a /64 by default");
    let text = format!("{base}subscriber_prefix_len = 56\n");
    assert_eq!(nat64(&text).subscriber_prefix_len, 56);
    let text = format!("{base}subscriber_prefix_len = 128\n");
    assert_eq!(nat64(&text).subscriber_prefix_len, 128);
    for bad in ["0", "65", "127", "300"] {
        expect_err(
            &format!("{base}subscriber_prefix_len = {bad}\n"),
            "subscriber_prefix_len",
            "nat64.subscriber_prefix_len",
            "must be 1 to 64",
        );
    }
}

// --- live reload ---

#[test]
fn reload_drain_is_read_and_checked() {
    let d = load_str(BASE, "t.toml").unwrap().nat44().cloned().unwrap();
    assert_eq!(d.reload_drain, engine::config::ReloadDrain::Expire);
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nreload_drain = \"immediate\"\n",
    );
    let c = load_str(&text, "t.toml").unwrap().nat44().cloned().unwrap();
    assert_eq!(c.reload_drain, engine::config::ReloadDrain::Immediate);
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nreload_drain = \"now\"\n",
    );
    expect_err(
        &text,
        "reload_drain",
        "nat44.reload_drain",
        "must be \"expire\"",
    );
}

/// Files as an operator edits them, reloaded over a running instance: what may change
/// live is applied and reported; what needs a restart is refused, named, and the
/// configuration in force stays.
#[test]
fn reload_of_edited_files_reports_or_refuses_naming_the_setting() {
    use engine::any::AnyMode;
    let start = load_str(BASE, "t.toml").unwrap().mode;
    let running = AnyMode::new(&start, 1).unwrap();
    let edited = BASE.replace(
        "203.0.113.0/28\"]",
        "203.0.113.0/28\", \"198.51.100.0/30\"]",
    ) + "\n[nat44.timeouts]\nudp = 120\n";
    let next = load_str(&edited, "t.toml").unwrap().mode;
    let report = running.reload(&start, &next).unwrap().to_string();
    assert!(report.contains("pool + 198.51.100.0/30"), "{report}");
    assert!(report.contains("udp 300 s → 120 s"), "{report}");
    let resized = edited.replace(
        "hairpinning = true\n",
        "hairpinning = true\nmax_sessions = 4096\nfragment_timeout = 9\n",
    );
    let next2 = load_str(&resized, "t.toml").unwrap().mode;
    let e = running.reload(&next, &next2).unwrap_err();
    assert_eq!(e.item.to_string(), "max_sessions");
    assert!(e.message.contains("max_sessions, fragment_timeout"), "{e}");
    assert!(e.message.contains("restart needed"), "{e}");
    let other = load_str("[nat64]\npool4 = [\"192.0.2.0/30\"]\n", "t.toml").unwrap();
    let e = running.reload(&next, &other.mode).unwrap_err();
    assert!(e.message.contains("from nat44 to nat64"), "{e}");
}

// --- port-block allocation ---

/// Off by default; read in both modes; out-of-range values and a block larger than a
/// rule's port range named by file, line and field.
#[test]
fn port_block_settings_are_read_and_checked() {
    let n = load_str(BASE, "t.toml").unwrap().nat44().cloned().unwrap();
    assert_eq!((n.port_block_size, n.blocks_per_subscriber), (0, 4));
    let text = BASE.replace(
        "hairpinning = true\n",
        "hairpinning = true\nport_block_size = 512\nblocks_per_subscriber = 8\n",
    );
    let n = load_str(&text, "t.toml").unwrap().nat44().cloned().unwrap();
    assert_eq!((n.port_block_size, n.blocks_per_subscriber), (512, 8));
    expect_err(
        &text.replace("size = 512", "size = 4"),
        "port_block_size",
        "nat44.port_block_size",
        "must be 0 (off) or between 8 and 32768",
    );
    expect_err(
        &text.replace("subscriber = 8", "subscriber = 0"),
        "blocks_per_subscriber",
        "nat44.blocks_per_subscriber",
        "between 1 and 1024",
    );
    // A rule whose range is smaller than one block.
    let small = format!("{text}ports = \"2000-2100\"\n");
    expect_err(
        &small,
        "ports = ",
        "nat44.rule[1].ports",
        "fewer than one port block of 512",
    );
    let text = "[nat64]\npref64 = \"2001:db8:64::/96\"\npool4 = [\"203.0.113.1/32\"]\n\
                port_block_size = 128\nblocks_per_subscriber = 2\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let engine::any::ModeConfig::Nat64(n) = &c.mode else {
        panic!("expected nat64");
    };
    assert_eq!((n.port_block_size, n.blocks_per_subscriber), (128, 2));
    expect_err(
        &text.replace("size = 128", "size = 40000"),
        "port_block_size",
        "nat64.port_block_size",
        "must be 0 (off)",
    );
}

// -- deterministic NAT --

/// The issue's contract shape loads alone; each mistake names its line and field.
#[test]
fn deterministic_table_loads_and_its_mistakes_are_located() {
    let text = "[nat44]\n\n[nat44.deterministic]\ninside = \"100.64.0.0/22\"\n\
                outside = \"203.0.113.0/28\"\nports_per_subscriber = 1008\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let d = c.nat44().unwrap().deterministic.unwrap();
    assert_eq!(d.inside.to_string(), "100.64.0.0/22");
    assert_eq!(d.ports_per_subscriber, Some(1008));
    // The default ports per subscriber is the engine's (64512 / R).
    let no_pps = text.replace("ports_per_subscriber = 1008\n", "");
    let c = load_str(&no_pps, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.nat44()
            .unwrap()
            .deterministic
            .unwrap()
            .ports_per_subscriber,
        None
    );
    expect_err(
        &text.replace("1008", "1009"),
        "ports_per_subscriber",
        "nat44.deterministic.ports_per_subscriber",
        "between 1 and 1008",
    );
    expect_err(
        &text.replace("1008", "0"),
        "ports_per_subscriber",
        "nat44.deterministic.ports_per_subscriber",
        "must be between 1",
    );
    expect_err(
        &text.replace("203.0.113.0/28", "203.0.112.0/20"),
        "outside =",
        "nat44.deterministic.outside",
        "sharing ratio would be below 1",
    );
    expect_err(
        &text.replace("203.0.113.0/28", "203.0.113.1/28"),
        "outside =",
        "nat44.deterministic.outside",
        "203.0.113.1/28",
    );
    expect_err(
        &text.replace("outside =", "outsid ="),
        "outsid",
        "nat44.deterministic.outsid",
        "unknown field",
    );
    // Beside a dynamic rule for another prefix; refused over the same subscribers.
    let base = BASE.replace("203.0.113.0/28", "192.0.2.0/28");
    let both = format!("{base}\n{}", &text["[nat44]\n\n".len()..]);
    load_str(&both, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    expect_err(
        &format!("{BASE}\n{}", &text["[nat44]\n\n".len()..]),
        "outside =",
        "nat44.deterministic.outside",
        "overlaps pool 203.0.113.0/28 of rule 1",
    );
    expect_err(
        &both.replace("100.64.0.0/22", "10.0.0.0/22"),
        "inside = \"10.0.0.0/22\"",
        "nat44.deterministic.inside",
        "overlaps the inside prefix 10.0.0.0/24 of rule 1",
    );
}

/// The issue's shape, `[nat44.deterministic]` with no `[nat44]` line (also any
/// `[nat44.timeouts]` alone), loads: toml cannot span such an implied table.
#[test]
fn nat44_sub_tables_without_a_nat44_line_load() {
    let text = "[nat44.deterministic]\ninside = \"100.64.0.0/22\"\noutside = \"203.0.113.0/28\"\n";
    let c = load_str(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(c.nat44().unwrap().deterministic.is_some());
    let text =
        format!("{BASE}[nat44.timeouts]\nudp = 600\n").replace("[nat44]\nhairpinning = true\n", "");
    let c = load_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.nat44().unwrap().timeouts.udp, Duration::from_secs(600));
    // Another mode beside it is still refused, at that mode's line.
    let both = "[nat44.timeouts]\nudp = 600\n[siit]\npref64 = \"64:ff9b::/96\"\n";
    let e = load_str(both, "t.toml").unwrap_err();
    assert!(e.message.contains("one translation mode"), "{e}");
    assert_eq!(e.line, Some(3));
}

#[test]
fn gateway_placement() {
    use runtime::live::PlacementSwitch;
    let gw = "[gateway]\ninside = \"in0\"\noutside = \"out0\"\n";
    let g = load_str(&format!("{BASE}\n{gw}"), "t.toml")
        .unwrap()
        .gateway
        .unwrap();
    assert_eq!(g.placement, PlacementSwitch::Flows, "flows by default");
    for (v, want) in [
        ("flows", PlacementSwitch::Flows),
        ("hash", PlacementSwitch::Hash),
    ] {
        let text = format!("{BASE}\n{gw}placement = \"{v}\"\n");
        assert_eq!(
            load_str(&text, "t.toml")
                .unwrap()
                .gateway
                .unwrap()
                .placement,
            want
        );
    }
    let text = format!("{BASE}\n{gw}rx_hash = \"leave\"\n");
    assert!(
        !load_str(&text, "t.toml")
            .unwrap()
            .gateway
            .unwrap()
            .rx_hash_ports
    );
    assert!(g.rx_hash_ports, "ports by default");
    expect_err(
        &format!("{BASE}\n{gw}rx_hash = \"on\"\n"),
        "rx_hash =",
        "gateway.rx_hash",
        "expected \"ports\" or \"leave\"",
    );
    expect_err(
        &format!("{BASE}\n{gw}placement = \"rss\"\n"),
        "placement =",
        "gateway.placement",
        "expected \"flows\" or \"hash\"",
    );
}

// -- XDP fast path: xdp_fast_path, xdp_fast_path_entries, xdp_fast_path_idle --
#[test]
fn gateway_xdp_fast_path() {
    use runtime::live::{FastPathSwitch, XDP_FAST_PATH_ENTRIES, XDP_FAST_PATH_IDLE};
    let gw = "[gateway]\ninside = \"in0\"\noutside = \"out0\"\n";
    let g = load_str(&format!("{BASE}\n{gw}"), "t.toml")
        .unwrap()
        .gateway
        .unwrap();
    assert_eq!(g.xdp_fast_path, FastPathSwitch::Auto, "auto by default");
    assert_eq!(g.xdp_fast_path_entries, XDP_FAST_PATH_ENTRIES);
    assert_eq!(g.xdp_fast_path_idle, XDP_FAST_PATH_IDLE);
    assert_eq!(XDP_FAST_PATH_IDLE.as_secs(), 30);
    for (v, want) in [
        ("auto", FastPathSwitch::Auto),
        ("on", FastPathSwitch::On),
        ("off", FastPathSwitch::Off),
    ] {
        let text = format!("{BASE}\n{gw}xdp_fast_path = \"{v}\"\nxdp_fast_path_entries = 1024\n");
        let g = load_str(&text, "t.toml").unwrap().gateway.unwrap();
        assert_eq!((g.xdp_fast_path, g.xdp_fast_path_entries), (want, 1024));
    }
    expect_err(
        &format!("{BASE}\n{gw}xdp_fast_path = \"yes\"\n"),
        "xdp_fast_path =",
        "gateway.xdp_fast_path",
        "expected \"auto\", \"on\" or \"off\"",
    );
    for bad in ["0", "1", "16777217"] {
        expect_err(
            &format!("{BASE}\n{gw}xdp_fast_path_entries = {bad}\n"),
            "xdp_fast_path_entries =",
            "gateway.xdp_fast_path_entries",
            "must be between 2 and 16777216",
        );
    }
    let g = load_str(&format!("{BASE}\n{gw}xdp_fast_path_idle = 2\n"), "t.toml")
        .unwrap()
        .gateway
        .unwrap();
    assert_eq!(g.xdp_fast_path_idle, std::time::Duration::from_secs(2));
    for bad in ["0", "86401", "-1", "\"30s\""] {
        expect_err(
            &format!("{BASE}\n{gw}xdp_fast_path_idle = {bad}\n"),
            "xdp_fast_path_idle =",
            "gateway.xdp_fast_path_idle",
            "",
        );
    }
}

// -- [routing] (routing integration) --

#[test]
fn routing_is_off_by_default_and_read_when_written() {
    let c = load_str(BASE, "t.toml").unwrap();
    assert!(!c.routing.enabled());
    assert_eq!(c.routing, runtime::routing::RoutingConfig::default());
    let text = format!(
        "{BASE}\n[gateway]\ninside = \"a\"\noutside = \"b\"\n\n[routing]\nannounce = [\"0.0.0.0/0\", \"203.0.113.0/29\", \"2001:db8:64::/96\"]\nstandby = [\"203.0.113.8/29\"]\nstandby_metric = 2000\ntable = 1234\nprotocol = 99\ndevice = \"qn-a1\"\nhealth_interval = \"250ms\"\n"
    );
    let c = load_str(&text, "t.toml").unwrap();
    let r = &c.routing;
    assert_eq!(
        r.describe(),
        [
            "0.0.0.0/0",
            "203.0.113.0/29",
            "2001:db8:64::/96",
            "203.0.113.8/29 (standby)"
        ]
    );
    assert_eq!((r.standby_metric, r.table, r.protocol), (2000, 1234, 99));
    assert_eq!(r.device, "qn-a1");
    assert_eq!(r.health_interval, Duration::from_millis(250));
    assert_eq!(c.gateway.unwrap().routing, *r, "the gateway carries it");
    let c = load_str(
        &format!("{BASE}\n[routing]\nannounce = [\"0.0.0.0/0\"]\nhealth_interval = \"1.5s\"\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.routing.health_interval, Duration::from_millis(1500));
    assert_eq!(c.routing.device, "qn-announce");
}

#[test]
fn routing_mistakes_name_the_line_and_field() {
    let with = |body: &str| format!("{BASE}\n[routing]\n{body}\n");
    let t = with("announce = [\"0.0.0.0/0\", \"203.0.113.1/29\"]");
    expect_err(
        &t,
        "203.0.113.1/29",
        "routing.announce[2]",
        "host bits set: the prefix is 203.0.113.0/29",
    );
    let t = with("announce = [\"203.0.113.0\"]");
    expect_err(
        &t,
        "announce =",
        "routing.announce[1]",
        "expected ADDRESS/LENGTH",
    );
    let t = with("announce = [\"2001:db8::/129\"]");
    expect_err(&t, "announce =", "routing.announce[1]", "expected 0 to 128");
    let t = with("announce = [\"192.0.2.0/24\", \"192.0.2.0/24\"]");
    expect_err(&t, "announce =", "routing.announce[2]", "written twice");
    let t = with("announce = [\"192.0.2.0/24\"]\nstandby = [\n  \"192.0.2.0/24\",\n]");
    expect_err(
        &t,
        "  \"192.0.2.0/24\"",
        "routing.standby[1]",
        "either primary or standby",
    );
    let t = with("announce = [\"0.0.0.0/0\"]\nstandby_metric = 100");
    expect_err(
        &t,
        "standby_metric",
        "routing.standby_metric",
        "must be above 100",
    );
    let t = with("announce = [\"0.0.0.0/0\"]\ntable = 254");
    expect_err(&t, "table", "routing.table", "254 (main)");
    let t = with("announce = [\"0.0.0.0/0\"]\nprotocol = 12");
    expect_err(&t, "protocol", "routing.protocol", "BIRD's own");
    let t = with("announce = [\"0.0.0.0/0\"]\nprotocol = 256");
    expect_err(&t, "protocol", "routing.protocol", "5 to 255");
    let t = with("announce = [\"0.0.0.0/0\"]\ndevice = \"qn-announce-far-too-long\"");
    expect_err(&t, "device", "routing.device", "not a Linux interface name");
    for bad in ["5ms", "11s", "fast", "100", "-1s"] {
        let t = with(&format!(
            "announce = [\"0.0.0.0/0\"]\nhealth_interval = \"{bad}\""
        ));
        expect_err(
            &t,
            "health_interval",
            "routing.health_interval",
            "from \"10ms\" to \"10s\"",
        );
    }
    let t = with("announce = [\"0.0.0.0/0\"]\nannounces = []");
    expect_err(&t, "announces", "routing.announces", "unknown field");
}

#[test]
fn a_file_larger_than_the_limit_is_refused_without_being_read() {
    let path = std::env::temp_dir().join(format!("qn-huge-{}.toml", std::process::id()));
    let f = std::fs::File::create(&path).unwrap();
    // Sparse: costs no disk, and reading it whole would cost 129 MiB of memory.
    f.set_len(MAX_FILE_BYTES + (1 << 20)).unwrap();
    let e = load_file(&path).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(e.contains("larger than 128 MiB"), "{e}");
    // A device with no size is read up to the limit only.
    let e = read_file(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(
        e.contains("/dev/zero") && e.contains("larger than 128 MiB"),
        "{e}"
    );
}

/// `[gateway] cpus` and `reaper_cpu`: a Linux CPU list, held against the CPUs the
/// machine lets quicknat run on (refused at the line, naming the CPU and what is allowed);
/// fewer CPUs than workers is a warning.
#[test]
fn cpus_are_held_against_the_machine() {
    let gw = |keys: &str| {
        format!(
            "[gateway]\ninside = \"in0\"\noutside = \"out0\"\nworkers = 3\n{keys}\n\n\
             [[nat44.rule]]\ninside = \"10.0.0.0/24\"\npool = \"203.0.113.0/28\"\n"
        )
    };
    let two = Machine {
        cpus: Some(super::CpuMask::of(&[0, 1])),
        ..Machine::default()
    };
    let c = load_str_on(&gw("cpus = \"1,0-1\"\nreaper_cpu = 0"), "t.toml", &two).unwrap();
    let g = c.gateway.unwrap();
    assert_eq!((g.cpus, g.reaper_cpu), (Some(vec![1, 0]), Some(0)));
    assert_eq!(
        c.warnings,
        ["t.toml:5: gateway.cpus 3 workers on 2 CPUs: workers share cores"]
    );
    let e = load_str_on(&gw("cpus = \"0-3\""), "t.toml", &two).unwrap_err();
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(5), Some("gateway.cpus")),
        "{e}"
    );
    assert!(
        e.message
            .contains("CPU 2 is not one quicknat may run on (this machine allows 0-1)"),
        "{e}"
    );
    let e = load_str_on(&gw("reaper_cpu = 7"), "t.toml", &two).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("gateway.reaper_cpu"), "{e}");
    let e = load_str(&gw("cpus = \"2-1\""), "t.toml").unwrap_err();
    assert!(
        e.to_string()
            .contains("gateway.cpus: \"2-1\": \"2-1\": a range goes upwards"),
        "{e}"
    );
    // Unknown machine: only the list's own form is checked.
    assert!(load_str(&gw("cpus = \"0-63\""), "t.toml").is_ok());
}
