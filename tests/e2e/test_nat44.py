"""End-to-end test of `quicknat run` as a NAT44 gateway with real kernels on both sides.

Three network namespaces joined by veth pairs,

    cli (10.0.0.2, 10.0.0.20) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

quicknat is the NAT44 gateway in `gw` (the kernel there does not forward: ip_forward=0,
so every translated packet went through quicknat); the checks, with real traffic:

  * ping from the client reaches the server and the replies come back;
  * a TTL that expires at the gateway is answered with ICMP Time Exceeded;
  * a TCP connection (HTTP) works and the server sees the public address 203.0.113.1;
  * a UDP exchange works and the server sees the public address;
  * a UDP datagram to a closed port comes back as ICMP port unreachable, translated
    back to the client (the client's socket reports "connection refused");
  * a hairpin connection (client -> 203.0.113.1:8080 -> 10.0.0.20:80 on the inside)
    works and the inside server sees the public address;
  * iperf3 moves TCP data through the gateway; on AF_PACKET, 16 MiB of TCP in GSO
    super-packets pass through with every segment's checksum verified by the server;
  * forwarding resumes after the outside interface goes down and up;
  * quicknat stops cleanly on SIGTERM, and everything is torn down (also on failure).

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_nat44.py [--quicknat PATH]
"""

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from netns import HTTP_SERVER, UDP_CLIENT, UDP_SERVER, Scenario, once

pytestmark = pytest.mark.needs_root

PUBLIC = "203.0.113.1"
SERVER = "198.51.100.2"
WORKERS = 1  # worker threads, and queues per veth (1, 2 or 4)

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = {workers}
stats_interval = 1

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]

