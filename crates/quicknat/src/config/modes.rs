//! The IPv4/IPv6 translation sections: `[siit]` (stateless, RFC 7915 with RFC 6052 and
//! RFC 7757 explicit address mappings) and `[clat]` (the customer side of 464XLAT, RFC
//! 6877), turned into an [`engine::siit::SiitConfig`] with every error located.

use engine::siit::{Eam, EamHairpin, Rfc6791Pool, SiitConfig};
use serde::Deserialize;
use toml::Spanned;
use xlat::prefix::{Ipv4Prefix, Ipv6Prefix};
use xlat::rfc6052::Pref64;
use xlat::siit::{DfPolicy, SiitOptions};

use super::{ConfigFileError, Source};

/// The RFC 7915 knobs shared by every translating section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawXlatOptions {
    /// MTU of the IPv6 next hop (at least 1280; default: the link's).
    pub ipv6_mtu: Option<Spanned<u64>>,
    /// MTU of the IPv4 next hop (at least 68; default: the link's).
    pub ipv4_mtu: Option<Spanned<u64>>,
    /// `"drop"` (default) or `"compute"`: IPv4 UDP packets with checksum zero.
    pub udp_zero_checksum: Option<Spanned<String>>,
    /// `"drop"` (default) or `"compute"`: IPv6 UDP packets with checksum zero.
    pub ipv6_udp_zero_checksum: Option<Spanned<String>>,
    /// Copy TOS <-> Traffic Class (default) or write zero.
    pub copy_tos: Option<bool>,
    // -- gateway-originated ICMP errors --
    /// RFC 7915 §4.4 / §5.4: send ICMP errors about refused packets (default true).
    pub icmp_errors: Option<bool>,
    // RFC 7915 §4.1 / §5.1 MTU, DF and TOS settings.
    /// RFC 7915 §4.1 lowest-ipv6-mtu (at least 1280, default 1280).
    pub lowest_ipv6_mtu: Option<Spanned<u64>>,
    /// RFC 7915 §5.1 DF: `"rfc"` (default), `"clear"` or `"set"`.
    pub df: Option<Spanned<String>>,
    /// RFC 7915 §5.1: the IPv4 TOS to write instead of copying the Traffic Class.
    pub tos: Option<Spanned<u64>>,
    /// RFC 7915 §4.1: the IPv6 Traffic Class to write instead of copying the TOS.
    pub traffic_class: Option<Spanned<u64>>,
    // -- ICMP error budget --
    /// ICMP errors per second a worker sends at most, in all.
    pub icmp_error_rate: Option<Spanned<u64>>,
    /// ICMP errors per second a worker sends at most to one sender.
    pub icmp_error_rate_per_source: Option<Spanned<u64>>,
}

/// `[MODE.options] icmp_error_rate` and `icmp_error_rate_per_source`.
fn options_icmp_rate(
    src: &Source<'_>,
    raw: Option<&RawXlatOptions>,
    section: &str,
) -> Result<engine::config::IcmpRate, ConfigFileError> {
    match raw {
        Some(r) => super::icmp_rate(
            src,
            &r.icmp_error_rate,
            &r.icmp_error_rate_per_source,
            &format!("{section}.options"),
        ),
        None => Ok(engine::config::IcmpRate::default()),
    }
}

/// The `[siit]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSiit {
    /// The RFC 6052 prefix, e.g. `"64:ff9b::/96"`.
    pub pref64: Option<Spanned<String>>,
    /// RFC 7757 explicit address mappings.
    #[serde(default)]
    pub eam: Vec<Spanned<RawEam>>,
    /// RFC 6791: IPv4 sources (an address, a prefix or a list) for ICMPv6 errors from
    /// unmapped IPv6 routers and for the translator's own ICMPv4 errors.
    pub icmp_error_source: Option<Spanned<super::raw::Pool>>,
    /// RFC 7757 §4: `"off"`, `"simple"` or `"intrinsic"` (default) EAM hairpinning.
    pub eam_hairpin: Option<Spanned<String>>,
    /// `[siit.options]`.
    pub options: Option<RawXlatOptions>,
}

/// One EAM entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEam {
    /// IPv4 prefix.
    pub ipv4: Spanned<String>,
    /// IPv6 prefix with a suffix as long as the IPv4 one.
    pub ipv6: Spanned<String>,
}

