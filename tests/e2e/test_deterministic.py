"""Deterministic NAT (RFC 7422) through the live gateway.

    cli (100.64.0.2, .0.65, .1.7, .3.200: four subscribers of 100.64.0.0/22) == gw (g-in
    100.64.0.1 | g-out 198.51.100.1) == srv (198.51.100.2: a UDP server and a TCP server
    that each answer with the peer address they saw)

`[nat44.deterministic]` maps 100.64.0.0/22 onto 203.0.113.0/28 (R = 64, 1008 ports
each). The server sees each subscriber's UDP and TCP flows from exactly the endpoint
`quicknat det forward --port` predicts from the configuration alone, and `quicknat det
reverse` of what it saw names the subscriber. Failover: a gateway is killed (SIGKILL)
and a second process started with the same configuration; the same UDP socket is seen
at the same public endpoint, and a TCP connection established through the first
continues through the second (mid-stream pick-up).

Needs root.
    sudo python3 -m pytest tests/e2e/test_deterministic.py [--quicknat PATH]
"""

import json
import subprocess

import pytest

from netns import UDP_SERVER, Scenario

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
HOSTS = ["100.64.0.2", "100.64.0.65", "100.64.1.7", "100.64.3.200"]

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat44.deterministic]
inside = "100.64.0.0/22"
outside = "203.0.113.0/28"
"""

# A TCP server: for each connection, answers every line with "peer=ADDR:PORT LINE".
TCP_SERVER = r"""
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
def serve(c, peer):
    f = c.makefile("rb")
    for line in f:
        c.sendall(("peer=%s:%d %s\n" % (peer[0], peer[1], line.decode().strip())).encode())
    c.close()
while True:
    c, peer = s.accept()
    threading.Thread(target=serve, args=(c, peer), daemon=True).start()
"""

# argv: server, udp port, tcp port, then "addr:port" pairs. One UDP datagram and one TCP
# connection (source port + 1) from each; prints one JSON list of what the server saw.
FLOWS = r"""
import json, socket, sys
srv, uport, tport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
for pair in sys.argv[4:]:
    a, p = pair.split(":"); p = int(p)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    u.bind((a, p)); u.connect((srv, uport)); u.send(b"hi")
    udp = u.recv(100).decode(); u.close()
    t = socket.create_connection((srv, tport), timeout=3, source_address=(a, p + 1))
    t.sendall(b"x\n"); tcp = t.makefile().readline().split()[0]; t.close()
    out.append({"inside": a, "udp_port": p, "udp": udp, "tcp_port": p + 1, "tcp": tcp})
print(json.dumps(out), flush=True)
"""

# One UDP socket and one TCP connection kept across the failover. argv: server, udp port,
# tcp port, address, port. Prints what the server saw, waits for a line on stdin, sends
# again on both (retrying for up to 10 s while the new gateway comes up), prints again.
KEEP = r"""
import socket, sys, time
srv, uport, tport, a, p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(0.5)
u.bind((a, p)); u.connect((srv, uport))
t = socket.create_connection((srv, tport), timeout=3, source_address=(a, p))
tf = t.makefile()
def udp():
    end = time.time() + 10
    while time.time() < end:
        u.send(b"hi")
        try:
            return u.recv(100).decode()
        except socket.timeout:
            pass
    return "udp-timeout"
def tcp(word):
    t.settimeout(10)
    t.sendall(word.encode() + b"\n")
    try:
        return tf.readline().strip() or "tcp-closed"
    except OSError as e:
        return "tcp-error:%s" % e
print(udp(), tcp("before"), flush=True)
sys.stdin.readline()
print(udp(), tcp("after"), flush=True)
"""


def det(quicknat, cfg, *args):
    """`quicknat det ... --json` on the host: offline, from the configuration file."""
    r = subprocess.run([quicknat, "det", *args, "--config", cfg, "--json"],
                       capture_output=True, text=True, timeout=10, check=True)
    return json.loads(r.stdout)


class Det(Scenario):
    def __init__(self):
        super().__init__("qdet", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        for a in HOSTS:
            self.nsx("cli", "ip", "addr", "add", f"{a}/22", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "100.64.0.1/22", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "100.64.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        self.popen("srv", "python3", "-c", TCP_SERVER, SERVER, "8080")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        assert self.wait_listening("srv", SERVER, 8080)
        self.config = CONFIG.format(backend=backend)
        return self.start(quicknat, f"det-{backend}-1")

    def start(self, quicknat, label):
        qn = self.quicknat(quicknat, "gw", self.config, label)
        assert qn.wait_started(), qn.text()[-2000:]
        return qn


def endpoint(seen):
    """"peer=ADDR:PORT" -> (ADDR, PORT)."""
    addr, port = seen.split("=", 1)[1].rsplit(":", 1)
    return addr, int(port)


def test_server_sees_the_predicted_endpoints_and_reverse_names_the_subscriber(quicknat, backend):
    s = Det()
    try:
        qn = s.setup(quicknat, backend)
        cfg = qn.cfg.name
        pairs = [f"{a}:{40000 + 17 * i}" for i, a in enumerate(HOSTS)]
        r = s.nsx("cli", "python3", "-c", FLOWS, SERVER, "5353", "8080", *pairs, timeout=60)
        seen = json.loads(r.stdout)
        assert len(seen) == len(HOSTS)
        publics = set()
        for f in seen:
            for proto in ("udp", "tcp"):
                got = endpoint(f[proto])
                want = det(quicknat, cfg, "forward", f["inside"], "--port", str(f[proto + "_port"]))
                assert got == (want["public"], want["port"]), (proto, f, want)
                assert want["first_port"] <= got[1] <= want["last_port"]
                back = det(quicknat, cfg, "reverse", got[0], str(got[1]))
                assert back["inside"] == f["inside"], (proto, f, back)
                publics.add(got[0])
        # 100.64.0.2 and .0.65 are subscribers 2 and 65: two public addresses apart.
        assert publics == {"203.0.113.0", "203.0.113.1", "203.0.113.4", "203.0.113.15"}
    finally:
        assert not s.close()


def test_a_second_gateway_keeps_the_udp_endpoint_and_picks_up_tcp(quicknat, backend):
    s = Det()
    try:
        first = s.setup(quicknat, backend)
        keep = s.popen("cli", "python3", "-c", KEEP, SERVER, "5353", "8080", "100.64.1.7", "45000",
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        before = keep.stdout.readline().split()
        assert len(before) == 3 and before[2] == "before", before
        udp_before, tcp_before = endpoint(before[0]), endpoint(before[1])
        want = det(quicknat, first.cfg.name, "forward", "100.64.1.7", "--port", "45000")
        assert udp_before == tcp_before == (want["public"], want["port"])
        # SIGKILL: no clean shutdown; then a fresh process with the same configuration.
        first.proc.kill()
        first.proc.wait(timeout=10)
        s.start(quicknat, f"det-{backend}-2")
        out, _ = keep.communicate("go\n", timeout=40)
        after = out.split()
        assert len(after) == 3, out
        assert endpoint(after[0]) == udp_before, out
        # The same TCP connection answered: the server saw it from the same endpoint.
        assert endpoint(after[1]) == tcp_before and after[2] == "after", out
    finally:
        assert not s.close()
