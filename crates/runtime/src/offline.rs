//! Offline translation: replay a capture through the engine, with the capture's
//! timestamps as the clock, and write what the gateway would transmit.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use conntrack::Timestamp;
use engine::config::{ConfigError, Nat44Config};
use engine::nat44::Nat44;
use engine::{Counters, Direction, Verdict};
use io::pcap::{LinkType, PcapError, PcapReader, PcapWriter};

use crate::pipeline::{ModeConfig, ModeError, ModeShared};
use crate::step::{l3_offset, Nat44Step, StepOutcome};

/// Why an offline translation could not run (packet problems are drops, not errors).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The configuration was refused by the engine.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// A SIIT/CLAT/NAT64 configuration was refused.
    #[error("configuration: {0}")]
    Mode(String),
    /// The input could not be opened.
    #[error("cannot open input {path}: {source}")]
    OpenInput {
        /// The input path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The output could not be created.
    #[error("cannot create output {path}: {source}")]
    CreateOutput {
        /// The output path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The input is not a usable pcap, or writing failed.
    #[error("{path}: {source}")]
    Pcap {
        /// The file concerned.
        path: PathBuf,
        /// The pcap error.
        source: PcapError,
    },
    /// The capture's link type carries no IP the NAT could find.
    #[error("{path}: link type {link:?} is not supported (use Ethernet, raw IP or Linux cooked captures)")]
    LinkType {
        /// The input path.
        path: PathBuf,
        /// Its link type.
        link: LinkType,
    },
}

/// What a replay did.
#[derive(Clone, Debug, Default)]
pub struct TranslateReport {
    /// Frames read.
    pub frames_in: u64,
    /// Frames written.
    pub frames_out: u64,
    /// Frames without IP, not given to the engine and not written.
    pub not_ip: u64,
    /// Packets judged outbound (from an inside address).
    pub outbound: u64,
    /// Packets judged inbound.
    pub inbound: u64,
    /// Sessions still live at the end of the capture.
    pub sessions_live: usize,
    /// The engine's counters.
    pub counters: Counters,
}

impl fmt::Display for TranslateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        writeln!(f, "frames read       {}", self.frames_in)?;
        writeln!(f, "frames written    {}", self.frames_out)?;
        writeln!(f, "  outbound        {}", self.outbound)?;
        writeln!(f, "  inbound         {}", self.inbound)?;
        writeln!(f, "  not IP (skipped) {}", self.not_ip)?;
        writeln!(f, "forwarded         {}", c.forwarded)?;
        writeln!(f, "dropped           {}", c.total_dropped())?;
        for (reason, n) in c.drop_summary() {
            writeln!(f, "  {reason:<22} {n}")?;
        }
        writeln!(f, "sessions created  {}", c.sessions_created)?;
        writeln!(f, "sessions expired  {}", c.sessions_expired)?;
        writeln!(f, "sessions live     {}", self.sessions_live)?;
        writeln!(f, "icmp errors xlat  {}", c.icmp_errors_translated)?;
        writeln!(f, "fragments xlat    {}", c.fragments_translated)?;
        write!(f, "hairpinned        {}", c.hairpinned)
    }
}

fn pcap_err(path: &Path) -> impl Fn(PcapError) -> OfflineError + '_ {
    move |source| OfflineError::Pcap {
        path: path.into(),
        source,
    }
}

