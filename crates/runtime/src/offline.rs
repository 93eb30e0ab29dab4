//! Offline translation: replay a capture through any mode, with the capture's timestamps
//! as the clock, and write what the gateway would transmit — the translated packets, the
//! ICMP errors it owes and the fragments it cuts — in input order with the input
//! timestamps. One loop serves every mode: the mode says which way each captured packet
//! travels ([`engine::Mode::classify`]) and decides what is sent ([`engine::Emit`]).

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

use conntrack::Timestamp;
use engine::config::ConfigError;
use engine::mode::any::{AnyMode, ModeConfig, ModeVisitor};
use engine::{Counters, Direction, Egress, Emit, Frame, Mode, ModeWorker, Output, HEADROOM};
use io::pcap::{LinkType, PcapError, PcapReader, PcapWriter};

use crate::link::l3_offset;
use crate::live::clamp_translator_mtus;

/// Why an offline translation could not run (packet problems are drops, not errors).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The configuration was refused by the engine.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
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
    /// Packets judged outbound (from the inside).
    pub outbound: u64,
    /// Packets judged inbound.
    pub inbound: u64,
    /// Sessions still live at the end of the capture.
    pub sessions_live: usize,
    /// The engine's counters (workers and reaper).
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
        writeln!(f, "icmp errors sent  {}", c.icmp_errors_sent)?;
        writeln!(f, "fragmented        {}", c.fragmented)?;
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
/// `output`, with `egress` standing for the gateway's links (their MTUs and its own
/// addresses, the source of its ICMP errors). As the live gateway does at start-up, the
/// translator MTUs of an IPv4 <-> IPv6 mode are lowered to the MTUs of `egress`'s links.
///
/// The link header of every frame written is the received frame's: a translated packet
/// keeps it (with the ethertype of the family it now carries), and an ICMP error the
/// gateway sends back to the sender gets it with source and destination MAC swapped.
/// DLT_IPV4/DLT_IPV6 captures are written as raw IP (the output may mix both families).
pub fn translate_pcap(
    mode: &ModeConfig,
    egress: &Egress,
    input: &Path,
    output: &Path,
) -> Result<TranslateReport, OfflineError> {
    let mut mode = mode.clone();
    clamp_translator_mtus(&mut mode, egress.links.map(|l| l.mtu));
    let mode = AnyMode::new(&mode, 1)?;
    mode.visit(Replay {
        egress,
        input,
        output,
    })
}

/// The replay, generic over the mode.
struct Replay<'a> {
    egress: &'a Egress,
    input: &'a Path,
    output: &'a Path,
}

impl ModeVisitor for Replay<'_> {
    type Output = Result<TranslateReport, OfflineError>;

    fn visit<M: Mode>(self, mode: &M) -> Self::Output {
        let Replay {
            egress,
            input,
            output,
        } = self;
        let mut worker = mode.worker(0);
        let mut reaper = mode.reaper();
        let (mut reader, link) = open_input(input)?;
        let out_link = match link {
            LinkType::Ipv4 | LinkType::Ipv6 => LinkType::Raw,
            l => l,
        };
        let mut writer = open_output(output, out_link, reader.is_nanosecond())?;
        let mut report = TranslateReport::default();
        let mut buf = vec![0u8; HEADROOM + 65_536 + 64];
        let mut out = Output::new();
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
            buf[HEADROOM..HEADROOM + len].copy_from_slice(&pkt[..len]);
            let dir = mode.classify(pkt);
            match dir {
                Direction::Outbound => report.outbound += 1,
                Direction::Inbound => report.inbound += 1,
            }
            let mut f = Frame::new(&mut buf, HEADROOM, len, &mut out);
            let e = worker.process(now, dir, &mut f, egress);
            worker.quiescent();
            let link_hdr = &rec.data[..l3];
            let mut write = |pkt: &[u8], back: bool| -> Result<(), OfflineError> {
                frame.clear();
                frame.extend_from_slice(link_hdr);
                relabel(link, &mut frame, l3, pkt, back);
                frame.extend_from_slice(pkt);
                report.frames_out += 1;
                writer.write(rec.ts_nanos, &frame).map_err(pcap_err(output))
            };
            match e {
                Emit::Forward { start, len } | Emit::Hairpin { start, len } => {
                    write(&buf[start..start + len], false)?;
                }
                Emit::Reply(_) => {
                    for p in out.packets() {
                        write(p, true)?;
                    }
                }
                Emit::Fragments => {
                    for p in out.packets() {
                        write(p, false)?;
                    }
                }
                Emit::Drop(_) => {}
            }
        }
        writer.flush().map_err(pcap_err(output))?;
        report.sessions_live = mode.session_count();
        report.counters = worker.counters().clone();
        if let Some(r) = &reaper {
            report.counters.merge(r.counters());
        }
        Ok(report)
    }
}

/// Fits the copied link header `hdr` (`l3` bytes) to the IP packet `pkt` it now carries:
/// the ethertype of its family, and for a packet going `back` to the sender the Ethernet
/// addresses swapped.
fn relabel(link: LinkType, hdr: &mut [u8], l3: usize, pkt: &[u8], back: bool) {
    if !matches!(link, LinkType::Ethernet | LinkType::LinuxSll) || l3 < 2 {
        return;
    }
    let ethertype: u16 = if pkt.first().map(|b| b >> 4) == Some(6) {
        0x86dd
    } else {
        0x0800
    };
    hdr[l3 - 2..l3].copy_from_slice(&ethertype.to_be_bytes());
    if back && link == LinkType::Ethernet && hdr.len() >= 12 {
        let (dst, src) = hdr[..12].split_at_mut(6);
        dst.swap_with_slice(src);
    }
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