/// The `[clat]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClat {
    /// The private IPv4 address or prefix of the host or LAN, e.g. `"192.0.0.2/32"`.
    pub ipv4: Spanned<String>,
    /// The CLAT IPv6 prefix it maps to (same suffix length), e.g. `"2001:db8:aaaa::2/128"`.
    pub ipv6: Spanned<String>,
    /// The provider's NAT64 prefix (PLAT side), e.g. `"64:ff9b::/96"`.
    pub plat: Spanned<String>,
    /// `[clat.options]`.
    pub options: Option<RawXlatOptions>,
}

fn pref64(src: &Source<'_>, v: &Spanned<String>, field: &str) -> Result<Pref64, ConfigFileError> {
    v.get_ref()
        .parse::<Pref64>()
        .map_err(|e| src.bad_value(v, field.into(), e.to_string()))
}

fn v4_prefix(
    src: &Source<'_>,
    v: &Spanned<String>,
    field: &str,
) -> Result<Ipv4Prefix, ConfigFileError> {
    v.get_ref()
        .parse()
        .map_err(|why: xlat::prefix::PrefixError| src.bad_value(v, field.into(), why.to_string()))
}

fn v6_prefix(
    src: &Source<'_>,
    v: &Spanned<String>,
    field: &str,
) -> Result<Ipv6Prefix, ConfigFileError> {
    v.get_ref()
        .parse()
        .map_err(|why: xlat::prefix::PrefixError| src.bad_value(v, field.into(), why.to_string()))
}

/// The RFC 7915 options of `section`.
pub(super) fn options(
    src: &Source<'_>,
    raw: Option<&RawXlatOptions>,
    section: &str,
) -> Result<SiitOptions, ConfigFileError> {
    let mut o = SiitOptions::default();
    let Some(raw) = raw else { return Ok(o) };
    let field = |f: &str| format!("{section}.options.{f}");
    if let Some(m) = &raw.ipv6_mtu {
        if !(1280..=65535).contains(m.get_ref()) {
            return Err(src.error(
                Some(m.span()),
                field("ipv6_mtu"),
                format!("{}: must be between 1280 and 65535", m.get_ref()),
            ));
        }
        o.ipv6_mtu = *m.get_ref() as u32;
    }
    if let Some(m) = &raw.ipv4_mtu {
        if !(68..=65535).contains(m.get_ref()) {
            return Err(src.error(
                Some(m.span()),
                field("ipv4_mtu"),
                format!("{}: must be between 68 and 65535", m.get_ref()),
            ));
        }
        o.ipv4_mtu = *m.get_ref() as u32;
    }
    // RFC 7915 §4.5 (IPv4), RFC 8200 §8.1 (IPv6: illegal outside RFC 6935 tunnels).
    let compute = |u: &Option<Spanned<String>>, name: &str, dflt: bool| match u {
        None => Ok(dflt),
        Some(u) => match u.get_ref().as_str() {
            "drop" => Ok(false),
            "compute" => Ok(true),
            _ => Err(src.bad_value(u, field(name), "must be \"drop\" or \"compute\"".into())),
        },
    };
    o.translate_udp_zero_csum = compute(
        &raw.udp_zero_checksum,
        "udp_zero_checksum",
        o.translate_udp_zero_csum,
    )?;
    o.compute_ipv6_udp_zero_csum = compute(
        &raw.ipv6_udp_zero_checksum,
        "ipv6_udp_zero_checksum",
        o.compute_ipv6_udp_zero_csum,
    )?;
    o.tos_to_traffic_class = raw.copy_tos.unwrap_or(o.tos_to_traffic_class);
    mtu_df_tos(src, raw, &mut o, &field)?;
    Ok(o)
}

/// `[MODE.options] icmp_errors`: RFC 7915 §4.4 / §5.4, on unless turned off.
fn icmp_errors(raw: Option<&RawXlatOptions>) -> bool {
    raw.and_then(|r| r.icmp_errors).unwrap_or(true)
}