/// Replays `input` through the translator of `mode` and writes what it would transmit to
/// `output` (same link type, same timestamps, input order).
///
/// NAT44 judges direction by the configuration (see [`translate_pcap`]). The IPv4/IPv6
/// modes by the family: for NAT64 an IPv6 packet comes from the inside, an IPv4 packet from
/// the outside; SIIT and CLAT translate every packet to the other family. Ethernet and
/// Linux cooked frames get the ethertype of the family they now carry.
pub fn translate_pcap_mode(
    mode: &ModeConfig,
    input: &Path,
    output: &Path,
) -> Result<TranslateReport, OfflineError> {
    let shared = match mode {
        ModeConfig::Nat44(c) => return translate_pcap(c, input, output),
        m => ModeShared::new(m, 1).map_err(|e| match e {
            ModeError::Config(c) => OfflineError::Config(c),
            ModeError::Siit(s) | ModeError::Ila(s) => OfflineError::Mode(s),
        })?,
    };
    let mut worker = shared.worker(0);
    let mut reaper = shared.reaper();
    let (mut reader, link) = open_input(input)?;
    // DLT_IPV4/DLT_IPV6 name one family; the output mixes both, so it is raw IP.
    let out_link = match link {
        LinkType::Ipv4 | LinkType::Ipv6 => LinkType::Raw,
        l => l,
    };
    let mut writer = open_output(output, out_link, reader.is_nanosecond())?;
    let mut report = TranslateReport::default();
    let mut buf = vec![0u8; engine::HEADROOM + 65_536 + 64];
    let mut frame = Vec::with_capacity(2048);
    while let Some(rec) = reader.next_record().map_err(pcap_err(input))? {
        report.frames_in += 1;
        let now = Timestamp::from_nanos(rec.ts_nanos);
        if let Some(r) = reaper.as_mut() {
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
        }
        let Some(l3) = l3_offset(link, rec.data) else {
            report.not_ip += 1;
            continue;
        };
        let pkt = &rec.data[l3..];
        let len = pkt.len().min(65_536);
        buf[engine::HEADROOM..engine::HEADROOM + len].copy_from_slice(&pkt[..len]);
        let dir = if pkt.first().map(|b| b >> 4) == Some(6) {
            report.outbound += 1;
            Direction::Outbound
        } else {
            report.inbound += 1;
            Direction::Inbound
        };
        let (start, len) = match worker.process(now, dir, &mut buf, engine::HEADROOM, len) {
            engine::Emit::Forward { start, len } | engine::Emit::Hairpin { start, len } => {
                (start, len)
            }
            engine::Emit::Drop(_) => continue,
        };
        worker.quiescent();
        frame.clear();
        frame.extend_from_slice(&rec.data[..l3]);
        if l3 >= 2 && matches!(link, LinkType::Ethernet | LinkType::LinuxSll) {
            let ethertype: u16 = if buf[start] >> 4 == 6 { 0x86dd } else { 0x0800 };
            frame[l3 - 2..l3].copy_from_slice(&ethertype.to_be_bytes());
        }
        frame.extend_from_slice(&buf[start..start + len]);
        writer
            .write(rec.ts_nanos, &frame)
            .map_err(pcap_err(output))?;
        report.frames_out += 1;
    }
    writer.flush().map_err(pcap_err(output))?;
    report.sessions_live = shared.session_count();
    report.counters = worker.counters().clone();
    if let Some(r) = &reaper {
        report.counters.merge(r.counters());
    }
    Ok(report)
}

fn open_input(input: &Path) -> Result<(PcapReader<BufReader<File>>, LinkType), OfflineError> {
    let file = File::open(input).map_err(|source| OfflineError::OpenInput {
        path: input.into(),
        source,
    })?;
    let reader = PcapReader::new(BufReader::new(file)).map_err(pcap_err(input))?;
    let link = reader.link_type();
    if matches!(link, LinkType::Other(_)) {
        return Err(OfflineError::LinkType {
            path: input.into(),
            link,
        });
    }
    Ok((reader, link))
}

fn open_output(
    output: &Path,
    link: LinkType,
    nanos: bool,
) -> Result<PcapWriter<BufWriter<File>>, OfflineError> {
    let out = File::create(output).map_err(|source| OfflineError::CreateOutput {
        path: output.into(),
        source,
    })?;
    PcapWriter::new(BufWriter::new(out), link, nanos).map_err(pcap_err(output))
}

/// Replays `input` through a NAT44 engine built from `config` and writes the frames it
/// would transmit to `output` (same link type, same timestamps, input order).
pub fn translate_pcap(
    config: &Nat44Config,
    input: &Path,
    output: &Path,
) -> Result<TranslateReport, OfflineError> {
    let nat = Nat44::new(config.clone())?;
    let (mut reader, link) = open_input(input)?;
    let mut writer = open_output(output, link, reader.is_nanosecond())?;
    let mut step = Nat44Step::new(nat);
    let mut report = TranslateReport::default();
    let mut buf = Vec::with_capacity(2048);
    while let Some(rec) = reader.next_record().map_err(pcap_err(input))? {
        report.frames_in += 1;
        let now = Timestamp::from_nanos(rec.ts_nanos);
        buf.clear();
        buf.extend_from_slice(rec.data);
        let ts = rec.ts_nanos;
        match step.frame(now, link, &mut buf) {
            StepOutcome::NotIp => report.not_ip += 1,
            StepOutcome::Engine(dir, verdict) => {
                match dir {
                    Direction::Outbound => report.outbound += 1,
                    Direction::Inbound => report.inbound += 1,
                }
                if verdict == Verdict::Forward {
                    writer.write(ts, &buf).map_err(pcap_err(output))?;
                    report.frames_out += 1;
                }
            }
        }
    }
    writer.flush().map_err(pcap_err(output))?;
    report.sessions_live = step.nat.session_count();
    report.counters = step.nat.counters().clone();
    Ok(report)
}
