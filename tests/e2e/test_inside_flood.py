"""A flood of spoofed inside sources against a NAT44 gateway with a small pool: its memory
stays within what `quicknat check-config` estimates, and a real inside host keeps opening
new connections through it.

    cli (10.0.0.2, and the flood from 10.128.0.0/9) == gw (g-in 10.0.0.1 | g-out 198.51.100.1)
        == srv (198.51.100.2: HTTP on 8080; port 9 dropped at ingress; port 10 closed)

The gateway (AF_PACKET, one worker) translates 10.0.0.0/8 to a /28 (16 addresses) whose
port range is cut to 1024-4095, so the pool has 49,152 TCP ports (3,072 per address), and
`max_sessions` is 20,000 with TCP timeouts of 2 s. Live bindings (at most 20,000) and held
ports (at most the hold's bound, 20,000) then fit in the pool, but an unbounded hold (every
released port kept for the 120 s of `port_reuse_hold`) would fill it within seconds: the
flood turns over some 200,000 bindings per phase. `quicknat-lab flood` (raw frames,
`sendmmsg`) sends TCP SYNs from random addresses and ports in 10.128.0.0/9, in two phases:

  1. unanswered: to 198.51.100.2:9, dropped at the server's ingress (nftables netdev), so
     no binding ever receives a packet from outside and its port must come back at once
     (`quicknat_ports_released_unheld`);
  2. answered: to 198.51.100.2:10, a closed port, so the server's kernel answers every SYN
     with a RST; the bindings count as answered, their ports are held, and only the hold's
     bound (`min(max_sessions, pool ports x 3)` = 20,000 here) keeps the pool from
     filling: past it the oldest hold is cut short (`quicknat_port_holds_cut_short`).

In each phase, while the flood runs and after it:

  * the gateway's RSS (VmRSS, sampled every 50 ms) never exceeds the RSS it had after
    start-up, before any binding, plus the estimate `check-config` prints for the same
    file ("memory: up to X when every table is full"): the estimate covers the tables,
    the start-up RSS the binary, its rings and its buffers;
  * the TCP ports the pool counts taken (in use or held; the control socket's `pool`)
    never exceed max_sessions plus the hold's bound, and every address keeps free ones;
  * the inside host (a kernel socket in cli) opens a new HTTP connection through the
    gateway every 200 ms during the flood and five right after, and every one succeeds
    (within the kernel's SYN retransmissions, 15 s) with a pool address as its source;
    the gateway drops nothing as `pool_exhausted`;
  * the counters (Prometheus metrics, which include the reaper's) say what happened.

The measured figures (flood rate, sources sent, peak RSS against the estimate, the inside
host's connections and slowest one, the counters) are printed and recorded as e2e
measurements. A last check compares the control socket's `stats` with the metrics.

QUICKNAT_FLOOD_SOURCES=N sends N sources per phase (default 300,000) over 8 s, paced, or
unpaced for longer when the generator cannot reach N / 8 per second (its rate is measured
first, 1 s into the sink from sources no rule covers). The full form is
QUICKNAT_FLOOD_SOURCES=2000000 (about 250,000 per second).

    sudo python3 -m pytest tests/e2e/test_inside_flood.py -s [--quicknat PATH]

`quicknat-lab` is found next to the quicknat binary (`cargo build --release -p quicknat
-p lab`).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from netns import HTTP_SERVER, Scenario, sh, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
HTTP_PORT = 8080
SINK_PORT = 9      # dropped at the server's ingress: never answered
CLOSED_PORT = 10   # nothing listens: the server's kernel answers each SYN with a RST
SPOOFED = "10.128.0.0/9"
POOL = "203.0.113.16/28"
POOL_ADDRESSES = 16
PORTS = (1024, 4095)
MAX_SESSIONS = 20_000
WORKERS = 1
# The hold's bound: min(max_sessions, pool ports x 3 protocols).
HOLD_BOUND = min(MAX_SESSIONS, POOL_ADDRESSES * (PORTS[1] - PORTS[0] + 1) * 3)
METRICS = "127.0.0.1:9464"
SOURCES = int(os.environ.get("QUICKNAT_FLOOD_SOURCES", "300000"))
# The flood spreads its sources over this many seconds, or more when the generator cannot
# send them that fast (it then runs unpaced).
FLOOD_SECONDS = 8.0

CONFIG = f"""
[gateway]
inside = "g-in"
outside = "g-out"
backend = "af_packet"
workers = {WORKERS}
stats_interval = 1
gso = false
xdp_fast_path = "off"
control_socket = "{{sock}}"
metrics = "{METRICS}"

