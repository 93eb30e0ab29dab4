"""End-to-end tests of the XDP fast path for established NAT44 flows.

The NAT44 topology of test_nat44.py (cli == gw == srv, quicknat on AF_XDP in gw), run
twice: with `xdp_fast_path = "off"` and `"on"`. The checks, with real traffic:

  * with the fast path on, an established TCP flow (iperf3) and an established UDP
    exchange are forwarded by the XDP program (its counter `xdp_fast` grows);
  * the bytes on the wire are identical with and without the fast path: the same
    crafted packets (UDP with and without a checksum, TCP data segments, several TTLs,
    TOS and IP IDs) on the same established flows are captured at the server in both
    runs and compared frame by frame; only the Ethernet addresses are each run's own
    (two topologies, random veth MACs), and each is checked to be that run's server and
    gateway MAC;
  * with the fast path on, the same crafted packets really went through it (its
    counter grew by at least their number, the AF_XDP socket did not see them);
  * a TCP session ended by an RST stops being fast-pathed: its packets reach the
    AF_XDP socket again (the engine removes the session from the map at its next walk);
  * the off switch: nothing is fast-pathed, the counter never appears;
  * operability: `quicknat status` says whether the fast path is on and why;
    `quicknat stats`, /metrics and the stats line carry its counters (packets and bytes
    per direction, installs, removals, misses, map full) as an entry of its own, and the
    workers list holds the workers only (no phantom entry that never beats).

The same checks run on AF_PACKET, where the fast path is the tc program (io::tcfast:
the same maps, at the tc ingress hook, with a claim filter on the receive sockets), and
there a TCP flow with every offload on must go through it as GSO super-packets.
The test_nat44.py suite itself runs again with the fast path on (its `fast` fixture).
Needs root.
    sudo python3 -m pytest tests/e2e/test_xdp_fast_path.py [--quicknat PATH]
"""

import re
import socket
import subprocess
import sys
import time

import pytest

import test_nat44
from netns import wait_for
from test_nat44 import SERVER, WORKERS, Gateway
from wirecmp import concurrently

pytestmark = [pytest.mark.needs_root]

# A UDP echo server that answers only datagrams starting with b"ping" (so crafted
# packets get no answer and change nothing but counters), and a TCP server that echoes
# lines starting with "ping" and reads everything else.
ECHO = r"""
import socket, sys, threading
addr = sys.argv[1]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 7000))
def udp():
    while True:
        d, p = u.recvfrom(65535)
        if d.startswith(b"ping"):
            u.sendto(d, p)
threading.Thread(target=udp, daemon=True).start()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, 7001)); t.listen(8)
def serve(c):
    while True:
        d = c.recv(65535)
        if not d:
            return
        if d.startswith(b"ping"):
            c.sendall(d)
while True:
    c, _ = t.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# The client: opens a UDP flow from 10.0.0.2:40000 and a TCP connection from
# 10.0.0.2:40001 to the echo server, then for each command line on stdin: "ping"
# exchanges one message on both (prints "ok"), "rst" resets the TCP connection.
CLIENT = r"""
import socket, struct, sys
srv = sys.argv[1]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.0.0.2", 40000))
u.connect((srv, 7000)); u.settimeout(3)
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t.bind(("10.0.0.2", 40001)); t.settimeout(3); t.connect((srv, 7001))
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd == "ping":
            u.send(b"ping-u"); u.recv(100)
            t.sendall(b"ping-t"); t.recv(100)
            print("ok", flush=True)
        elif cmd == "rst":
            t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            t.close()
            print("ok", flush=True)
    except OSError as e:
        print("error %r" % e, flush=True)
