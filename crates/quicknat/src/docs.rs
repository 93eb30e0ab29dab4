//! What the CLI says about itself — `quicknat completions SHELL`,
//! `quicknat man` (both generated from the clap definition, so they never drift from it)
//! and `quicknat --version` (version, git commit, the backends this build carries).
//! `scripts/gen_docs.sh` writes their output to `packaging/` for the Debian package.

use std::io::Write;

use clap::Args;

/// `quicknat completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the completion script for `args.shell` of `cmd`.
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "quicknat", &mut out);
    out.flush()?;
    Ok(())
}

/// Prints the man page of `cmd`: the main page, then a section per subcommand (its
/// options), so `man quicknat` documents every verb.
pub fn man(cmd: clap::Command) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let cmd = cmd.long_version(long_version());
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("quicknat {}", sub.get_name());
        writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
        let sub_man = clap_mangen::Man::new(sub.clone().bin_name(name));
        sub_man.render_synopsis_section(&mut Subsection(&mut out))?;
        sub_man.render_description_section(&mut Subsection(&mut out))?;
        sub_man.render_options_section(&mut Subsection(&mut out))?;
    }
    writeln!(out, ".SH FILES")?;
    writeln!(
        out,
        ".TP\n/etc/quicknat/quicknat.toml\nThe configuration the systemd unit starts with."
    )?;
    writeln!(
        out,
        ".TP\n/usr/share/doc/quicknat/examples/\nExample configurations, one per mode."
    )?;
    writeln!(out, ".SH ENVIRONMENT")?;
    writeln!(out, ".TP\nQUICKNAT_LOG, RUST_LOG\nLog filter (tracing EnvFilter syntax: warn, info, debug, quicknat=debug); overrides [gateway] log_level.")?;
    writeln!(out, ".TP\nNOTIFY_SOCKET, WATCHDOG_USEC\nSet by systemd for a Type=notify unit: READY, STATUS, WATCHDOG, RELOADING and STOPPING are sent there.")?;
    writeln!(
        out,
        ".SH VERSION\n{}",
        long_version().replace('\n', "\n.br\n")
    )?;
    out.flush()?;
    Ok(())
}

/// Turns a sub-page's `.SH` headings into `.SS` ones (sub-sections of its verb's section).
struct Subsection<'a, W: Write>(&'a mut W);

impl<W: Write> Write for Subsection<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let text = text.replace(".SH ", ".SS ");
        self.0.write_all(text.as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The git commit this binary was built from (`QUICKNAT_GIT_COMMIT` at build time, else
/// `git rev-parse`), if known.
pub const GIT_COMMIT: Option<&str> = option_env!("QUICKNAT_GIT_COMMIT");

/// What `quicknat --version` says: the version, the commit, the packet backends this
/// build carries and its fast paths. AF_PACKET is always there; AF_XDP and both fast paths
/// (the XDP program's, and the tc ingress program's for AF_PACKET) only when clang compiled
/// the BPF programs at build time. crates/io/build.rs compiles both programs or neither
/// (no clang: both objects empty; a clang that fails on either fails the build), so the
/// XDP object's presence answers for the tc one too.
pub fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let commit = GIT_COMMIT.filter(|c| !c.is_empty()).unwrap_or("unknown");
        let (backends, fast) = if runtime::preflight::af_xdp_built() {
            (
                "af_packet, af_xdp (XDP program built with clang)",
                "xdp (with af_xdp), tc (with af_packet)",
            )
        } else {
            (
                "af_packet; af_xdp NOT built (no clang at build time: install clang and rebuild)",
                "none (the XDP and tc programs were not built: no clang at build time)",
            )
        };
        format!(
            "{}\ncommit: {commit}\nbackends: {backends}\nfast paths: {fast}\nmodes: nat44, nat64, siit, clat, ila",
            env!("CARGO_PKG_VERSION")
        )
    })
}
