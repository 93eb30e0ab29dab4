//! `quicknat det forward|reverse`: the deterministic NAT mapping (RFC 7422)
//! answered offline from a configuration file alone, no gateway running: which public
//! address and port range a subscriber has, and which subscriber held a public address
//! and port (what a carrier's abuse desk asks). Text for people, `--json` for scripts.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use engine::any::ModeConfig;
use engine::nat44::deterministic::{DetMap, DetRange, FIRST_PORT};
use serde_json::json;

/// `quicknat det ...`.
#[derive(Debug, Args)]
pub struct DetArgs {
    #[command(subcommand)]
    verb: DetVerb,
}

/// The two directions of the mapping.
#[derive(Debug, Subcommand)]
enum DetVerb {
    /// Print the public address and port range of an inside address (subscriber).
    Forward {
        /// Configuration file with a [nat44.deterministic] table.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The subscriber's inside address.
        #[arg(value_name = "INSIDE")]
        inside: Ipv4Addr,
        /// Also print the port a new flow from this inside port is given first
        /// (range start + inside port mod ports per subscriber; the next free one up,
        /// wrapping inside the range, when taken).
        #[arg(long, value_name = "INSIDE_PORT")]
        port: Option<u16>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the inside address that holds (or held) a public address and port.
    Reverse {
        /// Configuration file with a [nat44.deterministic] table.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The public address.
        #[arg(value_name = "PUBLIC")]
        public: Ipv4Addr,
        /// The public port.
        #[arg(value_name = "PORT")]
        port: u16,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `quicknat det ...`, printing the answer on stdout.
pub fn run(args: &DetArgs) -> anyhow::Result<()> {
    match &args.verb {
        DetVerb::Forward {
            config,
            inside,
            port,
            json,
        } => {
            let m = load(config)?;
            println!("{}", forward(&m, *inside, *port, *json)?);
        }
        DetVerb::Reverse {
            config,
            public,
            port,
            json,
        } => {
            let m = load(config)?;
            println!("{}", reverse(&m, *public, *port, *json)?);
        }
    }
    Ok(())
}

/// The deterministic mapping of the configuration at `path` (validated whole, as
/// `check-config` would).
fn load(path: &Path) -> anyhow::Result<DetMap> {
    let c = quicknat::config::load_file(path)?;
    let d = match &c.mode {
        ModeConfig::Nat44(n) => n.deterministic,
        _ => None,
    };
    let Some(d) = d else {
        bail!(
            "{}: no [nat44.deterministic] table: deterministic NAT is not configured",
            path.display()
        );
    };
    DetMap::new(&d).with_context(|| format!("{}", path.display()))
}

/// The answer of `det forward`.
fn forward(m: &DetMap, inside: Ipv4Addr, port: Option<u16>, json: bool) -> anyhow::Result<String> {
    let Some(r) = m.forward(inside) else {
        bail!(
            "{inside} is not in the deterministic inside prefix {}",
            m.inside()
        );
    };
    let first = port.map(|p| m.first_choice(&r, p));
    if json {
        let mut v = range_json(m, &r);
        v["inside"] = json!(inside.to_string());
        if let (Some(p), Some(f)) = (port, first) {
            v["inside_port"] = json!(p);
            v["port"] = json!(f);
        }
        return Ok(v.to_string());
    }
    let mut s = format!(
        "{inside} -> {} ports {}-{} ({} ports; sharing ratio {})",
        r.public,
        r.first,
        r.last(),
        r.len,
        m.ratio()
    );
    if let (Some(p), Some(f)) = (port, first) {
        s.push_str(&format!(
            "\nfrom inside port {p}: {}:{f} first (the next free port up, wrapping in the range, if taken)",
            r.public
        ));
    }
    Ok(s)
}

/// The answer of `det reverse`.
fn reverse(m: &DetMap, public: Ipv4Addr, port: u16, json: bool) -> anyhow::Result<String> {
    if !m.contains_public(public) {
        bail!(
            "{public} is not in the deterministic outside prefix {}",
            m.outside()
        );
    }
    if port < FIRST_PORT {
        bail!("port {port} is below {FIRST_PORT}: deterministic NAT never hands it out");
    }
    let Some(inside) = m.reverse(public, port) else {
        let last = u32::from(FIRST_PORT) + m.ratio() * u32::from(m.ports_per_subscriber()) - 1;
        bail!(
            "port {port} is past the last subscriber's range (ports {FIRST_PORT}-{last} are \
             handed out): deterministic NAT never hands it out"
        );
    };
    let r = m
        .forward(inside)
        .context("the reverse mapping gave an address outside the inside prefix")?;
    if json {
        let mut v = range_json(m, &r);
        v["inside"] = json!(inside.to_string());
        v["port"] = json!(port);
        return Ok(v.to_string());
    }
    Ok(format!(
        "{public}:{port} -> {inside} (its range: ports {}-{})",
        r.first,
        r.last()
    ))
}

fn range_json(m: &DetMap, r: &DetRange) -> serde_json::Value {
    json!({
        "public": r.public.to_string(),
        "first_port": r.first,
        "last_port": r.last(),
        "ports": r.len,
        "ratio": m.ratio(),
    })
}

/// The `check-config` line of a deterministic configuration.
pub fn summary(m: &DetMap) -> String {
    let n = u32::from(m.ports_per_subscriber());
    format!(
        "deterministic: {} -> {}, sharing ratio {}, {n} ports per subscriber (ports {FIRST_PORT}-{})\n",
        m.inside(),
        m.outside(),
        m.ratio(),
        u32::from(FIRST_PORT) + m.ratio() * n - 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::nat44::deterministic::Deterministic;

    fn example() -> DetMap {
        DetMap::new(&Deterministic {
            inside: "100.64.0.0/22".parse().unwrap(),
            outside: "203.0.113.0/28".parse().unwrap(),
            ports_per_subscriber: None,
        })
        .unwrap()
    }

    #[test]
    fn forward_and_reverse_answers() {
        let m = example();
        let a: Ipv4Addr = "100.64.0.65".parse().unwrap();
        assert_eq!(
            forward(&m, a, None, false).unwrap(),
            "100.64.0.65 -> 203.0.113.1 ports 2032-3039 (1008 ports; sharing ratio 64)"
        );
        let v: serde_json::Value =
            serde_json::from_str(&forward(&m, a, Some(40000), true).unwrap()).unwrap();
        assert_eq!(v["public"], "203.0.113.1");
        assert_eq!(v["port"], 2032 + 40000 % 1008);
        let p: Ipv4Addr = "203.0.113.1".parse().unwrap();
        assert_eq!(
            reverse(&m, p, 2100, false).unwrap(),
            "203.0.113.1:2100 -> 100.64.0.65 (its range: ports 2032-3039)"
        );
        let v: serde_json::Value =
            serde_json::from_str(&reverse(&m, p, 2100, true).unwrap()).unwrap();
        assert_eq!(v["inside"], "100.64.0.65");
        let e = forward(&m, "10.0.0.1".parse().unwrap(), None, false).unwrap_err();
        assert!(e
            .to_string()
            .contains("not in the deterministic inside prefix 100.64.0.0/22"));
        let e = reverse(&m, "203.0.113.16".parse().unwrap(), 2100, false).unwrap_err();
        assert!(e
            .to_string()
            .contains("not in the deterministic outside prefix"));
        let e = reverse(&m, p, 80, false).unwrap_err();
        assert!(e.to_string().contains("below 1024"), "{e}");
        let m500 = DetMap::new(&Deterministic {
            ports_per_subscriber: Some(500),
            ..Deterministic {
                inside: m.inside(),
                outside: m.outside(),
                ports_per_subscriber: None,
            }
        })
        .unwrap();
        let e = reverse(&m500, p, 60000, false).unwrap_err();
        assert!(
            e.to_string()
                .contains("past the last subscriber's range (ports 1024-33023"),
            "{e}"
        );
    }
}
