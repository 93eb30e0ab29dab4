//! `quicknat ila list|add|set|del|reload`: the client side of the control socket
//! (`runtime::control`). Sends one request line, prints the answer; an `error ...`
//! answer becomes a failed exit. Holds no ILA logic: the gateway does the work.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use engine::ila::Addr64;

/// Arguments of `quicknat ila`.
#[derive(Debug, Args)]
pub struct IlaArgs {
    /// The running gateway's control socket.
    #[arg(long, value_name = "PATH", default_value = runtime::control::DEFAULT_SOCKET, global = true)]
    socket: PathBuf,
    #[command(subcommand)]
    op: IlaOp,
}

/// What to ask the gateway.
#[derive(Debug, Subcommand)]
enum IlaOp {
    /// Print every mapping: IDENTIFIER LOCATOR, one per line.
    List,
    /// Add a mapping (identifier and locator as four hex groups, e.g. 0:0:1:2 2001:0:87:0).
    Add {
        /// The identifier (lower 64 bits of the SIR address).
        identifier: Addr64,
        /// The locator (upper 64 bits of the ILA address).
        locator: Addr64,
    },
    /// Change the locator of an existing mapping (one atomic update).
    Set {
        /// The identifier.
        identifier: Addr64,
        /// The new locator.
        locator: Addr64,
    },
    /// Remove a mapping.
    Del {
        /// The identifier.
        identifier: Addr64,
    },
    /// Re-read the configuration file and apply the mapping differences.
    Reload,
}

/// The request line for `op`.
fn request_line(op: &IlaOp) -> String {
    match op {
        IlaOp::List => "ila list".into(),
        IlaOp::Add {
            identifier,
            locator,
        } => format!("ila add {identifier} {locator}"),
        IlaOp::Set {
            identifier,
            locator,
        } => format!("ila set {identifier} {locator}"),
        IlaOp::Del { identifier } => format!("ila del {identifier}"),
        IlaOp::Reload => "ila reload".into(),
    }
}

/// Sends `line` to the control socket at `path`; returns the status line and the lines
/// that follow an `ok N mappings` answer.
pub fn request(path: &Path, line: &str) -> anyhow::Result<(String, Vec<String>)> {
    let stream = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot reach the control socket {} (is quicknat running? --socket PATH)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut writer = stream.try_clone()?;
    writer.write_all(format!("{line}\n").as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut read_line = || -> anyhow::Result<String> {
        let mut l = String::new();
        anyhow::ensure!(
            reader.read_line(&mut l)? > 0,
            "the gateway closed the control connection without answering"
        );
        Ok(l.trim_end().to_owned())
    };
    let status = read_line()?;
    let mut rest = Vec::new();
    if let Some(n) = status
        .strip_prefix("ok ")
        .and_then(|s| s.strip_suffix(" mappings"))
    {
        let n: usize = n
            .parse()
            .with_context(|| format!("bad answer {status:?}"))?;
        for _ in 0..n {
            rest.push(read_line()?);
        }
    }
    Ok((status, rest))
}

/// `quicknat ila ...`: asks the gateway and prints its answer.
pub fn run(args: &IlaArgs) -> anyhow::Result<()> {
    let (status, rest) = request(&args.socket, &request_line(&args.op))?;
    if let Some(e) = status.strip_prefix("error ") {
        anyhow::bail!("{e}");
    }
    match args.op {
        IlaOp::List => rest.iter().for_each(|l| println!("{l}")),
        _ => println!("{}", status.strip_prefix("ok ").unwrap_or(&status)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use engine::ila::{CsumMode, IdentFormat, IlaConfig, IlaSettings, UnmappedAction};
    use runtime::control::{serve, ControlState};

    #[test]
    fn client_talks_to_the_server() {
        let dir = std::env::temp_dir().join(format!("quicknat-ilactl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let router = IlaSettings {
            config: IlaConfig {
                sir_prefix: 0x3333_0000_0000_0001,
                csum: CsumMode::AdjustTransport,
                format: IdentFormat::Luid,
                unmapped: UnmappedAction::Forward,
            },
            capacity: 8,
            mappings: vec![],
            icmp_rate: Default::default(),
        }
        .router()
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(ControlState::new(Arc::clone(&router), None, None));
        // The change log, kept open so changes are not refused.
        let (log, _changes) = std::sync::mpsc::sync_channel(1024);
        let server = serve(&path, state, Arc::clone(&stop), log).unwrap();
        let add = IlaOp::Add {
            identifier: "0:0:1:2".parse().unwrap(),
            locator: "2001:0:87:0".parse().unwrap(),
        };
        assert_eq!(request_line(&add), "ila add 0:0:1:2 2001:0:87:0");
        let (status, _) = request(&path, &request_line(&add)).unwrap();
        assert_eq!(status, "ok added 0:0:1:2 2001:0:87:0");
        let (status, rest) = request(&path, &request_line(&IlaOp::List)).unwrap();
        assert_eq!(
            (status.as_str(), rest),
            ("ok 1 mappings", vec!["0:0:1:2 2001:0:87:0".to_owned()])
        );
        let args = IlaArgs {
            socket: path.clone(),
            op: IlaOp::Reload,
        };
        assert!(run(&args)
            .unwrap_err()
            .to_string()
            .contains("no configuration file"));
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        let missing = request(&path, "ila list").unwrap_err().to_string();
        assert!(
            missing.contains("cannot reach the control socket"),
            "{missing}"
        );
        let _ = std::fs::remove_dir(&dir);
    }
}
