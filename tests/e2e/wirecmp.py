"""Captures compared frame by frame: the helpers the XDP fast-path suites share to show
that the bytes on the wire are the same with the fast path and without it (pcap files read
as they grow, IP headers decoded, and a report of where two frames differ)."""

import json
import re
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from netns import mask_translated_ident, wait_for


def read_pcap(path):
    """The frames of a (possibly still growing) pcap file; a partial last record is left out."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    if len(data) < 24:
        return []
    end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, frames = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        if off + 16 + incl > len(data):
            break
        frames.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return frames


def describe(frame):
    """The IP header fields of a frame, for a difference report."""
    et, ip = frame[12:14], frame[14:]
    if et == b"\x08\x00" and len(ip) >= 20:
        ff = int.from_bytes(ip[6:8], "big")
        return (f"IPv4 tos=0x{ip[1]:02x} len={int.from_bytes(ip[2:4], 'big')} id=0x{ip[4:6].hex()} "
                f"df={ff >> 14 & 1} mf={ff >> 13 & 1} off={ff & 0x1FFF} ttl={ip[8]} proto={ip[9]} "
                f"hcsum=0x{ip[10:12].hex()} l4csum=0x{ip[(ip[0] & 15) * 4 + (16 if ip[9] == 6 else 6):][:2].hex()}")
    if et == b"\x86\xdd" and len(ip) >= 40:
        vtf = int.from_bytes(ip[0:4], "big")
        return (f"IPv6 tc=0x{vtf >> 20 & 0xFF:02x} flow=0x{vtf & 0xFFFFF:05x} plen={int.from_bytes(ip[4:6], 'big')} "
                f"next={ip[6]} hlim={ip[7]} l4csum=0x{ip[40 + (16 if ip[6] == 6 else 6):][:2].hex()}")
    return f"ethertype 0x{et.hex()}"


def hexdump(b, rows=None):
    """A hex dump of `b`, only the 16-byte rows in `rows` (all when None)."""
    return "\n".join(f"    {i:04x}  {b[i:i + 16].hex(' ')}" for i in range(0, len(b), 16)
                     if rows is None or i // 16 in rows)


def ranges(offsets):
    """[1, 10, 11] -> "1, 10-11"."""
    out = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def diff_report(key, a, b):
    """How frame `a` (off) and `b` (on) differ from the IP header on: the differing
    offsets, both headers decoded, and both dumps (the first 64 bytes and every 16-byte
    row with a difference)."""
    x, y = a[14:], b[14:]
    diff = [i for i in range(max(len(x), len(y))) if i >= len(x) or i >= len(y) or x[i] != y[i]]
    rows = set(range(4)) | {i // 16 for i in diff[:64]}
    return (f"{key}: {len(x)} bytes off, {len(y)} on; IP bytes differing at {ranges(diff)}\n"
            f"  off: {describe(a)}\n  on:  {describe(b)}\n"
            f"  off IP bytes:\n{hexdump(x, rows)}\n  on IP bytes:\n{hexdump(y, rows)}")


def frame_key(frame, prefix):
    """What matches a frame across the runs: a fragment's identification and offset, else
    the tag of the crafted packet it carries (`prefix` and five characters, "Q64-o-07."); None
    for other traffic."""
    et, ip = frame[12:14], frame[14:]
    if et == b"\x08\x00" and len(ip) >= 20:
        ff = int.from_bytes(ip[6:8], "big")
        if ff & 0x3FFF:
            return ("frag4", ip[4:6].hex(), ff & 0x1FFF)
    elif et == b"\x86\xdd" and len(ip) >= 48 and ip[6] == 44:
        return ("frag6", ip[44:48].hex(), int.from_bytes(ip[42:44], "big") >> 3)
    i = frame.find(prefix.encode())
    return ("tag", frame[i:i + len(prefix) + 5].decode(errors="replace")) if i >= 0 else None


def crafted(frames, prefix):
    """{key: [frames]} of the frames among `frames` crafted with tags starting `prefix`."""
    out = {}
    for f in frames:
        k = frame_key(f, prefix)
        if k is not None:
            out.setdefault(k, []).append(f)
    return out


def rx(qn):
    """(rx in, rx out, to_kernel, not_for_us) of quicknat `qn`'s last stats line: frames its
    AF_XDP sockets received, of them those it handed to the kernel (neighbour discovery,
    router solicitations, MLD reports: the hosts' own, not translation traffic), and frames
    for another host's MAC its ports dropped (never counted as received)."""
    last = ([l for l in qn.text().splitlines() if "stats: rx in=" in l] or [""])[-1]
    get = lambda pattern: int((re.findall(pattern, last) or ["0"])[0])  # noqa: E731
    return (get(r"rx in=(\d+)"), get(r"rx in=\d+ out=(\d+)"), get(r" to_kernel=(\d+)"),
            get(r" not_for_us=(\d+)"))


# A frame for another host's MAC (as a bridge flooding unknown unicast delivers it): an
# IPv6 header with no next header, from the interface argv[1] to a documentation address.
# Every port drops it before the engine and counts it as not_for_us, never as received.
POKE = r"""
import socket, sys
dev = sys.argv[1]
src = bytes.fromhex(open("/sys/class/net/%s/address" % dev).read().strip().replace(":", ""))
ip6 = (bytes.fromhex("60000000" "0000" "3b40") + socket.inet_pton(socket.AF_INET6, "2001:db8:ffff::2")
       + socket.inet_pton(socket.AF_INET6, "2001:db8:ffff::1"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
s.send(bytes.fromhex("02000000beef") + src + b"\x86\xdd" + ip6)
"""


def fresh_rx(run):
    """rx() of a stats line whose counts include all the engine did so far. A stats line
    (one a second) reports the workers' last counter snapshot, published about twice a
    second, so the next line may predate the engine's latest frames (the last packets of
    a flow before the reaper installed it in the fast path): a frame for another host
    (POKE) goes to the gateway from `run.poke_port` (namespace, interface: IPv6 on the
    gateway's side), and the line waited for is one whose snapshot counted it."""
    run.pokes = getattr(run, "pokes", 0) + 1
    run.g.nsx(run.poke_port[0], sys.executable, "-c", POKE, run.poke_port[1])
    assert wait_for(lambda: rx(run.qn)[3] >= run.pokes, 5), run.qn.text()[-2000:]
    return rx(run.qn)


def fast_fixture(backend, make, backends=("af_xdp",)):
    """A module fixture's body for one run of a fast-path suite: skipped on a backend
    not in `backends` (the XDP hook is AF_XDP's; AF_PACKET's is tc ingress, NAT44 and
    NAT64) or without scapy, `make()` the run, closed at the end."""
    if backend not in backends:
        pytest.skip(f"the fast path of this suite runs on {' and '.join(backends)} only")
    pytest.importorskip("scapy")
    r = make()
    try:
        yield r
    finally:
        r.close()


class FastRun:
    """What a fast-path suite's run (one gateway, fast path `fast` "on" or "off") has in
    common: its Scenario `g`, its quicknat `qn` and control socket `sock`; the control
    verbs, the crafting scripts, the logs on failure."""

    def log_tails(self):
        return self.g.log_tails()

    def ctl(self, verb):
        """`quicknat VERB --json` on this run's socket: the answer's object."""
        r = subprocess.run([self.quicknat, verb, "--json", "--socket", self.sock],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])[verb]

    def fast_stats(self):
        return self.ctl("stats")["xdp_fast_path"]

    def script(self, ns, script, *args):
        """Runs the Python `script` in namespace `ns`: the JSON summary it prints last."""
        r = self.g.nsx(ns, sys.executable, "-c", script, *args, check=False, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    def close(self):
        return self.g.close()


def windows(run, directions, prefix, problems):
    """Sends each direction's crafted packets through `run` (a gateway with the fast path
    `run.fast`, "on" or "off") in a window of its own between two stats lines, so that the
    XDP counter of that direction and the AF_XDP socket's receive count of its ingress
    interface see that direction's crafted packets only (the peers' answers travel the
    other way). `directions`: (way "out"/"in", craft() -> the crafting script's summary,
    the far side's pcap, the ingress index 0/1). Off, the engine's frames are the
    reference (asserted: every expected frame came, the socket received every packet);
    on, what goes wrong besides the bytes is appended to `problems`: the frame count, the
    XDP counter grown by less than the fast-path-eligible packets, the socket receiving
    more than the rest (2 more allowed: an entry reinstalled at a routes/neighbours change
    is briefly absent). Returns ([{key: [frames]}], [summaries]) per direction."""
    got, sent = [], []
    rx0, before = fresh_rx(run), run.fast_stats()
    for way, craft, pcap, at in directions:
        c = craft()
        sent.append(c)
        wait_for(lambda: sum(map(len, crafted(read_pcap(pcap), prefix).values())) >= c["frames"], 10)
        frames = crafted(read_pcap(pcap), prefix)
        got.append(frames)
        n = sum(map(len, frames.values()))
        if run.fast == "off":
            assert n == c["frames"], \
                f"off, {way}: {sorted(frames)} came, {c['frames']} frames expected | {run.qn.stats()}"
        elif n != c["frames"]:
            problems.append(f"on, {way}: {n} crafted frames came, {c['frames']} expected")
        if run.fast == "on":
            key = f"packets_{way}"
            if not wait_for(lambda: run.fast_stats()[key] - before[key] >= c["fast"], 5):
                now = run.fast_stats()
                problems.append(f"on, {way}: XDP {key} grew by {now[key] - before[key]}, "
                                f"{c['fast']} fast-path-eligible packets sent; counter deltas "
                                f"{ {k: now[k] - before[k] for k in now if isinstance(now[k], int)} }")
        rx1 = fresh_rx(run)
        slow = c["sent"] - c["fast"]   # the engine's, and those either path may take
        if run.fast == "off":
            assert rx1[at] - rx0[at] >= c["sent"], f"{way}: {rx1[at] - rx0[at]} | {run.qn.stats()}"
        elif rx1[at] - rx0[at] > slow + 2 + rx1[2] - rx0[2]:
            problems.append(f"on, {way}: the AF_XDP socket received {rx1[at] - rx0[at]} frames, "
                            f"at most {slow} wanted, and {rx1[2] - rx0[2]} for the kernel "
                            f"| {run.qn.stats()}")
        rx0, before = rx1, run.fast_stats()
    return got, sent


def concurrently(fn, runs):
    """[fn(run) for run in runs], each in a thread of its own: the runs of a comparison
    are separate topologies (namespaces, gateways, captures, crafting scripts), and most of
    a run's time is spent waiting (for a stats line, a capture, the crafting script's
    Python), so the fast path's run and its reference overlap. The first run's exception
    (an assertion) is raised, after every run has ended."""
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = [pool.submit(fn, run) for run in runs]
    return [f.result() for f in futures]


def differences(got, sides, translated=()):
    """The frames that differ between the runs, from the IP header on: `got` {"off": [..],
    "on": [..]} per direction as `windows` returns them, `sides` the directions' names.
    In the directions named in `translated` (IPv4 a translator made from IPv6), a whole
    DF-clear datagram's Identification is not compared: it differs in every run by
    design (`mask_translated_ident`)."""
    differ = []
    for i, side in enumerate(sides):
        a, b = got["off"][i], got["on"][i]
        for k in sorted(set(a) | set(b)):
            fa, fb = a.get(k, []), b.get(k, [])
            if len(fa) != len(fb):
                differ.append(f"{side} {k}: {len(fa)} frame(s) off, {len(fb)} on\n"
                              + "".join(f"  off {describe(f)}\n{hexdump(f[14:], range(4))}\n" for f in fa)
                              + "".join(f"  on  {describe(f)}\n{hexdump(f[14:], range(4))}\n" for f in fb))
                continue
            mask = mask_translated_ident if side in translated else (lambda ip: ip)
            seen = lambda f: f[12:14] + mask(f[14:])  # noqa: E731 -- from the EtherType on
            differ += [f"{side} " + diff_report(k, x, y) for x, y in zip(fa, fb) if seen(x) != seen(y)]
    return differ
