"""A flood of orphan fragments against a NAT44 gateway: later fragments (offset > 0) of
many datagrams whose first fragment never comes. quicknat holds such fragments for their
first (virtual reassembly, `nat44::frag`), bounded by `fragment_hold_bytes` in total and
a share of it per source, and for `fragment_timeout` (3 s). When the hold is full, the
datagrams that have waited longest make room: a flood of orphan fragments pushes out its
own, and a reordered datagram whose fragments come close together is held until its
first fragment comes (how close: below). This test checks the bounds and that behaviour
under a flood, live.

    cli (10.0.0.2; the flood from 10.0.0.32 on) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

quicknat (one worker, the backend of the run) translates 10.0.0.0/24 to 203.0.113.1 with
`fragment_hold_bytes = 262144` (so the flood reaches the bound within milliseconds; a
source's share is then 69,632 bytes), `max_fragment_records = 4096` and `max_sessions =
4096` (so the memory estimate is small and the RSS check tight). The flood is raw frames
from an AF_PACKET socket in cli, with the gateway's MAC: UDP fragments to the server,
each of a datagram of its own (its source cycles over FLOOD_SOURCES addresses of
10.0.0.0/24 from 10.0.0.32, which no host has, so no source reaches its share and the
total bound is what the flood meets; its identification counts up), at a random offset,
with 8 to 1,480 bytes of payload, most with More Fragments set.

  * the gateway's RSS (VmRSS, sampled every 50 ms) never exceeds its RSS after start-up
    plus the estimate `quicknat check-config` prints for the same file ("memory: up to X
    when every table is full"); the start-up RSS is taken after a warm-up of one second
    of whole datagrams from a source no rule covers, which touches the receive rings and
    leaves no state;
  * the flood fills the hold and is then held by pushing out its own oldest datagrams:
    nearly every flood fragment is counted `fragment_held` (none refused: no source
    reaches its share), those pushed out `fragment_hold_full`, and those still held at
    the flood's end `fragment_expired` within `fragment_timeout` and a reaper pass. Each
    flood fragment ends counted once (refused or pushed out: `fragment_hold_full`; or
    expired), so `fragment_hold_full + fragment_expired` is the fragments sent, plus the later fragments (1 to 3 each) of any reordered datagram
    below that was lost, less any frame lost before quicknat counted it;
    `fragment_expired` is at most what the hold can contain at once;
  * while the hold is full, datagrams whose fragments arrive in order still pass (the
    client's kernel sends 3,000 bytes without DF: three fragments, first first), and no
    first fragment is refused (`fragment_table_full` stays 0);
  * while the hold is full, REORDERED datagrams of 3,000 bytes whose four fragments come
    in reverse order, back to back (raw frames from one socket, as a reordering link or
    a multi-queue sender delivers them), reach the server whole: at least
    REORDERED_MIN of them (see below);
  * after the flood's fragments expired, a reordered datagram (its four fragments in
    reverse order, scapy) reaches the server whole again: its later fragments were held.

How long a reordered datagram may take is what the flood leaves it. A full hold makes
room in the arriving fragment's shard (one of 64) first, so a waiting datagram is pushed
out once the flood has put as many fragments into its shard as older datagrams wait
there: here about 6 on average (the hold takes about 410 flood fragments of 641 bytes),
fewer in some shards. Back to back, the four fragments take well under a millisecond and
pass; spread out they fail: at 20,000 flood fragments a second, 15 of 20 arrived with
1 ms between fragments, 3-4 of 20 with 10 ms, and scapy's `send()` (24 ms a fragment here)
loses nearly all, which is why they are sent raw. Measured (report
2026-12-07-fragment-hold): back to back, 20 of 20 arrived during every flood, from 300
to 205,000 fragments a second, with this hold and the default 4 MiB, on both backends;
with a core kept busy, 40 of 40 at 20,000 a second and 39-40 of 40 unpaced. REORDERED_MIN
leaves room for a few lost to scheduling on a loaded machine.

The flood runs once per topology (`FragFlood.flooded`); the tests check what it measured.
The figures (fragments sent, rate, RSS at start-up and peak against the bound, the
counters) are printed and recorded as e2e measurements.

The short form (the default, for CI: about 13 s a backend) floods for at least 4 s at
20,000 fragments a second from 64 sources. The full form, QUICKNAT_FRAG_FLOOD_FULL=1,
floods for 20 s as fast as the generator goes (one Python process, 137,000-205,000 a
second here), from 192 sources.

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_fragment_flood.py -s [--quicknat PATH]
"""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from netns import Scenario, once, wait_for
from test_fragments_reordered import RECEIVER, receive, send
from test_inside_flood import estimate_bytes, vm_rss_kib, wire_flood_topology

