"""End-to-end tests of the XDP fast path for ILA: the ILA twin of test_xdp_fast_path64.py.

One ILA router between a host and the ILA network,

    a (A = 3333:0:0:1::a) == r1 [quicknat AF_XDP, ila] == p (the ILA network: B's router)
       a0, mtu 1600           r1a (inside) | r1n (outside)     p0, mtu 1500

with the mappings 0:0:0:a -> 2001:db8:a:0 (A, behind r1) and 0:0:0:b -> 2001:db8:b:1 (B,
behind p), run twice: `xdp_fast_path = "off"` and `"on"` (then a0 and p0 get GRO, i.e.
NAPI, or they drop XDP-redirected frames). r1 routes B's locator to p and A's SIR address to
a, with permanent neighbours, so both next hops are known at start: with the fast path on,
B's mapping is offloaded outbound (SIR -> ILA, in r1a's map) and A's inbound (ILA -> SIR,
in r1n's map) before any packet flows. Then the same crafted packets (scapy, at layer 2) go
through r1 in both directions:

  * outbound, from a to B's SIR address: UDP of many sizes, hop limits, traffic classes
    and flow labels; TCP data segments (ACK/PSH/URG/ECE/CWR); ICMPv6 echo requests and
    replies; a UDP zero checksum; a 1540-byte packet (fits r1a's MTU, not r1n's: Packet Too
    Big, nothing comes out); plus what the program must leave to the engine: hop limit 1
    (Time Exceeded), an unmapped identifier (dropped), TCP SYN and FIN, a Destination
    Options header, an unknown next header and a fragmented datagram (translated by the
    engine);
  * inbound, from p to A's ILA address (as B's router sends it: in the checksum-neutral
    modes with the identifier's adjusted low word, and the C-bit under neutral-map): the
    same kinds, with a 1500-byte packet instead of the big one (translated);
  * both ways, the checksum edge cases of test_xdp_fast_path64.py: checksums that
    translate to zero (TCP 0x0000, UDP sent as 0xffff) or arrive as zero, TCP's other
    zero 0xffff, a wrong checksum, partial ones (completed before translation).

Both runs send at once (two topologies side by side: wirecmp.concurrently).
The translated frames are captured at the far side (p0 outbound, a0 inbound) in both runs
and compared one by one from the IP header on (matched by tag, or by fragment
identification and offset). With the fast path on, each direction's XDP counter grows by
at least its number of fast-path-eligible packets and the AF_XDP socket of its ingress
interface receives only the rest (2 more allowed); off, the socket receives them all.
Last, both stop cleanly on SIGTERM with no XDP program left.

The whole comparison runs for the four checksum modes: adjust-transport, no-action,
neutral-map (ident_type use-format) and neutral-map-auto.

On AF_XDP the program is the steering XDP program's; on AF_PACKET the tc ingress program
(`xdp_fast_path = "on"` there puts the same fast path at the tc hook). Needs root and
scapy.
    sudo python3 -m pytest tests/e2e/test_xdp_fast_path_ila.py [--quicknat PATH]
"""

import ipaddress
import subprocess

import pytest

from netns import Scenario, wait_for
from wirecmp import FastRun, concurrently, differences, fast_fixture, windows

pytestmark = [pytest.mark.needs_root]

# The XDP hook (AF_XDP) and the tc ingress hook (AF_PACKET): the same maps, entries and
# bytes out.
BACKENDS = ("af_xdp", "af_packet")

SIR = 0x3333_0000_0000_0001
LOC_A, LOC_B = 0x2001_0db8_000a_0000, 0x2001_0db8_000b_0001
ID_A, ID_B, ID_C = 0xa, 0xb, 0xc      # C is not mapped
C_BIT = 1 << 60

# label: (csum_mode, ident_type)
MODES = {
    "adjust-transport": ("adjust-transport", "luid"),
    "no-action": ("no-action", "luid"),
    "neutral-map": ("neutral-map", "use-format"),
    "neutral-map-auto": ("neutral-map-auto", "luid"),
}