[[nat44.forward]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "10.0.0.20:80"
"""

# Reads a TCP connection to the end and prints the SHA-256 of what arrived.
HASH_SINK = r"""
import hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.2", 5202)); s.listen(1); s.settimeout(40)
while True:  # the readiness probe connects and closes first: skip empty connections
    c, _ = s.accept(); c.settimeout(40); h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        h.update(b); n += len(b)
    c.close()
    if n:
        break
print(h.hexdigest())
"""

# Sends N pseudo-random bytes to HOST:PORT in 256 KB writes; prints their SHA-256.
HASH_SOURCE = r"""
import hashlib, os, random, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(7); h = hashlib.sha256()
s = socket.create_connection((host, port), timeout=30)
left = n
while left:
    b = rnd.randbytes(min(left, 1 << 18)); h.update(b); s.sendall(b); left -= len(b)
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
print(h.hexdigest())
"""


class Gateway(Scenario):
    """The NAT44 topology with quicknat running in `gw`."""

    def __init__(self):
        super().__init__("qn", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.add_namespaces()
        # One receive queue per worker (AF_XDP binds worker i to queue i; AF_PACKET fans out).
        q = ("numtxqueues", str(WORKERS), "numrxqueues", str(WORKERS))
        ns = self.ns
        subprocess.run(["ip", "link", "add", "c0", "netns", ns["cli"], *q, "type", "veth", "peer", "name", "g-in",
                        "netns", ns["gw"], *q], check=True, capture_output=True, timeout=20)
        subprocess.run(["ip", "link", "add", "s0", "netns", ns["srv"], *q, "type", "veth", "peer", "name", "g-out",
                        "netns", ns["gw"], *q], check=True, capture_output=True, timeout=20)
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.20/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        for n, devs in (("cli", ["c0", "lo"]), ("gw", ["g-in", "g-out", "lo"]), ("srv", ["s0", "lo"])):
            for d in devs:
                self.nsx(n, "ip", "link", "set", d, "up")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        # The gateway's kernel must not forward: everything that crosses goes through quicknat.
        self.nsx("gw", "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
        for n, dev in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
            self.offloads_off(n, dev)

        config = CONFIG.replace("{backend}", backend).replace("{workers}", str(WORKERS))
        self.qn = self.quicknat(quicknat, "gw", config, f"nat44-{backend}")
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        self.popen("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353")
        self.popen("cli", sys.executable, "-c", HTTP_SERVER, "10.0.0.20", "80")
        if shutil.which("iperf3"):
            self.popen("srv", "iperf3", "-s", "-B", SERVER, "-1", stdout=subprocess.DEVNULL)
        self.wait_listening("srv", SERVER, 80)
        self.wait_listening("cli", "10.0.0.20", 80)
        self.qn.wait_started()  # bounded; test_quicknat_started checks it

    @once
    def started(self):
        """Whether quicknat wrote its start-up line and still runs."""
        return self.qn.wait_started() and self.qn.proc.poll() is None

    @once
    def stop(self):
        """SIGTERM to quicknat: (exit code or None, log text)."""
        return self.qn.stop()


@pytest.fixture(scope="module")
def gw(quicknat, backend):
    g = Gateway()
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        g.close()


def test_quicknat_started(gw):
    assert gw.started(), gw.qn.text()[-2000:]


@pytest.mark.only(backend="af_xdp")
def test_af_xdp_backend_in_use_no_fallback(gw):
    gw.started()
    text = gw.qn.text()
    assert "AF_XDP (copy mode)" in text, text[-2000:]


def test_ping_through_the_nat(gw):
    r = gw.nsx("cli", "ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ttl_expiring_at_the_gateway_is_answered_with_icmp_time_exceeded(gw):
    # TTL 1: the gateway answers ICMP Time Exceeded from its inside address.
    r = gw.nsx("cli", "ping", "-c", "1", "-t", "1", "-W", "2", SERVER, check=False)
    assert "Time to live exceeded" in r.stdout, r.stdout + r.stderr


def test_tcp_http_server_sees_the_public_address(gw):
    r = gw.nsx("cli", "curl", "-s", "--max-time", "5", f"http://{SERVER}/", check=False)
    assert r.stdout.strip() == f"peer={PUBLIC}", r.stdout + r.stderr


def test_udp_server_sees_the_public_address(gw):
    r = gw.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER, "5353", check=False)
    assert r.stdout.startswith(f"peer={PUBLIC}:"), r.stdout + r.stderr


def test_icmp_port_unreachable_translated_back_to_the_client(gw):
    r = gw.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER, "9", check=False)
    assert r.stdout.strip() == "refused", r.stdout + r.stderr


def test_hairpin_through_the_port_forward_inside_server_sees_the_public_address(gw):
    r = gw.nsx("cli", "curl", "-s", "--max-time", "5", "--interface", "10.0.0.2", f"http://{PUBLIC}:8080/", check=False)
    assert r.stdout.strip() == f"peer={PUBLIC}", r.stdout + r.stderr


def test_iperf3_tcp_through_the_nat(gw, record_property):
    if not shutil.which("iperf3"):
        pytest.skip("iperf3 is not installed (scripts/test.sh installs it)")
    r = gw.nsx("cli", "iperf3", "-c", SERVER, "-t", "2", "-J", check=False, timeout=30)
    ok = r.returncode == 0 and '"sum_received"' in r.stdout
    assert ok, r.stdout[-500:] + r.stderr
    gbps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
    record_property("gbit_per_s", f"{gbps:.2f}")
    print(f"iperf3 TCP through the NAT: {gbps:.2f} Gbit/s")


@pytest.mark.only(backend="af_packet")
def test_16mib_tcp_with_gso_super_packets_every_segment_checksum_verified_by_the_server(gw):
    # GSO pass-through: the client's TSO makes 64 KB super-packets, quicknat passes them
    # on behind virtio-net headers; the gateway's outside interface has its transmit
    # offloads off, so its kernel segments them and completes every checksum in
    # software, and the server's kernel verifies each one. A wrong partial checksum
    # would stall the transfer or corrupt the hash.
    gw.nsx("cli", "ethtool", "-K", "c0", "tx", "on", "tso", "on", "gso", "on", check=False)
    gw.nsx("gw", "ethtool", "-K", "g-out", "tx", "off", "tso", "off", "gso", "off", check=False)
    try:
        sink = gw.popen("srv", sys.executable, "-c", HASH_SINK, stdout=subprocess.PIPE, text=True)
        gw.wait_listening("srv", SERVER, 5202)
        r = gw.nsx("cli", sys.executable, "-c", HASH_SOURCE, SERVER, "5202", str(16 << 20), check=False, timeout=60)
        try:
            got, _ = sink.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            sink.kill()
            got, _ = sink.communicate()
    finally:
        gw.nsx("cli", "ethtool", "-K", "c0", "tx", "off", "tso", "off", "gso", "off", check=False)
    # The counters reach the log once a second: wait for a line written after the
    # transfer.
    gso = []
    for _ in range(30):
        time.sleep(0.2)
        gso = re.findall(r" gso=(\d+)", gw.qn.text())
        if gso and int(gso[-1]) > 0:
            break
    assert (r.returncode == 0 and got.strip() == r.stdout.strip() and len(got.strip()) == 64
            and bool(gso) and int(gso[-1]) > 0), \
        f"sent {r.stdout.strip()} got {got.strip()} {r.stderr[-300:]} gso counters {gso[-3:]}"


def test_forwarding_resumes_after_the_outside_interface_goes_down_and_up(gw):
    # An interface going down and up must not kill the daemon or stop forwarding.
    gw.nsx("gw", "ip", "link", "set", "g-out", "down")
    time.sleep(0.5)
    gw.nsx("gw", "ip", "link", "set", "g-out", "up")
    r = None
    for _ in range(10):
        r = gw.nsx("cli", "ping", "-c", "1", "-W", "1", SERVER, check=False)
        if r.returncode == 0:
            break
        time.sleep(0.5)
    assert gw.qn.proc.poll() is None and r.returncode == 0, (r.stdout + r.stderr) if r else ""


def test_quicknat_stops_cleanly_on_sigterm(gw):
    rc, text = gw.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_no_xdp_program_left_attached(gw):
    gw.stop()
    left = gw.nsx("gw", "ip", "link", "show", check=False).stdout
    assert "xdp" not in left, left


def test_namespaces_removed(gw):
    left = gw.close()
    assert not left, str(left)
