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
  * quicknat stops cleanly on SIGTERM, and everything is torn down (also on failure);
  * two inside hosts in namespaces of their own hole-punch a UDP path to each other
    through the hairpin (RFC 5128 §3.3, RFC 4787 REQ-9), after learning their public
    endpoints from a rendezvous server outside, in each of the three filtering modes
    (a topology of its own, below).

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
xdp_fast_path = "{fast}"

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

    def setup(self, quicknat, backend, fast="off"):
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

        if fast != "off":
            # XDP fast path: a veth takes XDP-redirected frames only with
            # NAPI on, which GRO (or an XDP program) turns on at the receiving end's peer.
            for n, dev in (("cli", "c0"), ("srv", "s0")):
                self.nsx(n, "ethtool", "-K", dev, "gro", "on", check=False)
        config = (CONFIG.replace("{backend}", backend).replace("{workers}", str(WORKERS))
                  .replace("{fast}", fast))
        self.qn = self.quicknat(quicknat, "gw", config, f"nat44-{backend}-fast-{fast}")
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


# The fast path: every test runs again with established flows forwarded
# by the XDP program (AF_XDP) or the tc program (AF_PACKET) (`xdp_fast_path = "on"`).
@pytest.fixture(scope="module", params=["off", "on"], ids=["slow", "xdp-fast"])
def fast(request, backend):
    return request.param


@pytest.fixture(scope="module")
def gw(quicknat, backend, fast):
    g = Gateway()
    try:
        g.setup(quicknat, backend, fast)
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


def fast_path_moved(log):
    """(packets, bytes) the fast path forwarded by the log's last stats line; (0, 0)
    with it off."""
    n = re.findall(r" xdp_fast=(\d+)", log)
    b = re.findall(r" xdp_fast_bytes=(\d+)", log)
    return (int(n[-1]) if n else 0, int(b[-1]) if b else 0)


@pytest.mark.only(backend="af_packet")
def test_16mib_tcp_with_gso_super_packets_every_segment_checksum_verified_by_the_server(gw):
    # GSO pass-through: the client's TSO makes 64 KB super-packets, quicknat passes them
    # on behind virtio-net headers; the gateway's outside interface has its transmit
    # offloads off, so its kernel segments them and completes every checksum in
    # software, and the server's kernel verifies each one. A wrong partial checksum
    # would stall the transfer or corrupt the hash.
    gw.nsx("cli", "ethtool", "-K", "c0", "tx", "on", "tso", "on", "gso", "on", check=False)
    gw.nsx("gw", "ethtool", "-K", "g-out", "tx", "off", "tso", "off", "gso", "off", check=False)
    fast_before = fast_path_moved(gw.qn.text())
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
    # transfer. Super-packets went through whole if the engine counted some (`gso`), or,
    # with the fast path on, if the program's packets during the transfer average more
    # than a frame: once the session is offloaded (within ms of the handshake) the engine
    # may see none of them.
    gso, fast = [], (0, 0)
    for _ in range(30):
        time.sleep(0.2)
        text = gw.qn.text()
        gso = re.findall(r" gso=(\d+)", text)
        after = fast_path_moved(text)
        fast = (after[0] - fast_before[0], after[1] - fast_before[1])
        if (gso and int(gso[-1]) > 0) or (fast[0] > 0 and fast[1] / fast[0] > 1514):
            break
    whole = (bool(gso) and int(gso[-1]) > 0) or (fast[0] > 0 and fast[1] / fast[0] > 1514)
    print(f"engine gso {gso[-1:]}; fast path packets, bytes {fast}")
    assert (r.returncode == 0 and got.strip() == r.stdout.strip() and len(got.strip()) == 64
            and whole), \
        f"sent {r.stdout.strip()} got {got.strip()} {r.stderr[-300:]} gso counters {gso[-3:]} " \
        f"fast path packets, bytes {fast}"


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