"""

# Sends the crafted packets (scapy, at layer 2 from c0 to the gateway) on the flows of
# CLIENT: argv[1] = the gateway's inside MAC, argv[2] = the TCP sequence number to use
# (one the server's window accepts or not: it only answers with an ACK).
CRAFT = r"""
import sys
# The layers used, not scapy.all (a second more to load every layer); the same bytes.
from scapy.layers.l2 import Ether
from scapy.layers.inet import IP, UDP, TCP
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.arch import get_if_hwaddr
gw, seq = sys.argv[1], int(sys.argv[2])
me = get_if_hwaddr("c0")
pkts = []
for i in range(8):
    ip = dict(src="10.0.0.2", dst="%s", id=0x1000 + i, ttl=(64, 2, 255, 7)[i %% 4],
              tos=(0, 0x10, 0xb8, 3)[i %% 4], flags=("DF" if i %% 2 else 0))
    pay = Raw(b"QNFP-%%02d-" %% i + bytes(range(i * 7 %% 200)))
    pkts.append(Ether(src=me, dst=gw) / IP(**ip) / UDP(sport=40000, dport=7000) / pay)
    # UDP without a checksum (RFC 768: zero), which must stay zero.
    u = Ether(src=me, dst=gw) / IP(**ip) / UDP(sport=40000, dport=7000, chksum=0) / pay
    pkts.append(u)
    flags = ("A", "PA", "AU", "PAE")[i %% 4]
    pkts.append(Ether(src=me, dst=gw) / IP(**ip) / TCP(sport=40001, dport=7001, seq=seq + i * 100,
                ack=1, flags=flags, window=512 + i) / pay)
