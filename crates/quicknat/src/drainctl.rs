//! `quicknat drain`: withdraw a running gateway's announced routes, wait until the
//! traffic has moved to the other gateways (no packet forwarded for a quiet period), say
//! how long it took, and, asked to, stop the gateway.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use serde_json::{json, Value};

use crate::ctl::{request, CtlOpts};

/// `quicknat drain`'s options.
#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Announce the routes again (while healthy) instead.
    #[arg(long, conflicts_with = "stop")]
    pub cancel: bool,
    /// Give up after this many seconds if traffic still flows (exit status 1; the routes
    /// stay withdrawn).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
    /// Seconds with no packet forwarded that count as the traffic having moved.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub quiet: f64,
    /// Stop the gateway (SIGTERM) once the traffic has moved.
    #[arg(long)]
    pub stop: bool,
    #[command(flatten)]
    pub opts: CtlOpts,
}

/// Packets the gateway has forwarded: its workers' and its fast path's.
pub fn forwarded(stats: &Value) -> u64 {
    let s = &stats["stats"];
    s["total"]["engine"]["forwarded"].as_u64().unwrap_or(0)
        + s["xdp_fast_path"]["packets"].as_u64().unwrap_or(0)
}

/// Drains (or cancels a drain) and reports.
pub fn run(a: &DrainArgs) -> anyhow::Result<()> {
    let sock = &a.opts.socket;
    let asked = Instant::now();
    let (_, r) = request(sock, &json!({"v": 1, "cmd": "drain", "cancel": a.cancel}))?;
    let d = &r["drain"];
    let announced = d["announced"].as_bool() == Some(true);
    if a.cancel {
        println!(
            "drain cancelled: routes {} ({})",
            if announced {
                "announced"
            } else {
                "not announced"
            },
            d["reason"].as_str().unwrap_or("?")
        );
        return Ok(());
    }
    if announced {
        bail!(
            "the routes are still announced: {}",
            d["reason"].as_str().unwrap_or("?")
        );
    }
    println!(
        "routes withdrawn ({}): {}",
        d["reason"].as_str().unwrap_or("?"),
        d["prefixes"]
            .as_array()
            .map(|p| p
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default()
    );
    // Until nothing was forwarded for `quiet`: the routers have moved the traffic.
    let quiet = Duration::from_secs_f64(a.quiet.max(0.1));
    let deadline = asked + Duration::from_secs(a.timeout);
    let stats = || -> anyhow::Result<u64> {
        let (_, s) = request(sock, &json!({"v": 1, "cmd": "stats"}))?;
        Ok(forwarded(&s))
    };
    let (mut last, mut changed) = (stats()?, Instant::now());
    let mut moved_at = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = stats()?;
        if now != last {
            (last, changed) = (now, Instant::now());
        } else if changed.elapsed() >= quiet {
            moved_at = Some(changed);
            break;
        }
    }
    let Some(moved) = moved_at else {
        bail!(
            "traffic still flows after {} s (the routes stay withdrawn; `quicknat drain \
             --cancel` announces them again)",
            a.timeout
        );
    };
    println!(
        "traffic moved: the last packet was forwarded {:.1} s after the drain began",
        moved.saturating_duration_since(asked).as_secs_f64()
    );
    if a.stop {
        stop(sock)?;
    }
    Ok(())
}

/// SIGTERMs the gateway behind `sock` (its pid from `status`) and waits for it to exit.
fn stop(sock: &std::path::Path) -> anyhow::Result<()> {
    let (_, s) = request(sock, &json!({"v": 1, "cmd": "status"}))?;
    let Some(pid) = s["status"]["pid"]
        .as_u64()
        .and_then(|p| i32::try_from(p).ok())
    else {
        bail!("the gateway did not say its pid");
    };
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    if !sent.success() {
        bail!("cannot signal pid {pid} ({sent})");
    }
    let gone = Instant::now() + Duration::from_secs(30);
    while running(pid) && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(50));
    }
    if running(pid) {
        bail!("pid {pid} did not exit within 30 s of SIGTERM");
    }
    println!("stopped (pid {pid})");
    Ok(())
}

/// Whether process `pid` still runs: it exists and is not a zombie (exited, its parent
/// not having collected it yet).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        // The state follows the command name's closing parenthesis.
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_counts_the_workers_and_the_fast_path() {
        let s = json!({"stats":{"total":{"engine":{"forwarded":7}},"xdp_fast_path":{"packets":5}}});
        assert_eq!(forwarded(&s), 12);
        let s = json!({"stats":{"total":{"engine":{"forwarded":7}},"xdp_fast_path":null}});
        assert_eq!(forwarded(&s), 7);
    }

    #[test]
    fn a_child_that_exited_is_not_running_before_it_is_collected() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        let t = Instant::now();
        while running(pid) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!running(pid), "a zombie is not running");
        c.wait().unwrap();
        assert!(running(std::process::id() as i32));
    }
}