/// The RFC 7915 §4.1 / §5.1 settings: `lowest_ipv6_mtu`, `df`, `tos`, `traffic_class`.
fn mtu_df_tos(
    src: &Source<'_>,
    raw: &RawXlatOptions,
    o: &mut SiitOptions,
    field: &dyn Fn(&str) -> String,
) -> Result<(), ConfigFileError> {
    if let Some(m) = &raw.lowest_ipv6_mtu {
        if !(1280..=65535).contains(m.get_ref()) {
            return Err(src.error(
                Some(m.span()),
                field("lowest_ipv6_mtu"),
                format!(
                    "{}: must be between 1280 (the IPv6 minimum MTU) and 65535",
                    m.get_ref()
                ),
            ));
        }
        o.lowest_ipv6_mtu = *m.get_ref() as u32;
    }
    if let Some(d) = &raw.df {
        o.df =
            match d.get_ref().as_str() {
                "rfc" => DfPolicy::Rfc,
                "clear" => DfPolicy::Clear,
                "set" => DfPolicy::Set,
                _ => return Err(src.bad_value(
                    d,
                    field("df"),
                    "must be \"rfc\" (RFC 7915 §5.1: set above 1260 bytes), \"clear\" or \"set\""
                        .into(),
                )),
            };
    }
    let octet = |v: &Spanned<u64>, name: &str| -> Result<u8, ConfigFileError> {
        u8::try_from(*v.get_ref()).map_err(|_| {
            src.error(
                Some(v.span()),
                field(name),
                format!("{}: must be between 0 and 255", v.get_ref()),
            )
        })
    };
    if let Some(v) = &raw.tos {
        o.tos = Some(octet(v, "tos")?);
    }
    if let Some(v) = &raw.traffic_class {
        o.traffic_class = Some(octet(v, "traffic_class")?);
    }
    Ok(())
}

/// `[siit]` into a validated configuration.
pub(super) fn convert_siit(
    src: &Source<'_>,
    raw: &Spanned<RawSiit>,
) -> Result<SiitConfig, ConfigFileError> {
    let r = raw.get_ref();
    let pref64 = r
        .pref64
        .as_ref()
        .map(|p| pref64(src, p, "siit.pref64"))
        .transpose()?;
    let mut eam: Vec<Eam> = Vec::with_capacity(r.eam.len());
    for (i, e) in r.eam.iter().enumerate() {
        let field = |f: &str| format!("siit.eam[{}].{f}", i + 1);
        let v = e.get_ref();
        let a = v4_prefix(src, &v.ipv4, &field("ipv4"))?;
        let b = v6_prefix(src, &v.ipv6, &field("ipv6"))?;
        let entry =
            Eam::new(a, b).map_err(|why| src.bad_value(&v.ipv6, field("ipv6"), why.to_string()))?;
        eam.push(entry);
    }
    let icmp_error_source = match &r.icmp_error_source {
        Some(p) => {
            let prefixes = super::pool_prefixes(src, p, "siit.icmp_error_source")?;
            let pool = Rfc6791Pool::new(prefixes).ok_or_else(|| {
                src.error(
                    Some(p.span()),
                    "siit.icmp_error_source",
                    "an empty list: give an IPv4 address or prefix (RFC 7600 reserves \
                     192.0.0.8 for this)",
                )
            })?;
            Some(pool)
        }
        None => None,
    };
    let eam_hairpin = match &r.eam_hairpin {
        Some(h) => h
            .get_ref()
            .parse::<EamHairpin>()
            .map_err(|why| src.bad_value(h, "siit.eam_hairpin".into(), why))?,
        None => EamHairpin::default(),
    };
    let cfg = SiitConfig {
        pref64,
        eam,
        icmp_error_source,
        options: options(src, r.options.as_ref(), "siit")?,
        icmp_errors: icmp_errors(r.options.as_ref()),
        eam_hairpin,
        icmp_rate: options_icmp_rate(src, r.options.as_ref(), "siit")?,
    };
    cfg.validate().map_err(|e| src.item_error("siit", e))?;
    Ok(cfg)
}

/// `[clat]` into a validated stateless configuration.
pub(super) fn convert_clat(
    src: &Source<'_>,
    raw: &Spanned<RawClat>,
) -> Result<SiitConfig, ConfigFileError> {
    let r = raw.get_ref();
    let a = v4_prefix(src, &r.ipv4, "clat.ipv4")?;
    let b = v6_prefix(src, &r.ipv6, "clat.ipv6")?;
    let plat = pref64(src, &r.plat, "clat.plat")?;
    let mut cfg = SiitConfig::clat(a, b, plat).map_err(|e| src.item_error("clat", e))?;
    cfg.options = options(src, r.options.as_ref(), "clat")?;
    cfg.icmp_errors = icmp_errors(r.options.as_ref());
    cfg.icmp_rate = options_icmp_rate(src, r.options.as_ref(), "clat")?;
    Ok(cfg)
}

