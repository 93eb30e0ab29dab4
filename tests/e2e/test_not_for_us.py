"""Frames for another host are not translated, once per backend.

A bridge floods unknown unicast to every port (after a link down it forgets a MAC), and a
veth or a promiscuous NIC hands the gateway frames whose destination MAC is another
host's. The kernel drops those (PACKET_OTHERHOST); quicknat must too, or a packet is
translated twice: by its addressee and by every gateway the bridge floods it to.

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

The client sends UDP datagrams of one flow at layer 2 (scapy) to the gateway's MAC, then
to a foreign unicast MAC, then to the gateway's MAC again; an nftables counter in the
server's input hook counts what came through. Checked: only the frames addressed to the
gateway arrive, and the stats line counts every foreign one as `not_for_us`. On AF_XDP the
gateway runs with its XDP fast path on, so the flow is established in the XDP program
when the foreign frames come (they must not take the fast path either).

    sudo python3 -m pytest tests/e2e/test_not_for_us.py [--quicknat PATH]
"""

import re
import sys

import pytest

from netns import Scenario, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
PORT = 9999
FOREIGN_MAC = "02:00:00:00:be:ef"
FOREIGN = 50
OWN = 5

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = 1
stats_interval = 1
gso = false
xdp_fast_path = "{fast}"

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

# argv: destination MAC, count. One UDP flow 10.0.0.2:40000 -> SERVER:PORT.
SEND = r"""
import sys
# The layers used, not scapy.all (a second more to load every layer); the same bytes.
from scapy.layers.l2 import Ether
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.arch import get_if_hwaddr
me = get_if_hwaddr("c0")
pkt = Ether(src=me, dst=sys.argv[1]) / IP(src="10.0.0.2", dst="%s") / \
    UDP(sport=40000, dport=%d) / Raw(b"x" * 32)
sendp([pkt] * int(sys.argv[2]), iface="c0", verbose=False)
""" % (SERVER, PORT)


class Network(Scenario):
    """cli == gw == srv with the addresses and routes of the module doc, offloads off;
    `forward`: the gateway kernel's net.ipv4.ip_forward. Shared with
    test_tc_kernel_bypass.py."""

    def build(self, forward=0):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        for n, d in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
            self.nsx(n, "ip", "link", "set", d, "up")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.nsx("gw", "sysctl", "-q", "-w", f"net.ipv4.ip_forward={forward}")
        for n, dev in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
            self.offloads_off(n, dev)


class Topo(Network):
    def __init__(self):
        super().__init__("qf", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.build()
        fast = "on"
        if backend == "af_xdp":
            # A veth takes XDP-redirected frames only with NAPI on (GRO at the peer).
            self.nsx("srv", "ethtool", "-K", "s0", "gro", "on", check=False)
        self.nsx("srv", "nft", "-f", "-", input=(
            "table inet qf {\n chain c {\n  type filter hook input priority 0;\n"
            f"  udp dport {PORT} counter\n }}\n}}\n"))
        self.qn = self.quicknat(quicknat, "gw", CONFIG.replace("{backend}", backend)
                                .replace("{fast}", fast), f"notforus-{backend}")

    def send(self, mac, n):
        self.nsx("cli", sys.executable, "-c", SEND, mac, str(n), timeout=60)

    def received(self):
        out = self.nsx("srv", "nft", "list", "table", "inet", "qf").stdout
        m = re.search(r"counter packets (\d+)", out)
        return int(m.group(1)) if m else 0

    def gateway_mac(self):
        return self.nsx("gw", "cat", "/sys/class/net/g-in/address").stdout.strip()


@pytest.fixture
def topo(quicknat, backend):
    t = Topo()
    try:
        t.setup(quicknat, backend)
        yield t
    finally:
        t.close()


def test_frames_for_another_mac_are_counted_not_translated(topo, backend):
    assert topo.qn.wait_started(), topo.qn.text()
    own = topo.gateway_mac()
    assert own and own != FOREIGN_MAC
    # The flow through the gateway first (on AF_XDP it is then in the fast path's map).
    topo.send(own, OWN)
    assert wait_for(lambda: topo.received() >= OWN, 10), \
        f"the gateway's own frames did not come through: {topo.received()}\n{topo.qn.text()}"
    topo.send(FOREIGN_MAC, FOREIGN)
    assert topo.qn.wait_counter("not_for_us", FOREIGN, timeout=10), \
        f"not counted as not_for_us: {topo.qn.stats()}"
    # Frames for the gateway after them still pass, and only those: had a foreign frame
    # been translated, it would have arrived before these.
    topo.send(own, OWN)
    assert wait_for(lambda: topo.received() >= 2 * OWN, 10), topo.qn.stats()
    assert topo.received() == 2 * OWN, f"foreign frames were translated: {topo.qn.stats()}"
    assert re.findall(r" not_for_us=(\d+)", topo.qn.stats())[-1] == str(FOREIGN), topo.qn.stats()
    print("fast path:", re.findall(r" xdp_fast=(\d+)", topo.qn.text())[-1:])
    rc, log = topo.qn.stop()
    assert rc == 0, log
