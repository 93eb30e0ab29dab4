"""End-to-end tests of `quicknat run` as a NAT64 and as both halves of 464XLAT, with
real kernels on every side.

TestNat64, NAT64 (RFC 6146), pref64 2001:db8:64::/96, pool4 203.0.113.1:

    cli (2001:db8:1::2, ::80) == gw (g-in 2001:db8:1::1 | g-out 198.51.100.1) == srv (198.51.100.2) == far (192.0.2.2)
        IPv6 only                 quicknat [nat64]                               IPv4 router     link MTU 1300

  The gateway's kernel forwards neither family, so every packet that crosses went
  through quicknat. `srv` routes the pool to the gateway (as for NAT44's pool) and
  routes on to `far` over a 1300-byte link; `far` advertises an MSS of 1460 (route
  advmss), so the client's full-size segments meet the small link in the middle of the
  path: only Path MTU Discovery through the translator lets them through.
  Checks: ping6 <-> ping, TCP (the server sees the pool address), UDP, ICMP port
  unreachable -> ICMPv6 (ECONNREFUSED), a large download, a large upload across the
  1300-byte link (ICMPv4 Fragmentation Needed -> ICMPv6 Packet Too Big with MTU + 20),
  a static binding that publishes an IPv6 server to IPv4, clean SIGTERM.

Test464xlat, 464XLAT (RFC 6877):

    cli (192.0.0.2/29) == clat (x-in 192.0.0.1 | x-out 2001:db8:2::2) == mid (bridge) == gw (g-in 2001:db8:2::1 | g-out 198.51.100.1) == srv (198.51.100.2)
      IPv4-only app        quicknat [clat]                                  IPv6 only        quicknat [nat64]

  The CLAT maps 192.0.0.2 <-> 2001:db8:aaaa::2 and IPv4 destinations into the NAT64's
  pref64; the gw routes the CLAT prefix back to the CLAT. Checks: ping, TCP (and a
  large download), UDP from the IPv4 application to the IPv4 server, and that the
  middle link carried IPv6 only (frames counted by EtherType on the bridge port).

TestFragmentation (a CLAT with lowest_ipv6_mtu 1280) and TestNat64Fragments (a NAT64 with
lowest_ipv6_mtu 1280): a 1400-byte datagram without DF crosses as translated fragments
(the IPv6 next hops are 1500: the lowest IPv6 MTU alone decides, RFC 7915 §4.1).

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_nat64.py [--quicknat PATH]
"""

import os
import subprocess
import sys
import tempfile

import pytest

from netns import (HTTP_SERVER, ICMP_PROBE, UDP_BIG, UDP_CLIENT, UDP_SERVER, FrameCounter, Scenario, once,
                   wait_for)

pytestmark = pytest.mark.needs_root

PREF64 = "2001:db8:64::/96"
POOL4 = "203.0.113.1"
SERVER = "198.51.100.2"
SERVER6 = "2001:db8:64::c633:6402"   # 198.51.100.2 under PREF64 (RFC 6052, /96)
FAR = "192.0.2.2"
FAR6 = "2001:db8:64::c000:202"       # 192.0.2.2
SMALL_MTU = 1300

GATEWAY = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "{backend}"
workers = 1
stats_interval = 1
"""

# The options cap the next-hop MTUs (RFC 7915 §4.1), which are otherwise the interfaces'
# (live quicknat lowers them to its links'); lowest_ipv6_mtu stays at its default, 1280,
# so IPv4 packets over 1260 bytes without DF are cut (TestFragmentation, TestNat64Fragments).
NAT64 = """
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]

[nat64.options]
ipv6_mtu = 1500
ipv4_mtu = 1500

