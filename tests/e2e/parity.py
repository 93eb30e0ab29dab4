"""Live gateway versus capture replay: does `quicknat translate`, fed the frames the live
gateway received, send what the live gateway sent (tests/e2e/test_translate_parity.py)?

Capture. A LinkCapture records one of the gateway's links from the peer's end of its
veth pair, with a Python AF_PACKET socket in the peer's namespace: what the peer sent is
what the gateway received, what the peer received is what the gateway sent. Not from the
gateway's own interfaces: with AF_XDP, a packet tap there sees neither the frames the XDP
program hands to quicknat nor those quicknat sends from its AF_XDP socket (tried: on g-in,
no trace of a datagram with TTL 1 nor of the Time Exceeded quicknat answered it with;
with AF_PACKET both were there). The socket is bound before the capture says "ready",
keeps kernel timestamps (SO_TIMESTAMPNS) and, once told to stop, drains what is queued: a
frame reaches the capture socket before the peer's own stack sees it, so everything that
led to an event a test waited for is in the capture. Kernel drops on the capture socket
are reported (they would make any comparison meaningless).

Comparison. Parity.compare() merges the received frames of every link in capture-time
order into one pcap, replays it with `quicknat translate` and a configuration equal to
the live one plus the [gateway] addresses and MTUs of the live links (read from the
gateway's namespace, chosen as the live gateway chooses them), and compares what both
sent from the IP header on, in two groups: the ICMP errors and fragments, and every other
packet (the forwarded ones; the gateway kernel's own neighbour discovery, MLD and IGMP
are left out, quicknat leaves those to it). Per flow (kind, destination, fragment
identification or protocol), the live sequence and translate's must be equal: every live
packet appears in translate's output in the same order, and translate adds none. On a
mismatch the report names the packets, the first differing byte, both hex dumps and
scapy's summary.

What the comparison assumes: the live gateway handled the received frames in the order
of their capture timestamps (true for traffic where each packet follows from the one
before, as in the tests; frames arriving on both links within the same receive pass may
be taken in another order, inside first), and its clock and the capture's agree closely
enough that the ICMP error rate limit (200 a second) decides alike (the tests send a few).
"""

import ipaddress
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile

from netns import mask_translated_ident, nsx, popen_ns

# Records every frame of one interface (both directions) until SIGTERM or a time limit;
# prints "ready" once bound, then, after draining the socket, one JSON line per frame
# {"ts": ns, "to_gw": bool, "frame": hex} ("to_gw": sent by this end, so received by the
# gateway at the other), and a last line {"drops": n} (the socket's kernel drop count).
CAPTURE = r"""
import json, select, signal, socket, struct, sys, time
dev, limit = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)   # protocol 0: nothing queued yet
s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)               # SO_RCVBUFFORCE: room for bursts
s.setsockopt(socket.SOL_SOCKET, 35, 1)                      # SO_TIMESTAMPNS
s.bind((dev, 3))                                            # ETH_P_ALL, this interface only
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
frames = []
def take():
    data, anc, _, addr = s.recvmsg(65536, 64)
    ts = time.time_ns()
    for level, kind, d in anc:
        if level == socket.SOL_SOCKET and kind == 35:       # SCM_TIMESTAMPNS
            sec, nsec = struct.unpack("qq", d[:16]); ts = sec * 10**9 + nsec
    frames.append((ts, addr[2] == 4, data))                 # PACKET_OUTGOING: this end sent it
print("ready", flush=True)
end = time.time() + limit
while not stop and time.time() < end:
    if select.select([s], [], [], 0.2)[0]:
        take()
s.setblocking(False)
while True:
    try:
        take()
    except BlockingIOError:
        break
_, drops = struct.unpack("II", s.getsockopt(263, 6, 8))     # SOL_PACKET, PACKET_STATISTICS
out = sys.stdout
for ts, sent, data in frames:
    out.write(json.dumps({"ts": ts, "to_gw": sent, "frame": data.hex()}) + "\n")
out.write(json.dumps({"drops": drops}) + "\n")
out.flush()
"""