# ---- UDP hole punching between two inside hosts, through the hairpin ----
#
#     ha (10.0.0.2) ─┐
#                    lan (bridge) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)
#     hb (10.0.0.3) ─┘
#
# RFC 5128 §3.3/§3.4: A and B register with a rendezvous server S outside, which tells each
# its own public endpoint and the other's; then each sends to the other's public endpoint
# until it hears from it. Behind the same NAT those packets take the hairpin: each is an
# outbound packet from its sender's mapping and an inbound one to its destination's mapping,
# so under dependent filtering the first to arrive is filtered (the other has sent nothing
# yet) but opens its sender's filter, and the answer passes (RFC 4787 REQ-9).

PUNCH_FILTERING = ("endpoint-independent", "address-dependent", "address-and-port-dependent")
RENDEZVOUS = ("198.51.100.2", 3478)
HOSTS = {"ha": ("10.0.0.2", 4000), "hb": ("10.0.0.3", 5000)}

PUNCH_CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = 1
stats_interval = 1

[nat44]
filtering = "{filtering}"
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

# The rendezvous server: to each "register NAME" it answers, as JSON, the public endpoint
# it saw the datagram come from ("you") and the other registered host's ("peer", or null
# until both have registered); when the second registers, it tells the first, too.
RENDEZVOUS_SERVER = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
seen = {}
while True:
    data, src = s.recvfrom(2048)
    name = data.decode(errors="replace").split()[-1]
    seen[name] = list(src)
    peer = next((v for k, v in seen.items() if k != name), None)
    s.sendto(json.dumps({"you": list(src), "peer": peer}).encode(), src)
    if peer:
        s.sendto(json.dumps({"you": peer, "peer": list(src)}).encode(), tuple(peer))
"""

# One peer: registers with the rendezvous server (again after 0.2 s without an answer)
# and waits to be told the other peer's public endpoint, then punches: sends "punch NAME" to the peer's public endpoint every 0.2 s
# (ICE's pacing, RFC 8445 §14) until it has heard from the peer and the peer has said it
# heard us ("... ack"). Prints JSON: its public endpoint as the server saw it, the peer's
# as the server told it, and the source address the peer's datagrams arrived from.
PUNCH_PEER = r"""
import json, socket, sys, time
me, rv, name = (sys.argv[1], int(sys.argv[2])), (sys.argv[3], int(sys.argv[4])), sys.argv[5]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(me); s.settimeout(0.2)
end = time.time() + 20
out = {"mapped": None, "peer": None, "heard_from": None, "acked": False, "sent": 0}
s.sendto(("register " + name).encode(), rv)
while out["peer"] is None and time.time() < end:
    try:
        data, src = s.recvfrom(2048)
    except socket.timeout:
        s.sendto(("register " + name).encode(), rv)
        continue
    if src == rv:
        m = json.loads(data)
        out["mapped"], out["peer"] = m["you"], m["peer"]
while out["peer"] and not (out["heard_from"] and out["acked"]) and time.time() < end:
    ack = " ack" if out["heard_from"] else ""
    s.sendto(("punch " + name + ack).encode(), tuple(out["peer"])); out["sent"] += 1
    try:
        data, src = s.recvfrom(2048)
    except socket.timeout:
        continue
    except ConnectionRefusedError:  # the peer's port unreachable, hairpinned back
        continue
    if src != rv and data.startswith(b"punch "):
        out["heard_from"] = list(src)
        out["acked"] = out["acked"] or data.endswith(b" ack")
if out["heard_from"]:
    for _ in range(3):  # the peer may still wait for our ack
        s.sendto(("punch " + name + " ack").encode(), tuple(out["peer"]))