pytestmark = pytest.mark.needs_root

CLIENT = "10.0.0.2"
SERVER = "198.51.100.2"
PUBLIC = "203.0.113.1"
HOLD_BYTES = 262144
TIMEOUT_S = 3  # fragment_timeout (the default)
FULL = os.environ.get("QUICKNAT_FRAG_FLOOD_FULL") == "1"
FLOOD_FIRST = "10.0.0.32"
FLOOD_SOURCES = 192 if FULL else 64   # from FLOOD_FIRST on
FLOOD_SECONDS = 20.0 if FULL else 4.0  # at least; the flood ends when the datagrams sent during it are through
FLOOD_PPS = 0 if FULL else 20_000      # 0: unpaced
IN_ORDER = 3   # in-order datagrams sent during the flood
REORDERED = 20     # reverse-order datagrams sent during the flood, 50 ms apart
REORDERED_MIN = 16  # of them that must arrive whole (measured: all, idle and with a core busy)
# The most fragments the hold can contain at once: each costs its bytes and 64 of
# bookkeeping (`hold::OVERHEAD`), the smallest flood fragment 20 + 8 + 64.
HOLD_MOST = HOLD_BYTES // (20 + 8 + 64)

CONFIG = f"""
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{{backend}}"
workers = 1
stats_interval = 1
xdp_fast_path = "off"

[nat44]
max_sessions = 4096
max_fragment_records = 4096
fragment_hold_bytes = {HOLD_BYTES}

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["{PUBLIC}/32"]
"""

# Raw IPv4/UDP frames on DEV to DST_MAC: with MODE "frag", later fragments (offset > 0,
# never a first) of distinct datagrams, sources cycling over COUNT addresses from FIRST,
# the identification counting up; with "whole", whole datagrams from FIRST alone. Sends
# for at least SECONDS and until SIGTERM (at most LIMIT seconds), at PPS frames a second
# (0: as fast as it goes). Prints "ready" when the first frame went, then, at the end,
# {"sent": N, "errors": N, "seconds": S, "pps": R}.
FLOOD = r"""
import json, random, signal, socket, struct, sys, time
dev, dst_mac, src_mac, dst, mode, first, count, seconds, limit, pps, seed = sys.argv[1:12]
count, seconds, limit, pps = int(count), float(seconds), float(limit), float(pps)
rnd = random.Random(int(seed))
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) + b"\x08\x00"
base = struct.unpack("!I", socket.inet_aton(first))[0]
srcs = [socket.inet_aton(socket.inet_ntoa(struct.pack("!I", base + i))) for i in range(count)]
dsta = socket.inet_aton(dst)
sizes = [8, 64, 256, 512, 1024, 1480]
payload = {n: bytes(rnd.randrange(256) for _ in range(n)) for n in sizes}
def csum(h):
    t = sum(struct.unpack("!10H", h))
    t = (t & 0xFFFF) + (t >> 16)
    t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF
def frame(i):
    if mode == "whole":
        body = struct.pack("!HHHH", 40000 + i % 1000, 9, 8 + 64, 0) + payload[64]
        src, ident, frag = srcs[0], i & 0xFFFF, 0
    else:
        body = payload[sizes[i % len(sizes)]]
        src, ident = srcs[i % count], (i // count) & 0xFFFF
        off = rnd.randrange(1, (65535 - 20 - 1480) // 8)   # in 8-byte units, never 0
        frag = off | (0x2000 if rnd.random() < 0.75 else 0)  # MF on most
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), ident, frag, 64, 17, 0, src, dsta)
    return eth + h[:10] + struct.pack("!H", csum(h)) + h[12:] + body
t0 = time.monotonic()
sent = errors = 0
while True:
    now = time.monotonic()
    el = now - t0
    if el >= limit or (el >= seconds and stop):
        break
    if pps and sent > el * pps:
        time.sleep(min(0.002, (sent - el * pps) / pps))
        continue
    for _ in range(32):
        try:
            s.send(frame(sent))
        except OSError:
            errors += 1
        sent += 1
    if sent == 32:
        print("ready", flush=True)
el = time.monotonic() - t0
print(json.dumps({"sent": sent, "errors": errors, "seconds": el, "pps": sent / el}), flush=True)
"""