CONFIG = """
[gateway]
inside = "r1a"
outside = "r1n"
backend = "{backend}"
workers = 1
stats_interval = 1
xdp_fast_path = "{fast}"
control_socket = "{sock}"

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


def addr(upper, lower):
    return str(ipaddress.IPv6Address(upper << 64 | lower))


def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def sum64(v):
    return fold(sum(v >> (16 * i) & 0xFFFF for i in range(4)))


def ila_ident(ident, csum, sir=SIR, loc=None):
    """The identifier of the ILA address the SIR one becomes (xlat::ila's `neutral`, the
    Linux `ila_csum_do_neutral_*` arithmetic): unchanged unless a neutral mode."""
    if not csum.startswith("neutral"):
        return ident
    comp, new = sum64(sir) + (~sum64(loc) & 0xFFFF), ident
    if csum == "neutral-map":
        comp += 0x1000 if ident & C_BIT else (~0x1000 & 0xFFFF)
        new ^= C_BIT
    comp = fold(comp)
    if comp in (0, 0xFFFF):
        return new
    adj = fold((ident & 0xFFFF) + comp)
    return (new & ~0xFFFF) | (0 if adj == 0xFFFF else adj)


# Both directions: lists of (packet, frames that must come out at the far side) — `drop`
# and `slow`, the engine's, `fast`, the program's, `either`, which either may take — sent
# in one go in that order, and a JSON summary on stdout. The checksum edge cases are those
# of test_xdp_fast_path64.py: a 16-bit word W at payload offset 10 makes the translated
# (out0) or the arriving (in0) checksum zero; TCP's other zero (inffff); a wrong checksum;
# partial checksums as they come and completing or translating to zero.
CRAFT = r"""
import json, socket, sys
# The layers used, not scapy.all (which loads every layer: a second more per script, four
# scripts a comparison); the packets' bytes are the same.
from scapy.config import conf
from scapy.layers.l2 import Ether
from scapy.layers.inet import UDP, TCP
from scapy.layers.inet6 import (IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, ICMPv6EchoRequest,
                                ICMPv6EchoReply, fragment6)
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.arch import get_if_hwaddr
conf.verb = 0
way, IFACE, gw, SRC, DST, THEIRS, DST_UNMAPPED, BIG = sys.argv[1:9]
me, BIG = get_if_hwaddr(IFACE), BIG == "fast"
n = iter(range(100))
tag = lambda: "QIL-%s-%02d." % (way[0], next(n))
def pay(t, size, w=None):
    head = t.encode() + (b"\0" + w.to_bytes(2, "big") if w is not None else b"")
    return Raw(head + bytes((i * 7 + 3) % 251 for i in range(max(0, size - len(head)))))
def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s
def words(b):
    b = b + b"\0" * (len(b) % 2)
    return sum(int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2))
def l4csum(l3):
    p = IPv6(bytes(l3))
    return (p[TCP] if TCP in p else p[UDP]).chksum
def pseudo(l3):
    p = IPv6(bytes(l3))
    m = len(bytes(p[IPv6].payload))
    return fold(words(socket.inet_pton(socket.AF_INET6, p.src)) + words(socket.inet_pton(socket.AF_INET6, p.dst))
                + (m >> 16) + (m & 0xFFFF) + p.nh)
def v6(dst=DST, hlim=64, tc=0, fl=0):
    return Ether(src=me, dst=gw) / IPv6(src=SRC, dst=dst, hlim=hlim, tc=tc, fl=fl)
def tcph(flags, i, csum=None):
    return TCP(sport=40001, dport=7001, seq=3000000 + i * 5000, ack=1, flags=flags, window=512 + i,
               urgptr=(7 if "U" in flags else 0), chksum=csum)
