//! Offline translation: replay a capture through any mode, with the capture's timestamps
//! as the clock, and write what the gateway would transmit — the translated packets, the
//! ICMP errors it owes and the fragments it cuts — in input order with the input
//! timestamps. One loop serves every mode: the mode says which way each captured packet
//! travels ([`engine::Mode::classify`]) and decides what is sent ([`engine::Emit`]).

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use conntrack::Timestamp;
use engine::any::{AnyMode, ModeConfig, ModeVisitor};
use engine::config::ConfigError;
use engine::DropReason;
use engine::{Counters, Direction, Egress, Emit, Frame, Mode, ModeWorker, Output, HEADROOM};
use io::capture::{CaptureReader, CaptureWriter};
use io::pcap::{LinkType, PcapError};

use crate::link::l3_offset;
use crate::live::clamp_translator_mtus;
use crate::live::forward::{ip_dst, link_scoped};

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
    /// The output names the input file itself (the same path, a symlink or a hard link to
    /// it): writing it would destroy the capture being read.
    #[error("output {output} is the input {input} (the same file): refusing to overwrite the capture being read")]
    SameFile {
        /// The input path.
        input: PathBuf,
        /// The output path.
        output: PathBuf,
    },
    /// The finished output could not be moved into place.
    #[error("cannot replace output {path}: {source}")]
    Commit {
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
    /// Packets for the host itself — to a `[gateway]` address, broadcast, multicast, IPv6
    /// link-local (neighbour discovery, MLD) — which the live gateway hands to its kernel:
    /// not given to the engine and not written.
    pub for_host: u64,
    /// Packets judged outbound (from the inside).
    pub outbound: u64,
    /// Packets judged inbound.
    pub inbound: u64,
    /// What became of the packets from the inside (judged outbound).
    pub from_inside: DirectionTally,
    /// What became of the packets from the outside (judged inbound): the replies
    /// translated back, and the unsolicited dropped.
    pub from_outside: DirectionTally,
    /// Sessions still live at the end of the capture.
    pub sessions_live: usize,
    /// The engine's counters (workers and reaper).
    pub counters: Counters,
}

/// What became of the packets of one direction.
#[derive(Clone, Debug)]
pub struct DirectionTally {
    /// Packets translated and sent on (fragmented ones and hairpinned ones count once).
    pub translated: u64,
    /// ICMP errors sent back to the sender in place of a packet.
    pub replied: u64,
    /// Packets dropped, per [`DropReason`] (index: position in [`DropReason::ALL`]).
    pub dropped: [u64; DropReason::COUNT],
}

impl Default for DirectionTally {
    fn default() -> Self {
        Self {
            translated: 0,
            replied: 0,
            dropped: [0; DropReason::COUNT],
        }
    }
}

impl DirectionTally {
    /// Counts what the engine decided for one packet.
    fn count(&mut self, e: &Emit) {
        match e {
            Emit::Forward { .. } | Emit::Hairpin { .. } | Emit::Fragments => self.translated += 1,
            Emit::Reply(r) => {
                self.replied += 1;
                self.drop(*r);
            }
            Emit::Drop(r) => self.drop(*r),
        }
    }

    fn drop(&mut self, r: DropReason) {
        if let Some(i) = DropReason::ALL.iter().position(|x| *x == r) {
            self.dropped[i] += 1;
        }
    }

