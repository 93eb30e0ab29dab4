"""GSO/GRO pass-through on AF_PACKET for the translating modes, with
offloads ON: the senders' TSO hands the gateway 64 KB TCP super-packets (veth keeps
them whole), quicknat translates them behind virtio-net headers (IPv4 <-> IPv6 for NAT64
and CLAT, the ILA address rewrite) and sends them on as super-packets; the gateway's
egress interface has its transmit offloads off, so its kernel cuts them into segments
and completes every checksum in software, and the receiving kernel verifies each one (a
wrong partial checksum stalls the transfer, a wrong length or offset corrupts it).

    NAT64:  cli (2001:db8:1::2) == gw [nat64] == srv (198.51.100.2)
    CLAT:   cli (192.0.0.2)     == gw [clat]  == srv (2001:db8:64::c633:6402, the
                                                      CLAT prefix routed back to gw)
    ILA:    a (3333:0:0:1::a) == r1 [ila] == r2 [ila] == b (3333:0:0:1::b), csum_mode
            adjust-transport (the partial checksum follows the address change) and
            neutral-map

Each test moves 16 MB each way (an upload and a download, SHA-256 compared at both
ends) and checks that the gateway counted super-packets passed through (gso > 0) and
refused none (gso_refused = 0). AF_PACKET only (AF_XDP takes no super-packets).

    sudo python3 -m pytest tests/e2e/test_gso_xlat.py --quicknat PATH
"""

import re
import subprocess
import sys
import tempfile

import pytest

from netns import Scenario, wait_for

pytestmark = pytest.mark.needs_root

SIZE = 16 << 20
# The least average frame size through the fast path that shows super-packets crossed
# whole: two full frames (a loaded sender's TSO builds smaller super-packets than an
# idle one's, so more is not asked).
SUPER = 2 * 1514

# Listens on argv[1]:argv[2]. "sink": reads one connection to its end, prints the
# SHA-256 of what came. "source": sends argv[3] pseudo-random bytes to the first
# connection, prints their SHA-256. Connections that carry nothing (readiness probes)
# are skipped.
SERVER = r"""
import hashlib, random, socket, sys
addr, port, role = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port)); s.listen(4); s.settimeout(60)
while True:
    c, _ = s.accept(); c.settimeout(60); h = hashlib.sha256()
    if role == "sink":
        n = 0
        while True:
            b = c.recv(1 << 20)
            if not b: break
            h.update(b); n += len(b)
        c.close()
        if n:
            break
    else:
        try:
            if c.recv(1) != b"g":
                c.close(); continue
        except OSError:
            continue
        rnd = random.Random(11); left = int(sys.argv[4])
        while left:
            b = rnd.randbytes(min(left, 1 << 18)); h.update(b); c.sendall(b); left -= len(b)
        c.close()
        break
print(h.hexdigest(), flush=True)
"""

# "up": sends argv[4] pseudo-random bytes to argv[1]:argv[2]; "down": asks for the
# server's bytes and reads them to the end. Prints the SHA-256.
CLIENT = r"""
import hashlib, random, socket, sys
host, port, role, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.create_connection((host, port), timeout=60); h = hashlib.sha256()
if role == "up":
    rnd = random.Random(7); left = n
    while left:
        b = rnd.randbytes(min(left, 1 << 18)); h.update(b); s.sendall(b); left -= len(b)
    s.shutdown(socket.SHUT_WR); s.recv(1)
else:
    s.sendall(b"g")
    while True:
        b = s.recv(1 << 20)
        if not b: break
        h.update(b)
s.close()
print(h.hexdigest())
"""