drop, fast, either, slow = [], [], [], []
# The engine's: hop limit 1 (Time Exceeded goes back), an unmapped identifier (dropped).
drop.append((v6(hlim=1) / UDP(sport=40000, dport=7000) / pay(tag(), 20), 0))
drop.append((v6(dst=DST_UNMAPPED) / UDP(sport=40000, dport=7000) / pay(tag(), 20), 0))
HL, TC, FL = (64, 2, 255), (0, 0xb8, 0x03), (0, 0x12345, 0xfffff)
# The program's: UDP of many sizes.
for i in range(9):
    fast.append((v6(hlim=HL[i % 3], tc=TC[(i // 3) % 3], fl=FL[i % 3]) / UDP(sport=40000, dport=7000)
                 / pay(tag(), 12 + i * 160), 1))
# TCP data segments (never SYN/FIN/RST).
for i, (size, flags) in enumerate(((10, "A"), (100, "PA"), (33, "AU"), (200, "PAE"), (50, "AC"), (1400, "PA"))):
    fast.append((v6(hlim=HL[i % 3], tc=TC[(i + 1) % 3]) / tcph(flags, i) / pay(tag(), size), 1))
# ICMPv6 echo, a UDP zero checksum (no checksum: left as it is in every mode).
fast.append((v6() / ICMPv6EchoRequest(id=7, seq=1, data=pay(tag(), 40).load), 1))
fast.append((v6(hlim=9) / ICMPv6EchoReply(id=7, seq=2, data=pay(tag(), 300).load), 1))
fast.append((v6() / UDP(sport=40000, dport=7000, chksum=0) / pay(tag(), 30), 1))
# Outbound, 1540 bytes: over r1n's MTU (Packet Too Big, the engine's); inbound, 1500 (the
# most p0 sends): the program's.
if BIG:
    fast.append((v6() / UDP(sport=40000, dport=7000) / pay(tag(), 1452), 1))
else:
    drop.append((v6() / UDP(sport=40000, dport=7000) / pay(tag(), 1492), 0))
# Checksum edge cases, UDP and TCP, small and large.
def edges(mine, theirs):
    tcp = TCP in mine(0, None, "QIL-x-00.")
    for case in ["out0", "in0"] + (["inffff"] if tcp else []):
        t = tag()
        w = l4csum(theirs(0, t)) if case == "out0" else l4csum(mine(0, None, t)[Ether].payload)
        fast.append((mine(w, 0xFFFF if case == "inffff" else None, t), 1))
    t = tag()
    good = l4csum(mine(None, None, t)[Ether].payload)
    fast.append((mine(None, good ^ 0x5A5A, t), 1))
    for case in ("plain", "in0", "out0"):
        t = tag()
        w = {"plain": None, "in0": l4csum(mine(0, None, t)[Ether].payload), "out0": l4csum(theirs(0, t))}[case]
        either.append((mine(w, pseudo(mine(w, None, t)[Ether].payload), t), 1))
for size in (30, 1300):
    edges(lambda w, c, t, size=size: v6(tc=0xb8) / UDP(sport=40000, dport=7000, chksum=c) / pay(t, size, w),
          lambda w, t, size=size: IPv6(src=SRC, dst=THEIRS) / UDP(sport=40000, dport=7000) / pay(t, size, w))
    edges(lambda w, c, t, size=size: v6(hlim=9) / tcph("PA", 20 + size, c) / pay(t, size, w),
          lambda w, t, size=size: IPv6(src=SRC, dst=THEIRS) / tcph("PA", 20 + size) / pay(t, size, w))
# The engine's, which it translates: SYN and FIN, a Destination Options header, an unknown
# next header, a fragmented datagram.
slow.append((v6() / tcph("S", 30) / pay(tag(), 0), 1))
slow.append((v6() / tcph("FA", 31) / pay(tag(), 20), 1))
slow.append((v6(hlim=63) / IPv6ExtHdrDestOpt() / UDP(sport=40000, dport=7000) / pay(tag(), 40), 1))
slow.append((Ether(src=me, dst=gw) / IPv6(src=SRC, dst=DST, nh=253) / pay(tag(), 64), 1))
whole = v6(tc=0xb8)[IPv6] / IPv6ExtHdrFragment(id=0x51520000 + ord(way[0])) / UDP(sport=40000, dport=7000) / pay(tag(), 1400)
for f in fragment6(whole, 800):
    slow.append((Ether(src=me, dst=gw) / f, 1))
pkts = [p for p, _ in drop + fast + either + slow]
sendp(pkts, iface=IFACE, verbose=False)
print(json.dumps({"sent": len(pkts), "fast": len(fast), "either": len(either),
                  "frames": sum(k for _, k in fast + either + slow)}))
"""


def mac(g, ns, dev):
    return g.nsx(ns, "cat", f"/sys/class/net/{dev}/address").stdout.strip()


class Run(FastRun):
    """One ILA router (fast path on or off) with captures of what it sends to p
    (outbound) and to a (inbound)."""

    # Where windows() sends its frame for another host (wirecmp.fresh_rx).
    poke_port = ("a", "a0")

    def __init__(self, quicknat, fast, mode, backend="af_xdp"):
        self.fast, self.quicknat, self.csum = fast, quicknat, MODES[mode][0]
        self.g = g = Scenario("qilf", ("a", "r1", "p"))
        try:
            g.make_namespaces()
            g.link("a", "a0", "r1", "r1a", mtu=1600, own_link_local=True)
            g.link("r1", "r1n", "p", "p0", mtu=1500, own_link_local=True)
            if fast != "off" and backend == "af_xdp":
                # A veth takes XDP-redirected frames only with NAPI on (GRO at the peer).
                for n, dev in (("a", "a0"), ("p", "p0")):
                    g.nsx(n, "ethtool", "-K", dev, "gro", "on", check=False)
            for n, dev, ll in (("a", "a0", "fe80::a"), ("r1", "r1a", "fe80::1"), ("r1", "r1n", "fe80::1"),
                               ("p", "p0", "fe80::2")):
                g.nsx(n, "ip", "-6", "addr", "add", f"{ll}/64", "dev", dev, "nodad")
            g.nsx("a", "ip", "-6", "addr", "add", f"{addr(SIR, ID_A)}/128", "dev", "a0", "nodad")
            # r1: B's locator to p, A's SIR address to a, both neighbours known.
            g.nsx("r1", "ip", "-6", "route", "add", f"{addr(LOC_B, 0)}/64", "via", "fe80::2", "dev", "r1n")
            g.nsx("r1", "ip", "-6", "route", "add", f"{addr(SIR, ID_A)}/128", "via", "fe80::a", "dev", "r1a")
            g.nsx("r1", "ip", "-6", "neigh", "replace", "fe80::2", "lladdr", mac(g, "p", "p0"),
                  "dev", "r1n", "nud", "permanent")
            g.nsx("r1", "ip", "-6", "neigh", "replace", "fe80::a", "lladdr", mac(g, "a", "a0"),
                  "dev", "r1a", "nud", "permanent")
            csum, ident = MODES[mode]
            self.sock = f"/run/qn-xdpfastila-{fast}-{g.ns['r1']}.sock"
            self.qn = g.quicknat(quicknat, "r1", CONFIG.format(fast=fast, sock=self.sock, csum=csum, ident=ident,
                                                          backend=backend),
                                 f"ila-xdp-fast-{fast}-{mode}")
            self.pcap_out = f"/tmp/qn-xdpfastila-{fast}-{g.ns['p']}.pcap"
            self.pcap_in = f"/tmp/qn-xdpfastila-{fast}-{g.ns['a']}.pcap"
            g.defer(self.qn.stop)
            g.defer(lambda: subprocess.run(["rm", "-f", self.sock, self.pcap_out, self.pcap_in]))
            assert self.qn.wait_started() and self.qn.proc.poll() is None, self.qn.text()[-2000:]
            for ns, dev, pcap in (("p", "p0", self.pcap_out), ("a", "a0", self.pcap_in)):
                dump = g.popen(ns, "tcpdump", "-i", dev, "-Q", "in", "-U", "-n", "-w", pcap,
                               "ip6 and not (ip6[6] == 58 and ip6[40] < 128)",  # not r1's ICMPv6 errors
                               stderr=subprocess.PIPE, text=True)
                assert wait_for(lambda: "listening" in (dump.stderr.readline() or ""), 5)
        except BaseException:
            g.close()
            raise

    def ready(self):
        """With the fast path on: both mappings offloaded (B's outbound, A's inbound)."""
        if self.fast == "off":
            return True
        return wait_for(lambda: (self.fast_stats() or {}).get("sessions", 0) >= 2, 5)

    def craft(self, way):
        """Sends the crafted packets of `way` ("out" from a, "in" from p)."""
        g, csum = self.g, self.csum
        ila_a = addr(LOC_A, ila_ident(ID_A, csum, loc=LOC_A))
        ila_b = addr(LOC_B, ila_ident(ID_B, csum, loc=LOC_B))
        if way == "out":
            args = ("a0", mac(g, "r1", "r1a"), addr(SIR, ID_A), addr(SIR, ID_B), ila_b, addr(SIR, ID_C), "drop")
            ns = "a"
        else:
            args = ("p0", mac(g, "r1", "r1n"), addr(SIR, ID_B), ila_a, addr(SIR, ID_A),
                    addr(LOC_A, ila_ident(ID_C, csum, loc=LOC_A)), "fast")
            ns = "p"
        return self.script(ns, CRAFT, way, *args)



@pytest.fixture(scope="module", params=list(MODES))
def mode(request):
    return request.param


@pytest.fixture(scope="module")
def off(quicknat, backend, mode):
    yield from fast_fixture(backend, lambda: Run(quicknat, "off", mode, backend), BACKENDS)


@pytest.fixture(scope="module")
def on(quicknat, backend, mode):
    yield from fast_fixture(backend, lambda: Run(quicknat, "on", mode, backend), BACKENDS)


def test_on_the_mappings_are_offloaded_each_in_the_direction_this_router_forwards(on):
    assert on.ready(), f"{on.fast_stats()} | {on.qn.text()[-2000:]}"
    f = on.fast_stats()
    st = on.ctl("status")["xdp_fast_path"]
    assert st["on"] is True and "ILA mappings" in st["why"], st
    assert f["sessions"] == 2 and f["errors"] == 0 and f["map_full"] == 0, f


def test_the_bytes_on_the_wire_are_identical_with_and_without_the_fast_path(off, on, mode):
    problems = []

    def one(run):
        """The run's crafted packets, both ways, and what came out (both runs at once:
        wirecmp.concurrently)."""
        assert run.ready(), f"{run.fast}: {run.qn.text()[-2000:]}"
        return windows(run, (
            ("out", lambda: run.craft("out"), run.pcap_out, 0),
            ("in", lambda: run.craft("in"), run.pcap_in, 1),
        ), "QIL-", problems)

    (got_off, sent_off), (got_on, sent_on) = concurrently(one, (off, on))
    got, sent = {"off": got_off, "on": got_on}, {"off": sent_off, "on": sent_on}
    assert sent["off"] == sent["on"]
    differ = differences(got, ("at p (outbound)", "at a (inbound)"))
    assert not differ, (f"{mode}: {len(differ)} frame(s) differ:\n" + "\n\n".join(differ)
                        + "".join(f"\nalso: {p}" for p in problems))
    assert not problems, "\n".join(problems)


def test_quicknat_stops_cleanly_and_leaves_no_xdp_program(off, on):
    for run in (off, on):
        rc, text = run.qn.stop()
        assert rc == 0 and "stopped." in text, f"{run.fast}: {text[-2000:]}"
        left = run.g.nsx("r1", "ip", "link", "show", check=False).stdout
        assert "xdp" not in left, f"{run.fast}: {left}"