# Sends one UDP datagram making an IP packet of `size` bytes with TTL / hop limit `hops`,
# never fragmented by the sender (IPv4: DF set), from `src` if given, and prints the ICMP
# error that comes back on the socket's error queue: "type=T code=C from=ADDR info=N"
# (info: the MTU of a Fragmentation Needed / Packet Too Big), or "none" after 3 s.
# argv: dst port size hops [src]
PROBE = r"""
import select, socket, struct, sys
dst, port, size, hops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
v6 = ":" in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 25, 1)                         # IPV6_RECVERR
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, hops)
    s.setsockopt(socket.IPPROTO_IPV6, 23, 2)                         # IPV6_MTU_DISCOVER = DO
else:
    s.setsockopt(socket.IPPROTO_IP, 11, 1)                           # IP_RECVERR
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, hops)
    s.setsockopt(socket.IPPROTO_IP, 10, 2)                           # IP_MTU_DISCOVER = DO: DF
if len(sys.argv) > 5:
    s.bind((sys.argv[5], 0))
s.connect((dst, port))
s.send(b"p" * (size - (48 if v6 else 28)))
p = select.poll(); p.register(s, select.POLLERR)
if not p.poll(3000):
    print("none"); sys.exit()
_, anc, _, _ = s.recvmsg(2048, 512, socket.MSG_ERRQUEUE)
for level, kind, data in anc:
    errno_, origin, typ, code, _, info = struct.unpack_from("=IBBBBI", data)
    off = data[16:]
    who = socket.inet_ntop(socket.AF_INET6, off[8:24]) if v6 else socket.inet_ntop(socket.AF_INET, off[4:8])
    print("type=%d code=%d from=%s info=%d" % (typ, code, who, info)); sys.exit()
print("none")
"""


# ------------------------------------------------------------------------------ capture