# Sends COUNT UDP datagrams SRC:SPORT -> DST:DPORT of 3,000 bytes (seeded by SEED + i, IP
# identification SEED + i) as raw frames on DEV to DST_MAC, each cut into fragments of
# 1,000, 1,000, 1,000 and 8 bytes (as scapy's fragment(fragsize=1000)) sent back to back
# in reverse order, the first last; INTERVAL seconds between datagrams. Prints their
# sha256s as a JSON list.
REORDERED_SENDER = r"""
import hashlib, json, random, socket, struct, sys, time
dev, dst_mac, src_mac, src, sport, dst, dport, count, interval, seed = sys.argv[1:11]
sport, dport, count, interval, seed = int(sport), int(dport), int(count), float(interval), int(seed)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) + b"\x08\x00"
sa, da = socket.inet_aton(src), socket.inet_aton(dst)
def csum(b):
    b += b"\0" * (len(b) % 2)
    t = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF
shas = []
for i in range(count):
    data = random.Random(seed + i).randbytes(3000)
    udp = struct.pack("!HHHH", sport, dport, 3008, 0) + data
    c = csum(sa + da + struct.pack("!BBH", 0, 17, 3008) + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    frames = []
    for off in range(0, len(udp), 1000):
        part = udp[off:off + 1000]
        flags = 0x2000 if off + 1000 < len(udp) else 0  # MF on all but the last
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(part), (seed + i) & 0xFFFF, flags | off // 8, 64, 17,
                        0, sa, da)
        frames.append(eth + h[:10] + struct.pack("!H", csum(h)) + h[12:] + part)
    for f in reversed(frames):
        s.send(f)
    shas.append(hashlib.sha256(data).hexdigest())
    time.sleep(interval)
print(json.dumps(shas))
"""

# Sends one UDP datagram of argv[3] bytes (seeded by argv[5]) from port argv[4] to
# argv[1]:argv[2] with DF clear, so the kernel cuts it into fragments and sends them in
# order, first first; prints its sha256.
IN_ORDER_SENDER = r"""
import hashlib, random, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: DF clear
s.bind(("10.0.0.2", int(sys.argv[4])))
data = random.Random(int(sys.argv[5])).randbytes(int(sys.argv[3]))
s.sendto(data, (sys.argv[1], int(sys.argv[2])))
print(hashlib.sha256(data).hexdigest())
"""


