"""The kernel bypass on AF_PACKET, with the fast path's tc program and without it.

quicknat's AF_PACKET sockets get a copy of each frame; the host's kernel must not also
route the transit ones, or with `net.ipv4.ip_forward=1` every packet would leave twice:
translated by quicknat and untranslated by the kernel. Without the fast path an nftables
netdev ingress table drops them after the sockets' copy. With it (`xdp_fast_path = "on"`)
the sockets are bound to IPv4 and see a frame only after the tc program, so the program
keeps the transit frames it leaves to the engine from the kernel itself: it marks them
PACKET_OTHERHOST, which ip_rcv drops, and the sockets still take them (their destination
MAC is the gateway's).

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

The gateway's kernel forwards (ip_forward=1) and quicknat runs NAT44 on AF_PACKET, the
fast path off and on. The client sends a UDP exchange and pings (the first packets of
every flow are the engine's); nftables counters at the server's input count what came from
the NAT's public address and what came untranslated from the client's. Checked, both
ways: everything came translated and nothing untranslated; the gateway's own address still
answers (the kernel keeps its own traffic); with the fast path, no nftables table is left
to do it, the log says which bypass runs, the kernel counted the marked frames as
`otherhost` drops, and once the session was offloaded its next exchanges went through
the program.

    sudo python3 -m pytest tests/e2e/test_tc_kernel_bypass.py [--quicknat PATH]
"""

import re
import sys

import pytest

from netns import wait_for
from test_not_for_us import Network

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
PORT = 7000
ROUNDS = 20

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "af_packet"
workers = 1
stats_interval = 1
gso = false
xdp_fast_path = "{fast}"

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

ECHO = r"""
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((sys.argv[1], int(sys.argv[2])))
while True:
    d, p = u.recvfrom(2048)
    u.sendto(d, p)
"""

# ROUNDS request/response exchanges on one flow: prints how many were answered.
CLIENT = r"""
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.0.0.2", 41000))
u.connect((sys.argv[1], int(sys.argv[2]))); u.settimeout(2)
ok = 0
for i in range(int(sys.argv[3])):
    u.send(b"bypass-%d" % i)
    try:
        u.recv(2048); ok += 1
    except OSError:
        pass
print(ok)
"""


class Topo(Network):
    def __init__(self):
        super().__init__("qb", ("cli", "gw", "srv"))

    def setup(self, quicknat, fast):
        # The kernel would forward what reaches it: the bypass is all that stops it.
        self.build(forward=1)
        self.nsx("srv", "nft", "-f", "-", input=(
            "table inet qb {\n chain c {\n  type filter hook input priority 0;\n"
            "  ip saddr 203.0.113.1 counter\n  ip saddr 10.0.0.2 counter\n }\n}\n"))
        self.popen("srv", sys.executable, "-c", ECHO, SERVER, str(PORT))
        self.wait_udp_bound("srv", SERVER, PORT)
        self.qn = self.quicknat(quicknat, "gw", CONFIG.replace("{fast}", fast), f"bypass-{fast}")

    def counters(self):
        """(translated, untranslated) packets counted at the server's input."""
        out = self.nsx("srv", "nft", "list", "table", "inet", "qb").stdout
        got = [int(n) for n in re.findall(r"counter packets (\d+)", out)]
        assert len(got) == 2, out
        return got[0], got[1]

    def otherhost(self, dev):
        """The kernel's count of frames dropped as another host's on `dev` (ip -s -s)."""
        out = self.nsx("gw", "ip", "-s", "-s", "link", "show", dev).stdout
        m = re.search(r"otherhost\s*\n\s*(?:\d+\s+){5}(\d+)", out)
        return int(m.group(1)) if m else 0

    def netdev_tables(self):
        return self.nsx("gw", "nft", "list", "tables", "netdev").stdout


def last(topo, name):
    """The last value of stats counter `name` in the log (0 before it is there)."""
    v = re.findall(rf" {name}=(\d+)", topo.qn.stats())
    return int(v[-1]) if v else 0


def exchange(topo):
    """ROUNDS UDP exchanges on the client's one flow; all must be answered (True)."""
    r = topo.nsx("cli", sys.executable, "-c", CLIENT, SERVER, str(PORT), str(ROUNDS), timeout=60)
    assert int(r.stdout.strip()) == ROUNDS, topo.qn.text()[-2000:]
    return True


@pytest.fixture(params=["off", "on"])
def topo(request, quicknat):
    t = Topo()
    try:
        t.setup(quicknat, request.param)
        t.fast = request.param
        yield t
    finally:
        t.close()


def test_the_kernel_never_forwards_what_the_gateway_translates(topo):
    assert topo.qn.wait_started(), topo.qn.text()
    before = topo.otherhost("g-in")
    r = topo.nsx("cli", "ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, check=False)
    assert r.returncode == 0, r.stdout + topo.qn.text()[-2000:]
    exchange(topo)
    if topo.fast == "on":
        # The session is offloaded as its traffic goes on (the reaper offers it when a
        # worker hints it); from then on its packets go through the program.
        assert wait_for(lambda: exchange(topo) and last(topo, "xdp_fast_sessions") >= 1, 20,
                        step=0.2), topo.qn.stats()
    fast_before = last(topo, "xdp_fast")
    exchange(topo)
    translated, untranslated = topo.counters()
    # 3 pings and at least 2 x ROUNDS datagrams reached the server, every one from the
    # NAT's address.
    assert translated >= 3 + 2 * ROUNDS, (translated, untranslated)
    assert untranslated == 0, f"the kernel forwarded {untranslated} packets untranslated"
    # The gateway's own address is the kernel's: it answers.
    r = topo.nsx("cli", "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.0.0.1", check=False)
    assert r.returncode == 0, r.stdout
    text = topo.qn.text()
    if topo.fast == "on":
        assert "kernel bypass: the tc fast path's program marks transit IPv4" in text, text[-3000:]
        # No table: it would drop the frames before the protocol-bound sockets saw them.
        assert "quicknat" not in topo.netdev_tables(), topo.netdev_tables()
        # The program marked the engine's frames (the first of each flow at least), and
        # the kernel dropped them as another host's.
        assert topo.otherhost("g-in") > before, topo.nsx("gw", "ip", "-s", "-s", "link").stdout
        # The last exchange's 2 x ROUNDS packets went through it.
        assert wait_for(lambda: last(topo, "xdp_fast") >= fast_before + 2 * ROUNDS, 5), topo.qn.stats()
    else:
        assert "kernel bypass: nftables netdev ingress table" in text, text[-3000:]
        assert "quicknat" in topo.netdev_tables(), topo.netdev_tables()
    rc, log = topo.qn.stop()
    assert rc == 0, log