[nat44]
max_sessions = {MAX_SESSIONS}
# Sessions turn over fast; the reuse hold keeps its default (120 s), far longer.
[nat44.timeouts]
tcp_syn_sent = 2
tcp_syn_recv = 2
tcp_closed = 2
tcp_transitory = 2

[[nat44.rule]]
inside = "10.0.0.0/8"
pool = ["{POOL}"]
ports = "{PORTS[0]}-{PORTS[1]}"
"""

# The inside host: a new TCP connection (a fresh ephemeral port, so a new binding) every
# argv[3] seconds to argv[1]:argv[2], an HTTP GET on it, until SIGTERM or argv[4] attempts
# made. One JSON line per
# attempt: {"t": unix time, "ok": bool, "peer": what the server saw, "err": ...}.
LEGIT = r"""
import json, signal, socket, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
host, port, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def attempt():
    t = time.time()
    try:
        # 15 s: the kernel's SYN and its retransmissions at 1, 3 and 7 s.
        s = socket.create_connection((host, port), timeout=15)
        s.settimeout(5)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        body = data.split(b"\r\n\r\n", 1)[-1].decode().strip()
        return {"t": t, "ok": body.startswith("peer="), "peer": body, "took": time.time() - t}
    except OSError as e:
        return {"t": t, "ok": False, "err": repr(e), "took": time.time() - t}
left = int(sys.argv[4]) if len(sys.argv) > 4 else -1
while not stop and left != 0:
    print(json.dumps(attempt()), flush=True)
    left -= 1
    if not stop and left != 0:
        time.sleep(every)