sendp(pkts, iface="c0", verbose=False)
print(len(pkts))
""" % SERVER


def gateway_mac(g):
    r = g.nsx("gw", "cat", "/sys/class/net/g-in/address")
    return r.stdout.strip()


def last(g, name):
    """The last value of stats counter `name` in the log (0 when not there yet)."""
    v = re.findall(rf" {name}=(\d+)", g.qn.stats())
    return int(v[-1]) if v else 0


def rx_in(g):
    v = re.findall(r"stats: rx in=(\d+)", g.qn.text())
    return int(v[-1]) if v else 0


def stats_lines(g):
    return g.qn.text().count("stats:")


class Run:
    """One gateway (fast path on or off) with the echo server, the client and a capture
    of what reaches the server from the NAT's public address."""

    def __init__(self, quicknat, backend, fast):
        self.g = Gateway()
        self.fast = fast
        self.backend = backend
        self.quicknat = quicknat
        # Each run its own control socket and a metrics listener in its namespace.
        self.sock = f"/run/qn-xdpfast-{fast}-{id(self)}.sock"
        extra = f'xdp_fast_path = "{{fast}}"\ncontrol_socket = "{self.sock}"\nmetrics = "127.0.0.1:9477"\n'
        config = test_nat44.CONFIG.replace('xdp_fast_path = "{fast}"\n', extra)
        assert config != test_nat44.CONFIG
        try:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(test_nat44, "CONFIG", config)
                self.g.setup(quicknat, backend, fast)
            assert self.g.qn.wait_started(), self.g.qn.text()[-2000:]
            self.g.popen("srv", sys.executable, "-c", ECHO, SERVER)
            self.g.wait_listening("srv", SERVER, 7001)
            self.pcap = f"/tmp/qn-xdpfast-{fast}-{self.g.ns['srv']}.pcap"
            self.g.defer(lambda: subprocess.run(["rm", "-f", self.pcap]))
            self.dump = self.g.popen("srv", "tcpdump", "-i", "s0", "-U", "-n", "-w", self.pcap,
                                     "src host 203.0.113.1 and (udp port 7000 or tcp port 7001)",
                                     stderr=subprocess.PIPE, text=True)
            assert wait_for(lambda: "listening" in (self.dump.stderr.readline() or ""), 5)
            self.cli = self.g.popen("cli", sys.executable, "-c", CLIENT, SERVER,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert self.cli.stdout.readline().strip() == "ready"
        except BaseException:
            self.g.close()
            raise

    def cmd(self, c):
        self.cli.stdin.write(c + "\n")
        self.cli.stdin.flush()
        return self.cli.stdout.readline().strip()

    def established(self):
        """Exchanges messages until the flows are established (and, with the fast path
        on, until the XDP program forwards them); returns whether that happened."""
        def exchanged():
            return self.cmd("ping") == "ok" and (self.fast == "off" or last(self.g, "xdp_fast") >= 4)
        return wait_for(exchanged, 10, step=0.05)

    def craft(self, seq):
        r = self.g.nsx("cli", sys.executable, "-c", CRAFT, gateway_mac(self.g), str(seq),
                       check=False, timeout=60)
        assert r.returncode == 0, r.stderr[-1000:]
        return int(r.stdout.strip())

    def captured(self, n):
        """The crafted frames (payload marker QNFP) captured at the server, once `n` came."""
        from scapy.all import rdpcap

        def frames():
            try:
                return [bytes(p) for p in rdpcap(self.pcap) if b"QNFP-" in bytes(p)]
            except Exception:  # noqa: BLE001 -- the capture file is being written
                return []
        wait_for(lambda: len(frames()) >= n, 10)
        return frames()

    def ctl(self, quicknat, verb):
        """`quicknat VERB --json` on this run's socket: the answer's object."""
        r = subprocess.run([quicknat, verb, "--json", "--socket", self.sock],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        import json
        return json.loads(r.stdout.strip().splitlines()[-1])[verb]

    def metrics(self):
        r = self.g.nsx("gw", sys.executable, "-c",
                       "import urllib.request;print(urllib.request.urlopen("
                       "'http://127.0.0.1:9477/metrics', timeout=5).read().decode())",
                       check=False, timeout=20)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def close(self):
        return self.g.close()


@pytest.fixture(scope="module")
def runs(quicknat, backend):
    rs = {}
    try:
        for fast in ("off", "on"):
            rs[fast] = Run(quicknat, backend, fast)
        yield rs
    finally:
        for r in rs.values():
            r.close()


def test_udp_and_tcp_flows_are_fast_pathed_once_established(runs):
    on = runs["on"]
    assert on.established(), on.g.qn.text()[-3000:]
    assert "xdp fast path: on" in on.g.qn.text(), on.g.qn.text()[-3000:]
    hook = {"af_xdp": "XDP", "af_packet": "tc ingress"}[on.backend]
    assert f"at the {hook} hook" in on.g.qn.text(), on.g.qn.text()[-3000:]


def test_gso_super_packets_go_through_the_tc_fast_path_as_they_are(runs):
    """AF_PACKET: with every offload on, the client's kernel sends 64 KB TSO super-packets
    with partial checksums; the tc program forwards them whole (its packets are far
    longer than the MTU) and the server's kernel accepts what arrives (iperf3 completes:
    the checksums the program left partial were right)."""
    on = runs["on"]
    if on.backend != "af_packet":
        pytest.skip("an XDP program turns its veth peer's TSO off: no super-packets reach it")
    assert on.established(), on.g.qn.text()[-3000:]
    for n, dev in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
        on.g.nsx(n, "ethtool", "-K", dev, "tx", "on", "tso", "on", "gso", "on", "gro", "on",
                 check=False)
    # A server of its own (the topology's answers one client, test_iperf3_... below).
    on.g.popen("srv", "iperf3", "-s", "-B", SERVER, "-p", "5202", stdout=subprocess.DEVNULL)
    on.g.wait_listening("srv", SERVER, 5202)
    try:
        stats0 = on.ctl(on.quicknat, "stats")
        r = on.g.nsx("cli", "iperf3", "-c", SERVER, "-p", "5202", "-t", "2", "-J", check=False,
                     timeout=30)
        assert r.returncode == 0 and '"sum_received"' in r.stdout, r.stdout[-500:] + r.stderr
        stats1 = on.ctl(on.quicknat, "stats")
        before, after = stats0["xdp_fast_path"], stats1["xdp_fast_path"]
        packets = after["packets_out"] - before["packets_out"]
        out = after["bytes_out"] - before["bytes_out"]
        assert packets > 100, (before, after)
        # The mean frame the program forwarded out is a super-packet, not a segment.
        assert out / packets > 4 * 1514, (packets, out)
        # The connection is offloaded within the reaper's next drain after its handshake
        # (a worker's hint), not at its next 200 ms walk: until this was so, ~8% of the
        # frames (100 ms of a 20 Gbit/s flow, super-packets) went through the engine.
        slow = sum(stats1["total"]["io"][k] - stats0["total"]["io"][k]
                   for k in ("rx_inside", "rx_outside"))
        assert slow < 0.015 * packets, (slow, packets)
    finally:
        for n, dev in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
            on.g.offloads_off(n, dev)


def test_iperf3_tcp_goes_through_the_fast_path(runs):
    on = runs["on"]
    before = last(on.g, "xdp_fast")
    r = on.g.nsx("cli", "iperf3", "-c", SERVER, "-t", "2", "-J", check=False, timeout=30)
    assert r.returncode == 0 and '"sum_received"' in r.stdout, r.stdout[-500:] + r.stderr
    # Thousands of segments: most must have gone through the XDP program.
    assert on.g.qn.wait_counter("xdp_fast", before + 10_000, timeout=5), on.g.qn.stats()


def test_the_bytes_on_the_wire_are_identical_with_and_without_the_fast_path(runs):
    def one(r):
        """The crafted packets through run `r` and what reached the server (both runs at
        once: wirecmp.concurrently)."""
        assert r.established(), r.g.qn.text()[-3000:]
        before_fast, before_rx = last(r.g, "xdp_fast"), rx_in(r.g)
        n = r.craft(seq=123456)
        frames = r.captured(n)
        assert len(frames) == n, f"{r.fast}: {len(frames)} of {n} crafted frames arrived"
        if r.fast == "on":
            # They went through the XDP program, not the AF_XDP socket.
            assert r.g.qn.wait_counter("xdp_fast", before_fast + n, timeout=5), r.g.qn.stats()
            assert rx_in(r.g) - before_rx < n, r.g.qn.stats()
        return frames

    from scapy.all import rdpcap  # noqa: F401 -- loaded once here, not by both threads at once
    got = dict(zip(("off", "on"), concurrently(one, (runs["off"], runs["on"]))))
    # The two runs are two topologies with their own (random) veth MACs: each frame's
    # Ethernet addresses must be that run's server and gateway-outside MACs; everything
    # after them must be identical.
    for fast in ("off", "on"):
        g = runs[fast].g
        want = (bytes.fromhex(g.nsx("srv", "cat", "/sys/class/net/s0/address").stdout.strip().replace(":", ""))
                + bytes.fromhex(g.nsx("gw", "cat", "/sys/class/net/g-out/address").stdout.strip().replace(":", "")))
        assert all(f[:12] == want for f in got[fast]), fast
    assert len(got["on"]) == len(got["off"])
    for i, (a, b) in enumerate(zip(got["off"], got["on"])):
        assert a[12:] == b[12:], f"frame {i} differs:\n off {a.hex()}\n on  {b.hex()}"


def test_a_reset_tcp_session_stops_being_fast_pathed(runs):
    on = runs["on"]
    assert on.established()
    assert on.cmd("rst") == "ok"
    # The engine sees the RST (the program never forwards one); its next walk (200 ms)
    # takes the session out of the map. Wait for two stats lines (>= 1 s) to be sure.
    lines = stats_lines(on.g)
    assert wait_for(lambda: stats_lines(on.g) >= lines + 2, 5)
    before_rx = rx_in(on.g)
    r = on.g.nsx("cli", sys.executable, "-c", TCP_AFTER_RST, gateway_mac(on.g), check=False,
                 timeout=60)
    assert r.returncode == 0, r.stderr[-1000:]
    # All 20 reach the socket now (the stats line counts what it received).
    assert wait_for(lambda: rx_in(on.g) >= before_rx + 20, 5), (before_rx, on.g.qn.stats())


TCP_AFTER_RST = r"""
import sys
from scapy.layers.l2 import Ether
from scapy.layers.inet import IP, TCP
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.arch import get_if_hwaddr
me = get_if_hwaddr("c0")
sendp([Ether(src=me, dst=sys.argv[1]) / IP(src="10.0.0.2", dst="%s") /
       TCP(sport=40001, dport=7001, flags="A", seq=1000 + i) / Raw(b"late") for i in range(20)],
      iface="c0", verbose=False)
""" % SERVER


def test_the_off_switch_keeps_everything_on_the_slow_path(runs):
    off = runs["off"]
    r = off.g.nsx("cli", "iperf3", "-c", SERVER, "-t", "1", "-J", check=False, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = stats_lines(off.g)
    assert wait_for(lambda: stats_lines(off.g) >= lines + 1, 5)
    assert " xdp_fast=" not in off.g.qn.text()
    assert "xdp fast path: on" not in off.g.qn.text()


# -- operability: status, stats, /metrics and the stats line --

def metric(text, name):
    """The value of the sample line `name` (with its labels) in a /metrics text, or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def test_status_says_whether_the_fast_path_is_on_and_why(runs, quicknat):
    on = runs["on"].ctl(quicknat, "status")["xdp_fast_path"]
    assert on["on"] is True and on["switch"] == "on", on
    assert "established NAT44 TCP/UDP" in on["why"], on
    off = runs["off"].ctl(quicknat, "status")["xdp_fast_path"]
    assert off == {"switch": "off", "on": False, "why": "turned off in the configuration"}, off
    # The table form says it too.
    r = subprocess.run([quicknat, "status", "--socket", runs["on"].sock], capture_output=True,
                       text=True, timeout=10)
    assert re.search(r"^xdp fast path\s+on \(xdp_fast_path = on: ", r.stdout, re.M), r.stdout


def test_stats_metrics_and_the_log_export_the_fast_path_as_its_own_entry(runs, quicknat):
    run = runs["on"]
    st = run.ctl(quicknat, "stats")
    # The earlier tests established (and one reset) the flows; alone, establish them here.
    if st["xdp_fast_path"]["installs"] < 2:
        assert run.established(), run.g.qn.text()[-3000:]
        st = run.ctl(quicknat, "stats")
    # The workers only: no phantom entry for the fast path.
    assert len(st["workers"]) == WORKERS, st["workers"]
    f = st["xdp_fast_path"]
    # Both directions went through XDP, a UDP and a TCP session were installed, and the
    # first packets of each flow missed (they went to the AF_XDP socket).
    assert f["packets_out"] > 0 and f["packets_in"] > 0, f
    assert f["bytes_out"] > f["packets_out"] * 40 and f["bytes_in"] > 0, f
    assert f["packets"] == f["packets_out"] + f["packets_in"], f
    assert f["installs"] >= 2 and f["sessions"] >= 1 and f["misses"] > 0, f
    assert f["map_full"] == 0 and f["errors"] == 0, f
    assert "xdp_fast_packets" not in st["total"]["io"], st["total"]["io"]
    m = run.metrics()
    assert metric(m, "quicknat_xdp_fast_path_enabled") == 1, m
    assert metric(m, 'quicknat_xdp_fast_path_packets_total{direction="out"}') > 0, m
    assert metric(m, 'quicknat_xdp_fast_path_packets_total{direction="in"}') > 0, m
    assert metric(m, "quicknat_xdp_fast_path_installs_total") >= 2, m
    assert metric(m, "quicknat_xdp_fast_path_misses_total") > 0, m
    assert metric(m, "quicknat_xdp_fast_path_map_full_total") == 0, m
    assert metric(m, "quicknat_workers") == WORKERS, m
    assert f'worker="{WORKERS}"' not in m, "a phantom worker entry"
    # The stats line: every field, the installs among them.
    assert run.g.qn.wait_counter("xdp_fast_installs", 2, timeout=5), run.g.qn.stats()
    for field in ("xdp_fast_out", "xdp_fast_in", "xdp_fast_misses", "xdp_fast_map_full",
                  "xdp_fast_removals", "xdp_fast_sessions"):
        assert f" {field}=" in run.g.qn.stats(), run.g.qn.stats()
    # Off: nothing to export but the switch.
    off = runs["off"]
    assert off.ctl(quicknat, "stats")["xdp_fast_path"] is None
    mo = off.metrics()
    assert metric(mo, "quicknat_xdp_fast_path_enabled") == 0, mo
    assert "quicknat_xdp_fast_path_packets" not in mo, mo
