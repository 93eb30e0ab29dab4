"""Fragments in any order through a live NAT44 gateway (RFC 4787 REQ-14): the receiving
kernel is the oracle.

The NAT44 topology of test_nat44.py (cli 10.0.0.2 == gw == srv 198.51.100.2, public
203.0.113.1, the gateway's kernel not forwarding). scapy builds UDP datagrams of 3,000
bytes, cuts them into fragments and sends them in reverse and in shuffled order, from
the client to the server and from the server back to the client's public endpoint; the
receiving kernel reassembles them and its UDP socket gets the datagram only if every
fragment arrived with the addresses of its first and the whole datagram's checksum
holds after translation. The later fragments that arrived before their first were held
by quicknat (`fragment_held`) and sent right after it.

Overlapping fragments (RFC 5722 / RFC 1858) are refused: the receiver gets nothing and
quicknat counts `fragment_overlap`.

TestNat64 does the same through a NAT64 (RFC 6146 §3.4/§3.5), the small topology of
test_nat64.py's TestNat64Fragments (cli 2001:db8:1::2, IPv6 only == gw == srv
198.51.100.2, pool4 203.0.113.1, pref64 2001:db8:64::/96): the IPv6 client sends the
3,000-byte datagram as IPv6 fragments (a Fragment header each) to the server's pref64
address, in reverse and shuffled order, and the IPv4 server's socket must get it whole;
the server sends one back as IPv4 fragments in reverse and shuffled order to the public
endpoint the client's first datagram opened, and the IPv6 client's socket must get it
whole, from the server's pref64 address.

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_fragments_reordered.py [--quicknat PATH]
"""

import subprocess
import sys

import pytest

from netns import wait_for
from test_nat44 import PUBLIC, SERVER, Gateway
from test_nat64 import POOL4, SERVER6, Nat64Fragments, make

pytestmark = pytest.mark.needs_root

CLIENT = "10.0.0.2"
CLIENT6 = "2001:db8:1::2"  # the NAT64's IPv6 client

# Receives UDP datagrams on HOST:PORT (IPv4 or IPv6, by HOST) and prints "<length>
# <sha256> <peer> <port>" for each, until COUNT came or TIMEOUT seconds passed. With a
# fifth argument PEER:PORT, first sends a small datagram there, to open the NAT binding.
RECEIVER = r"""
import hashlib, socket, sys
host, port, count, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((host, port)); s.settimeout(timeout)
if len(sys.argv) > 5:
    peer, pport = sys.argv[5].rsplit(":", 1)
    s.sendto(b"hello", (peer, int(pport)))
print("ready", flush=True)
for _ in range(count):
    try:
        b, peer = s.recvfrom(65535)
    except socket.timeout:
        break
    print(len(b), hashlib.sha256(b).hexdigest(), peer[0], peer[1], flush=True)
"""

# Sends one UDP datagram SRC:SPORT -> DST:DPORT of N bytes (seeded), cut into fragments
# of FRAG bytes, in ORDER (indices, comma separated); OVERLAP=1 adds a fragment that
# overlaps the second. Prints the datagram's sha256.
SENDER = r"""
import hashlib, random, sys
# The layers used, not scapy.all (a second more to load every layer); the same bytes.
from scapy.config import conf
from scapy.layers.inet import IP, UDP, fragment
from scapy.packet import Raw
from scapy.sendrecv import send
conf.verb = 0
src, sport, dst, dport, n, fsize, order, ident, overlap = sys.argv[1:10]
data = random.Random(int(ident)).randbytes(int(n))
d = IP(src=src, dst=dst, id=int(ident), flags=0) / UDP(sport=int(sport), dport=int(dport)) / Raw(data)
frags = fragment(IP(bytes(d)), fragsize=int(fsize))
pkts = [frags[int(i)] for i in order.split(",")]
if overlap == "1":
    bad = IP(bytes(frags[1]))
    bad.frag = bad.frag - 1  # starts 8 bytes earlier: overlaps the fragment before it
    del bad.chksum
    pkts.insert(0, bad)
for p in pkts:
    send(p)
print(hashlib.sha256(data).hexdigest())
"""

# SENDER for IPv6: the datagram carries a Fragment header (identification IDENT) and is
# cut by scapy's fragment6 into fragments of FRAG bytes of payload.
SENDER6 = r"""
import hashlib, random, sys
from scapy.config import conf
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6
from scapy.packet import Raw
from scapy.sendrecv import send
conf.verb = 0
src, sport, dst, dport, n, fsize, order, ident = sys.argv[1:9]
data = random.Random(int(ident)).randbytes(int(n))
d = (IPv6(src=src, dst=dst) / IPv6ExtHdrFragment(id=int(ident)) / UDP(sport=int(sport), dport=int(dport))
     / Raw(data))
frags = fragment6(IPv6(bytes(d)), 40 + 8 + int(fsize))
pkts = [frags[int(i)] for i in order.split(",")]
for p in pkts:
    send(p)
print(hashlib.sha256(data).hexdigest())
"""


@pytest.fixture(scope="module")
def gw(quicknat, backend):
    g = Gateway()
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        g.close()