    /// Packets dropped, all reasons.
    pub fn total_dropped(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// `N dropped (reason n, ...)`, or `0 dropped`.
    fn dropped_summary(&self) -> String {
        let reasons: Vec<String> = DropReason::ALL
            .iter()
            .zip(self.dropped)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{} {n}", r.as_str()))
            .collect();
        if reasons.is_empty() {
            "0 dropped".into()
        } else {
            format!("{} dropped ({})", self.total_dropped(), reasons.join(", "))
        }
    }
}

impl fmt::Display for TranslateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counters;
        let (i, o) = (&self.from_inside, &self.from_outside);
        writeln!(
            f,
            "inside→outside    {} translated, {}{}",
            i.translated,
            i.dropped_summary(),
            replies(i.replied)
        )?;
        writeln!(
            f,
            "outside→inside    {} translated back, {}{}",
            o.translated,
            o.dropped_summary(),
            replies(o.replied)
        )?;
        writeln!(f, "frames read       {}", self.frames_in)?;
        writeln!(f, "frames written    {}", self.frames_out)?;
        writeln!(f, "  outbound        {}", self.outbound)?;
        writeln!(f, "  inbound         {}", self.inbound)?;
        writeln!(f, "  not IP (skipped) {}", self.not_ip)?;
        writeln!(f, "  for the host (skipped) {}", self.for_host)?;
        writeln!(f, "forwarded         {}", c.forwarded)?;
        writeln!(f, "dropped           {}", c.total_dropped())?;
        for (reason, n) in c.drop_summary() {
            writeln!(f, "  {reason:<22} {n}")?;
        }
        writeln!(f, "icmp errors sent  {}", c.icmp_errors_sent)?;
        writeln!(
            f,
            "icmp errors limited {} (sender budget {})",
            c.icmp_errors_limited + c.icmp_errors_limited_source,
            c.icmp_errors_limited_source
        )?;
        writeln!(f, "fragmented        {}", c.fragmented)?;
        writeln!(f, "sessions created  {}", c.sessions_created)?;
        writeln!(f, "sessions expired  {}", c.sessions_expired)?;
        writeln!(f, "sessions early-dropped {}", c.sessions_early_dropped)?;
        writeln!(f, "sessions live     {}", self.sessions_live)?;
        writeln!(f, "icmp errors xlat  {}", c.icmp_errors_translated)?;
        writeln!(f, "fragments xlat    {}", c.fragments_translated)?;
        write!(f, "hairpinned        {}", c.hairpinned)
    }
}

/// `, N ICMP errors sent back`, or nothing.
fn replies(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {n} answered with an ICMP error")
    }
}

/// Whether a packet to `dst` is the gateway host's own traffic, as the live gateway
/// decides it (`Forwarding::for_kernel`): link-scoped, or to one of the `[gateway]`
/// interface addresses.
fn for_the_host(dst: IpAddr, egress: &Egress) -> bool {
    link_scoped(dst)
        || egress.links.iter().any(|l| match dst {
            IpAddr::V4(a) => l.addr4 == Some(a),
            IpAddr::V6(a) => l.addr6 == Some(a),
        })
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
    translate_pcap_traced(mode, egress, input, output, None)
}

/// A trace of a replay (`quicknat translate --trace`): the packets `filter` takes, each
/// record handed to `sink` in the capture's order (see [`crate::trace`]).
pub struct OfflineTrace<'a> {
    /// Which packets.
    pub filter: crate::trace::TraceFilter,
    /// Where each record goes.
    pub sink: &'a mut dyn FnMut(serde_json::Value),
}

/// [`translate_pcap`], tracing the packets `trace` takes.
pub fn translate_pcap_traced(
    mode: &ModeConfig,
    egress: &Egress,
    input: &Path,
    output: &Path,
    trace: Option<OfflineTrace<'_>>,
) -> Result<TranslateReport, OfflineError> {
    let mut mode = mode.clone();
    clamp_translator_mtus(&mut mode, egress.links.map(|l| l.mtu));
    let stateful = matches!(mode, ModeConfig::Nat44(_) | ModeConfig::Nat64(_));
    let mode = AnyMode::new(&mode, 1)?;
    mode.visit(Replay {
        egress,
        input,
        output,
        trace,
        stateful,
    })
}

/// The replay, generic over the mode.
struct Replay<'a, 't> {
    egress: &'a Egress,
    input: &'a Path,
    output: &'a Path,
    trace: Option<OfflineTrace<'t>>,
    stateful: bool,
}

impl ModeVisitor for Replay<'_, '_> {
    type Output = Result<TranslateReport, OfflineError>;