print(json.dumps(out), flush=True)
"""


class Punch(Scenario):
    """Two inside hosts on a bridge behind quicknat, a rendezvous server outside."""

    def __init__(self):
        super().__init__("qp", ("ha", "hb", "lan", "gw", "srv"))

    def setup(self, quicknat, backend, filtering):
        self.add_namespaces()
        ns = self.ns
        links = (("ha", "a0", "lan", "l-a"), ("hb", "b0", "lan", "l-b"), ("lan", "l-g", "gw", "g-in"),
                 ("srv", "s0", "gw", "g-out"))
        for n1, d1, n2, d2 in links:
            subprocess.run(["ip", "link", "add", d1, "netns", ns[n1], "type", "veth", "peer", "name", d2,
                            "netns", ns[n2]], check=True, capture_output=True, timeout=20)
        self.nsx("lan", "ip", "link", "add", "br0", "type", "bridge")
        for d in ("l-a", "l-b", "l-g"):
            self.nsx("lan", "ip", "link", "set", d, "master", "br0")
        for host, (addr, _) in HOSTS.items():
            self.nsx(host, "ip", "addr", "add", f"{addr}/24", "dev", host[1] + "0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        for n, devs in (("ha", ["a0", "lo"]), ("hb", ["b0", "lo"]), ("lan", ["l-a", "l-b", "l-g", "br0"]),
                        ("gw", ["g-in", "g-out", "lo"]), ("srv", ["s0", "lo"])):
            for d in devs:
                self.nsx(n, "ip", "link", "set", d, "up")
        for host in HOSTS:
            self.nsx(host, "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        # Every packet that crosses goes through quicknat, never the gateway's kernel.
        self.nsx("gw", "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
        for n, dev in (("ha", "a0"), ("hb", "b0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
            self.offloads_off(n, dev)
        config = PUNCH_CONFIG.format(backend=backend, filtering=filtering)
        self.qn = self.quicknat(quicknat, "gw", config, f"punch-{backend}-{filtering}")
        self.popen("srv", sys.executable, "-c", RENDEZVOUS_SERVER, *map(str, RENDEZVOUS))
        assert self.wait_udp_bound("srv", *RENDEZVOUS), "rendezvous server not bound"
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def punch(self):
        """Runs both peers at once; {host: its JSON report}."""
        procs = {h: self.popen(h, sys.executable, "-c", PUNCH_PEER, addr, str(port), *map(str, RENDEZVOUS), h,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for h, (addr, port) in HOSTS.items()}
        out = {}
        for h, p in procs.items():
            stdout, stderr = p.communicate(timeout=30)
            assert p.returncode == 0, stderr
            out[h] = json.loads(stdout)
        return out

    def stats_lines(self):
        return [l for l in self.qn.text().splitlines() if "stats:" in l]

    def drops_after(self, lines_before, reason):
        """The engine's drop count for `reason` in the first stats line written after the
        log held `lines_before` of them (0 if absent; None if none came in 5 s)."""
        end = time.time() + 5
        while len(self.stats_lines()) <= lines_before:
            if time.time() > end:
                return None
            time.sleep(0.1)
        m = re.findall(rf"[\[ ]{reason}=(\d+)", self.stats_lines()[lines_before])
        return int(m[-1]) if m else 0


@pytest.fixture(scope="module", params=PUNCH_FILTERING)
def punched(request, quicknat, backend):
    s = Punch()
    try:
        s.setup(quicknat, backend, request.param)
        out = s.punch()
        s.lines_after_punch = len(s.stats_lines())
        yield request.param, out, s
    finally:
        s.close()


def test_hole_punch_through_the_hairpin_in_every_filtering_mode(punched):
    _, out, s = punched
    for h in HOSTS:
        assert out[h]["heard_from"] and out[h]["acked"], f"{h}: {out}\n{s.qn.stats()}"


def test_hole_punched_peers_see_each_others_public_endpoint(punched):
    # RFC 4787 REQ-9: a hairpinned packet's source is its sender's public endpoint (the one
    # the rendezvous server saw), not the inside address.
    _, out, s = punched
    a, b = out["ha"], out["hb"]
    assert a["mapped"][0] == PUBLIC and b["mapped"][0] == PUBLIC, out
    assert a["mapped"] != b["mapped"], out
    assert (a["peer"], b["peer"]) == (b["mapped"], a["mapped"]), out
    assert (a["heard_from"], b["heard_from"]) == (b["mapped"], a["mapped"]), out


def test_hole_punch_first_packet_filtered_only_under_dependent_filtering(punched):
    # One worker: the first punch to reach the gateway finds the other host's filter shut in
    # the dependent modes (it has sent nothing to this endpoint yet) and is dropped as
    # `filtered`; the endpoint-independent mode lets everything to a mapping in.
    filtering, out, s = punched
    filtered = s.drops_after(s.lines_after_punch, "filtered")
    assert filtered is not None, "no stats line after the punch: " + s.qn.text()[-2000:]
    assert (filtered >= 1) == (filtering != "endpoint-independent"), f"{filtering}: {s.qn.stats()}"