class FragFlood(Scenario):
    def __init__(self, quicknat, backend):
        super().__init__("qff", ("cli", "gw", "srv"))
        self.bin, self.backend = quicknat, backend

    def setup(self):
        wire_flood_topology(self, CLIENT)
        self.qn = self.quicknat(self.bin, "gw", CONFIG.format(backend=self.backend), f"frag-flood-{self.backend}")
        self.qn.wait_started()  # bounded; test_quicknat_started checks it
        self.estimate, self.estimate_line = estimate_bytes(self.bin, self.qn.cfg.name)

    @once
    def flooded(self):
        """The flood step (run_flood), once; its figures."""
        return run_flood(self)

    def flood(self, mode, first, count, seconds, limit, pps, seed):
        return self.popen("cli", sys.executable, "-u", "-c", FLOOD, "c0", self.gin_mac, self.c0_mac, SERVER, mode,
                          first, str(count), f"{seconds:.3f}", f"{limit:.3f}", str(pps), str(seed),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout, stop=True):
    """Stops a FLOOD process (SIGTERM, when `stop`: only once it printed "ready") or awaits
    its end, and returns its report."""
    if stop and proc.poll() is None:
        proc.terminate()
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


class Sampler:
    """The gateway's VmRSS every 50 ms on a thread until stopped."""

    def __init__(self, pid):
        self.pid, self.rss = pid, []
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_ev.is_set():
            v = vm_rss_kib(self.pid)
            if v is not None:
                self.rss.append(v)
            self.stop_ev.wait(0.05)

    def finish(self):
        self.stop_ev.set()
        self.thread.join(timeout=10)
        return max(self.rss, default=0)


REASONS = ("fragment_held", "fragment_hold_full", "fragment_expired", "fragment_table_full",
           "fragment_overlap", "fragment_too_many")


def counters(sc):
    """The fragment drop counts on the last stats line."""
    return {r: sc.qn.dropped(r) for r in REASONS}


def stats_lines(sc):
    """How many stats lines quicknat has logged (one a second)."""
    return sum("stats:" in line for line in sc.qn.text().splitlines())


@pytest.fixture(scope="module")
def flood(quicknat, backend):
    sc = FragFlood(quicknat, backend)
    try:
        sc.setup()
        yield sc
    finally:
        sc.close()


def test_quicknat_started(flood):
    assert flood.qn.wait_started() and flood.qn.proc.poll() is None, flood.qn.text()[-2000:]


def in_order(sc, i):
    """An in-order fragmented datagram from the client to the server: (sent sha256, what
    the server's socket got)."""
    rx = receive(sc, "srv", SERVER, 7400 + i, 1)
    r = sc.nsx("cli", sys.executable, "-c", IN_ORDER_SENDER, SERVER, str(7400 + i), "3000", str(7500 + i),
               str(600 + i), check=False)
    assert r.returncode == 0, r.stderr
    out, _ = rx.communicate(timeout=15)
    return r.stdout.strip(), out.split()