"""


FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


def mac(sc, name, dev):
    return sc.nsx(name, "cat", f"/sys/class/net/{dev}/address").stdout.strip()


def vm_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def estimate_bytes(quicknat, config_path):
    """What `check-config` says the tables of `config_path` can grow to, in bytes."""
    out = sh(quicknat, "check-config", "--config", config_path).stdout
    m = re.search(r"^memory: up to ([\d.]+) (B|KiB|MiB|GiB)\b", out, re.M)
    assert m, out
    return float(m.group(1)) * UNITS[m.group(2)], out.strip().splitlines()[-1]


def wire_flood_topology(t, client="10.0.0.2"):
    """The flood suites' NAT44 topology in scenario `t` (namespaces cli, gw, srv): the
    client `client` in 10.0.0.0/24, the server 198.51.100.2, the pool routed to the
    gateway, and every neighbour fixed, so a flood never starves address resolution.
    Sets `t.gin_mac` and `t.c0_mac`."""
    t.make_namespaces()
    t.link("cli", "c0", "gw", "g-in")
    t.link("srv", "s0", "gw", "g-out")
    t.nsx("cli", "ip", "addr", "add", f"{client}/24", "dev", "c0")
    t.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
    t.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
    t.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
    t.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
    t.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
    c0, gin, gout, s0 = (mac(t, "cli", "c0"), mac(t, "gw", "g-in"),
                         mac(t, "gw", "g-out"), mac(t, "srv", "s0"))
    t.gin_mac, t.c0_mac = gin, c0
    for name, addr, lladdr, dev in (("gw", client, c0, "g-in"), ("gw", SERVER, s0, "g-out"),
                                    ("cli", "10.0.0.1", gin, "c0"), ("srv", "198.51.100.1", gout, "s0")):
        t.nsx(name, "ip", "neigh", "replace", addr, "lladdr", lladdr, "dev", dev, "nud", "permanent")


class Flood(Scenario):
    def __init__(self, quicknat):
        super().__init__("qfl", ("cli", "gw", "srv"))
        self.bin = quicknat
        self.lab = str(Path(quicknat).with_name("quicknat-lab"))
        self.dir = tempfile.mkdtemp(prefix="qn-flood-")
        self.sock = os.path.join(self.dir, "ctl.sock")
        self.defer(lambda: subprocess.run(["rm", "-rf", self.dir]))

    def setup(self):
        wire_flood_topology(self)
        # The unanswered phase's sink: SYNs to port 9 dropped before the server's stack.
        sink = ('table netdev qnsink {\n chain in {\n  type filter hook ingress device "s0" priority 0;\n'
                f'  tcp dport {SINK_PORT} drop\n }}\n}}\n')
        self.nsx("srv", "nft", "-f", "-", input=sink)
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, str(HTTP_PORT))
        assert self.wait_listening("srv", SERVER, HTTP_PORT)

        self.config = CONFIG.format(sock=self.sock)
        self.qn = self.quicknat(self.bin, "gw", self.config, "inside-flood")
        assert self.qn.wait_started(), self.qn.text()[-2000:]
        assert wait_for(lambda: os.path.exists(self.sock), 5), self.qn.text()[-2000:]
        self.estimate, self.estimate_line = estimate_bytes(self.bin, self.qn.cfg.name)

    def ctl_json(self, verb):
        r = sh(self.bin, verb, "--socket", self.sock, "--json", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = [json.loads(l) for l in r.stdout.splitlines()]
        assert lines and lines[-1]["ok"] is True, lines
        return lines[:-1], lines[-1]

    def metrics(self):
        """The gateway's Prometheus counters (the workers' and the reaper's), by name
        without the `quicknat_` prefix and `_total` suffix; drops by reason as
        `drop:REASON`."""
        r = self.nsx("gw", sys.executable, "-c", FETCH, f"http://{METRICS}/metrics")
        out = {}
        for line in r.stdout.splitlines():
            m = re.match(r'quicknat_(\w+)_total(?:\{reason="(\w+)"\})? (\d+)$', line)
            if m and m.group(2) and m.group(1) == "dropped_packets":
                out[f"drop:{m.group(2)}"] = int(m.group(3))
            elif m and not m.group(2):
                out[m.group(1)] = int(m.group(3))
        assert "ports_released_unheld" in out, r.stdout[-2000:]
        return out

    def pool_taken(self):
        """TCP ports taken (in use or held) per pool address."""
        rows, _ = self.ctl_json("pool")
        return {r["addr"]: r["taken"]["tcp"] for r in rows}, rows[0]["ports_per_proto"] if rows else 0

    def flood(self, dst_port, seconds, seed, pps=None):
        """Starts the generator in cli (unpaced, as fast as it goes, without `pps`)."""
        pace = ["--pps", str(pps)] if pps else []
        return self.popen("cli", self.lab, "flood", "--dev", "c0", "--dst-mac", self.gin_mac,
                          "--src-mac", self.c0_mac, "--pattern", "spoofed-syn",
                          "--dst", f"{SERVER}:{dst_port}", "--src-net", SPOOFED,
                          "--seconds", f"{seconds:.3f}", "--seed", str(seed), *pace,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def legit(self, every, count=None):
        args = [sys.executable, "-u", "-c", LEGIT, SERVER, str(HTTP_PORT), str(every)]
        if count is not None:
            args.append(str(count))
        return self.popen("cli", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Sampler:
    """Samples the gateway's RSS every 50 ms and the pool's taken ports every 500 ms (the
    latter through the control socket) on a thread until stopped."""

    def __init__(self, sc):
        self.sc, self.pid = sc, sc.qn.proc.pid
        self.rss, self.taken, self.paired_free_min = [], [], None
        self.stop_ev = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        next_pool = 0.0
        try:
            while not self.stop_ev.is_set():
                v = vm_rss_kib(self.pid)
                if v is not None:
                    self.rss.append(v)
                if time.monotonic() >= next_pool:
                    per_addr, per_proto = self.sc.pool_taken()
                    self.taken.append(sum(per_addr.values()))
                    free = per_proto - max(per_addr.values(), default=0)
                    self.paired_free_min = free if self.paired_free_min is None else min(self.paired_free_min, free)
                    next_pool = time.monotonic() + 0.5
                self.stop_ev.wait(0.05)
        except Exception as e:  # noqa: BLE001 -- reported by finish()
            self.error = e

    def finish(self):
        self.stop_ev.set()
        self.thread.join(timeout=10)
        assert self.error is None, repr(self.error)
        return self


def attempts(proc, stop=True):
    """The attempts of a LEGIT process, stopped first (`stop`) or awaited."""
    if stop and proc.poll() is None:
        proc.terminate()
    out, err = proc.communicate(timeout=30)
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    assert rows, f"the inside host made no attempt: {err}"
    return rows


@pytest.fixture(scope="module")
def scene(quicknat):
    if not Path(quicknat).with_name("quicknat-lab").exists():
        pytest.fail(f"{Path(quicknat).with_name('quicknat-lab')} is missing: "
                    "cargo build --release -p quicknat -p lab")
    sc = Flood(quicknat)
    try:
        sc.setup()
        yield sc
    finally:
        sc.close()


def calibrate(sc):
    """The generator's rate on this machine, measured by a 1 s flood into the sink with
    sources outside the rule (10.0.0.0/8 only), so the gateway creates nothing: a flood
    of N sources then runs N / rate seconds."""
    p = sc.popen("cli", sc.lab, "flood", "--dev", "c0", "--dst-mac", sc.gin_mac, "--src-mac", sc.c0_mac,
                 "--pattern", "spoofed-syn", "--dst", f"{SERVER}:{SINK_PORT}", "--src-net", "172.16.0.0/12",
                 "--seconds", "1", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    return json.loads(out)["pps"]


def run_phase(sc, name, dst_port, seed, record_property):
    before = sc.metrics()
    base_rss = vm_rss_kib(sc.qn.proc.pid)
    pps = SOURCES / FLOOD_SECONDS
    unpaced = pps >= 0.9 * sc.rate
    seconds = SOURCES / sc.rate if unpaced else FLOOD_SECONDS
    sampler = Sampler(sc)
    legit = sc.legit(0.2)
    gen = sc.flood(dst_port, seconds, seed, None if unpaced else round(pps))
    out, err = gen.communicate(timeout=seconds + 60)
    assert gen.returncode == 0, err
    report = json.loads(out)
    during = attempts(legit)
    # Right after: a few new connections, while the flood's sessions are still live.
    after = attempts(sc.legit(0.05, count=5), stop=False)
    # Every binding the flood made ends (2 s timeouts, then the reaper's pass), so its
    # port has come back, at once or into the hold.
    def settled():
        return sc.ctl_json("census")[1]["census"]["bindings"] <= 2
    assert wait_for(settled, 20, step=0.5), sc.ctl_json("census")
    end = sc.metrics()
    sampler.finish()
    # And after that, the RSS once more.
    final_rss = vm_rss_kib(sc.qn.proc.pid)

    d = {k: end[k] - before[k] for k in ("bindings_created", "sessions_created", "sessions_expired",
                                         "sessions_early_dropped", "ports_released_unheld",
                                         "port_holds_cut_short")}
    for reason in ("pool_exhausted", "table_full"):
        d[reason] = end[f"drop:{reason}"] - before[f"drop:{reason}"]
    peak = max(sampler.rss + [final_rss or 0])
    limit_kib = sc.base_rss + sc.estimate / 1024
    ok_during = sum(a["ok"] for a in during)
    ok_after = sum(a["ok"] for a in after)
    figures = {
        "flood_pps": round(report["pps"]), "sources_sent": report["sent"], "flood_s": round(report["seconds"], 2),
        "gen_dropped": report["dropped"], "rss_start_kib": sc.base_rss, "rss_phase_start_kib": base_rss,
        "rss_peak_kib": peak, "rss_final_kib": final_rss, "rss_limit_kib": round(limit_kib),
        "estimate_mib": round(sc.estimate / (1 << 20), 1), "pool_taken_max": max(sampler.taken),
        "paired_free_min": sampler.paired_free_min,
        "legit_attempts": len(during) + len(after),
        "legit_during": f"{ok_during}/{len(during)}", "legit_after": f"{ok_after}/{len(after)}",
        "legit_slowest_s": round(max(a["took"] for a in during + after), 2), **d,
    }
    print(f"\n{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    for k, v in figures.items():
        record_property(f"{name}_{k}", v)

    failed = [a for a in during + after if not a["ok"]]
    assert not failed, f"{name}: the inside host failed {len(failed)} of {len(during) + len(after)}: {failed[:5]}"
    assert all("peer=203.0.113." in a["peer"] for a in during + after), during + after
    assert len(during) >= 2, during
    assert d["pool_exhausted"] == 0, figures
    assert peak <= limit_kib, (f"{name}: RSS {peak} KiB above start-up {sc.base_rss} KiB + estimate "
                               f"{sc.estimate / 1024:.0f} KiB ({sc.estimate_line})")
    # Taken ports: live bindings (at most max_sessions) and held ones (at most the bound),
    # and the one port the worker may hold for an instant between taking it and finding
    # the binding table full (it gives it back at once: `table_full` drops).
    assert max(sampler.taken) <= MAX_SESSIONS + HOLD_BOUND + WORKERS, figures
    assert sampler.paired_free_min > 0, figures
    # The flood went through the gateway and turned its table over.
    assert report["sent"] >= 0.9 * SOURCES, report
    assert d["bindings_created"] > 2 * MAX_SESSIONS, figures
    return figures, d


def test_unanswered_flood_gives_ports_back_at_once(scene, record_property):
    scene.rate = calibrate(scene)
    # The RSS after start-up and the calibration (no binding made), before any flood.
    scene.base_rss = vm_rss_kib(scene.qn.proc.pid)
    print(f"\n{scene.estimate_line}; generator {scene.rate:.0f} pps; start-up RSS {scene.base_rss} KiB")
    figures, d = run_phase(scene, "unanswered", SINK_PORT, 1, record_property)
    # No flood binding was answered: its port came back at once, none was held; only the
    # inside host's bindings (answered) went into the hold, far from its bound.
    legit = figures["legit_attempts"]
    assert d["bindings_created"] - legit <= d["ports_released_unheld"] <= d["bindings_created"], figures
    assert d["port_holds_cut_short"] == 0, figures


def test_answered_flood_is_bounded_by_the_hold(scene, record_property):
    if getattr(scene, "base_rss", None) is None:
        pytest.skip("runs after the unanswered phase, which measures the start-up RSS")
    figures, d = run_phase(scene, "answered", CLOSED_PORT, 2, record_property)
    # The flood's bindings were answered (a RST each) and their ports held, at most
    # HOLD_BOUND at once: every other answered port's hold was cut short.
    assert d["ports_released_unheld"] < d["bindings_created"] / 2, figures
    assert d["port_holds_cut_short"] >= d["bindings_created"] - d["ports_released_unheld"] - HOLD_BOUND, figures
    assert d["port_holds_cut_short"] > 0, figures


def test_control_socket_stats_count_what_the_reaper_did(scene):
    if getattr(scene, "base_rss", None) is None:
        pytest.skip("runs after the flood phases")
    m = scene.metrics()
    e = scene.ctl_json("stats")[1]["stats"]["total"]["engine"]
    assert m["ports_released_unheld"] > 0 and m["port_holds_cut_short"] > 0, m
    got = {k: e[k] for k in ("ports_released_unheld", "port_holds_cut_short", "sessions_expired")}
    want = {k: m[k] for k in got}
    assert got == want, f"control socket {got}, metrics {want}"