    fn visit<M: Mode>(self, mode: &M) -> Self::Output {
        let Replay {
            egress,
            input,
            output,
            mut trace,
            stateful,
        } = self;
        let mut worker = mode.worker(0);
        let mut reaper = mode.reaper();
        let (mut reader, input_id) = open_input(input)?;
        if same_file(input_id, output) {
            return Err(OfflineError::SameFile {
                input: input.into(),
                output: output.into(),
            });
        }
        // Written to a temporary file beside the output, renamed over it on success only:
        // a failed replay leaves an existing output as it was.
        let (mut pending, file) = PendingOutput::create(output)?;
        // The output's format is the input's: pcapng keeps one interface per link type.
        let mut writer = CaptureWriter::new(
            BufWriter::new(file),
            reader.format(),
            out_link(reader.link_type().unwrap_or(LinkType::Raw)),
            reader.is_nanosecond(),
        )
        .map_err(pcap_err(output))?;
        let mut report = TranslateReport::default();
        let mut buf = vec![0u8; HEADROOM + 65_536 + 64];
        let mut out = Output::new();
        let mut frame = Vec::with_capacity(2048);
        // The link header of the last packet from the outside: what the packets the mode
        // sends with no packet arriving (answers to held SYNs, which go back out of the
        // outside) are written behind, Ethernet addresses swapped.
        let mut outside_hdr: Vec<u8> = Vec::with_capacity(64);
        let mut outside_link = reader.link_type().unwrap_or(LinkType::Raw);
        while let Some(rec) = reader.next_record().map_err(pcap_err(input))? {
            report.frames_in += 1;
            let now = Timestamp::from_nanos(rec.ts_nanos);
            if let Some(r) = reaper.as_mut() {
                if r.poll_timeout().is_some_and(|t| t <= now) {
                    r.handle_timeout(now);
                }
                // What was evicted at a full table, reclaimed as a live reaper would.
                r.drain(now);
            }
            report.frames_out += write_polled(
                &mut worker,
                Some(now),
                egress,
                (outside_link, &outside_hdr, true),
                &mut out,
                (&mut writer, output),
            )?;
            // pcap: the file's link type; pcapng: the interface's (an unsupported one
            // carries no IP the NAT could find).
            let link = rec.link_type;
            let Some(l3) = l3_offset(link, rec.data).filter(|_| supported(link)) else {
                report.not_ip += 1;
                continue;
            };
            let pkt = &rec.data[l3..];
            if ip_dst(pkt).is_some_and(|d| for_the_host(d, egress)) {
                report.for_host += 1;
                continue;
            }
            let len = pkt.len().min(65_536);
            buf[HEADROOM..HEADROOM + len].copy_from_slice(&pkt[..len]);
            let dir = mode.classify(pkt);
            match dir {
                Direction::Outbound => report.outbound += 1,
                Direction::Inbound => {
                    report.inbound += 1;
                    outside_hdr.clear();
                    outside_hdr.extend_from_slice(&rec.data[..l3]);
                    outside_link = link;
                }
            }
            let traced = trace.as_ref().and_then(|_| {
                let io = crate::live::IoCounters::default();
                let before = crate::trace::Packet::parse(&pkt[..len])?;
                Some((before, crate::trace::Snapshot::of(worker.counters(), &io)))
            });
            let mut f = Frame::new(&mut buf, HEADROOM, len, &mut out);
            f.link_group = crate::link::link_group(link, rec.data);
            let e = worker.process(now, dir, &mut f, egress);
            worker.quiescent();
            if let (Some(t), Some((before, a))) = (trace.as_mut(), traced) {
                trace_one(
                    t,
                    &before,
                    &a,
                    (dir, &e),
                    &buf,
                    &out,
                    worker.counters(),
                    stateful,
                );
            }
            match dir {
                Direction::Outbound => report.from_inside.count(&e),
                Direction::Inbound => report.from_outside.count(&e),
            }
            let link_hdr = &rec.data[..l3];
            let mut write = |pkt: &[u8], back: bool| -> Result<(), OfflineError> {
                frame.clear();
                frame.extend_from_slice(link_hdr);
                relabel(link, &mut frame, l3, pkt, back);
                frame.extend_from_slice(pkt);
                report.frames_out += 1;
                writer
                    .write(out_link(link), rec.ts_nanos, &frame)
                    .map_err(pcap_err(output))
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
            // What the packet set free at once (the held later fragments its first
            // fragment released) goes the packet's way, behind its link header.
            report.frames_out += write_polled(
                &mut worker,
                Some(now),
                egress,
                (link, &rec.data[..l3], false),
                &mut out,
                (&mut writer, output),
            )?;
        }
        // What the gateway still sends after the last packet (held SYNs' answers).
        report.frames_out += write_polled(
            &mut worker,
            None,
            egress,
            (outside_link, &outside_hdr, true),
            &mut out,
            (&mut writer, output),
        )?;
        let file = writer
            .into_inner()
            .map_err(pcap_err(output))?
            .into_inner()
            .map_err(|e| OfflineError::Commit {
                path: output.into(),
                source: e.into_error(),
            })?;
        pending.commit(file)?;
        report.sessions_live = mode.session_count();
        report.counters = worker.counters().clone();
        if let Some(r) = &reaper {
            report.counters.merge(r.counters());
        }
        Ok(report)
    }
}

/// Offers the record of one replayed packet to `t`: `before` and the counters `a` from
/// before the mode had it, `e` what the mode decided (the packet in `buf`, or its output in
/// `out`), `c` the counters after.
#[allow(clippy::too_many_arguments)]
fn trace_one(
    t: &mut OfflineTrace<'_>,
    before: &crate::trace::Packet,
    a: &crate::trace::Snapshot,
    (dir, e): (Direction, &Emit),
    buf: &[u8],
    out: &Output,
    c: &engine::Counters,
    stateful: bool,
) {
    use crate::trace::{Packet, Seen, Snapshot};
    let side = usize::from(dir == Direction::Inbound);
    let (after, sent) = match *e {
        Emit::Forward { start, len } => (
            buf.get(start..start + len).and_then(Packet::parse),
            vec![1 - side],
        ),
        Emit::Hairpin { start, len } => (
            buf.get(start..start + len).and_then(Packet::parse),
            vec![side],
        ),
        Emit::Reply(_) => (out.packets().next().and_then(Packet::parse), vec![side]),
        Emit::Fragments => (out.packets().next().and_then(Packet::parse), vec![1 - side]),
        Emit::Drop(_) => (None, vec![]),
    };
    let b = Snapshot::of(c, &crate::live::IoCounters::default());
    let seen = Seen {
        worker: None,
        side,
        links: ["", ""],
        sent: &sent,
        stateful,
    };
    if t.filter
        .matches(side, before, after.as_ref(), b.dropped_since(a))
    {
        (t.sink)(crate::trace::record(&seen, before, after.as_ref(), a, &b).json);
    }
}

/// Writes what `worker` sends with no packet arriving ([`ModeWorker::poll`]) at each time
/// it is due up to `until` (`None`: all), stamped with that time, behind the link header
/// `hdr`: a packet from the outside's with `back` (answers go back out of it), or the
/// packet's just translated without (the fragments it released go its way). Returns the
/// frames written.
fn write_polled<W: ModeWorker, O: std::io::Write>(
    worker: &mut W,
    until: Option<Timestamp>,
    egress: &Egress,
    (link, hdr, back): (LinkType, &[u8], bool),
    out: &mut Output,
    (writer, path): (&mut CaptureWriter<O>, &Path),
) -> Result<u64, OfflineError> {
    let mut written = 0;
    while let Some(t) = worker
        .poll_timeout()
        .filter(|t| until.is_none_or(|u| *t <= u))
    {
        if worker.poll(t, egress, out) == 0 && worker.poll_timeout() == Some(t) {
            break; // defensive: a due time that sends nothing and does not pass
        }
        for p in out.packets() {
            let mut f = hdr.to_vec();
            relabel(link, &mut f, hdr.len(), p, back);
            f.extend_from_slice(p);
            writer
                .write(out_link(link), t.as_nanos(), &f)
                .map_err(pcap_err(path))?;
            written += 1;
        }
    }
    Ok(written)
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

/// The link type a frame of `link` is written with: DLT_IPV4/DLT_IPV6 become raw IP
/// (a translated packet may change family).
fn out_link(link: LinkType) -> LinkType {
    match link {
        LinkType::Ipv4 | LinkType::Ipv6 => LinkType::Raw,
        l => l,
    }
}

/// Whether frames of `link` carry IP the replay can find.
fn supported(link: LinkType) -> bool {
    !matches!(link, LinkType::Other(_))
}

/// The identity of a file: device and inode, which every name of it shares (symlinks
/// followed, hard links alike).
type FileId = (u64, u64);

fn open_input(input: &Path) -> Result<(CaptureReader<BufReader<File>>, FileId), OfflineError> {
    use std::os::unix::fs::MetadataExt;
    let open_err = |source| OfflineError::OpenInput {
        path: input.into(),
        source,
    };
    let file = File::open(input).map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    let id = (meta.dev(), meta.ino());
    let reader = CaptureReader::new(BufReader::new(file)).map_err(pcap_err(input))?;
    // A pcap file has one link type: refused whole if unsupported. A pcapng file's
    // interfaces each have theirs: frames of an unsupported one are skipped (not IP).
    if let Some(link) = reader.link_type().filter(|l| !supported(*l)) {
        return Err(OfflineError::LinkType {
            path: input.into(),
            link,
        });
    }
    Ok((reader, id))
}

/// Whether `output` already names the file `input` (through any symlink or hard link).
fn same_file(input: FileId, output: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(output).is_ok_and(|m| (m.dev(), m.ino()) == input)
}

/// An output being written: a temporary file in the target's directory, removed unless
/// [`commit`](Self::commit) renames it over the target.
struct PendingOutput {
    /// The temporary file's path.
    tmp: PathBuf,
    /// The path renamed over: the output, or the file it links to when it is a symlink
    /// (the link is kept, as writing through it would).
    target: PathBuf,
    /// Set once renamed.
    committed: bool,
}

impl PendingOutput {
    /// Creates the temporary file next to `output`'s target, and opens it for writing.
    fn create(output: &Path) -> Result<(Self, File), OfflineError> {
        let create_err = |source| OfflineError::CreateOutput {
            path: output.into(),
            source,
        };
        let target = std::fs::canonicalize(output).unwrap_or_else(|_| output.to_path_buf());
        let name = target
            .file_name()
            .ok_or_else(|| create_err(std::io::ErrorKind::InvalidInput.into()))?;
        let dir = target.parent().unwrap_or(Path::new(""));
        let mut n = 0u32;
        loop {
            let mut tmp_name = std::ffi::OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
            let tmp = dir.join(tmp_name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
            {
                Ok(file) => {
                    // An existing output keeps its permissions.
                    if let Ok(m) = std::fs::metadata(&target) {
                        let _ = file.set_permissions(m.permissions());
                    }
                    let pending = Self {
                        tmp,
                        target,
                        committed: false,
                    };
                    return Ok((pending, file));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => return Err(create_err(e)),
            }
        }
    }

    /// Flushes `file` (the temporary file, written) to disk and renames it over the target.
    fn commit(&mut self, file: File) -> Result<(), OfflineError> {
        let commit_err = |source| OfflineError::Commit {
            path: self.target.clone(),
            source,
        };
        file.sync_all().map_err(commit_err)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.target).map_err(commit_err)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::nat44::{DynamicRule, Nat44Config};
    use io::pcap::{PcapReader, PcapWriter};

    /// A TCP segment over IPv4 (checksums filled).
    fn tcp4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[..12].copy_from_slice(&[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0]);
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[32] = 0x50;
        p[33] = flags;
        p[34] = 0xff;
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let ph = wire::checksum::pseudo_header_v4(src, dst, 6, 20);
        let c = !wire::checksum::fold(wire::checksum::combine(ph, wire::checksum::sum(&p[20..])));
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// The host's own traffic in a capture — an IPv6 neighbour solicitation (to a
    /// solicited-node multicast address), an MLD report, a ping of the gateway's
    /// configured address — is skipped as the live gateway leaves it to its kernel, not
    /// counted as the translator's drops nor answered.
    #[test]
    fn host_traffic_is_skipped_not_dropped() {
        let dir = std::env::temp_dir().join(format!("qn-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
        let v6 = |dst: std::net::Ipv6Addr, next: u8| {
            let mut p = vec![0u8; 64];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&24u16.to_be_bytes());
            p[6] = next;
            p[7] = 255;
            let src: std::net::Ipv6Addr = "fe80::2".parse().unwrap();
            p[8..24].copy_from_slice(&src.octets());
            p[24..40].copy_from_slice(&dst.octets());
            p[40] = 135; // neighbour solicitation
            p
        };
        let gw4 = std::net::Ipv4Addr::new(192, 0, 2, 1);
        {
            let f = BufWriter::new(File::create(&input).unwrap());
            let mut w = PcapWriter::new(f, LinkType::Raw, true).unwrap();
            w.write(1, &v6("ff02::1:ff00:1".parse().unwrap(), 58))
                .unwrap();
            w.write(2, &v6("ff02::16".parse().unwrap(), 0)).unwrap();
            w.write(3, &tcp4([192, 0, 2, 9], 1000, gw4.octets(), 22, 0x02))
                .unwrap();
            w.write(4, &tcp4([192, 0, 2, 9], 1000, [198, 51, 100, 9], 80, 0x02))
                .unwrap();
            w.flush().unwrap();
        }
        let cfg = ModeConfig::Siit(engine::siit::SiitConfig {
            pref64: Some("2001:db8:64::/96".parse().unwrap()),
            ..engine::siit::SiitConfig::default()
        });
        let mut egress = Egress::default();
        egress.links[0].addr4 = Some(gw4);
        let report = translate_pcap(&cfg, &egress, &input, &output).unwrap();
        assert_eq!(report.for_host, 3);
        assert_eq!(report.counters.total_dropped(), 0);
        assert_eq!((report.counters.forwarded, report.frames_out), (1, 1));
        assert!(report.to_string().contains("for the host (skipped) 3"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// RFC 5382 REQ-4 in a replay: an unsolicited SYN's Port Unreachable is written at
    /// the time the live gateway sends it, 6 s after the SYN — between the packets of
    /// the capture when one comes later, and after the last one otherwise.
    #[test]
    fn held_syns_are_answered_at_their_time_between_and_after_the_packets() {
        let dir = std::env::temp_dir().join(format!("qn-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
        let (srv, public, inside) = ([198, 51, 100, 2], [203, 0, 113, 1], [10, 0, 0, 2]);
        let s = 1_000_000_000u64;
        {
            let f = BufWriter::new(File::create(&input).unwrap());
            let mut w = PcapWriter::new(f, LinkType::Ipv4, true).unwrap();
            w.write(s, &tcp4(srv, 1000, public, 5000, 0x02)).unwrap(); // held
            w.write(2 * s, &tcp4(srv, 1001, public, 5001, 0x02))
                .unwrap(); // held
            w.write(10 * s, &tcp4(inside, 6000, srv, 80, 0x02)).unwrap(); // forwarded
            w.write(11 * s, &tcp4(srv, 1002, public, 5002, 0x02))
                .unwrap(); // held past the end
            w.flush().unwrap();
        }
        let cfg = ModeConfig::Nat44(Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/24".parse().unwrap(),
                pool: vec!["203.0.113.1/32".parse().unwrap()],
                ports: engine::config::PortRange::new(1024, 65535).unwrap(),
            }],
            ..Nat44Config::default()
        });
        let report = translate_pcap(&cfg, &Egress::default(), &input, &output).unwrap();
        assert_eq!(report.counters.dropped(engine::DropReason::SynHeld), 3);
        assert_eq!(report.counters.icmp_errors_sent, 3);
        assert_eq!(report.frames_out, 4);
        let mut r = PcapReader::new(BufReader::new(File::open(&output).unwrap())).unwrap();
        let mut got = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            got.push((rec.ts_nanos, rec.data[9], rec.data[20..22].to_vec()));
        }
        assert_eq!(
            got,
            vec![
                (7 * s, 1, vec![3, 3]), // the first SYN's Port Unreachable, at 1 s + 6 s
                (8 * s, 1, vec![3, 3]), // the second's
                (10 * s, 6, vec![0x17, 0x70]), // the outbound SYN, port 6000 kept
                (17 * s, 1, vec![3, 3]), // after the last packet, at its time
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A one-rule NAT44 configuration and a capture of `n` outbound SYNs at `path`.
    fn nat44_and_capture(path: &Path, n: u16) -> ModeConfig {
        let f = BufWriter::new(File::create(path).unwrap());
        let mut w = PcapWriter::new(f, LinkType::Ipv4, true).unwrap();
        for i in 0..n {
            w.write(
                u64::from(i) + 1,
                &tcp4([10, 0, 0, 2], 6000 + i, [198, 51, 100, 2], 80, 0x02),
            )
            .unwrap();
        }
        w.flush().unwrap();
        ModeConfig::Nat44(Nat44Config {
            rules: vec![DynamicRule {
                inside: "10.0.0.0/24".parse().unwrap(),
                pool: vec!["203.0.113.1/32".parse().unwrap()],
                ports: engine::config::PortRange::new(1024, 65535).unwrap(),
            }],
            ..Nat44Config::default()
        })
    }

    /// Files in `dir` (to see that no temporary file is left behind).
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// `translate X X` must not truncate X before reading it (and then blame the input).
    /// The same file, named by the same path, another path, a symlink or a hard link, is
    /// refused before anything is written, and the capture is left intact.
    #[test]
    fn output_that_is_the_input_is_refused_and_the_input_kept() {
        let dir = std::env::temp_dir().join(format!("qn-same-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.pcap");
        let cfg = nat44_and_capture(&input, 50);
        let before = std::fs::read(&input).unwrap();
        std::os::unix::fs::symlink(&input, dir.join("link.pcap")).unwrap();
        std::fs::hard_link(&input, dir.join("hard.pcap")).unwrap();
        for out in [
            input.clone(),
            dir.join(".").join("in.pcap"),
            dir.join("link.pcap"),
            dir.join("hard.pcap"),
        ] {
            let e = translate_pcap(&cfg, &Egress::default(), &input, &out).unwrap_err();
            assert!(matches!(e, OfflineError::SameFile { .. }), "{out:?}: {e}");
            assert!(e.to_string().contains("the same file"), "{e}");
            assert_eq!(std::fs::read(&input).unwrap(), before, "{out:?}");
        }
        // And the other way round: the input named through the link.
        let e =
            translate_pcap(&cfg, &Egress::default(), &dir.join("link.pcap"), &input).unwrap_err();
        assert!(matches!(e, OfflineError::SameFile { .. }), "{e}");
        assert_eq!(std::fs::read(&input).unwrap(), before);
        assert_eq!(names(&dir), ["hard.pcap", "in.pcap", "link.pcap"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A replay that fails half way (a truncated record) leaves an existing output as it
    /// was and no temporary file; one that succeeds replaces it, through a symlink the
    /// link is kept and the file it names is written.
    #[test]
    fn output_is_replaced_on_success_only() {
        let dir = std::env::temp_dir().join(format!("qn-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (good, bad, out) = (
            dir.join("good.pcap"),
            dir.join("bad.pcap"),
            dir.join("out.pcap"),
        );
        let cfg = nat44_and_capture(&good, 20);
        let mut broken = std::fs::read(&good).unwrap();
        broken.truncate(broken.len() - 10);
        std::fs::write(&bad, &broken).unwrap();
        std::fs::write(&out, b"precious").unwrap();
        let e = translate_pcap(&cfg, &Egress::default(), &bad, &out).unwrap_err();
        assert!(
            matches!(e, OfflineError::Pcap { ref path, .. } if *path == bad),
            "{e}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"precious");
        assert_eq!(names(&dir), ["bad.pcap", "good.pcap", "out.pcap"]);

        let report = translate_pcap(&cfg, &Egress::default(), &good, &out).unwrap();
        assert_eq!(report.frames_out, 20);
        let mut r = PcapReader::new(BufReader::new(File::open(&out).unwrap())).unwrap();
        let mut n = 0;
        while r.next_record().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 20);

        std::os::unix::fs::symlink(&out, dir.join("link.pcap")).unwrap();
        std::fs::write(&out, b"precious").unwrap();
        translate_pcap(&cfg, &Egress::default(), &good, &dir.join("link.pcap")).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("link.pcap"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_ne!(std::fs::read(&out).unwrap(), b"precious");
        assert_eq!(
            names(&dir),
            ["bad.pcap", "good.pcap", "link.pcap", "out.pcap"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A pcapng capture whose interfaces differ in link type — raw IPv4, Ethernet, and
    /// one (USB) that carries no IP — is replayed frame by frame with each frame's own
    /// link type, the USB frame skipped as not IP, and written as pcapng with one
    /// interface per link type.
    #[test]
    fn pcapng_interfaces_of_different_link_types() {
        use io::capture::{CaptureReader, Format};
        use io::pcapng::PcapngWriter;
        let dir = std::env::temp_dir().join(format!("quicknat-ng-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in.pcapng"), dir.join("out.pcapng"));
        let mut w = PcapngWriter::new(File::create(&input).unwrap()).unwrap();
        let syn = tcp4([10, 0, 0, 2], 6000, [198, 51, 100, 2], 80, 0x02);
        let mut eth = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        eth.extend_from_slice(&tcp4([10, 0, 0, 3], 6001, [198, 51, 100, 2], 80, 0x02));
        w.write(LinkType::Ipv4, 1_000, &syn).unwrap();
        w.write(LinkType::Other(189), 2_000, &[0; 48]).unwrap();
        w.write(LinkType::Ethernet, 3_000, &eth).unwrap();
        w.into_inner().unwrap();
        let cfg = nat44_and_capture(&dir.join("unused.pcap"), 0);
        let report = translate_pcap(&cfg, &Egress::default(), &input, &output).unwrap();
        assert_eq!((report.frames_in, report.not_ip), (3, 1));
        assert_eq!(report.from_inside.translated, 2);
        let mut r = CaptureReader::new(File::open(&output).unwrap()).unwrap();
        assert_eq!(r.format(), Format::Pcapng);
        let a = r.next_record().unwrap().unwrap();
        assert_eq!((a.link_type, a.ts_nanos), (LinkType::Raw, 1_000));
        assert_eq!(&a.data[12..16], &[203, 0, 113, 1]);
        let b = r.next_record().unwrap().unwrap();
        assert_eq!((b.link_type, b.ts_nanos), (LinkType::Ethernet, 3_000));
        assert_eq!(&b.data[..14], &eth[..14]);
        assert_eq!(&b.data[14 + 12..14 + 16], &[203, 0, 113, 1]);
        assert!(r.next_record().unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The summary says how many half-open sessions were evicted for new ones.
    #[test]
    fn summary_names_the_early_dropped_sessions() {
        let r = TranslateReport {
            counters: Counters {
                sessions_early_dropped: 31,
                ..Counters::default()
            },
            ..TranslateReport::default()
        };
        let text = r.to_string();
        assert!(
            text.lines().any(|l| l == "sessions early-dropped 31"),
            "{text}"
        );
    }
}