/// The `[nat64]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat64 {
    /// The RFC 6052 prefix IPv4 servers are reached at, e.g. `"64:ff9b::/96"`.
    pub pref64: Option<Spanned<String>>,
    /// The public IPv4 pool: one prefix or a list.
    pub pool4: Spanned<super::raw::Pool>,
    /// Port range of the pool, e.g. `"1024-65535"`.
    pub ports: Option<Spanned<String>>,
    /// `"endpoint-independent"` or `"address-dependent"`.
    pub filtering: Option<Spanned<String>>,
    /// IPv6 hosts may reach each other through pool addresses.
    pub hairpinning: Option<bool>,
    /// Seconds a released pool port is held back.
    pub port_reuse_hold: Option<Spanned<u64>>,
    /// Upper bound on live sessions.
    pub max_sessions: Option<Spanned<u64>>,
    /// `[nat64.timeouts]`, in seconds.
    pub timeouts: Option<Spanned<super::raw::RawTimeouts>>,
    /// `[[nat64.static]]` bindings.
    #[serde(default, rename = "static")]
    pub static_bindings: Vec<Spanned<RawNat64Static>>,
    /// `[nat64.options]`.
    pub options: Option<RawXlatOptions>,
    /// Seconds a fragmented datagram's translation is remembered.
    pub fragment_timeout: Option<Spanned<u64>>,
    /// Fragmented datagrams in flight at most.
    pub max_fragment_records: Option<Spanned<u64>>,
    /// Bytes of fragments held at most while they wait for their first.
    pub fragment_hold_bytes: Option<Spanned<u64>>,
    /// Unsolicited inbound TCP SYNs held at once (RFC 6146 §3.5.2.2).
    pub max_simultaneous_opens: Option<Spanned<u64>>,
    /// Drop unsolicited inbound TCP SYNs instead of holding them (RFC 6146 §3.5.2.2).
    pub drop_externally_initiated_tcp: Option<bool>,
    /// Drop ICMPv6 informational messages from the inside (RFC 6146 §3.5.3).
    pub drop_icmpv6_info: Option<bool>,
    /// Sessions one IPv6 host may open (0: unlimited).
    pub max_sessions_per_host: Option<Spanned<u64>>,
    /// Pool ports one IPv6 host may hold per protocol (0: unlimited).
    pub max_ports_per_host: Option<Spanned<u64>>,
    /// Keep the IPv6 host's source port when free (else RFC 6056 randomised).
    pub port_preservation: Option<bool>,
    /// The prefix length the per-host limits count IPv6 sources by (64; 1-64 or 128).
    pub subscriber_prefix_len: Option<Spanned<u64>>,
    // -- port-block allocation --
    /// Ports per block (0: off).
    pub port_block_size: Option<Spanned<u64>>,
    /// Blocks one IPv6 subscriber may hold per pool4 address (each serves every protocol).
    pub blocks_per_subscriber: Option<Spanned<u64>>,
}

/// One `[[nat64.static]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat64Static {
    /// `"tcp"` or `"udp"`.
    pub protocol: Spanned<String>,
    /// Public `address:port` (in the pool).
    pub public: Spanned<String>,
    /// IPv6 server `[address]:port`.
    pub inside: Spanned<String>,
}