def receive(gw, ns, host, port, count, hello=None):
    """A receiver in `ns`, ready (its binding opened when `hello` names the peer)."""
    args = [sys.executable, "-c", RECEIVER, host, str(port), str(count), "8"]
    if hello:
        args.append(hello)
    p = gw.popen(ns, *args, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def send(gw, ns, src, sport, dst, dport, order, ident, overlap=False):
    """Sends the 3,000-byte datagram as fragments of 1,000 bytes (four: the last has the
    UDP header's 8 bytes) in `order`, as IPv4 or, when `dst` is IPv6, IPv6 fragments;
    returns its sha256."""
    if ":" in dst:
        assert not overlap
        args = (SENDER6, src, str(sport), dst, str(dport), "3000", "1000", ",".join(map(str, order)), str(ident))
    else:
        args = (SENDER, src, str(sport), dst, str(dport), "3000", "1000", ",".join(map(str, order)), str(ident),
                "1" if overlap else "0")
    r = gw.nsx(ns, sys.executable, "-c", *args, check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def held_before_first(order):
    """The later fragments `order` sends before its first: the ones quicknat holds."""
    return order.index(0)


def test_quicknat_started(gw):
    assert gw.qn.wait_started(), gw.qn.text()[-2000:]


@pytest.mark.parametrize("order", [[3, 2, 1, 0], [2, 0, 3, 1]], ids=["reverse", "shuffled"])
def test_outbound_fragments_in_any_order_reach_the_server_whole(gw, order):
    ident = 100 + order[0]
    rx = receive(gw, "srv", SERVER, 7100, 1)
    sha = send(gw, "cli", CLIENT, 7200 + order[0], SERVER, 7100, order, ident)
    out, _ = rx.communicate(timeout=15)
    assert out.split()[:3] == ["3000", sha, PUBLIC], f"{out!r} | {gw.qn.stats()}"


def inbound_whole(gw, client, server, public, seen_as, order, ident):
    """The client (address, port) opens its binding with a small datagram to the server's
    port (as `seen_as`, its address from inside); the server, which sees it come from
    `public`, answers with a fragmented datagram sent in `order` to that public endpoint,
    which must reach the client whole, from `seen_as`."""
    probe = receive(gw, "srv", server[0], server[1], 1)
    rx = receive(gw, "cli", client[0], client[1], 1, hello=f"{seen_as}:{server[1]}")
    seen, _ = probe.communicate(timeout=15)
    assert seen.split()[2:3] == [public], f"{seen!r} | {gw.qn.stats()}"
    sha = send(gw, "srv", server[0], server[1], public, int(seen.split()[3]), order, ident)
    out, _ = rx.communicate(timeout=15)
    assert out.split()[:3] == ["3000", sha, seen_as], f"{out!r} | {gw.qn.stats()}"


@pytest.mark.parametrize("order", [[3, 2, 1, 0], [1, 3, 0, 2]], ids=["reverse", "shuffled"])
def test_inbound_fragments_in_any_order_reach_the_client_whole(gw, order):
    inbound_whole(gw, (CLIENT, 7300 + order[0]), (SERVER, 7101), PUBLIC, SERVER, order, 200 + order[0])


def test_held_fragments_are_counted(gw):
    # The later fragments sent before their first: 3 + 1 out, 3 + 2 back (a stats line a
    # second).
    assert wait_for(lambda: gw.qn.dropped("fragment_held") >= 9, 5), gw.qn.stats()


def test_an_overlapping_fragment_refuses_the_datagram(gw):
    before = gw.qn.dropped("fragment_overlap")
    rx = receive(gw, "srv", SERVER, 7102, 1)
    send(gw, "cli", CLIENT, 7202, SERVER, 7102, [3, 2, 1, 0], 300, overlap=True)
    out, _ = rx.communicate(timeout=15)
    assert out.strip() == "", f"the server got {out!r}"
    assert wait_for(lambda: gw.qn.dropped("fragment_overlap") > before, 5), gw.qn.stats()


def test_quicknat_stops_cleanly_on_sigterm(gw):
    rc, text = gw.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_namespaces_removed(gw):
    left = gw.close()
    assert not left, str(left)


# ------------------------------------------------------------------------------- NAT64


@pytest.fixture(scope="class")
def gw64(quicknat, backend):
    yield from make(Nat64Fragments, quicknat, backend)


NAT64_OUT = [[3, 2, 1, 0], [2, 0, 3, 1]]
NAT64_IN = [[3, 2, 1, 0], [1, 3, 0, 2]]


class TestNat64:
    def test_quicknat_started(self, gw64):
        assert gw64.qn.wait_started() and gw64.qn.proc.poll() is None, gw64.qn.text()[-2000:]

    @pytest.mark.parametrize("order", NAT64_OUT, ids=["reverse", "shuffled"])
    def test_ipv6_fragments_in_any_order_reach_the_ipv4_server_whole(self, gw64, order):
        rx = receive(gw64, "srv", SERVER, 7110, 1)
        sha = send(gw64, "cli", CLIENT6, 7210 + order[0], SERVER6, 7110, order, 400 + order[0])
        out, _ = rx.communicate(timeout=15)
        assert out.split()[:3] == ["3000", sha, POOL4], f"{out!r} | {gw64.qn.stats()}"

    @pytest.mark.parametrize("order", NAT64_IN, ids=["reverse", "shuffled"])
    def test_ipv4_fragments_in_any_order_reach_the_ipv6_client_whole(self, gw64, order):
        inbound_whole(gw64, (CLIENT6, 7310 + order[0]), (SERVER, 7111), POOL4, SERVER6, order,
                      500 + order[0])

    def test_held_fragments_are_counted(self, gw64):
        want = sum(map(held_before_first, NAT64_OUT + NAT64_IN))
        assert want == 9
        assert wait_for(lambda: gw64.qn.dropped("fragment_held") >= want, 5), gw64.qn.stats()

    def test_quicknat_stops_cleanly_on_sigterm(self, gw64):
        rc, text = gw64.qn.stop()
        assert rc == 0 and "stopped." in text, text[-2000:]

    def test_namespaces_removed(self, gw64):
        left = gw64.close()
        assert not left, str(left)
