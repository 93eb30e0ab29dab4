//! Hash flooding, measured: new TCP flows crafted to share one bucket of an unkeyed
//! session hash against as many random flows, through a fresh NAT44 engine each
//! (`bench::hashflood`). Prints nanoseconds per SYN and per established packet, and the
//! collision/random ratio of each (medians of alternating rounds).
//!
//! `cargo run --release -p bench --example hashflood -- [FLOWS] [ROUNDS]` (20000, 5), or one
//! kind alone for callgrind: `hashflood FLOWS 1 collide` / `hashflood FLOWS 1 random`.

use bench::hashflood::{colliding_flows, random_flows, run, FloodCost};
use bench::median;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let only = args.next();
    let (collide, random) = (colliding_flows(n), random_flows(n));
    let mut c: Vec<FloodCost> = Vec::new();
    let mut r: Vec<FloodCost> = Vec::new();
    for _ in 0..rounds.max(1) {
        if only.as_deref() != Some("random") {
            c.push(run(&collide));
        }
        if only.as_deref() != Some("collide") {
            r.push(run(&random));
        }
    }
    let med = |v: &[FloodCost], f: fn(&FloodCost) -> f64| median(v.iter().map(f).collect());
    for (name, v) in [("collide", &c), ("random", &r)] {
        if let Some(last) = v.last() {
            println!(
                "{name:8} {n} flows: {:8.1} ns/SYN {:8.1} ns/established packet ({} admitted)",
                med(v, |x| x.syn_ns),
                med(v, |x| x.established_ns),
                last.admitted
            );
        }
    }
    if !c.is_empty() && !r.is_empty() {
        println!(
            "ratio collide/random: SYN {:.2}x, established {:.2}x",
            med(&c, |x| x.syn_ns) / med(&r, |x| x.syn_ns),
            med(&c, |x| x.established_ns) / med(&r, |x| x.established_ns)
        );
    }
}
