"""Live versus replay: `quicknat translate`, fed the frames a live gateway received, emits
the same ICMP errors and fragments, byte for byte, as the live gateway sent (the engine
decides both; the live runtime and the replay must hand it the same packets, directions,
addresses and MTUs).

For each mode, a fresh gateway in network namespaces is made to owe ICMP errors and to
cut fragments, while both of its links are captured from their peer ends (parity.py
tells why there, and how). Then the frames it received, both links merged in capture-time
order, are replayed with `quicknat translate` and a configuration equal to the live one
plus the [gateway] addresses and MTUs of the live links; every ICMP error and fragment the
live gateway sent must appear in the replay's output from the IP header on, in the same
order per flow, and the replay must emit no other; a second test holds the packets it
forwarded to the same rule. Each case also checks that the live gateway really sent what
the case is about (so parity is never vacuous). The gateways start fresh with the
captures already running, so the replay starts from the same state (empty session
tables, the same port allocations), and each case awaits what the gateway sends for it
(an error on the sender's socket, an echo, a path MTU learnt, a datagram received).

TestNat44Parity   cli (10.0.0.2) == gw [nat44] (g-in 10.0.0.1 | g-out 198.51.100.1, link MTU 1400) == srv (198.51.100.2)
                  live [gateway] inside_mtu = 1280
  TTL 1 out (Time Exceeded from 10.0.0.1), TTL 1 in (from 198.51.100.1), a 1500-byte DF
  datagram out (Fragmentation Needed, MTU 1400: the link's), a 1400-byte DF answer in
  (Fragmentation Needed, MTU 1280: the configured one, on a session).

TestNat64Parity   cli (2001:db8:1::2) == gw [nat64] (g-in 2001:db8:1::1 | g-out 198.51.100.1, link MTU 1400) == srv
                  [nat64.options] ipv4_mtu = ipv6_mtu = 1500; live [gateway] inside_mtu = 1280
                  (the translator MTUs are lowered to the links': 1400 by the interface, 1280
                  by the configuration)
  hop limit 1 (ICMPv6 Time Exceeded), a 1500-byte IPv6 packet (Packet Too Big, MTU 1420),
  an IPv4 answer without DF cut into IPv6 fragments, a 1328-byte IPv4 DF answer
  (Fragmentation Needed, MTU 1260), TTL 1 in (Time Exceeded from 198.51.100.1).

TestClatParity    v4 (192.0.0.2) == clat [clat] (x-in 192.0.0.1, link MTU 1400 | x-out 2001:db8:2::2) == v6 (2001:db8:2::1)
                  [clat.options] ipv4_mtu = 1500 (lowered live to 1400), ipv6_mtu = 1280
  IPv4 side: TTL 1 (Time Exceeded), a 1400-byte DF datagram (Fragmentation Needed, MTU
  1260), a datagram without DF cut into IPv6 fragments; IPv6 side: hop limit 1 (ICMPv6
  Time Exceeded), a 1500-byte packet (Packet Too Big, MTU 1420).

TestIlaParity     a (3333:0:0:1::a) == r1 [ila] (r1a fe80::1 | r1n fe80::1, link MTU 1400) == n (B's locator address)
                  live [gateway] inside_mtu = 1280
  a 1500-byte packet out (Packet Too Big, MTU 1400), a 1400-byte packet in (Packet Too
  Big, MTU 1280), and a hop limit 1 packet (Time Exceeded: an ILA router decrements the
  hop limit like Linux's, whose ILA translates in the forwarding path).

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_translate_parity.py [--quicknat PATH]
"""

import select
import shutil
import subprocess
import sys
import time

import pytest

from netns import UDP_BIG, Scenario, once, wait_for
from parity import PROBE, Parity, new_tmp

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
POOL4 = "203.0.113.1"
PREF64 = "2001:db8:64::/96"
SERVER6 = "2001:db8:64::c633:6402"   # 198.51.100.2 under PREF64 (RFC 6052, /96)
CLAT6 = "2001:db8:aaaa::2"

# A UDP server answering "big:N" with N bytes (DF set: the kernel's default path MTU
# discovery), and an echo server sending with DF clear ("nodf").
UDP_BIG_SERVER = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
if sys.argv[3:] == ["nodf"]:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: DF clear
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(65535)
    try:
        s.sendto(b"y" * int(data[4:]) if data.startswith(b"big:") else data, peer)
    except OSError:
        pass
