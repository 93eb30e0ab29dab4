"""RFC 7915's two MTUs and the IPv4 fragmentation of IPv6 fragments, on a live CLAT.
The golden scenarios siit_mtu / nat64_mtu check the same
rules offline, byte for byte; this checks that `quicknat run` takes the next-hop MTUs from
its interfaces and that real kernels on both sides accept what it sends.

TestTwoMtus   v4 (192.0.0.2, c0 MTU 1400) == clat [clat] (x-in 192.0.0.1, MTU 1400 |
              x-out 2001:db8:2::2, MTU 1500) == v6 (2001:db8:2::1, UDP echo at SERVER6)
              [clat.options] sets no MTU: the next hops are the links' (IPv4 1400, IPv6
              1500), lowest_ipv6_mtu its default 1280.
  - a 1328-byte UDP datagram with DF (IP_PMTUDISC_DO) crosses whole both ways: RFC 7915
    §4.1 holds a DF packet to the next-hop IPv6 MTU (1348 <= 1500), not to 1280 (held to
    1280, it would be answered with Fragmentation Needed 1260 and the datagram lost);
  - a 3000-byte datagram without DF: the IPv4 host's 1400-byte fragments are cut for the
    lowest IPv6 MTU; the IPv6 host's echo comes back in 1448-byte IPv6 fragments, whose
    IPv4 translations (1468 bytes, DF clear, RFC 7915 §5.1.1) are cut again for the
    1400-byte IPv4 link (not dropped as needs_fragmentation, unanswered); the
    IPv4 host's kernel reassembles the echo intact.

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_mtu.py [--quicknat PATH]
"""

import sys

import pytest

from test_nat64 import (CLAT, SERVER, SERVER6, UDP_BIG, UDP_ECHO, Topology, assert_started,
                        assert_stops_cleanly, make)

pytestmark = pytest.mark.needs_root

# The CLAT of test_nat64 without its MTU options: everything from the links.
CLAT_LINKS = CLAT.replace("ipv6_mtu = 1500\n", "").replace("ipv4_mtu = 1480\n", "")

# Sends one datagram of argv[3] bytes with DF set (IP_PMTUDISC_DO: the kernel neither
# fragments it nor lets routers do so) and prints the length of an intact answer,
# "corrupt" or "timeout".
UDP_DF = UDP_BIG.replace("s.setsockopt(socket.IPPROTO_IP, 10, 0)", "s.setsockopt(socket.IPPROTO_IP, 10, 2)")


class TwoMtus(Topology):
    def __init__(self, quicknat, backend):
        super().__init__("qnmtu", ("v4", "clat", "v6"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("v4", "c0", "clat", "x-in")
        self.link("clat", "x-out", "v6", "v0")
        for n, dev in (("v4", "c0"), ("clat", "x-in")):
            self.nsx(n, "ip", "link", "set", dev, "mtu", "1400")
        self.nsx("v4", "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        self.nsx("v4", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("clat", "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        self.nsx("clat", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        self.nsx("clat", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("v6", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "v0", "nodad")
        self.nsx("v6", "ip", "-6", "addr", "add", f"{SERVER6}/128", "dev", "lo", "nodad")
        self.nsx("v6", "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        assert "ipv6_mtu" not in CLAT_LINKS and "ipv4_mtu" not in CLAT_LINKS
        self.clat = self.translator("clat", "x-in", "x-out", CLAT_LINKS, f"clat-{self.backend}")
        self.popen("v6", sys.executable, "-c", UDP_ECHO, SERVER6, "7007")

    def echo(self, script, size):
        """Sends `size` bytes from v4 to the echo with `script`; one retry (the first may
        go while neighbours resolve). Returns the last answer."""
        self.wait_udp_bound("v6", SERVER6, 7007)
        for _ in range(2):
            r = self.nsx("v4", sys.executable, "-c", script, SERVER, "7007", str(size), check=False)
            if r.stdout.strip() == str(size):
                break
        return (r.stdout + r.stderr).strip()


@pytest.fixture(scope="class")
def mtu(quicknat, backend):
    yield from make(TwoMtus, quicknat, backend)


class TestTwoMtus:
    def test_clat_quicknat_started(self, mtu):
        assert_started(mtu.clat)

    def test_a_1328_byte_df_datagram_crosses_whole_both_ways(self, mtu):
        got = mtu.echo(UDP_DF, 1300)
        mtu.clat.wait_counter("forwarded", at_least=2)
        stats = mtu.clat.stats()
        assert got == "1300", f"{got[-300:]} | {stats}"
        assert "fragment_needed=" not in stats and " fragmented=0 " in stats, stats

    def test_ipv6_fragments_too_big_for_the_ipv4_link_are_cut_and_the_echo_reassembles(self, mtu):
        got = mtu.echo(UDP_BIG, 3000)
        # At least: the IPv4 host's 3 fragments cut for IPv6, the echo's 2 big IPv6
        # fragments cut for IPv4.
        cut = mtu.clat.wait_counter("fragmented", at_least=4)
        stats = mtu.clat.stats()
        assert got == "3000" and cut, f"{got[-300:]} | {stats}"
        assert "needs_fragmentation=" not in stats and " oversize=0 " in stats, stats

    def test_clat_quicknat_stops_cleanly_on_sigterm(self, mtu):
        assert_stops_cleanly(mtu.clat)

    def test_namespaces_removed(self, mtu):
        left = mtu.close()
        assert not left, str(left)