/// `[nat64]` into a validated configuration.
pub(super) fn convert_nat64(
    src: &Source<'_>,
    raw: &Spanned<RawNat64>,
) -> Result<(engine::nat64::Nat64Config, Vec<String>), ConfigFileError> {
    use engine::config::{Filtering, L4Proto, PortRange};
    use engine::nat64::{Nat64Config, Nat64Static};
    let r = raw.get_ref();
    let mut c = Nat64Config::default();
    if let Some(p) = &r.pref64 {
        c.pref64 = pref64(src, p, "nat64.pref64")?;
    }
    c.pool4 = super::pool_prefixes(src, &r.pool4, "nat64.pool4")?;
    if let Some(p) = &r.ports {
        c.ports = p
            .get_ref()
            .parse::<PortRange>()
            .map_err(|why| src.bad_value(p, "nat64.ports".into(), why.to_string()))?;
    }
    if let Some(f) = &r.filtering {
        c.filtering =
            match f.get_ref().as_str() {
                "endpoint-independent" => Filtering::EndpointIndependent,
                "address-dependent" => Filtering::AddressDependent,
                _ => return Err(src.bad_value(
                    f,
                    "nat64.filtering".into(),
                    "must be \"endpoint-independent\" or \"address-dependent\" (RFC 6146 §3.5.1)"
                        .into(),
                )),
            };
    }
    c.hairpinning = r.hairpinning.unwrap_or(c.hairpinning);
    if let Some(h) = &r.port_reuse_hold {
        c.port_reuse_hold = std::time::Duration::from_secs(*h.get_ref());
    }
    if let Some(m) = &r.max_sessions {
        c.max_sessions = usize::try_from(*m.get_ref())
            .ok()
            .filter(|n| *n <= conntrack::host_table::MAX_HOSTS)
            .ok_or_else(|| {
                src.error(
                    Some(m.span()),
                    "nat64.max_sessions",
                    format!(
                        "{} is too large (at most {})",
                        m.get_ref(),
                        conntrack::host_table::MAX_HOSTS
                    ),
                )
            })?;
    }
    if let Some(t) = &r.timeouts {
        c.timeouts = super::timeouts(t.get_ref(), c.timeouts);
    }
    for (i, s) in r.static_bindings.iter().enumerate() {
        let s = s.get_ref();
        let field = |f: &str| format!("nat64.static[{}].{f}", i + 1);
        let protocol = L4Proto::from_name(s.protocol.get_ref()).ok_or_else(|| {
            src.bad_value(
                &s.protocol,
                field("protocol"),
                "must be \"tcp\", \"udp\" or \"sctp\"".into(),
            )
        })?;
        let public = s.public.get_ref().trim().parse().map_err(|_| {
            src.bad_value(
                &s.public,
                field("public"),
                "not an IPv4 address and port (like 203.0.113.1:8080)".into(),
            )
        })?;
        let inside = s.inside.get_ref().trim().parse().map_err(|_| {
            src.bad_value(
                &s.inside,
                field("inside"),
                "not an IPv6 address and port (like [2001:db8::80]:80)".into(),
            )
        })?;
        c.static_bindings.push(Nat64Static {
            protocol,
            public,
            inside,
        });
    }
    c.options = options(src, r.options.as_ref(), "nat64")?;
    c.icmp_errors = icmp_errors(r.options.as_ref());
    c.icmp_rate = options_icmp_rate(src, r.options.as_ref(), "nat64")?;
    let (t, m) =
        super::fragment_limits(src, &r.fragment_timeout, &r.max_fragment_records, "nat64")?;
    c.fragment_timeout = t.unwrap_or(c.fragment_timeout);
    c.max_fragment_records = m.unwrap_or(c.max_fragment_records);
    // Unsolicited inbound SYNs (RFC 6146 §3.5.2.2) and ICMPv6 informational (§3.5.3).
    c.max_simultaneous_opens = super::count_or(&r.max_simultaneous_opens, c.max_simultaneous_opens);
    c.fragment_hold_bytes = super::count_or(&r.fragment_hold_bytes, c.fragment_hold_bytes);
    c.drop_externally_initiated_tcp = r
        .drop_externally_initiated_tcp
        .unwrap_or(c.drop_externally_initiated_tcp);
    c.drop_icmpv6_info = r.drop_icmpv6_info.unwrap_or(c.drop_icmpv6_info);
    // Per-subscriber limits (RFC 6888 REQ-4/REQ-5) and port choice.
    let (s, p) = super::limits::host_limits(
        src,
        &r.max_sessions_per_host,
        &r.max_ports_per_host,
        "nat64",
    )?;
    c.max_sessions_per_host = s.unwrap_or(c.max_sessions_per_host);
    c.max_ports_per_host = p.unwrap_or(c.max_ports_per_host);
    c.port_preservation = r.port_preservation.unwrap_or(c.port_preservation);
    // Port-block allocation.
    let (size, per) =
        super::blocks::port_blocks(src, &r.port_block_size, &r.blocks_per_subscriber, "nat64")?;
    c.port_block_size = size.unwrap_or(c.port_block_size);
    c.blocks_per_subscriber = per.unwrap_or(c.blocks_per_subscriber);
    // Per-subscriber limits count an IPv6 subscriber's prefix, not one address.
    if let Some(v) = &r.subscriber_prefix_len {
        c.subscriber_prefix_len = u8::try_from(*v.get_ref())
            .ok()
            .filter(|l| matches!(l, 1..=64 | 128))
            .ok_or_else(|| {
                src.error(
                    Some(v.span()),
                    "nat64.subscriber_prefix_len",
                    format!(
                        "{}: must be 1 to 64 (a subscriber's prefix) or 128 (each address)",
                        v.get_ref()
                    ),
                )
            })?;
    }
    // The engine's own checks (pool sizes, static bindings in the pool, timeouts).
    let warnings = c
        .validate()
        .map_err(|e| src.item_error("nat64", e))?
        .into_iter()
        .map(|w| src.warning("nat64", w))
        .collect();
    Ok((c, warnings))
}
