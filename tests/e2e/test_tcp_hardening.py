"""End-to-end: a real TCP connection through `quicknat run` (NAT44) survives an off-path
RST and is closed by an in-window one.

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

A Python echo server in `srv`, a client in `cli` driven line by line over a pipe. scapy
in `srv` learns the server's next sequence number from what it sent, then injects RSTs
"from the server" toward the client's public endpoint:

  * one far outside the window (an off-path guess): quicknat drops it and counts it
    (`tcp_rst_out_of_window`), the client never sees it, and the connection goes on;
  * one at exactly the server's next sequence number: quicknat forwards it and the
    client's kernel resets the connection.

Forwarding the first RST would let an off-path guess reset the client's connection (and
close the session in the NAT).

    sudo python3 -m pytest tests/e2e/test_tcp_hardening.py [--quicknat PATH]
"""

import json
import re
import subprocess
import sys

import pytest

from netns import Scenario, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
PORT = 7000

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = 1
stats_interval = 1
# The engine's sequence checks: a session the fast path forwards has its window
# forgotten (the engine no longer sees its segments), as the kernel's flowtable marks
# offloaded connections liberal.
xdp_fast_path = "off"

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

# Echo server: skips connections that send nothing (the readiness probe), prints
# "PEER addr port" for the first that does, and echoes its lines.
ECHO_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4); s.settimeout(60)
while True:
    c, peer = s.accept(); c.settimeout(60)
    f = c.makefile("rb")
    first = f.readline()
    if first:
        break
    c.close()
print("PEER %s %d" % peer, flush=True)
c.sendall(first)
try:
    for line in f:
        c.sendall(line)
except OSError:
    pass
"""

# Client: connects, then per stdin line "send WORD" sends WORD and prints "GOT WORD",
# or "ERR <exception>" when the connection is gone.
CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
f = s.makefile("rb")
s.sendall(b"hello\n")
print("connected" if f.readline() == b"hello\n" else "no echo", flush=True)
for cmd in sys.stdin:
    word = cmd.split()[1]
    try:
        s.sendall(word.encode() + b"\n")
        got = f.readline()
        print("GOT " + got.decode().strip() if got else "ERR eof", flush=True)
    except OSError as e:
        print("ERR " + type(e).__name__, flush=True)
"""

# Sniffer: prints "ready" once capturing; on a line on stdin stops and prints the
# captured TCP segments as JSON [seq, payload length, flags].
SNIFFER = r"""
import json, sys, threading
# The layers used, not scapy.all (a second more to load every layer).
from scapy.config import conf
import scapy.arch  # noqa: F401 -- the capture sockets
from scapy.layers.l2 import Ether  # noqa: F401 -- frames dissected from Ethernet on
from scapy.layers.inet import TCP
from scapy.sendrecv import AsyncSniffer
conf.verb = 0
up = threading.Event()
sn = AsyncSniffer(iface=sys.argv[1], filter=sys.argv[2], store=True, started_callback=up.set)
sn.start()
assert up.wait(10), "sniffer did not start"
print("ready", flush=True)
sys.stdin.readline()
pkts = sn.stop() or []
print(json.dumps([[p[TCP].seq, len(bytes(p[TCP].payload)), int(p[TCP].flags)] for p in pkts if TCP in p]), flush=True)
"""

# Sends one RST from argv[1]:argv[2] to argv[3]:argv[4] with sequence number argv[5].
INJECT = r"""
import sys
from scapy.config import conf
from scapy.layers.inet import IP, TCP
from scapy.sendrecv import send
conf.verb = 0
send(IP(src=sys.argv[1], dst=sys.argv[3]) / TCP(sport=int(sys.argv[2]), dport=int(sys.argv[4]), flags="R", seq=int(sys.argv[5]) % 2**32))
"""


class Edge(Scenario):
    """The NAT44 topology with quicknat in `gw`."""

    def __init__(self):
        super().__init__("qtcp", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.qn = self.quicknat(quicknat, "gw", CONFIG.format(backend=backend), f"tcp-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]
        # The path works (and the neighbours are resolved) before the connection opens.
        r = self.nsx("cli", "ping", "-c", "1", "-W", "2", SERVER, check=False)
        assert r.returncode == 0, r.stdout + r.stderr + self.qn.stats()

    def piped(self, name, script, *args):
        return self.popen(name, sys.executable, "-c", script, *args, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def sniffer(self, name, iface, bpf):
        p = self.piped(name, SNIFFER, iface, bpf)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        return p


def finish(sniffer):
    sniffer.stdin.write("stop\n")
    sniffer.stdin.flush()
    out = sniffer.stdout.readline()
    assert out, sniffer.stderr.read()
    return json.loads(out)


def ask(client, word):
    client.stdin.write(f"send {word}\n")
    client.stdin.flush()
    return client.stdout.readline().strip()


@pytest.fixture(scope="module")
def edge(quicknat, backend):
    s = Edge()
    try:
        s.setup(quicknat, backend)
        yield s
    finally:
        s.close()


def test_off_path_rst_is_dropped_and_in_window_rst_closes(edge):
    s = edge
    server = s.piped("srv", ECHO_SERVER, SERVER, str(PORT))
    assert s.wait_listening("srv", SERVER, PORT), server.stderr.read()
    client = s.piped("cli", CLIENT, SERVER, str(PORT))
    assert client.stdout.readline().strip() == "connected", client.stderr.read() + s.qn.stats()
    _, public, pport = server.stdout.readline().split()
    assert public == "203.0.113.1"

    def server_next_seq(word):
        """Echoes `word` while sniffing the server's segments: its next sequence number."""
        sn = s.sniffer("srv", "s0", f"tcp and src port {PORT}")
        assert ask(client, word) == f"GOT {word}"
        segs = [x for x in finish(sn) if x[1] > 0]
        assert segs, "the echo was not captured"
        seq, length, _ = segs[-1]
        return (seq + length) % 2**32

    nxt = server_next_seq("ping")
    # An off-path guess: half the sequence space away.
    watch = s.sniffer("cli", "c0", "tcp[13] & 4 != 0")
    s.nsx("srv", sys.executable, "-c", INJECT, SERVER, str(PORT), public, pport, str(nxt + 2**31))
    # The stats line lists drops as drops[tcp_rst_out_of_window=N].
    assert wait_for(lambda: re.search(r"\btcp_rst_out_of_window=[1-9]", s.qn.stats()), 5), s.qn.stats()
    assert ask(client, "pong") == "GOT pong", s.qn.stats()
    assert finish(watch) == [], "the off-path RST reached the client"

    # In window: exactly the server's next sequence number.
    nxt = server_next_seq("again")
    watch = s.sniffer("cli", "c0", "tcp[13] & 4 != 0")
    s.nsx("srv", sys.executable, "-c", INJECT, SERVER, str(PORT), public, pport, str(nxt))
    # The RST left before the client's next word, on the same links as its echo: the
    # client's kernel sees the RST first and resets the socket.
    answer = ask(client, "after")
    assert answer.startswith("ERR"), f"{answer} {s.qn.stats()}"
    assert len(finish(watch)) >= 1, "the in-window RST was not forwarded"