GATEWAY = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "af_packet"
workers = 1
stats_interval = 1
gso = true
offloads_off = false
control_socket = "{sock}"
"""

NAT64 = """
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
"""

CLAT = """
[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "2001:db8:64::/96"
"""

SIR = "3333:0:0:1"
ILA = """
[ila]
sir_prefix = "3333:0:0:1::/64"
csum_mode = "{csum}"
ident_type = "{ident}"
unmapped = "drop"

[[ila.mapping]]
identifier = "0:0:0:a"
locator = "2001:db8:a:0"

[[ila.mapping]]
identifier = "0:0:0:b"
locator = "2001:db8:b:1"
"""


def offloads(t, ns, dev, on):
    v = "on" if on else "off"
    t.nsx(ns, "ethtool", "-K", dev, "tx", v, "tso", v, "gso", v, check=False)


class Xlat(Scenario):
    """A sender and a receiver with TSO on, translators whose receive side merges (GRO
    on) and whose transmit side segments in software (tx/tso/gso off)."""

    def gateway(self, binary, ns, inside, outside, mode, label, extra='xdp_fast_path = "off"\n'):
        """A gateway on `inside`/`outside`; the engine's GSO path unless `extra` turns the
        fast path on."""
        sock = tempfile.mktemp(prefix=f"qn-{label}-", suffix=".sock")
        for dev in (inside, outside):
            offloads(self, ns, dev, False)
            self.nsx(ns, "ethtool", "-K", dev, "gro", "on", check=False)
        text = GATEWAY.format(inside=inside, outside=outside, sock=sock) + extra + mode
        return self.quicknat(binary, ns, text, label)

    def transfer(self, server_ns, bind, connect, client_ns, port, role):
        """16 MB `role` ("up": client to server, "down": server to client); returns
        (client's hash, server's hash, detail)."""
        srv = self.popen(server_ns, sys.executable, "-c", SERVER, bind, str(port),
                         "sink" if role == "up" else "source", str(SIZE), stdout=subprocess.PIPE, text=True)
        self.wait_listening(server_ns, bind, port)
        r = self.nsx(client_ns, sys.executable, "-c", CLIENT, connect, str(port), role, str(SIZE),
                     check=False, timeout=90)
        try:
            got, _ = srv.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            got, _ = srv.communicate()
        return r.stdout.strip(), got.strip(), r.stderr[-300:]


def counters(qn, name):
    seen = re.findall(rf" {name}=(\d+)", qn.text())
    return int(seen[-1]) if seen else 0


def check(t, qns, server_ns, bind, connect, client_ns):
    for q in qns:
        assert q.wait_started() and q.proc.poll() is None, q.text()[-2000:]
    for port, role in ((5301, "up"), (5302, "down")):
        mine, theirs, err = t.transfer(server_ns, bind, connect, client_ns, port, role)
        assert len(mine) == 64 and mine == theirs, f"{role}: client {mine} server {theirs} {err} | " + \
            " | ".join(q.stats() for q in qns)
    # Counters reach the log once a second: wait (bounded) for super-packets counted.
    for q in qns:
        assert wait_for(lambda: counters(q, "gso") > 0, 5.0, step=0.2), q.stats()
        assert counters(q, "gso_refused") == 0, q.stats()


class Nat64(Xlat):
    def __init__(self, binary):
        super().__init__("qg64", ("cli", "gw", "srv"))
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("gw", "g-out", "srv", "s0")
        offloads(self, "cli", "c0", True)
        offloads(self, "srv", "s0", True)
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.qn = self.gateway(binary, "gw", "g-in", "g-out", NAT64, "gso-nat64")


class Clat(Xlat):
    def __init__(self, binary, fast=False):
        super().__init__("qgcl", ("cli", "gw", "srv"))
        self.make_namespaces()
        self.link("cli", "c0", "gw", "x-in")
        self.link("gw", "x-out", "srv", "s0")
        offloads(self, "cli", "c0", True)
        offloads(self, "srv", "s0", True)
        self.nsx("cli", "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("gw", "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        self.nsx("gw", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:2::1")
        self.nsx("srv", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "s0", "nodad")
        self.nsx("srv", "ip", "-6", "addr", "add", "2001:db8:64::c633:6402/128", "dev", "lo")
        self.nsx("srv", "ip", "-6", "route", "add", "2001:db8:aaaa::2/128", "via", "2001:db8:2::2")
        if fast:
            # The fast path at the tc hook (SIIT/CLAT flows).
            self.qn = self.gateway(binary, "gw", "x-in", "x-out", CLAT, "gso-clat-fast",
                                   'xdp_fast_path = "on"\n')
        else:
            self.qn = self.gateway(binary, "gw", "x-in", "x-out", CLAT, "gso-clat")


class Ila(Xlat):
    def __init__(self, binary, csum, ident, fast=False):
        super().__init__("qgila", ("a", "r1", "r2", "b"))
        self.make_namespaces()
        for n in self.ns:
            self.nsx(n, "sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0")
            self.nsx(n, "sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0")
        self.link("a", "a0", "r1", "r1a")
        self.link("r1", "r1n", "r2", "r2n")
        self.link("r2", "r2b", "b", "b0")
        offloads(self, "a", "a0", True)
        offloads(self, "b", "b0", True)
        for n, dev, ll in (("a", "a0", "fe80::a"), ("r1", "r1a", "fe80::1"), ("r1", "r1n", "fe80::1"),
                           ("r2", "r2n", "fe80::2"), ("r2", "r2b", "fe80::2"), ("b", "b0", "fe80::b")):
            self.nsx(n, "ip", "-6", "addr", "add", f"{ll}/64", "dev", dev, "nodad")
        self.nsx("a", "ip", "-6", "addr", "add", f"{SIR}::a/128", "dev", "a0", "nodad")
        self.nsx("a", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::1", "dev", "a0", "src", f"{SIR}::a")
        self.nsx("b", "ip", "-6", "addr", "add", f"{SIR}::b/128", "dev", "lo")
        self.nsx("b", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::2", "dev", "b0", "src", f"{SIR}::b")
        self.nsx("r1", "ip", "-6", "route", "add", "2001:db8:b:1::/64", "via", "fe80::2", "dev", "r1n")
        self.nsx("r1", "ip", "-6", "route", "add", f"{SIR}::a/128", "via", "fe80::a", "dev", "r1a")
        self.nsx("r2", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "r2n")
        self.nsx("r2", "ip", "-6", "route", "add", f"{SIR}::b/128", "via", "fe80::b", "dev", "r2b")
        mode = ILA.format(csum=csum, ident=ident)
        # With `fast`, the fast path at the tc hook on both routers.
        extra, tag = ('xdp_fast_path = "on"\n', "-fast") if fast else ('xdp_fast_path = "off"\n', "")
        self.r1 = self.gateway(binary, "r1", "r1a", "r1n", mode, f"gso-ila-r1-{csum}{tag}", extra)
        self.r2 = self.gateway(binary, "r2", "r2b", "r2n", mode, f"gso-ila-r2-{csum}{tag}", extra)


def run(t, body):
    try:
        body(t)
    finally:
        t.close()


def test_nat64_tcp_both_ways_with_super_packets_passed_through(quicknat):
    run(Nat64(quicknat), lambda t: check(t, [t.qn], "srv", "198.51.100.2", "2001:db8:64::c633:6402", "cli"))


def test_clat_tcp_both_ways_with_super_packets_passed_through(quicknat):
    run(Clat(quicknat), lambda t: check(t, [t.qn], "srv", "2001:db8:64::c633:6402", "198.51.100.2", "cli"))


def test_clat_tcp_both_ways_through_the_tc_fast_path_as_super_packets(quicknat):
    """CLAT with `xdp_fast_path = "on"` (on AF_PACKET, the tc ingress program): each
    direction of each transfer is hinted by the engine at its second packet and installed;
    from then on the program translates the senders' super-packets whole (IPv4 -> IPv6
    uploads, IPv6 -> IPv4 downloads). The bytes arrive intact both ways (SHA-256), and
    most of them went through the program, as super-packets."""
    def body(t):
        assert t.qn.wait_started() and t.qn.proc.poll() is None, t.qn.text()[-2000:]
        assert "at the tc ingress hook" in t.qn.text(), t.qn.text()[-2000:]
        for port, role in ((5301, "up"), (5302, "down")):
            mine, theirs, err = t.transfer("srv", "2001:db8:64::c633:6402", "198.51.100.2", "cli", port, role)
            assert len(mine) == 64 and mine == theirs, f"{role}: {mine} {theirs} {err} | {t.qn.stats()}"
        # The stats line comes once a second: wait for one written after both transfers
        # (both directions counted), not the last one written during them.
        assert wait_for(lambda: counters(t.qn, "xdp_fast_bytes") > SIZE and counters(t.qn, "xdp_fast_out") > 0
                        and counters(t.qn, "xdp_fast_in") > 0, 5.0, step=0.2), t.qn.stats()
        n, b = counters(t.qn, "xdp_fast"), counters(t.qn, "xdp_fast_bytes")
        # More than one transfer's worth through the program, in frames of more than two
        # MTUs on average: super-packets (a loaded sender's TSO builds smaller ones, so the
        # average is not held to more).
        assert b / n > SUPER, t.qn.stats()
        assert counters(t.qn, "xdp_fast_out") > 0 and counters(t.qn, "xdp_fast_in") > 0, t.qn.stats()
        assert counters(t.qn, "xdp_fast_installs") >= 4, t.qn.stats()
    run(Clat(quicknat, fast=True), body)


@pytest.mark.parametrize("csum,ident", [("adjust-transport", "luid"), ("neutral-map", "use-format")])
def test_ila_tcp_both_ways_with_super_packets_passed_through(quicknat, csum, ident):
    run(Ila(quicknat, csum, ident), lambda t: check(t, [t.r1, t.r2], "b", f"{SIR}::b", f"{SIR}::b", "a"))


@pytest.mark.parametrize("csum,ident", [("adjust-transport", "luid"), ("neutral-map", "use-format")])
def test_ila_tcp_both_ways_through_the_tc_fast_path_as_super_packets(quicknat, csum, ident):
    """Both ILA routers with `xdp_fast_path = "on"` (the tc ingress program on AF_PACKET):
    the mappings are offloaded as their next hops resolve, and the senders' super-packets
    cross both routers whole through the program (the destination rewritten and, under
    adjust-transport, the partial checksum updated as it is). The bytes arrive intact both
    ways, and more than a transfer's worth went through each router's program, in frames
    of more than two MTUs on average."""
    def body(t):
        for q in (t.r1, t.r2):
            assert q.wait_started() and q.proc.poll() is None, q.text()[-2000:]
            assert "at the tc ingress hook" in q.text(), q.text()[-2000:]
        for port, role in ((5301, "up"), (5302, "down")):
            mine, theirs, err = t.transfer("b", f"{SIR}::b", f"{SIR}::b", "a", port, role)
            assert len(mine) == 64 and mine == theirs, \
                f"{role}: {mine} {theirs} {err} | {t.r1.stats()} | {t.r2.stats()}"
        for q in (t.r1, t.r2):
            # Both transfers cross each router: wait for a stats line (one a second) written
            # after most of the second, not one written during the first.
            assert wait_for(lambda: counters(q, "xdp_fast_bytes") > 3 * SIZE // 2, 5.0, step=0.2), q.stats()
            assert counters(q, "xdp_fast_bytes") / counters(q, "xdp_fast") > SUPER, q.stats()
    run(Ila(quicknat, csum, ident, fast=True), body)