def reordered(sc):
    """REORDERED datagrams from the client to the server, each as four fragments back to
    back in reverse order: (sent sha256s, those the server's socket got whole from the
    public address)."""
    rx = sc.popen("srv", sys.executable, "-c", RECEIVER, SERVER, "7420", str(REORDERED), "3",
                  stdout=subprocess.PIPE, text=True)
    assert rx.stdout.readline().strip() == "ready"
    r = sc.nsx("cli", sys.executable, "-c", REORDERED_SENDER, "c0", sc.gin_mac, sc.c0_mac, CLIENT, "7520", SERVER,
               "7420", str(REORDERED), "0.05", "900", check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    sent = json.loads(r.stdout)
    out, _ = rx.communicate(timeout=30)
    whole = {w[1] for w in map(str.split, out.splitlines()) if w[:1] == ["3000"] and w[2:3] == [PUBLIC]}
    return sent, [sha for sha in sent if sha in whole]


def run_flood(sc):
    """The flood, once per topology (the tests below check what it measured): the warm-up
    and the start-up RSS, the flood with the in-order and the reordered datagrams during
    it, then the wait for what is still held to expire. Returns a dict of figures,
    printed."""
    started_rss = vm_rss_kib(sc.qn.proc.pid)
    # Warm-up: whole datagrams from a source no rule covers (dropped, no state made) touch
    # the receive rings; the RSS after it is the start-up RSS.
    warm = sc.flood("whole", "192.0.2.9", 1, 1.0, 1.0, 20_000, 0)
    warm_report = finish(warm, 20, stop=False)
    assert warm_report["sent"] > 0, warm_report
    base_rss = vm_rss_kib(sc.qn.proc.pid)
    before = counters(sc)
    sampler = Sampler(sc.qn.proc.pid)
    sc.defer(sampler.finish)  # stopped at teardown too, should a step below fail
    gen = sc.flood("frag", FLOOD_FIRST, FLOOD_SOURCES, FLOOD_SECONDS, FLOOD_SECONDS + 60, FLOOD_PPS, 1)
    try:
        assert gen.stdout.readline().strip() == "ready", gen.stderr.read()[-2000:]
        t_start = time.monotonic()
        # The bound is reached (the counters reach the log once a second).
        full = wait_for(lambda: sc.qn.dropped("fragment_hold_full") > before["fragment_hold_full"], 10, step=0.2)
        t_full = time.monotonic() - t_start
        assert full, f"the hold never filled: {sc.qn.stats()}"
        # While the hold is full: datagrams in order, then reordered ones.
        got = [in_order(sc, i) for i in range(IN_ORDER)]
        re_sent, re_whole = reordered(sc)
        flooding = gen.poll() is None
        during = counters(sc)
    finally:
        report = finish(gen, 90)
        t_end = time.monotonic()

    # What the hold still has expires within fragment_timeout of the flood's end and is
    # counted at the next reaper pass (every second) and the stats line after it: wait
    # for a stats line begun after that, noting when `fragment_expired` last grew.
    settle = t_end + TIMEOUT_S + 1.2
    lines_at = None
    last = (counters(sc)["fragment_expired"], 0.0)
    deadline = settle + 5
    while time.monotonic() < deadline:
        now = time.monotonic()
        c = counters(sc)["fragment_expired"]
        if c != last[0]:
            last = (c, now - t_end)
        if lines_at is None and now >= settle:
            lines_at = stats_lines(sc)
        if lines_at is not None and stats_lines(sc) > lines_at:
            break
        time.sleep(0.2)
    settled = lines_at is not None and stats_lines(sc) > lines_at
    peak = max(sampler.finish(), vm_rss_kib(sc.qn.proc.pid) or 0)
    after = counters(sc)
    f = {
        "form": "full" if FULL else "short", "backend": sc.backend,
        "fragments_sent": report["sent"], "flood_s": round(report["seconds"], 2), "flood_pps": round(report["pps"]),
        "send_errors": report["errors"], "sources": FLOOD_SOURCES, "hold_full_seen_after_s": round(t_full, 1),
        "rss_before_warmup_kib": started_rss, "rss_start_kib": base_rss, "rss_peak_kib": peak,
        "rss_growth_kib": peak - base_rss, "bound_kib": round(sc.estimate / 1024),
        "rss_limit_kib": round(base_rss + sc.estimate / 1024),
        "settled": settled, "expired_within_s": round(last[1], 1),
        "in_order_passed": sum(out[:3] == ["3000", sha, PUBLIC] for sha, out in got),
        "in_order_sent": IN_ORDER, "reordered_sent": len(re_sent), "reordered_whole": len(re_whole),
        "during_flood": flooding,
        **{k: after[k] - before[k] for k in REASONS},
        "table_full_during": during["fragment_table_full"] - before["fragment_table_full"],
        "hold_full_during": during["fragment_hold_full"] - before["fragment_hold_full"],
    }
    # Each flood fragment ends counted once: refused or pushed out (fragment_hold_full),
    # or expired. Beyond the flood's, only reordered datagrams that were lost add to it.
    f["ended_minus_sent"] = f["fragment_hold_full"] + f["fragment_expired"] - f["fragments_sent"]
    print(f"\n{sc.estimate_line}\nfragment flood: " + ", ".join(f"{k}={v}" for k, v in f.items()))
    f["in_order"] = got
    return f


def lost_before_quicknat(f):
    """How many flood frames may be lost before quicknat counts them (at the receive ring,
    when the generator outruns the worker): 1%. None was, with this hold, up to 205,000
    fragments a second; with the default 4 MiB hold, 1.1% at 140,000-158,000 a second."""
    return f["fragments_sent"] // 100


def test_the_flood_fills_the_hold_and_pushes_out_its_own(flood, record_property):
    f = flood.flooded()
    for k, v in f.items():
        if k != "in_order":
            record_property(f"frag_flood_{k}", v)
    # The hold filled: datagrams were pushed out (or refused) while the flood lasted.
    assert f["hold_full_during"] > 0, f
    # No source reached its share: the flood's fragments were held, each making room by
    # pushing out the datagram that had waited longest, not refused.
    assert f["fragment_held"] >= f["fragments_sent"] - lost_before_quicknat(f), f
    assert f["fragment_hold_full"] >= f["fragment_held"] - f["fragment_expired"] - 3 * f["reordered_sent"], f


def test_every_flood_fragment_ends_counted_once(flood):
    f = flood.flooded()
    assert f["settled"], f
    # fragment_hold_full + fragment_expired = the flood's fragments (less those lost
    # before quicknat counted them) + the later fragments of lost reordered datagrams
    # (1 to 3 each: pushed out or expired before their first came).
    lost = f["reordered_sent"] - f["reordered_whole"]
    assert -lost_before_quicknat(f) <= f["ended_minus_sent"] <= 3 * lost, f
    # What expires is only what the hold had when the flood stopped: the rest was pushed
    # out before its time.
    assert 0 < f["fragment_expired"] <= HOLD_MOST, f


def test_the_gateway_rss_stays_within_its_start_up_rss_plus_the_estimate(flood):
    f = flood.flooded()
    assert f["rss_peak_kib"] <= f["rss_limit_kib"], (
        f"RSS {f['rss_peak_kib']} KiB above start-up {f['rss_start_kib']} KiB + estimate "
        f"{flood.estimate / 1024:.0f} KiB ({flood.estimate_line})")


def test_in_order_datagrams_pass_while_the_hold_is_full(flood):
    f = flood.flooded()
    assert f["during_flood"], f"the flood ended before the datagrams sent during it were through: {f}"
    for sha, out in f["in_order"]:
        assert out[:3] == ["3000", sha, PUBLIC], f"an in-order datagram during the flood: {out!r} | {f}"
    assert f["fragment_table_full"] == 0, f


def test_reordered_datagrams_pass_while_the_hold_is_full(flood):
    f = flood.flooded()
    assert f["during_flood"], f"the flood ended before the datagrams sent during it were through: {f}"
    assert f["reordered_whole"] >= REORDERED_MIN, (
        f"{f['reordered_whole']} of {f['reordered_sent']} reverse-order datagrams arrived whole during the "
        f"flood: {f}")


def test_a_reordered_datagram_after_the_flood_reaches_the_server_whole(flood):
    flood.flooded()
    held = flood.qn.dropped("fragment_held")
    rx = receive(flood, "srv", SERVER, 7410, 1)
    sha = send(flood, "cli", CLIENT, 7510, SERVER, 7410, [3, 2, 1, 0], 700)
    out, _ = rx.communicate(timeout=15)
    assert out.split()[:3] == ["3000", sha, PUBLIC], f"{out!r} | {flood.qn.stats()}"
    assert wait_for(lambda: flood.qn.dropped("fragment_held") >= held + 3, 5), flood.qn.stats()


def test_quicknat_stops_cleanly_on_sigterm(flood):
    rc, text = flood.qn.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_namespaces_removed(flood):
    left = flood.close()
    assert not left, str(left)
