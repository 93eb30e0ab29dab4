"""Per-subscriber limits (RFC 6888 REQ-4) through the live gateway.

    cli (10.0.0.2 greedy; 10.0.0.100-149 fifty others) == gw (g-in 10.0.0.1 | g-out
    198.51.100.1) == srv (198.51.100.2, a UDP echo server)

One pool address with 1024 ports. The greedy host opens 1100 UDP flows (one source
port each, sent and closed) and keeps its first socket; then the fifty others send one
datagram each from sockets of their own and wait for the answer. With
`max_ports_per_host = 256` the greedy host stops at 256 ports (`subscriber_limit`), all
fifty others are answered and the greedy host's first flow still works; with `0`
(unlimited) the greedy host takes all 1024 ports and the fifty are
refused (`pool_exhausted`).

Needs root.
    sudo python3 -m pytest tests/e2e/test_subscriber_limits.py [--quicknat PATH]
"""

import re
import subprocess

import pytest

from netns import UDP_SERVER, Scenario, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
OTHERS = [f"10.0.0.{i}" for i in range(100, 150)]

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat44]
max_ports_per_host = {limit}
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
ports = "20000-21023"
"""

# argv: server, port, count. Keeps the first flow's socket; opens `count` flows from
# 10.0.0.2 (one distinct source port each, so no flow repeats another), then waits for the gateway (stdin line), then sends
# on the first socket again and prints "first=<answer>|timeout".
GREEDY = r"""
import socket, sys
srv, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); first.settimeout(3)
first.bind(("10.0.0.2", 39999)); first.connect((srv, port)); first.send(b"first")
first.recv(100)
for i in range(n - 1):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("10.0.0.2", 40000 + i)); s.sendto(b"x", (srv, port)); s.close()
print("sent", flush=True)
sys.stdin.readline()
first.send(b"again")
try:
    print("first=" + first.recv(100).decode(), flush=True)
except socket.timeout:
    print("first=timeout", flush=True)
"""

# argv: server, port, then source addresses: one datagram from each, answers counted.
OTHERS_SCRIPT = r"""
import select, socket, sys, time
srv, port, ok = sys.argv[1], int(sys.argv[2]), 0
socks = []
for a in sys.argv[3:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a, 0)); s.connect((srv, port)); s.send(b"hello"); socks.append(s)
end = time.time() + 3  # one deadline for all the answers
while socks and time.time() < end:
    ready, _, _ = select.select(socks, [], [], max(0, end - time.time()))
    for s in ready:
        try:
            ok += s.recv(100).startswith(b"peer=203.0.113.1:")
        except OSError:
            pass
        socks.remove(s)
print(ok)
"""


class Limits(Scenario):
    def __init__(self):
        super().__init__("qlim", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend, limit):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        for a in OTHERS:
            self.nsx("cli", "ip", "addr", "add", f"{a}/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        self.qn = self.quicknat(quicknat, "gw", CONFIG.format(backend=backend, limit=limit),
                                f"limits-{backend}-{limit}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def drops(self, reason):
        m = re.findall(rf"\b{reason}=(\d+)", self.qn.stats())
        return int(m[-1]) if m else 0


@pytest.mark.parametrize("limit,served", [(256, 50), (0, 0)])
def test_greedy_host_and_fifty_others(quicknat, backend, limit, served):
    s = Limits()
    try:
        s.setup(quicknat, backend, limit)
        greedy = s.popen("cli", "python3", "-c", GREEDY, SERVER, "5353", "1100",
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert greedy.stdout.readline().strip() == "sent"
        # The gateway has seen every greedy flow once its drops are counted: 1100 - 256
        # refused for the host, or 1100 - 1024 refused for the pool.
        reason, n = ("subscriber_limit", 1100 - limit) if limit else ("pool_exhausted", 76)
        assert wait_for(lambda: s.drops(reason) >= n, 15), s.qn.stats()
        r = s.nsx("cli", "python3", "-c", OTHERS_SCRIPT, SERVER, "5353", *OTHERS, timeout=30)
        assert int(r.stdout.strip()) == served, s.qn.stats()
        out, _ = greedy.communicate("go\n", timeout=10)
        assert "first=peer=203.0.113.1:" in out, out + s.qn.stats()
    finally:
        assert not s.close()
