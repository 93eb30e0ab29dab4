"""SCTP through a live NAT44 and NAT64 with its ports: a real SCTP stack on both ends
judges the translation.

These kernels have no SCTP module, so both ends run usrsctp, the userland SCTP stack
(Debian's libusrsctp-examples; it sends and receives SCTP on raw IP sockets and checks
every packet's CRC32c): its daytime server on the IPv4 server 198.51.100.2, port 13, and
its client, which opens an association from local port 5000, reads the time and shuts
the association down.

Before the client runs, another inside host (10.0.0.20; NAT64: 2001:db8:1::3; then taken
off the link, as usrsctp would use every local address) sends one SCTP packet from its
port 5000, so that it holds the public port 5000 and the client's association must get
another public port: the NAT rewrites the ports and moves the
CRC32c with them, both ways. Then:

  * the association completes (the client prints the server's time): usrsctp accepted
    every translated packet's CRC32c;
  * at the server, every packet of the association comes from the public address on one
    public port that is not 5000, and scapy finds each one's CRC32c right.

NAT44: test_nat44.py's topology (cli 10.0.0.2 and 10.0.0.20 == gw == srv, public
203.0.113.1). NAT64: test_nat64.py's (cli 2001:db8:1::2, IPv6 only == gw == srv, pool4
203.0.113.1, the server at its pref64 address).

Runs once per backend (af_packet, af_xdp); needs root and usrsctp's examples.
    sudo python3 -m pytest tests/e2e/test_sctp.py [--quicknat PATH]
"""

import os
import re
import subprocess
import sys

import pytest

from netns import wait_for
from test_nat44 import PUBLIC, SERVER, Gateway
from test_nat64 import POOL4, SERVER6, Nat64Fragments, make

pytestmark = pytest.mark.needs_root

USRSCTP = "/usr/lib/usrsctp"
LOCAL_PORT = 5000

# Sends one SCTP INIT (scapy computes the CRC32c) from SRC:5000 to DST:9 on a raw socket.
OCCUPY = r"""
import socket, sys
from scapy.layers.sctp import SCTP, SCTPChunkInit
src, dst = sys.argv[1], sys.argv[2]
init = bytes(SCTP(sport=5000, dport=9, tag=0) / SCTPChunkInit(init_tag=0x5eed, a_rwnd=65535,
             n_out_streams=1, n_in_streams=1, init_tsn=1))
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.socket(fam, socket.SOCK_RAW, 132)
s.bind((src, 0))
s.sendto(init, (dst, 0))
"""

# Reads the pcap argv[1]: one line per SCTP packet, "<src> <sport> <dport> <crc-ok|crc-bad>".
READ = r"""
import sys
from scapy.all import rdpcap, IP
from scapy.layers.sctp import SCTP
for p in rdpcap(sys.argv[1]):
    if SCTP not in p:
        continue
    s = p[SCTP]
    raw = bytes(s)
    again = SCTP(raw)
    want = again.chksum
    del again.chksum
    ok = SCTP(bytes(again)).chksum == want
    print(p[IP].src, s.sport, s.dport, "crc-ok" if ok else "crc-bad")
"""


def have_usrsctp():
    return os.access(f"{USRSCTP}/client", os.X_OK) and os.access(f"{USRSCTP}/daytime_server", os.X_OK)


def serve(g):
    """The daytime server in srv (bounded), once its raw SCTP socket is open; and a capture
    of SCTP at the server's link. Returns the capture's path."""
    g.popen("srv", "timeout", "90", f"{USRSCTP}/daytime_server",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A raw socket of protocol 132 shows in /proc/net/raw with "port" 0084.
    assert wait_for(lambda: ":0084 " in g.nsx("srv", "cat", "/proc/net/raw").stdout, 10)
    pcap = f"/tmp/qn-sctp-{g.ns['srv']}.pcap"
    g.defer(lambda: subprocess.run(["rm", "-f", pcap]))
    dump = g.popen("srv", "tcpdump", "-i", "s0", "-U", "-n", "-w", pcap, "sctp",
                   stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: "listening" in (dump.stderr.readline() or ""), 5)
    g.defer(dump.terminate)
    return pcap, dump


def occupy(g, addr, dst):
    """The inside host ADDR (a prefix on the client's link, added for this) sends one
    SCTP packet from port 5000, so it holds public port 5000; then ADDR is taken off the
    link again, so that the client's association (usrsctp uses every local address)
    starts from the other host."""
    g.nsx("cli", "ip", "addr", "replace", addr, "dev", "c0", "nodad")
    g.nsx("cli", sys.executable, "-c", OCCUPY, addr.split("/")[0], dst)
    g.nsx("cli", "ip", "addr", "del", addr, "dev", "c0")


def associate(g, dst):
    """Runs usrsctp's client from port 5000 to DST:13 (bounded); returns its output."""
    r = g.nsx("cli", "timeout", "30", f"{USRSCTP}/client", dst, "13", str(LOCAL_PORT), "0", "0",
              check=False, timeout=40)
    return r.stdout + r.stderr


def at_server(g, pcap, dump):
    """(src, sport, dport, crc) of each SCTP packet the server's link saw."""
    dump.terminate()
    dump.wait(timeout=10)
    out = g.nsx("srv", sys.executable, "-c", READ, pcap).stdout
    return [tuple(l.split()) for l in out.splitlines() if l.strip()]


def check(g, pcap, dump, out, public):
    assert re.search(r"\d\d:\d\d:\d\d \d{4}", out), f"no time from the server: {out!r} | {g.qn.stats()}"
    everything = at_server(g, pcap, dump)
    seen = [p for p in everything if "13" in (p[1], p[2])]
    assert seen, "nothing of the association at the server"
    from_client = [p for p in seen if p[2] == "13"]
    assert {p[0] for p in from_client} == {public}, seen
    ports = {p[1] for p in from_client}
    assert len(ports) == 1 and ports != {str(LOCAL_PORT)}, f"one public port, not 5000: {everything}"
    assert all(p[3] == "crc-ok" for p in seen), seen


@pytest.fixture(scope="module")
def gw(quicknat, backend):
    if not have_usrsctp():
        pytest.skip("usrsctp's examples (libusrsctp-examples) are not installed")
    g = Gateway()
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        g.close()


def test_quicknat_started(gw):
    assert gw.qn.wait_started(), gw.qn.text()[-2000:]


def test_an_association_through_nat44_on_a_changed_port(gw):
    pcap, dump = serve(gw)
    occupy(gw, "10.0.0.20/24", SERVER)
    out = associate(gw, SERVER)
    check(gw, pcap, dump, out, PUBLIC)


def test_quicknat_stops_cleanly_on_sigterm(gw):
    rc, text = gw.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_namespaces_removed(gw):
    left = gw.close()
    assert not left, str(left)


@pytest.fixture(scope="module")
def gw64(quicknat, backend):
    if not have_usrsctp():
        pytest.skip("usrsctp's examples (libusrsctp-examples) are not installed")
    yield from make(Nat64Fragments, quicknat, backend)


def test_nat64_quicknat_started(gw64):
    assert gw64.qn.wait_started(), gw64.qn.text()[-2000:]


def test_an_association_from_an_ipv6_client_through_nat64_on_a_changed_port(gw64):
    pcap, dump = serve(gw64)
    occupy(gw64, "2001:db8:1::3/64", SERVER6)
    out = associate(gw64, SERVER6)
    check(gw64, pcap, dump, out, POOL4)


def test_nat64_namespaces_removed(gw64):
    left = gw64.close()
    assert not left, str(left)