class LinkCapture:
    """Captures the gateway's link whose peer end is `dev` in namespace `ns` (full name):
    frames in both directions, with kernel timestamps, for at most `limit` seconds."""

    def __init__(self, ns, dev, limit=120):
        self.ns, self.dev = ns, dev
        self.frames, self.drops, self.error = None, None, None
        self.proc = popen_ns(ns, sys.executable, "-u", "-c", CAPTURE, dev, str(limit),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = self._await_ready(10.0)

    def _await_ready(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if r and self.proc.stdout.readline().strip() == "ready":
            return True
        self.error = f"capture on {self.dev} not ready in {timeout:.0f} s"
        return False

    def finish(self, timeout=20.0):
        """Stops the capture (it drains its socket first); returns its frames as
        (timestamp ns, sent to the gateway, frame bytes), or None (see .error)."""
        if self.frames is not None or self.proc is None:
            return self.frames
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            self.error = f"capture on {self.dev} did not stop in {timeout:.0f} s"
            return None
        frames = []
        for line in out.splitlines():
            d = json.loads(line)
            if "drops" in d:
                self.drops = d["drops"]
            else:
                frames.append((d["ts"], d["to_gw"], bytes.fromhex(d["frame"])))
        if self.drops is None:
            self.error = f"capture on {self.dev} ended without its report: {err.strip()[-300:]}"
            return None
        self.frames = frames
        return frames

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass


# --------------------------------------------------------------------------------- pcap


def write_pcap(path, frames):
    """Frames (timestamp ns, Ethernet bytes) into a nanosecond pcap."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for ts, data in frames:
            f.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(data), len(data)))
            f.write(data)


def read_pcap(path):
    """(timestamp ns, bytes) of every record of a classic pcap, and its link type."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    magic = struct.unpack(endian + "I", data[:4])[0]
    scale = 1 if magic == 0xA1B23C4D else 1000
    link = struct.unpack(endian + "I", data[20:24])[0]
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        out.append((sec * 10**9 + frac * scale, data[off + 16:off + 16 + incl]))
        off += 16 + incl
    return out, link


def ip_layer(frame, link=1):
    """The IP packet of an Ethernet (link 1) or raw IP (101) frame, or None."""
    if link == 101:
        return frame if frame[:1] and frame[0] >> 4 in (4, 6) else None
    if len(frame) >= 14 and frame[12:14] in (b"\x08\x00", b"\x86\xdd"):
        return frame[14:]
    return None


# ----------------------------------------------------------------------- what is compared


def ip_len(p):
    """The packet's IP length (link padding cut off)."""
    if p[0] >> 4 == 4 and len(p) >= 20:
        return min(len(p), struct.unpack("!H", p[2:4])[0])
    if p[0] >> 4 == 6 and len(p) >= 40:
        return min(len(p), 40 + struct.unpack("!H", p[4:6])[0])
    return len(p)


def kind_of(p):
    """What the gateway's packet `p` is, for the comparison: ("icmp error" or "fragment"
    or "forwarded", flow key), or None for the gateway kernel's own link traffic
    (neighbour discovery, MLD, IGMP), which quicknat leaves to it. ICMPv4 errors are types
    3, 4, 5, 11, 12, ICMPv6 errors types 1-4; a fragment is an IPv4 packet with MF or an
    offset, or an IPv6 packet with a Fragment header. A flow is the kind, the destination
    and the fragment identification or the protocol (not the source, so that a packet
    sent from the wrong address is shown against the right one)."""
    if p[0] >> 4 == 4 and len(p) >= 20:
        dst = p[16:20]
        ihl = (p[0] & 15) * 4
        if struct.unpack("!H", p[6:8])[0] & 0x3FFF:
            return "fragment", ("fragment", dst, p[4:6])
        if p[9] == 1 and len(p) > ihl and p[ihl] in (3, 4, 5, 11, 12):
            return "icmp error", ("icmp error", dst, b"")
        if p[9] == 2:
            return None
        return "forwarded", ("forwarded", dst, p[9:10])
    if p[0] >> 4 == 6 and len(p) >= 40:
        dst = p[24:40]
        nh, off = p[6], 40
        while nh in (0, 43, 44, 60) and off + 8 <= len(p):
            if nh == 44:
                return "fragment", ("fragment", dst, p[off + 4:off + 8])
            nh, off = p[off], off + (p[off + 1] + 1) * 8
        if nh == 58 and len(p) > off and p[off] < 128:
            return "icmp error", ("icmp error", dst, b"")
        if nh == 58 and len(p) > off and 130 <= p[off] <= 143:
            return None
        return "forwarded", ("forwarded", dst, bytes([nh]))
    return None


def by_flow(packets, kinds):
    """{flow key: [packet, ...] in order} of the packets of these kinds."""
    flows = {}
    for p in packets:
        k = kind_of(p)
        if k and k[0] in kinds:
            flows.setdefault(k[1], []).append(p)
    return flows


def summary(p):
    """scapy's one-line summary of an IP packet (the bare version and length without
    scapy)."""
    try:
        from scapy.layers.inet import IP
        from scapy.layers.inet6 import IPv6
        return (IP if p[0] >> 4 == 4 else IPv6)(p).summary()
    except Exception:  # noqa: BLE001 -- a summary is a courtesy
        return f"IPv{p[0] >> 4}, {len(p)} bytes"


def hexdump(p, mark=None):
    """16 bytes a row: the first three rows (the headers), the last one, and two rows
    either side of byte `mark` (shown in brackets); "..." for the rows left out."""
    rows = (len(p) + 15) // 16
    keep = {0, 1, 2, rows - 1}
    if mark is not None:
        keep |= set(range(mark // 16 - 2, mark // 16 + 3))
    lines, skipped = [], 0
    for r in range(rows):
        if r not in keep:
            skipped += 1
            continue
        if skipped:
            lines.append(f"    ...   ({skipped * 16} bytes)")
            skipped = 0
        i = r * 16
        row = " ".join(("[%02x]" if mark == j else "%02x") % p[j] for j in range(i, min(i + 16, len(p))))
        lines.append(f"    {i:04x}  {row}")
    return "\n".join(lines)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def describe_flow(key):
    kind, dst, extra = key
    fam = "IPv6" if len(dst) == 16 else "IPv4"
    what = {"fragment": f", identification 0x{bytes(extra).hex()}", "icmp error": "",
            "forwarded": f", protocol {extra[0] if extra else '?'}"}[kind]
    return f"{kind}s ({fam}) to {ipaddress.ip_address(bytes(dst))}{what}"


def compare_flows(live, replay):
    """Compares two {flow: [packets]} maps (the live gateway's, the replay's); returns
    the lines of a readable diff (empty when every flow has the same packets in the same
    order)."""
    lines = []
    for key in sorted(set(live) | set(replay), key=lambda k: (k[0], len(k[1]), k[1], k[2])):
        a, b = live.get(key, []), replay.get(key, [])
        if a == b:
            continue
        lines.append(f"{describe_flow(key)}: live sent {len(a)}, translate emitted {len(b)}")
        for i in range(max(len(a), len(b))):
            pa = a[i] if i < len(a) else None
            pb = b[i] if i < len(b) else None
            if pa == pb:
                lines.append(f"  #{i}: same ({len(pa)} bytes) {summary(pa)}")
                continue
            if pa is None:
                lines.append(f"  #{i}: only translate emitted: {summary(pb)}\n{hexdump(pb)}")
                continue
            if pb is None:
                lines.append(f"  #{i}: only the live gateway sent: {summary(pa)}\n{hexdump(pa)}")
                continue
            at = first_difference(pa, pb)
            lines.append(f"  #{i}: differ from byte {at} (0x{at:x}); live {len(pa)} bytes, translate {len(pb)}")
            lines.append(f"   live:      {summary(pa)}\n{hexdump(pa, at)}")
            lines.append(f"   translate: {summary(pb)}\n{hexdump(pb, at)}")
    return lines


# ---------------------------------------------------------------------------- link facts


def link_facts(ns, dev):
    """The MTU of interface `dev` in namespace `ns` and the addresses the live gateway
    sends its ICMP errors from there, chosen as it chooses them (netview.rs): the first
    IPv4 address, the first global IPv6 address, else the first link-local one."""
    link = json.loads(nsx(ns, "ip", "-j", "link", "show", "dev", dev).stdout)[0]
    addrs = json.loads(nsx(ns, "ip", "-j", "addr", "show", "dev", dev).stdout)[0].get("addr_info", [])
    v4 = [a["local"] for a in addrs if a["family"] == "inet"]
    v6 = [a["local"] for a in addrs if a["family"] == "inet6"]
    glob = [a for a in v6 if not a.lower().startswith("fe80:")]
    chosen = v4[:1] + (glob[:1] or v6[:1])
    return link["mtu"], chosen


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def gateway_table(**keys):
    """A [gateway] table with these keys (None values left out)."""
    return "[gateway]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items() if v is not None)


# ------------------------------------------------------------------------------ parity


class Parity:
    """The parity check of one live gateway: captures on the peer ends of its links, and
    the replay of what it received.

    `gateway` holds the live [gateway] keys (inside, outside, backend, ... and any
    inside_mtu / outside_mtu the live configuration sets), `mode_config` the mode's
    sections; `links` maps "inside" / "outside" to (gateway namespace, gateway device,
    peer namespace, peer device)."""

    def __init__(self, binary, gateway, mode_config, links, tmp):
        self.binary, self.gateway, self.mode_config = binary, dict(gateway), mode_config
        self.links, self.tmp = links, tmp
        self.captures = {}
        self.result = None

    def live_config(self):
        return gateway_table(**self.gateway) + self.mode_config

    def start(self):
        """Starts a capture on each link; returns whether all are ready."""
        for side, (_, _, pns, pdev) in self.links.items():
            self.captures[side] = LinkCapture(pns, pdev)
        return all(c.ready for c in self.captures.values())

    def replay_config(self):
        """The live configuration plus the addresses and MTUs of the live links (an MTU
        the live configuration sets lower than the link's stays)."""
        keys = dict(self.gateway)
        for side, (gns, gdev, _, _) in self.links.items():
            mtu, addrs = link_facts(gns, gdev)
            conf = keys.get(f"{side}_mtu")
            keys[f"{side}_mtu"] = min(mtu, conf) if conf else mtu
            keys[f"{side}_addresses"] = keys.get(f"{side}_addresses") or addrs
        return gateway_table(**keys) + self.mode_config

    def compare(self):
        """Stops the captures, replays, compares (once); returns a dict: "ok" and the
        diff "lines" for the ICMP errors and fragments, "forwarded_ok" and
        "forwarded_lines" for every other packet the gateway sent (its kernel's own link
        traffic aside), the "counts" compared, the flows ("live", "replay") and the
        replay's "report"."""
        if self.result is not None:
            return self.result
        received, sent = [], []
        for side, c in self.captures.items():
            frames = c.finish()
            if frames is None:
                return self._failed(c.error or "capture failed")
            if c.drops:
                return self._failed(f"capture on {c.dev} dropped {c.drops} frames: nothing to compare")
            for ts, to_gw, frame in frames:
                (received if to_gw else sent).append((ts, side, frame))
        received.sort(key=lambda r: r[0])
        inp = os.path.join(self.tmp, "received.pcap")
        outp = os.path.join(self.tmp, "translated.pcap")
        cfg = os.path.join(self.tmp, "replay.toml")
        write_pcap(inp, [(ts, f) for ts, _, f in received])
        config_text = self.replay_config()
        with open(cfg, "w") as f:
            f.write(config_text)
        r = subprocess.run([self.binary, "translate", "--config", cfg, inp, outp], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            return self._failed(f"quicknat translate failed: {r.stdout}{r.stderr}")
        out, link = read_pcap(outp)
        replay = [p[:ip_len(p)] for p in (ip_layer(f, link) for _, f in out) if p]
        live = [p[:ip_len(p)] for p in (ip_layer(f) for _, _, f in sorted(sent, key=lambda s: s[0])) if p]
        if "[nat44" not in self.mode_config:
            # A translator's IPv4 Identification differs between any two runs (RFC 6864).
            replay, live = ([mask_translated_ident(p) for p in ps] for ps in (replay, live))
        parity = ("icmp error", "fragment")
        lf, rf = by_flow(live, parity), by_flow(replay, parity)
        lines = compare_flows(lf, rf)
        fwd_lines = compare_flows(by_flow(live, ("forwarded",)), by_flow(replay, ("forwarded",)))
        count = lambda flows, kind: sum(len(v) for k, v in flows.items() if k[0] == kind)  # noqa: E731
        counts = {
            "frames_received": len(received),
            "live_errors": count(lf, "icmp error"), "live_fragments": count(lf, "fragment"),
            "replay_errors": count(rf, "icmp error"), "replay_fragments": count(rf, "fragment"),
            "forwarded": sum(1 for p in live if (kind_of(p) or ("",))[0] == "forwarded"),
        }
        context = ["", "replay configuration:", config_text, "translate's report:", r.stdout]
        self.result = {"ok": not lines, "lines": lines + context if lines else [],
                       "forwarded_ok": not fwd_lines, "forwarded_lines": fwd_lines + context if fwd_lines else [],
                       "counts": counts, "live": lf, "replay": rf, "report": r.stdout}
        return self.result

    def _failed(self, why):
        self.result = {"ok": False, "lines": [why], "forwarded_ok": False, "forwarded_lines": [why], "counts": {},
                       "live": {}, "replay": {}, "report": ""}
        return self.result

    def close(self):
        for c in self.captures.values():
            c.kill()


def new_tmp(prefix):
    return tempfile.mkdtemp(prefix=prefix)