[[nat64.static]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "[2001:db8:1::80]:80"
"""

CLAT = """
[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "2001:db8:64::/96"

[clat.options]
ipv6_mtu = 1500
ipv4_mtu = 1480
"""

# Echoes every datagram back to its sender (IPv4 or IPv6 by the bound address); with a
# third argument "nodf", sends with DF clear (IP_PMTUDISC_DONT), as many IPv4 hosts do.
UDP_ECHO = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
if sys.argv[3:] == ["nodf"]:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(data, peer)
"""

# RFC 6146 §3.5.2.2 / RFC 5382 REQ-4: connects to argv[1]:argv[2] (from
# argv[3]:argv[4] when given), sends and reads one byte, and prints "connected got=X",
# "refused after S" (seconds since the first SYN) or "timeout".
TCP_OPEN = r"""
import socket, sys, time
a = sys.argv
s = socket.socket(socket.AF_INET6 if ":" in a[1] else socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if len(a) > 4:
    s.bind((a[3], int(a[4])))
s.settimeout(20)
t0 = time.monotonic()
try:
    s.connect((a[1], int(a[2])))
    s.sendall(b"x")
    print("connected got=%s" % s.recv(1).decode())
except ConnectionRefusedError:
    print("refused after %.2f" % (time.monotonic() - t0))
except OSError as e:
    print("error %s" % e)
"""

# RFC 6146 §3.5.3: an echo request from a ping socket whose identifier is
# argv[2] (a ping socket's identifier is its bound "port"); prints "reply type=T id=I"
# or "timeout".
ECHO_FROM = r"""
import socket, struct, sys
addr, ident = sys.argv[1], int(sys.argv[2])
v6 = ":" in addr
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM,
                  socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
s.bind(("::" if v6 else "0.0.0.0", ident))
s.settimeout(2)
for seq in range(3):
    s.sendto(struct.pack("!BBHHH", 128 if v6 else 8, 0, 0, ident, seq) + b"echo", (addr, 0))
    try:
        d = s.recv(1500)
        print("reply type=%d id=%d" % (d[0], struct.unpack("!H", d[4:6])[0])); sys.exit()
    except socket.timeout:
        pass
print("timeout")
"""


# A UDP socket at argv[1]:argv[2] connected to argv[3]:argv[4] with IP_RECVERR;
# prints "ready", then the first ICMP error it gets as "type=T code=C from=A" (or "none").
ERR_WATCH = r"""
import select, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 11, 1)                               # IP_RECVERR
s.bind((sys.argv[1], int(sys.argv[2]))); s.connect((sys.argv[3], int(sys.argv[4])))
print("ready", flush=True)
p = select.poll(); p.register(s, select.POLLERR)
if not p.poll(5000):
    print("none"); sys.exit()
_, anc, _, _ = s.recvmsg(512, 512, socket.MSG_ERRQUEUE)
for level, kind, data in anc:
    errno_, origin, typ, code = struct.unpack_from("=IBBB", data)
    print("type=%d code=%d from=%s" % (typ, code, socket.inet_ntop(socket.AF_INET, data[20:24])))
    sys.exit()
print("none")
"""

# An IPv6 router (argv[1], not the session's host) reports Address Unreachable
# (RFC 4443 §3.1, code 3) about the datagram argv[2]:argv[3] -> argv[4]:argv[5].
ROUTER_ERROR = r"""
import sys
from scapy.all import IPv6, ICMPv6DestUnreach, UDP, send
router, src, sport, dst, dport = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
quote = IPv6(src=src, dst=dst, hlim=63) / UDP(sport=sport, dport=dport) / b"probe"
send(IPv6(src=router, dst=src) / ICMPv6DestUnreach(code=3) / quote, verbose=0)
"""


class Topology(Scenario):
    """Namespaces whose kernels forward nothing (only quicknat does; routers turn it back
    on), joined by veth pairs with offloads off."""

    def __init__(self, prefix, names, quicknat, backend):
        super().__init__(prefix, names)
        self.binary, self.backend = quicknat, backend

    def translator(self, name, inside, outside, mode_config, label):
        gateway = GATEWAY.format(inside=inside, outside=outside, backend=self.backend)
        return self.quicknat(self.binary, name, gateway + mode_config, label)

    def curl(self, name, url, *extra, timeout=20):
        return self.nsx(name, "curl", "-s", "-g", "--max-time", str(timeout - 5), *extra, url, check=False,
                        timeout=timeout)


def expect(r, want):
    return r.returncode == 0 and r.stdout.strip() == want


def make(cls, quicknat, backend):
    """A fixture body: builds topology `cls`, awaits (bounded) the start-up lines of its
    quicknat processes (the tests check them), yields it, always tears it down."""
    t = cls(quicknat, backend)
    try:
        t.setup()
        for q in t.quicknats:
            q.wait_started()
        yield t
    finally:
        t.close()


def wait_drops(qn, reason, at_least, timeout):
    """Waits (bounded) until drop `reason` is logged at least `at_least` times."""
    return wait_for(lambda: qn.dropped(reason) >= at_least, timeout, step=0.2)


def assert_started(qn):
    ok = qn.wait_started()
    assert ok and qn.proc.poll() is None, qn.text()[-2000:]


def assert_af_xdp(qn):
    qn.wait_started()
    assert "AF_XDP (copy mode)" in qn.text(), qn.text()[-2000:]


def assert_stops_cleanly(qn):
    rc, text = qn.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def assert_fragmented(qn, t, client, dst):
    """A 1400-byte datagram from `client` to `dst`:7007 and its echo cross `qn` as
    translated fragments (one retry: the first may go while neighbours resolve)."""
    for _ in range(2):
        r = t.nsx(client, sys.executable, "-c", UDP_BIG, dst, "7007", "1400", check=False)
        if r.stdout.strip() == "1400":
            break
    fragmented = qn.wait_counter("fragmented")
    assert r.stdout.strip() == "1400" and fragmented, f"{(r.stdout + r.stderr).strip()[-300:]} | {qn.stats()}"


# ------------------------------------------------------------------------------- NAT64


class Nat64(Topology):
    def __init__(self, quicknat, backend):
        super().__init__("qn64", ("cli", "gw", "srv", "far"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0")
        self.link("srv", "s1", "far", "f0")
        for n, dev in (("srv", "s1"), ("far", "f0")):
            self.nsx(n, "ip", "link", "set", dev, "mtu", str(SMALL_MTU))
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::80/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("gw", "ip", "route", "add", "192.0.2.0/24", "via", SERVER)
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        self.nsx("srv", "ip", "addr", "add", "192.0.2.1/24", "dev", "s1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.nsx("srv", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        self.nsx("far", "ip", "addr", "add", "192.0.2.2/24", "dev", "f0")
        # far's own link is small, but it advertises the MSS of a 1500-byte path: the
        # client sends full-size segments and learns the path MTU the hard way.
        self.nsx("far", "ip", "route", "add", "default", "via", "192.0.2.1", "advmss", "1460")

        self.qn = self.translator("gw", "g-in", "g-out", NAT64, f"nat64-{self.backend}")
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        self.popen("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353")
        self.popen("far", sys.executable, "-c", HTTP_SERVER, FAR, "80")
        self.popen("cli", sys.executable, "-c", HTTP_SERVER, "2001:db8:1::80", "80")
        for n, a in (("srv", SERVER), ("far", FAR), ("cli", "2001:db8:1::80")):
            self.wait_listening(n, a, 80)

    def detail(self, r):
        return f"{(r.stdout + r.stderr).strip()[-600:]} | {self.qn.stats()}"

    @once
    def upload(self):
        """The upload across srv's 1300-byte link (result of curl)."""
        blob = tempfile.NamedTemporaryFile(delete=False, suffix=".bin")
        blob.write(os.urandom(4 << 20))
        blob.close()
        try:
            return self.curl("cli", f"http://[{FAR6}]/", "-H", "Expect:", "--data-binary", f"@{blob.name}", timeout=30)
        finally:
            os.unlink(blob.name)

    @once
    def stop(self):
        return self.qn.stop()


@pytest.fixture(scope="class")
def nat64(quicknat, backend):
    yield from make(Nat64, quicknat, backend)


class TestNat64:
    def test_quicknat_started(self, nat64):
        assert_started(nat64.qn)

    @pytest.mark.only(backend="af_xdp")
    def test_af_xdp_backend_in_use_no_fallback(self, nat64):
        assert_af_xdp(nat64.qn)

    def test_ping6_to_the_ipv4_servers_embedded_address(self, nat64):
        """ICMPv6 <-> ICMPv4 echo."""
        r = nat64.nsx("cli", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", SERVER6, check=False)
        assert r.returncode == 0, nat64.detail(r)

    def test_tcp_http_the_ipv4_server_sees_the_pool_address(self, nat64):
        r = nat64.curl("cli", f"http://[{SERVER6}]/")
        assert expect(r, f"peer={POOL4}"), nat64.detail(r)

    def test_udp_request_response_the_server_sees_the_pool_address(self, nat64):
        r = nat64.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER6, "5353", check=False)
        assert r.stdout.startswith(f"peer={POOL4}:"), nat64.detail(r)

    def test_icmpv4_port_unreachable_comes_back_as_icmpv6_econnrefused(self, nat64):
        r = nat64.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER6, "9", check=False)
        assert r.stdout.strip() == "refused", nat64.detail(r)

    def test_icmpv4_time_exceeded_from_an_ipv4_router_comes_back_as_icmpv6_time_exceeded(self, nat64):
        # A traceroute step: hop limit 2 expires at the IPv4 router srv (the gateway
        # counts as the first hop), whose ICMPv4 Time Exceeded comes back as ICMPv6 Time
        # Exceeded (type 3) from srv's embedded address.
        r = nat64.nsx("cli", sys.executable, "-c", ICMP_PROBE, FAR6, "33434", "2", check=False)
        assert r.stdout.strip() == f"type=3 code=0 from={SERVER6}", nat64.detail(r)

    def test_hop_limit_1_expires_at_the_translator_which_answers_icmpv6_time_exceeded(self, nat64):
        # Hop limit 1 expires at the translator itself, which must answer like any router
        # (RFC 7915 §5.1: "MUST check for zero and send the ICMPv4 TTL Exceeded or ICMPv6
        # Hop Limit Exceeded error").
        r = nat64.nsx("cli", sys.executable, "-c", ICMP_PROBE, FAR6, "33434", "1", check=False)
        assert r.stdout.strip().startswith("type=3 code=0 from="), nat64.detail(r)

    def test_large_tcp_download_4mib_ipv4_server_to_ipv6_client(self, nat64):
        n = 4 << 20
        r = nat64.curl("cli", f"http://[{SERVER6}]/big?n={n}", "-o", "/dev/null", "-w", "%{size_download}", timeout=30)
        assert expect(r, str(n)), nat64.detail(r)

    def test_large_tcp_upload_across_a_1300_byte_ipv4_link_pmtud_through_the_translator(self, nat64):
        # The upload crosses srv's 1300-byte link: srv answers the translated DF packets
        # with ICMPv4 Fragmentation Needed (MTU 1300), which must reach the client as
        # ICMPv6 Packet Too Big with MTU 1320 (RFC 7915 §4.2: +20).
        r = nat64.upload()
        assert expect(r, f"got={4 << 20} peer={POOL4}"), nat64.detail(r)

    def test_the_client_learned_path_mtu_1320_from_a_translated_packet_too_big(self, nat64):
        nat64.upload()
        rt = nat64.nsx("cli", "ip", "-6", "route", "get", FAR6, check=False)
        assert f"mtu {SMALL_MTU + 20}" in rt.stdout, rt.stdout + rt.stderr + " | " + nat64.qn.stats()

    def test_an_ipv4_df_packet_too_big_for_the_ipv6_side_is_answered_with_frag_needed_mtu_1480(self, nat64):
        # RFC 7915 §4.1: an IPv4 packet with DF set that is too big for the IPv6 side
        # once translated (1500 + 20 > 1500) "MUST" be answered with ICMPv4 Fragmentation
        # Needed carrying 1480; the server's kernel then records that path MTU.
        r = nat64.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER6, "5353", "big:1472", check=False)
        rt = nat64.nsx("srv", "ip", "route", "get", POOL4, check=False)
        assert "mtu 1480" in rt.stdout, \
            f"client got {r.stdout.strip()[:20]!r}; server's route: {rt.stdout.strip()} | {nat64.qn.stats()}"

    def test_static_binding_publishes_the_ipv6_server_to_ipv4(self, nat64):
        """The IPv6 server sees the IPv4 client's embedded address."""
        r = nat64.curl("srv", f"http://{POOL4}:8080/")
        assert expect(r, f"peer={SERVER6}"), nat64.detail(r)

    def test_an_echo_request_from_ipv4_reaches_the_client_through_its_icmp_binding(self, nat64):
        # RFC 6146 §3.5.3: the client pings out with identifier 0x4242 (kept as the
        # public one); the server's echo request to the pool address with that identifier
        # reaches the client, whose kernel answers it back through the binding.
        for n in ("cli", "srv"):
            nat64.nsx(n, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647")
        r = nat64.nsx("cli", sys.executable, "-c", ECHO_FROM, SERVER6, str(0x4242), check=False)
        assert r.stdout.strip() == f"reply type=129 id={0x4242}", nat64.detail(r)
        r = nat64.nsx("srv", sys.executable, "-c", ECHO_FROM, POOL4, str(0x4242), check=False)
        assert r.stdout.strip() == f"reply type=0 id={0x4242}", nat64.detail(r)

    def test_an_unsolicited_syn_is_refused_with_port_unreachable_after_6_seconds(self, nat64):
        # RFC 6146 §3.5.2.2 / RFC 5382 REQ-4: not answered for 6 s, then ICMPv4 Port
        # Unreachable, which the server's kernel takes as ECONNREFUSED for its connect().
        r = nat64.nsx("srv", sys.executable, "-c", TCP_OPEN, POOL4, "4444", check=False, timeout=30)
        out = r.stdout.strip()
        assert out.startswith("refused after "), nat64.detail(r)
        assert 5.9 <= float(out.split()[-1]) < 12, nat64.detail(r)

    def test_simultaneous_open_from_both_sides_connects(self, nat64):
        # The server's SYN to 203.0.113.1:5000 comes first and is held; the client's SYN
        # from port 5000 (kept as the public port) to the server's port opens the session;
        # both kernels complete the simultaneous open and exchange a byte.
        held = nat64.qn.dropped("syn_held")
        srv = nat64.popen("srv", sys.executable, "-c", TCP_OPEN, POOL4, "5000", SERVER, "4000",
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert wait_drops(nat64.qn, "syn_held", held + 1, 5.0), nat64.qn.stats()
        r = nat64.nsx("cli", sys.executable, "-c", TCP_OPEN, SERVER6, "4000", "2001:db8:1::2", "5000",
                      check=False, timeout=30)
        srv_out, _ = srv.communicate(timeout=25)
        assert r.stdout.strip() == "connected got=x", nat64.detail(r)
        assert srv_out.strip() == "connected got=x", srv_out + " | " + nat64.qn.stats()

    def test_an_icmpv6_error_from_an_ipv6_router_leaves_from_the_pool_address(self, nat64):
        # RFC 6146 §3.5.3, RFC 6791: the server's kernel names the offender of
        # the translated error; it must be the pool address, never an internal host id
        # (240.0.0.0/4).
        pytest.importorskip("scapy")
        watch = nat64.popen("srv", sys.executable, "-c", ERR_WATCH, SERVER, "7777", POOL4, "7100",
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert watch.stdout.readline().strip() == "ready"
        opened = nat64.nsx("cli", sys.executable, "-c",
                           "import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
                           f"s.bind(('2001:db8:1::2', 7100)); s.sendto(b'open', ('{SERVER6}', 7777))",
                           check=False)
        assert opened.returncode == 0, opened.stderr
        sent = nat64.nsx("cli", sys.executable, "-c", ROUTER_ERROR, "2001:db8:1::80", SERVER6, "7777",
                         "2001:db8:1::2", "7100", check=False, timeout=30)
        assert sent.returncode == 0, sent.stderr[-600:]
        got, _ = watch.communicate(timeout=10)
        assert got.strip() == f"type=3 code=1 from={POOL4}", got + " | " + nat64.qn.stats()

    def test_quicknat_stops_cleanly_on_sigterm(self, nat64):
        rc, text = nat64.stop()
        assert rc == 0 and "stopped." in text, text[-2000:]

    def test_no_xdp_program_left_attached(self, nat64):
        nat64.stop()
        left = nat64.nsx("gw", "ip", "link", "show", check=False).stdout
        assert "xdp" not in left, left

    def test_namespaces_removed(self, nat64):
        left = nat64.close()
        assert not left, str(left)


# ----------------------------------------------------------------------------- 464XLAT


class Xlat464(Topology):
    def __init__(self, quicknat, backend):
        super().__init__("qn464", ("cli", "clat", "mid", "gw", "srv"), quicknat, backend)
        self.counter = None
        self.defer(lambda: self.counter and self.counter.finish())

    def setup(self):
        self.make_namespaces()
        self.link("cli", "c0", "clat", "x-in")
        self.link("clat", "x-out", "mid", "m1")
        self.link("mid", "m2", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0")
        # The middle: a plain bridge with no addresses, where frames are counted.
        self.nsx("mid", "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        for dev in ("m1", "m2"):
            self.nsx("mid", "ip", "link", "set", dev, "master", "br0")
        self.nsx("mid", "ip", "link", "set", "br0", "up")
        # The host's IPv4 link is 20 bytes smaller than the IPv6 path, as a CLAT host sets
        # it up (RFC 6877 §6.3 ...the translated packet fits the IPv6 MTU).
        self.nsx("cli", "ip", "link", "set", "c0", "mtu", "1480")
        self.nsx("clat", "ip", "link", "set", "x-in", "mtu", "1480")
        self.nsx("cli", "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("clat", "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        self.nsx("clat", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        self.nsx("clat", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")

        self.clat = self.translator("clat", "x-in", "x-out", CLAT, f"clat-{self.backend}")
        self.plat = self.translator("gw", "g-in", "g-out", NAT64, f"plat-{self.backend}")
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        self.popen("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353")
        self.wait_listening("srv", SERVER, 80)

    def detail(self, r):
        return f"{(r.stdout + r.stderr).strip()[-600:]} | clat {self.clat.stats()} | plat {self.plat.stats()}"

    @once
    def count_frames(self):
        """Starts counting frames on the middle link (after both translators started);
        returns whether the counter is ready."""
        self.counter = FrameCounter(self.ns["mid"], "m1")
        return self.counter.ready

    @once
    def traffic(self):
        """Ping, TCP, a large download and UDP from the IPv4-only client, while the
        frames on the middle link are counted; then the counts."""
        self.count_frames()
        n = 4 << 20
        out = {
            "ping": self.nsx("cli", "ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, check=False),
            "tcp": self.curl("cli", f"http://{SERVER}/"),
            "download": self.curl("cli", f"http://{SERVER}/big?n={n}", "-o", "/dev/null", "-w", "%{size_download}",
                                  timeout=30),
            "udp": self.nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER, "5353", check=False),
        }
        out["counts"] = self.counter.finish()
        self.counter = None
        return out

    @once
    def stop(self):
        return self.clat.stop(), self.plat.stop()


@pytest.fixture(scope="class")
def xlat(quicknat, backend):
    yield from make(Xlat464, quicknat, backend)


class Test464xlat:
    def test_clat_quicknat_started(self, xlat):
        assert_started(xlat.clat)

    @pytest.mark.only(backend="af_xdp")
    def test_clat_af_xdp_backend_in_use_no_fallback(self, xlat):
        assert_af_xdp(xlat.clat)

    def test_plat_quicknat_started(self, xlat):
        assert_started(xlat.plat)

    @pytest.mark.only(backend="af_xdp")
    def test_plat_af_xdp_backend_in_use_no_fallback(self, xlat):
        assert_af_xdp(xlat.plat)

    def test_frame_counter_on_the_middle_link_ready(self, xlat):
        assert xlat.count_frames()

    def test_ping_from_the_ipv4_only_client_to_the_ipv4_server(self, xlat):
        r = xlat.traffic()["ping"]
        assert r.returncode == 0, xlat.detail(r)

    def test_tcp_http_the_server_sees_the_pool_address(self, xlat):
        r = xlat.traffic()["tcp"]
        assert expect(r, f"peer={POOL4}"), xlat.detail(r)

    def test_large_tcp_download_4mib_through_both_translators(self, xlat):
        r = xlat.traffic()["download"]
        assert expect(r, str(4 << 20)), xlat.detail(r)

    def test_udp_request_response_the_server_sees_the_pool_address(self, xlat):
        r = xlat.traffic()["udp"]
        assert r.stdout.startswith(f"peer={POOL4}:"), xlat.detail(r)

    def test_the_middle_link_carried_ipv6_only(self, xlat, record_property):
        counts = xlat.traffic()["counts"]
        v4 = (counts or {}).get("0x0800", 0) + (counts or {}).get("0x0806", 0)
        v6 = (counts or {}).get("0x86dd", 0)
        record_property("frames", f"{v6} IPv6, {v4} IPv4/ARP")
        assert counts is not None and v6 > 0 and v4 == 0, f"{v6} IPv6 frames, {v4} IPv4/ARP: {counts}"

    def test_clat_quicknat_stops_cleanly_on_sigterm(self, xlat):
        rc, text = xlat.stop()[0]
        assert rc == 0 and "stopped." in text, text[-2000:]

    def test_plat_quicknat_stops_cleanly_on_sigterm(self, xlat):
        rc, text = xlat.stop()[1]
        assert rc == 0 and "stopped." in text, text[-2000:]

    def test_no_xdp_program_left_attached(self, xlat):
        xlat.stop()
        left = "".join(xlat.nsx(n, "ip", "link", "show", check=False).stdout for n in ("clat", "gw"))
        assert "xdp" not in left, left

    def test_namespaces_removed(self, xlat):
        left = xlat.close()
        assert not left, str(left)


# ------------------------------------------------------------------------ fragmentation


class Fragmentation(Topology):
    """RFC 7915 §4.1: an IPv4 packet without DF, too big for the IPv6 side once
    translated, is fragmented by the translator (here a CLAT with lowest_ipv6_mtu 1280 and
    a 1500-byte IPv6 next hop: without DF, the lowest IPv6 MTU decides)."""

    def __init__(self, quicknat, backend):
        super().__init__("qnfr", ("v4", "clat", "v6"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("v4", "c0", "clat", "x-in")
        self.link("clat", "x-out", "v6", "v0")
        self.nsx("v4", "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        self.nsx("v4", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("clat", "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        self.nsx("clat", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        self.nsx("clat", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("v6", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "v0", "nodad")
        self.nsx("v6", "ip", "-6", "addr", "add", f"{SERVER6}/128", "dev", "lo", "nodad")
        self.nsx("v6", "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        cfg = CLAT.replace("ipv6_mtu = 1500", "ipv6_mtu = 1500\nlowest_ipv6_mtu = 1280").replace(
            "ipv4_mtu = 1480", "ipv4_mtu = 1500")
        self.clat = self.translator("clat", "x-in", "x-out", cfg, f"clat-{self.backend}")
        self.popen("v6", sys.executable, "-c", UDP_ECHO, SERVER6, "7007")


@pytest.fixture(scope="class")
def frag(quicknat, backend):
    yield from make(Fragmentation, quicknat, backend)


class TestFragmentation:
    def test_clat_quicknat_started(self, frag):
        assert_started(frag.clat)

    @pytest.mark.only(backend="af_xdp")
    def test_clat_af_xdp_backend_in_use_no_fallback(self, frag):
        assert_af_xdp(frag.clat)

    def test_a_1400_byte_ipv4_datagram_without_df_crosses_a_1280_byte_ipv6_mtu_as_fragments_echo_intact(self, frag):
        frag.wait_udp_bound("v6", SERVER6, 7007)
        assert_fragmented(frag.clat, frag, "v4", SERVER)

    def test_clat_quicknat_stops_cleanly_on_sigterm(self, frag):
        assert_stops_cleanly(frag.clat)

    def test_namespaces_removed(self, frag):
        left = frag.close()
        assert not left, str(left)


# --------------------------------------------------------------------- NAT64 fragments


class Nat64Fragments(Topology):
    """An IPv4 server answering without DF, too big for the NAT64's lowest IPv6 MTU (1280;
    the IPv6 next hop is 1500): the translator cuts the datagram, NAT44's fragment tracking
    carries the later fragments, and the IPv6 client reassembles the echo."""

    def __init__(self, quicknat, backend):
        super().__init__("qnf64", ("cli", "gw", "srv"), quicknat, backend)

    def setup(self):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0")
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        cfg = NAT64.replace("ipv6_mtu = 1500", "ipv6_mtu = 1500\nlowest_ipv6_mtu = 1280")
        self.qn = self.translator("gw", "g-in", "g-out", cfg, f"nat64-{self.backend}")
        self.popen("srv", sys.executable, "-c", UDP_ECHO, SERVER, "7007", "nodf")


@pytest.fixture(scope="class")
def frag64(quicknat, backend):
    yield from make(Nat64Fragments, quicknat, backend)


class TestNat64Fragments:
    def test_quicknat_started(self, frag64):
        assert_started(frag64.qn)

    @pytest.mark.only(backend="af_xdp")
    def test_af_xdp_backend_in_use_no_fallback(self, frag64):
        assert_af_xdp(frag64.qn)

    def test_a_1400_byte_ipv4_answer_without_df_reaches_the_ipv6_client_as_translated_fragments(self, frag64):
        """The NAT64's lowest IPv6 MTU is 1280."""
        frag64.wait_udp_bound("srv", SERVER, 7007)
        assert_fragmented(frag64.qn, frag64, "cli", SERVER6)

    def test_quicknat_stops_cleanly_on_sigterm(self, frag64):
        assert_stops_cleanly(frag64.qn)

    def test_namespaces_removed(self, frag64):
        left = frag64.close()
        assert not left, str(left)
