"""Every IP protocol through a live NAT44 gateway: ESP and GRE, which have no ports the
NAT could use, are translated by address only, and the far kernel is the judge (SCTP,
which has ports, has test_sctp.py).

The NAT44 topology of test_nat44.py (cli 10.0.0.2 and 10.0.0.20 == gw == srv
198.51.100.2, public 203.0.113.1, the gateway's kernel not forwarding). These kernels
have neither IPsec states nor GRE modules, so both ends are raw IP sockets of the
protocol (the receiving kernel hands every such packet to them, header included):

  * ESP from the client reaches the server from the public address, its bytes untouched,
    and the server's answer to the public address reaches the client;
  * GRE likewise;
  * a second inside host (10.0.0.20, the same public address) sending ESP to the same
    server is refused while the first holds that (public address, remote, protocol):
    `address_only_in_use`, and nothing reaches the server from it.

And through NAT64 (test_nat64.py's topology: cli 2001:db8:1::2, IPv6 only == gw ==
srv 198.51.100.2, pool4 203.0.113.1): ESP from the IPv6 client to the server's pref64
address reaches the IPv4 server from the pool4 address, and the answer comes back to
the client from the server's pref64 address, the ESP bytes untouched both ways.

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_every_protocol.py [--quicknat PATH]
"""

import hashlib
import subprocess
import sys

import pytest

from netns import wait_for
from test_nat44 import PUBLIC, SERVER, Gateway
from test_nat64 import POOL4, SERVER6, Nat64Fragments, make

pytestmark = pytest.mark.needs_root

# A raw socket of protocol PROTO bound to BIND: prints "ready", then for each packet
# received within TIMEOUT s (at most COUNT): "<source> <sha256 of the payload>". With
# REPLY, answers each packet's source with REPLY's bytes.
RAW_RECEIVER = r"""
import hashlib, socket, sys
proto, bind, count, timeout = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
reply = bytes.fromhex(sys.argv[5]) if len(sys.argv) > 5 else None
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)
s.bind((bind, 0)); s.settimeout(timeout)
print("ready", flush=True)
for _ in range(count):
    try:
        pkt, (src, _) = s.recvfrom(65535)
    except socket.timeout:
        break
    body = pkt[(pkt[0] & 0xf) * 4:]
    print(src, hashlib.sha256(body).hexdigest(), flush=True)
    if reply is not None:
        s.sendto(reply, (src, 0))
"""

# Sends BODY (hex) as protocol PROTO from BIND to DST on a raw socket (IPv4 or IPv6 by
# DST); with WAIT, prints "<source> <sha256>" of the payload of the first packet of that
# protocol that comes back within WAIT s (an IPv4 raw socket gets the header too, an
# IPv6 one the payload alone).
RAW_SENDER = r"""
import hashlib, socket, sys
proto, bind, dst, body = int(sys.argv[1]), sys.argv[2], sys.argv[3], bytes.fromhex(sys.argv[4])
wait = float(sys.argv[5]) if len(sys.argv) > 5 else 0
v6 = ":" in dst
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW, proto)
s.bind((bind, 0)); s.settimeout(wait or 1)
s.sendto(body, (dst, 0))
if wait:
    try:
        pkt, peer = s.recvfrom(65535)
        payload = pkt if v6 else pkt[(pkt[0] & 0xf) * 4:]
        print(peer[0], hashlib.sha256(payload).hexdigest(), flush=True)
    except socket.timeout:
        print("timeout", flush=True)
"""

ESP = 50
GRE = 47


def sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture(scope="module")
def gw(quicknat, backend):
    g = Gateway()
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        g.close()


def receiver(gw, proto, count, reply=None):
    args = [sys.executable, "-c", RAW_RECEIVER, str(proto), SERVER, str(count), "6"]
    if reply is not None:
        args.append(reply.hex())
    p = gw.popen("srv", *args, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def send(gw, proto, body, src="10.0.0.2", wait=0, dst=SERVER):
    args = [sys.executable, "-c", RAW_SENDER, str(proto), src, dst, body.hex()]
    if wait:
        args.append(str(wait))
    r = gw.nsx("cli", *args, check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_quicknat_started(gw):
    assert gw.qn.wait_started(), gw.qn.text()[-2000:]


@pytest.mark.parametrize("proto", [ESP, GRE], ids=["esp", "gre"])
def test_a_portless_protocol_reaches_the_server_from_the_public_address_and_back(gw, proto):
    body = bytes([0, 0, 0x10, proto]) + bytes(range(60))
    answer = bytes([0, 0, 0x20, proto]) + bytes(range(100, 160))
    rx = receiver(gw, proto, 1, reply=answer)
    got = send(gw, proto, body, wait=5)
    seen, _ = rx.communicate(timeout=15)
    assert seen.split()[:2] == [PUBLIC, sha(body)], f"{seen!r} | {gw.qn.stats()}"
    assert got.split() == [SERVER, sha(answer)], f"{got!r} | {gw.qn.stats()}"


def test_a_second_inside_host_with_esp_to_the_same_server_is_refused_while_the_first_holds_it(gw):
    before = gw.qn.dropped("address_only_in_use")
    rx = receiver(gw, ESP, 2)
    first = bytes([0, 0, 0x30, 1]) + bytes(32)
    second = bytes([0, 0, 0x30, 2]) + bytes(32)
    send(gw, ESP, first, src="10.0.0.2")
    send(gw, ESP, second, src="10.0.0.20")
    seen, _ = rx.communicate(timeout=15)
    lines = seen.strip().splitlines()
    assert [l.split()[:2] for l in lines] == [[PUBLIC, sha(first)]], f"{seen!r} | {gw.qn.stats()}"
    assert wait_for(lambda: gw.qn.dropped("address_only_in_use") > before, 5), gw.qn.stats()


def test_quicknat_stops_cleanly_on_sigterm(gw):
    rc, text = gw.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_namespaces_removed(gw):
    left = gw.close()
    assert not left, str(left)


# ---------------------------------------------------------------------- through NAT64


@pytest.fixture(scope="module")
def gw64(quicknat, backend):
    yield from make(Nat64Fragments, quicknat, backend)


def test_nat64_quicknat_started(gw64):
    assert gw64.qn.wait_started(), gw64.qn.text()[-2000:]


def test_esp_from_an_ipv6_client_reaches_the_ipv4_server_from_pool4_and_back(gw64):
    body = bytes([0, 0, 0x64, 0x01]) + bytes(range(60))
    answer = bytes([0, 0, 0x46, 0x01]) + bytes(range(100, 160))
    rx = receiver(gw64, ESP, 1, reply=answer)
    got = send(gw64, ESP, body, src="2001:db8:1::2", wait=5, dst=SERVER6)
    seen, _ = rx.communicate(timeout=15)
    assert seen.split()[:2] == [POOL4, sha(body)], f"{seen!r} | {gw64.qn.stats()}"
    assert got.split() == [SERVER6, sha(answer)], f"{got!r} | {gw64.qn.stats()}"


def test_nat64_namespaces_removed(gw64):
    left = gw64.close()
    assert not left, str(left)