"""

# Sends one datagram with hop limit argv[3] and payload argv[4] (IPv6), then exits.
UDP_HOPS = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, int(sys.argv[3]))
s.sendto(sys.argv[4].encode(), (sys.argv[1], int(sys.argv[2])))
"""

# Prints the payload of every datagram to argv[1]:argv[2], one line each ("ready" first).
UDP_SINK = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    d, peer = s.recvfrom(65535)
    print(d[:40].decode(errors="replace"), flush=True)
"""


# ------------------------------------------------------------------------------ topology


class ParityGateway(Scenario):
    """One gateway between two peers, joined by veth pairs with offloads off, kernels
    forwarding nothing; its links captured from the peer ends from before it starts."""

    def __init__(self, prefix, names, quicknat, backend):
        super().__init__(prefix, names)
        self.binary, self.backend = quicknat, backend
        self.tmp = new_tmp(f"{prefix}-")
        self.parity = None
        self.qn = None
        self.captures_ready = False

    def start_gateway(self, gw, inside, outside, peers, mode_config, label, **gateway_keys):
        """Starts the captures of the gateway in namespace `gw` (inside and outside
        devices), from the peer ends `peers` ((namespace, device) inside and outside),
        then quicknat with the [gateway] keys and `mode_config`."""
        keys = {"inside": inside, "outside": outside, "backend": self.backend, "workers": 1,
                "stats_interval": 1, **gateway_keys}
        links = {"inside": (self.ns[gw], inside, self.ns[peers[0][0]], peers[0][1]),
                 "outside": (self.ns[gw], outside, self.ns[peers[1][0]], peers[1][1])}
        self.parity = Parity(self.binary, keys, mode_config, links, self.tmp)
        self.captures_ready = self.parity.start()
        self.qn = self.quicknat(self.binary, gw, self.parity.live_config(), label)
        self.qn.wait_started()

    def probe(self, name, dst, size, hops, src=None, port=33434):
        r = self.nsx(name, sys.executable, "-c", PROBE, dst, str(port), str(size), str(hops), *([src] if src else []),
                     check=False)
        return (r.stdout + r.stderr).strip()

    def route_mtu(self, name, dst, mtu, timeout=5.0):
        """Waits (bounded) until `name`'s route to `dst` carries `mtu` (learnt from a
        Fragmentation Needed); returns the route."""
        last = [""]

        def learnt():
            last[0] = self.nsx(name, "ip", "route", "get", dst, check=False).stdout.strip()
            return f"mtu {mtu}" in last[0]

        wait_for(learnt, timeout)
        return last[0]

    def detail(self):
        return f"{self.qn.stats() if self.qn else ''}"

    @once
    def started(self):
        return self.captures_ready and self.qn.wait_started() and self.qn.proc.poll() is None

    @once
    def parity_result(self):
        """The captures stopped after every case ran, the replay and the comparison."""
        self.cases()
        return self.parity.compare()

    def close(self):
        if self.left is None and self.parity is not None:
            self.parity.close()
        left = super().close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left


def make(cls, quicknat, backend):
    t = cls(quicknat, backend)
    try:
        t.setup()
        yield t
    finally:
        t.close()


def assert_parity(t, record_property):
    res = t.parity_result()
    c = res["counts"]
    record_property("compared", f"{c.get('live_errors', 0)} ICMP errors, {c.get('live_fragments', 0)} fragments "
                                f"of {c.get('frames_received', 0)} frames received")
    assert res["ok"], "live gateway and `quicknat translate` differ:\n" + "\n".join(res["lines"])


def assert_forwarded_parity(t, record_property):
    res = t.parity_result()
    record_property("forwarded_compared", str(res["counts"].get("forwarded", 0)))
    assert res["forwarded_ok"], "live gateway and `quicknat translate` forward differently:\n" + \
        "\n".join(res["forwarded_lines"])


def live_sent(t, kind):
    """The ICMP errors ("icmp error") or fragments ("fragment") the live gateway sent."""
    return [p for k, ps in t.parity_result().get("live", {}).items() if k[0] == kind for p in ps]


# --------------------------------------------------------------------------------- NAT44

NAT44 = """
[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""


# The echo identifier of the pings through the stateful modes: inside the pool's port range
# (1024-65535), so it is preserved, as the TCP and UDP source ports (ephemeral) are. ping
# picks a random one otherwise, and one below 1024 gets an RFC 6056 randomised identifier:
# a different one in the live gateway and in `translate` (each draws its own secret), and
# the comparison fails.
ECHO_ID = "4660"


class Nat44Parity(ParityGateway):
    def __init__(self, quicknat, backend):
        super().__init__("qp44", ("cli", "gw", "srv"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0", mtu=1400)
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", sys.executable, "-c", UDP_BIG_SERVER, SERVER, "5353")
        self.wait_udp_bound("srv", SERVER, 5353)
        self.start_gateway("gw", "g-in", "g-out", (("cli", "c0"), ("srv", "s0")), NAT44, f"p44-{self.backend}",
                           inside_mtu=1280)

    @once
    def cases(self):
        """Every case in order, each awaiting what the gateway sends for it."""
        out = {"warm": self.nsx("cli", "ping", "-c", "1", "-W", "2", "-e", ECHO_ID, SERVER, check=False)}
        out["ttl_out"] = self.probe("cli", SERVER, 60, 1)
        out["too_big_out"] = self.probe("cli", SERVER, 1500, 64)
        out["ttl_in"] = self.probe("srv", POOL4, 60, 1)
        self.nsx("cli", sys.executable, "-c", UDP_BIG, SERVER, "5353", "0", "big:1372", check=False)
        out["too_big_in"] = self.route_mtu("srv", POOL4, 1280)
        return out


@pytest.fixture(scope="class")
def p44(quicknat, backend):
    yield from make(Nat44Parity, quicknat, backend)


class TestNat44Parity:
    def test_quicknat_started_with_both_links_captured(self, p44):
        assert p44.started(), p44.qn.text()[-2000:]

    def test_ping_through_the_nat(self, p44):
        r = p44.cases()["warm"]
        assert r.returncode == 0, r.stdout + r.stderr + p44.detail()

    def test_ttl_1_from_the_inside_live_answers_time_exceeded_from_the_inside_address(self, p44):
        assert p44.cases()["ttl_out"] == "type=11 code=0 from=10.0.0.1 info=0", p44.detail()

    def test_ttl_1_from_the_outside_live_answers_time_exceeded_from_the_outside_address(self, p44):
        assert p44.cases()["ttl_in"] == "type=11 code=0 from=198.51.100.1 info=0", p44.detail()

    def test_df_1500_bytes_out_live_answers_fragmentation_needed_with_the_outside_links_mtu_1400(self, p44):
        assert p44.cases()["too_big_out"] == "type=3 code=4 from=10.0.0.1 info=1400", p44.detail()

    def test_df_answer_of_1400_bytes_in_live_answers_fragmentation_needed_with_the_configured_inside_mtu_1280(self, p44):
        route = p44.cases()["too_big_in"]
        assert "mtu 1280" in route, f"server's route: {route} | {p44.detail()}"

    def test_translate_emits_the_live_gateways_icmp_errors_byte_for_byte_and_no_other(self, p44, record_property):
        assert_parity(p44, record_property)
        assert len(live_sent(p44, "icmp error")) >= 4

    def test_translate_forwards_every_other_packet_as_the_live_gateway_did(self, p44, record_property):
        assert_forwarded_parity(p44, record_property)

    def test_namespaces_removed(self, p44):
        left = p44.close()
        assert not left, str(left)


# --------------------------------------------------------------------------------- NAT64

NAT64 = """
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]

[nat64.options]
ipv4_mtu = 1500
ipv6_mtu = 1500
"""


class Nat64Parity(ParityGateway):
    def __init__(self, quicknat, backend):
        super().__init__("qp64", ("cli", "gw", "srv"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0", mtu=1400)
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", sys.executable, "-c", UDP_BIG_SERVER, SERVER, "5353")
        self.popen("srv", sys.executable, "-c", UDP_BIG_SERVER, SERVER, "7007", "nodf")
        self.wait_udp_bound("srv", SERVER, 5353)
        self.wait_udp_bound("srv", SERVER, 7007)
        self.start_gateway("gw", "g-in", "g-out", (("cli", "c0"), ("srv", "s0")), NAT64, f"p64-{self.backend}",
                           inside_mtu=1280)

    @once
    def cases(self):
        out = {"warm": self.nsx("cli", "ping", "-6", "-c", "1", "-W", "2", "-e", ECHO_ID, SERVER6,
                                check=False)}
        out["hop1"] = self.probe("cli", SERVER6, 60, 1)
        out["ptb"] = self.probe("cli", SERVER6, 1500, 64)
        # 1300 bytes: 1348 over IPv6, 1328 over IPv4 (fits the 1400-byte link); the echo
        # comes back without DF and does not fit the 1280-byte IPv6 MTU.
        r = self.nsx("cli", sys.executable, "-c", UDP_BIG, SERVER6, "7007", "1300", check=False)
        out["fragments"] = r.stdout.strip()
        self.nsx("cli", sys.executable, "-c", UDP_BIG, SERVER6, "5353", "0", "big:1300", check=False)
        out["frag_needed"] = self.route_mtu("srv", POOL4, 1260)
        out["ttl_in"] = self.probe("srv", POOL4, 60, 1)
        return out


@pytest.fixture(scope="class")
def p64(quicknat, backend):
    yield from make(Nat64Parity, quicknat, backend)


class TestNat64Parity:
    def test_quicknat_started_with_both_links_captured(self, p64):
        assert p64.started(), p64.qn.text()[-2000:]

    def test_ping6_to_the_ipv4_server(self, p64):
        r = p64.cases()["warm"]
        assert r.returncode == 0, r.stdout + r.stderr + p64.detail()

    def test_hop_limit_1_live_answers_icmpv6_time_exceeded(self, p64):
        assert p64.cases()["hop1"] == "type=3 code=0 from=2001:db8:1::1 info=0", p64.detail()

    def test_ipv6_packet_too_big_for_the_ipv4_link_live_answers_packet_too_big_mtu_1420(self, p64):
        # ipv4_mtu = 1500 in the configuration; the live gateway lowers it to the link's 1400.
        assert p64.cases()["ptb"] == "type=2 code=0 from=2001:db8:1::1 info=1420", p64.detail()

    def test_ipv4_answer_without_df_crosses_as_ipv6_fragments_echo_intact(self, p64):
        assert p64.cases()["fragments"] == "1300", p64.detail()
        assert len(live_sent(p64, "fragment")) >= 2

    def test_ipv4_df_answer_too_big_for_ipv6_live_answers_fragmentation_needed_mtu_1260(self, p64):
        route = p64.cases()["frag_needed"]
        assert "mtu 1260" in route, f"server's route: {route} | {p64.detail()}"

    def test_ttl_1_from_the_ipv4_side_live_answers_time_exceeded(self, p64):
        assert p64.cases()["ttl_in"] == "type=11 code=0 from=198.51.100.1 info=0", p64.detail()

    def test_translate_emits_the_live_gateways_icmp_errors_and_fragments_byte_for_byte_and_no_other(
            self, p64, record_property):
        assert_parity(p64, record_property)

    def test_translate_forwards_every_other_packet_as_the_live_gateway_did(self, p64, record_property):
        assert_forwarded_parity(p64, record_property)

    def test_namespaces_removed(self, p64):
        left = p64.close()
        assert not left, str(left)


# ---------------------------------------------------------------------------------- CLAT

CLAT = """
[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "2001:db8:64::/96"

[clat.options]
ipv4_mtu = 1500
ipv6_mtu = 1280
"""


class ClatParity(ParityGateway):
    def __init__(self, quicknat, backend):
        super().__init__("qpcl", ("v4", "clat", "v6"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("v4", "c0", "clat", "x-in", mtu=1400)
        self.link("clat", "x-out", "v6", "v0")
        self.nsx("v4", "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        self.nsx("v4", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("clat", "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        self.nsx("clat", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        self.nsx("clat", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("v6", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "v0", "nodad")
        self.nsx("v6", "ip", "-6", "addr", "add", f"{SERVER6}/128", "dev", "lo", "nodad")
        self.nsx("v6", "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        self.popen("v6", sys.executable, "-c", UDP_BIG_SERVER, SERVER6, "7007")
        self.wait_udp_bound("v6", SERVER6, 7007)
        self.start_gateway("clat", "x-in", "x-out", (("v4", "c0"), ("v6", "v0")), CLAT, f"pclat-{self.backend}")

    @once
    def cases(self):
        out = {"warm": self.nsx("v4", sys.executable, "-c", UDP_BIG, SERVER, "7007", "100", check=False).stdout.strip()}
        out["ttl"] = self.probe("v4", SERVER, 60, 1)
        out["df_too_big"] = self.probe("v4", SERVER, 1400, 64)
        # 1300 bytes without DF: 1328 over IPv4, cut for the 1280-byte IPv6 MTU.
        out["fragments"] = self.nsx("v4", sys.executable, "-c", UDP_BIG, SERVER, "7007", "1300",
                                    check=False).stdout.strip()
        out["hop1_v6"] = self.probe("v6", CLAT6, 60, 1, src=SERVER6)
        out["ptb_v6"] = self.probe("v6", CLAT6, 1500, 64, src=SERVER6)
        return out


@pytest.fixture(scope="class")
def pclat(quicknat, backend):
    yield from make(ClatParity, quicknat, backend)


class TestClatParity:
    def test_quicknat_started_with_both_links_captured(self, pclat):
        assert pclat.started(), pclat.qn.text()[-2000:]

    def test_udp_echo_from_the_ipv4_host(self, pclat):
        assert pclat.cases()["warm"] == "100", pclat.detail()

    def test_ttl_1_from_the_ipv4_host_live_answers_time_exceeded(self, pclat):
        assert pclat.cases()["ttl"] == "type=11 code=0 from=192.0.0.1 info=0", pclat.detail()

    def test_ipv4_df_datagram_too_big_for_ipv6_live_answers_fragmentation_needed_mtu_1260(self, pclat):
        assert pclat.cases()["df_too_big"] == "type=3 code=4 from=192.0.0.1 info=1260", pclat.detail()

    def test_ipv4_datagram_without_df_crosses_as_ipv6_fragments_echo_intact(self, pclat):
        assert pclat.cases()["fragments"] == "1300", pclat.detail()
        assert len(live_sent(pclat, "fragment")) >= 2

    def test_hop_limit_1_from_the_ipv6_side_live_answers_icmpv6_time_exceeded(self, pclat):
        assert pclat.cases()["hop1_v6"] == "type=3 code=0 from=2001:db8:2::2 info=0", pclat.detail()

    def test_ipv6_packet_too_big_for_the_ipv4_link_live_answers_packet_too_big_mtu_1420(self, pclat):
        # ipv4_mtu = 1500 in the configuration; the live gateway lowers it to the link's 1400.
        assert pclat.cases()["ptb_v6"] == "type=2 code=0 from=2001:db8:2::2 info=1420", pclat.detail()

    def test_translate_emits_the_live_gateways_icmp_errors_and_fragments_byte_for_byte_and_no_other(
            self, pclat, record_property):
        assert_parity(pclat, record_property)

    def test_translate_forwards_every_other_packet_as_the_live_gateway_did(self, pclat, record_property):
        assert_forwarded_parity(pclat, record_property)

    def test_namespaces_removed(self, pclat):
        left = pclat.close()
        assert not left, str(left)


# ------------------------------------------------- SIIT: errors for refused packets, EAM hairpin

SIIT_ERRORS = """
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.0.2.0/24", ipv6 = "2001:db8:aaaa::/120" } ]
icmp_error_source = "203.0.113.7"
"""
SIIT_A6, SIIT_B6 = "2001:db8:aaaa::1", "2001:db8:aaaa::2"   # EAM: 192.0.2.1, 192.0.2.2
SIIT_B4_IN_PREF64 = "2001:db8:64::c000:202"


class SiitErrorsParity(ParityGateway):
    """v4 (198.51.100.2) == gw [siit] (s-in 198.51.100.1 | s-out 2001:db8:2::2) == v6 (A and
    B, 2001:db8:aaaa::1 and ::2, EAM 192.0.2.1 and .2). The translator's own ICMPv4
    errors come from its IPv4 link's address, not the RFC 6791 source 203.0.113.7 (that
    is for translated errors of unmapped IPv6 routers); A reaches B through the Pref64
    (hairpin)."""

    def __init__(self, quicknat, backend):
        super().__init__("qpse", ("v4", "gw", "v6"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("v4", "c0", "gw", "s-in")
        self.link("gw", "s-out", "v6", "v0")
        self.nsx("v4", "ip", "addr", "add", f"{SERVER}/24", "dev", "c0")
        self.nsx("v4", "ip", "route", "add", "default", "via", "198.51.100.1")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "s-in")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "s-out", "nodad")
        self.nsx("gw", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("v6", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "v0", "nodad")
        for a in (SIIT_A6, SIIT_B6):
            self.nsx("v6", "ip", "-6", "addr", "add", f"{a}/128", "dev", "lo", "nodad")
        # A's traffic to the Pref64 and to an unmapped network leaves from A's address.
        for net in ("2001:db8:64::/96", "2001:db8:77::/64"):
            self.nsx("v6", "ip", "-6", "route", "add", net, "via", "2001:db8:2::2", "src", SIIT_A6)
        self.popen("v6", sys.executable, "-c", UDP_BIG_SERVER, SIIT_A6, "7007")
        self.popen("v6", sys.executable, "-c", UDP_BIG_SERVER, SIIT_B6, "7100")
        self.wait_udp_bound("v6", SIIT_A6, 7007)
        self.wait_udp_bound("v6", SIIT_B6, 7100)
        self.start_gateway("gw", "s-in", "s-out", (("v4", "c0"), ("v6", "v0")), SIIT_ERRORS,
                           f"pse-{self.backend}")

    @once
    def cases(self):
        out = {"warm": self.nsx("v4", sys.executable, "-c", UDP_BIG, "192.0.2.1", "7007", "100",
                                check=False).stdout.strip()}
        out["ttl"] = self.probe("v4", "192.0.2.1", 60, 1)
        out["unmapped6"] = self.probe("v6", "2001:db8:77::1", 60, 64, src=SIIT_A6)
        # A -> B at B's IPv4 address in the Pref64, B's echo back: both ways hairpinned.
        out["hairpin"] = self.nsx("v6", sys.executable, "-c", UDP_BIG, SIIT_B4_IN_PREF64, "7100", "100",
                                  check=False).stdout.strip()
        return out


@pytest.fixture(scope="class")
def psiit_err(quicknat, backend):
    yield from make(SiitErrorsParity, quicknat, backend)


class TestSiitErrorsParity:
    def test_quicknat_started_with_both_links_captured(self, psiit_err):
        assert psiit_err.started(), psiit_err.qn.text()[-2000:]

    def test_udp_echo_from_the_ipv4_host_to_an_eam_node(self, psiit_err):
        assert psiit_err.cases()["warm"] == "100", psiit_err.detail()

    def test_ttl_1_live_answers_time_exceeded_from_the_links_address_not_the_rfc6791_pool(self, psiit_err):
        # RFC 7915 §1.4, RFC 1812 §4.3.2.4: a router's own error, from the link it leaves by.
        assert psiit_err.cases()["ttl"] == "type=11 code=0 from=198.51.100.1 info=0", psiit_err.detail()

    def test_unmapped_ipv6_destination_live_answers_administratively_prohibited(self, psiit_err):
        # RFC 7915 §5.4: Destination Unreachable, code 1, from the gateway's IPv6 address.
        assert psiit_err.cases()["unmapped6"] == "type=1 code=1 from=2001:db8:2::2 info=0", psiit_err.detail()

    def test_eam_hairpin_both_ways_echo_intact(self, psiit_err):
        # UDP_BIG is connected to B's Pref64 address: the echo only counts if it comes
        # back from there, i.e. hairpinned with B's source written in the Pref64.
        assert psiit_err.cases()["hairpin"] == "100", psiit_err.detail()

    def test_translate_emits_the_live_gateways_icmp_errors_byte_for_byte_and_no_other(
            self, psiit_err, record_property):
        assert len(live_sent(psiit_err, "icmp error")) >= 2
        assert_parity(psiit_err, record_property)

    def test_translate_forwards_every_other_packet_as_the_live_gateway_did(self, psiit_err, record_property):
        assert_forwarded_parity(psiit_err, record_property)

    def test_namespaces_removed(self, psiit_err):
        left = psiit_err.close()
        assert not left, str(left)


# ----------------------------------------------------------------------------------- ILA

SIR = "3333:0:0:1"
A = f"{SIR}::a"
B = f"{SIR}::b"
A_ILA = "2001:db8:a::a"        # A under its locator 2001:db8:a:0 (identifier 0:0:0:a)
B_ILA = "2001:db8:b:1::b"      # B under its locator 2001:db8:b:1

ILA = """
[ila]
sir_prefix = "3333:0:0:1::/64"
csum_mode = "adjust-transport"
ident_type = "luid"
unmapped = "drop"

[[ila.mapping]]
identifier = "0:0:0:a"
locator = "2001:db8:a:0"

[[ila.mapping]]
identifier = "0:0:0:b"
locator = "2001:db8:b:1"
"""


class IlaParity(ParityGateway):
    def __init__(self, quicknat, backend):
        super().__init__("qpila", ("a", "r1", "n"), quicknat, backend)
        self.sink = None

    def setup(self):
        self.make_namespaces()
        self.link("a", "a0", "r1", "r1a", own_link_local=True)
        self.link("r1", "r1n", "n", "n0", mtu=1400, own_link_local=True)
        for n, dev, ll in (("a", "a0", "fe80::a"), ("r1", "r1a", "fe80::1"), ("r1", "r1n", "fe80::1"),
                           ("n", "n0", "fe80::2")):
            self.nsx(n, "ip", "-6", "addr", "add", f"{ll}/64", "dev", dev, "nodad")
        self.nsx("a", "ip", "-6", "addr", "add", f"{A}/128", "dev", "a0", "nodad")
        self.nsx("a", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::1", "dev", "a0", "src", A)
        self.nsx("r1", "ip", "-6", "route", "add", "2001:db8:b:1::/64", "via", "fe80::2", "dev", "r1n")
        self.nsx("r1", "ip", "-6", "route", "add", f"{A}/128", "via", "fe80::a", "dev", "r1a")
        # n stands for B's router: it owns B's ILA address and sends to A's.
        self.nsx("n", "ip", "-6", "addr", "add", f"{B_ILA}/128", "dev", "lo", "nodad")
        self.nsx("n", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "n0", "src", B_ILA)
        self.sink = self.popen("n", sys.executable, "-u", "-c", UDP_SINK, B_ILA, "7001", stdout=subprocess.PIPE,
                               text=True)
        self.sink_ready = self.sink_line("ready")
        self.start_gateway("r1", "r1a", "r1n", (("a", "a0"), ("n", "n0")), ILA, f"pila-{self.backend}",
                           inside_mtu=1280)

    def sink_line(self, want, timeout=5.0):
        """Waits (bounded) for the sink to print `want`; returns whether it did."""
        end = time.time() + timeout
        while time.time() < end:
            r, _, _ = select.select([self.sink.stdout], [], [], max(0.0, end - time.time()))
            if not r:
                break
            line = self.sink.stdout.readline()
            if not line:
                break
            if line.strip() == want:
                return True
        return False

    @once
    def cases(self):
        self.nsx("a", sys.executable, "-c", UDP_HOPS, B, "7001", "64", "warm", check=False)
        out = {"warm": self.sink_line("warm")}
        out["hop1"] = self.probe("a", B, 100, 1, port=7001)
        out["ptb_out"] = self.probe("a", B, 1500, 64, port=7001)
        out["ptb_in"] = self.probe("n", A_ILA, 1400, 64, src=B_ILA, port=7001)
        return out


@pytest.fixture(scope="class")
def pila(quicknat, backend):
    yield from make(IlaParity, quicknat, backend)


class TestIlaParity:
    def test_quicknat_started_with_both_links_captured(self, pila):
        assert pila.sink_ready and pila.started(), pila.qn.text()[-2000:]

    def test_a_to_bs_sir_address_arrives_at_bs_locator(self, pila):
        assert pila.cases()["warm"], pila.detail()

    def test_hop_limit_1_live_answers_time_exceeded_as_a_router(self, pila):
        assert pila.cases()["hop1"] == "type=3 code=0 from=fe80::1 info=0", pila.detail()

    def test_1500_bytes_out_live_answers_packet_too_big_with_the_outside_links_mtu_1400(self, pila):
        assert pila.cases()["ptb_out"] == "type=2 code=0 from=fe80::1 info=1400", pila.detail()

    def test_1400_bytes_in_live_answers_packet_too_big_with_the_configured_inside_mtu_1280(self, pila):
        assert pila.cases()["ptb_in"] == "type=2 code=0 from=fe80::1 info=1280", pila.detail()

    def test_translate_emits_the_live_gateways_icmp_errors_byte_for_byte_and_no_other(self, pila, record_property):
        assert_parity(pila, record_property)
        assert len(live_sent(pila, "icmp error")) >= 3

    def test_translate_forwards_every_other_packet_as_the_live_gateway_did(self, pila, record_property):
        assert_forwarded_parity(pila, record_property)

    def test_namespaces_removed(self, pila):
        left = pila.close()
        assert not left, str(left)
