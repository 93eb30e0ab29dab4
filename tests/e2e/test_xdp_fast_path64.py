"""End-to-end tests of the XDP fast path for established NAT64 flows: the NAT64 twin of
test_xdp_fast_path.py.

The NAT64 topology of test_nat64.py without its far router,

    cli (2001:db8:1::2) == gw (g-in 2001:db8:1::1 | g-out 198.51.100.1) == srv (198.51.100.2)
        IPv6 only          quicknat AF_XDP [nat64], pref64 2001:db8:64::/96, pool4 203.0.113.1

run twice: `xdp_fast_path = "off"` and `"on"` (then the client- and server-side veth
peers get GRO, i.e. NAPI, or they drop XDP-redirected frames). In each run the client
opens a UDP flow ([2001:db8:1::2]:40000) and a TCP connection ([2001:db8:1::2]:40001) to
the IPv4 server through its pref64 address and exchanges messages until they are
established (with the fast path on: until the reaper's walk installed both sessions in
the XDP maps). Then the same crafted packets (scapy, at layer 2) go on those flows in
both directions:

  * IPv6 -> IPv4 from the client: UDP and TCP data segments (ACK/PSH/URG/ECE/CWR, never
    SYN/FIN/RST), small (translated <= 1260 bytes: DF clear, an Identification from the
    flow's counter) and large (DF set, Identification 0), at the 1260/1261 boundary and
    the 1500-byte MTU, with hop limits 64/2/255, traffic classes 0/0xb8/0x03 and flow
    labels; plus packets the program must leave to the engine: a UDP zero checksum and
    hop limit 1 (nothing comes out), a Destination Options header and a fragmented
    datagram (translated by the engine);
  * IPv4 -> IPv6 from the server: UDP and TCP to the public endpoints, TTLs 64/2/255/9,
    TOS 0/0x10/0xb8/0x03, DF set and clear, up to the 1260-byte DF-clear and 1480-byte
    DF-set limits; plus a UDP zero checksum, TTL 1, a bad header checksum and a DF
    packet 1 byte too big (nothing comes out), IPv4 options, a fragmented datagram, and
    a DF-clear packet over 1260 bytes (fragmented by the engine);
  * in both directions, checksum edge cases on the same flows, UDP and TCP, small and
    large: packets whose translated checksum computes to zero (TCP 0x0000, UDP sent as
    0xffff) or whose own does (and TCP's other zero, 0xffff), a wrong checksum (carried
    through as wrong), and partial ones (a veth peer's tx offload), plain and completing
    or translating to zero.

Both runs send at once (two topologies side by side: wirecmp.concurrently).
The translated frames are captured at the far side (IPv4 at the server's s0, IPv6 at the
client's c0) in both runs and compared one by one (matched by the tag each crafted
packet carries, or by fragment identification and offset) from the IP header on; each
frame's Ethernet addresses must be that run's own receiving-host and gateway MACs. Each
direction is sent in a window of its own between two stats lines: with the fast path on,
its XDP counter (packets_out, packets_in) grows by at least the number of its
fast-path-eligible packets, and the AF_XDP socket of its ingress interface receives only
the packets meant for the engine (2 more allowed: a session is reinstalled, briefly
absent from the map, whenever routes or neighbours change); with it off, the socket
receives them all, the fast path is reported off and has no counters. Last, both stop
cleanly on SIGTERM with no XDP program left on the gateway's interfaces.

The whole comparison runs for three [nat64.options] variants, the settings the program
copies at install: RFC 7915's defaults; tos = 32, traffic_class = 72, df = "set"; and
copy_tos = false, df = "clear" (each checked to be in force in the captures).

AF_XDP only; needs root and scapy.
    sudo python3 -m pytest tests/e2e/test_xdp_fast_path64.py [--quicknat PATH]
"""

import signal
import subprocess
import sys
import time

import pytest

from netns import Scenario, wait_for
from wirecmp import FastRun, concurrently, describe, differences, fast_fixture, read_pcap, windows

pytestmark = [pytest.mark.needs_root]

PREF64 = "2001:db8:64::/96"
POOL4 = "203.0.113.1"
SERVER = "198.51.100.2"
# The XDP hook (AF_XDP) and the tc ingress hook (AF_PACKET): the same maps, entries and
# bytes out.
BACKENDS = ("af_xdp", "af_packet")
SERVER6 = "2001:db8:64::c633:6402"   # 198.51.100.2 under PREF64 (RFC 6052, /96)
CLIENT6 = "2001:db8:1::2"
TCP_PORT = 7001                      # the server's (UDP: 7000; the client's: 40000, 40001)

CONFIG = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "{backend}"
workers = 1
stats_interval = 1
xdp_fast_path = "{fast}"
control_socket = "{sock}"
{gateway}
{table}

[{mode}.options]
ipv6_mtu = 1500
ipv4_mtu = 1500
{options}"""

# The same packets through the stateless translator (SIIT/CLAT): the
# client is the EAM entry 203.0.113.1 <-> 2001:db8:1::2 (so it shows the server the
# address NAT64's pool gave it) and the server is in the Pref64, as for NAT64; the ports are
# the client's own. The IPv4 side is SIIT's inside: g-out. A CLAT is this translator
# with one EAM entry and the PLAT as its Pref64 (`SiitConfig::clat`).
MODES = {
    "nat64": ('[nat64]\npref64 = "2001:db8:64::/96"\npool4 = ["203.0.113.1/32"]', "g-in", "g-out"),
    "siit": ('[siit]\npref64 = "2001:db8:64::/96"\n'
             'eam = [ { ipv4 = "203.0.113.1/32", ipv6 = "2001:db8:1::2/128" } ]', "g-out", "g-in"),
}

# The translator settings the fast path copies at install (README "Translator settings"):
# RFC 7915's defaults (TOS <-> traffic class copied, DF above 1260 bytes), fixed values
# with DF always set, and zeros with DF always clear (a counted ID on every packet).
SETTINGS = {
    "rfc": "",
    "fixed": 'tos = 32\ntraffic_class = 72\ndf = "set"\n',
    "zero": 'copy_tos = false\ndf = "clear"\n',
}
# The suite's variants: every settings for NAT64, two for SIIT ("siit-rfc": mode-settings).
VARIANTS = list(SETTINGS) + ["siit-rfc", "siit-zero"]


def variant_of(name):
    """(mode, settings) of a variant's name."""
    mode, _, settings = name.rpartition("-")
    return mode or "nat64", settings

# A UDP echo server that answers only datagrams starting with b"ping" (crafted packets
# get no answer and change nothing but counters), and a TCP server that echoes data
# starting with "ping" and reads everything else; each peer it hears a ping from is
# appended to the file argv[2] ("udp ADDR PORT" / "tcp ADDR PORT"): the public endpoints.
ECHO = r"""
import socket, sys, threading
addr, peers = sys.argv[1], sys.argv[2]
def note(kind, p):
    with open(peers, "a") as f:
        f.write("%s %s %d\n" % (kind, p[0], p[1]))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((addr, 7000))
def udp():
    while True:
        d, p = u.recvfrom(65535)
        if d.startswith(b"ping"):
            note("udp", p)
            u.sendto(d, p)
threading.Thread(target=udp, daemon=True).start()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, 7001)); t.listen(8)
def serve(c, p):
    while True:
        d = c.recv(65535)
        if not d:
            return
        if d.startswith(b"ping"):
            note("tcp", p)
            c.sendall(d)
while True:
    c, p = t.accept()
    threading.Thread(target=serve, args=(c, p), daemon=True).start()
"""

# The IPv6 client: a UDP flow from [2001:db8:1::2]:40000 and a TCP connection from
# [2001:db8:1::2]:40001 to the server's pref64 address; "ping" on stdin exchanges one
# message on both (prints "ok").
CLIENT = r"""
import socket, sys
srv = sys.argv[1]
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.bind(("2001:db8:1::2", 40000))
u.connect((srv, 7000)); u.settimeout(3)
t = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t.bind(("2001:db8:1::2", 40001)); t.settimeout(3); t.connect((srv, 7001))
print("ready", flush=True)
for line in sys.stdin:
    try:
        if line.strip() == "ping":
            u.send(b"ping-u"); u.recv(100)
            t.sendall(b"ping-t"); t.recv(100)
            print("ok", flush=True)
    except OSError as e:
        print("error %r" % e, flush=True)
"""

# Shared by both crafting scripts: lists of (packet, frames that must come out at the far
# side) — `drop` and `slow`, the engine's (dropped, or translated by it), `fast`, the XDP
# program's, and `either`, which either may take — sent in one go in that order (the
# dropped first and the engine-translated last, so that when the last expected frame has
# arrived the engine has decided every earlier packet), and a JSON summary on stdout.
#
# Checksum edge cases: ones' complement arithmetic has two zeros, and an incremental
# update (RFC 1624) may land on either, so the program must land where the engine does. A
# 16-bit word W in the payload (at offset 10, even) is chosen so that the translated
# packet's checksum computes to zero ("out0": TCP 0x0000, UDP sent as 0xffff), or the
# arriving packet's own does ("in0"), or an arriving TCP segment carries the other zero,
# 0xffff ("inffff"). Also a wrong checksum (neither path verifies it: the same wrong value
# must come out), and partial ones, the pseudo-header sum a veth peer's tx offload leaves
# (completed before translation), as they come and with W making the completed or the
# translated checksum zero.
CRAFT_COMMON = r"""
import json, socket, sys
# The layers used, not scapy.all (which loads every layer: a second more per script, four
# scripts a comparison); the packets' bytes are the same.
from scapy.config import conf
from scapy.layers.l2 import Ether
from scapy.layers.inet import IP, UDP, TCP, IPOption_NOP, IPOption_EOL, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, fragment6
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.arch import get_if_hwaddr
conf.verb = 0
def start(iface, prefix):
    # The sender's interface, the gateway's MAC (argv[1]), the flows' public ports
    # (argv[2] UDP, argv[3] TCP), and the tags its packets carry.
    global IFACE, gw, me, uport, tport, tag
    IFACE, gw, me = iface, sys.argv[1], get_if_hwaddr(iface)
    uport, tport = int(sys.argv[2]), int(sys.argv[3])
    n = iter(range(100))
    tag = lambda: prefix + "%02d." % next(n)
def pay(tag, n, w=None):
    # n payload bytes (at least 12), starting with the tag "Q64-d-NN."; with w, the word
    # at payload offset 10 is w.
    head = tag.encode() + (b"\0" + w.to_bytes(2, "big") if w is not None else b"")
    return Raw(head + bytes((i * 7 + 3) % 251 for i in range(max(0, n - len(head)))))
def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s
def words(b):
    b = b + b"\0" * (len(b) % 2)
    return sum(int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2))
def l4csum(l3):
    # The TCP/UDP checksum scapy computes for the L3 packet `l3`.
    p = type(l3)(bytes(l3))
    return (p[TCP] if TCP in p else p[UDP]).chksum
def pseudo(l3):
    # The folded pseudo-header sum: what a partial checksum holds.
    p = type(l3)(bytes(l3))
    if IPv6 in p:
        fam, src, dst, proto = socket.AF_INET6, p[IPv6].src, p[IPv6].dst, p[IPv6].nh
        n = len(bytes(p[IPv6].payload))
    else:
        fam, src, dst, proto = socket.AF_INET, p[IP].src, p[IP].dst, p[IP].proto
        n = len(bytes(p[IP].payload))
    return fold(words(socket.inet_pton(fam, src)) + words(socket.inet_pton(fam, dst)) + (n >> 16)
                + (n & 0xFFFF) + proto)
drop, fast, either, slow = [], [], [], []
def edges(mine, theirs):
    # mine(w, csum, tag): the packet to send (Ether / IP / L4 / pay(tag, .., w)),
    # theirs(w, tag): its translation's L3 packet (what the gateway must make of it).
    tcp = TCP in mine(0, None, "Q64-x-00.")
    for case in ["out0", "in0"] + (["inffff"] if tcp else []):
        t = tag()
        if case == "out0":
            w = l4csum(theirs(0, t))
        else:
            w = l4csum(mine(0, None, t)[Ether].payload)
        fast.append((mine(w, 0xFFFF if case == "inffff" else None, t), 1))
    t = tag()
    good = l4csum(mine(None, None, t)[Ether].payload)
    fast.append((mine(None, good ^ 0x5A5A, t), 1))                        # wrong, not zero
    # Partial: as it comes, completed to zero, and translated to zero. Either path may
    # complete it (the program does up to a size, user space beyond).
    for case in ("plain", "in0", "out0"):
        t = tag()
        w = {"plain": None, "in0": l4csum(mine(0, None, t)[Ether].payload), "out0": l4csum(theirs(0, t))}[case]
        either.append((mine(w, pseudo(mine(w, None, t)[Ether].payload), t), 1))
def summary():
    pkts = [p for p, _ in drop + fast + either + slow]
    sendp(pkts, iface=IFACE, verbose=False)
    print(json.dumps({"sent": len(pkts), "fast": len(fast), "either": len(either),
                      "frames": sum(n for _, n in fast + either + slow)}))
"""

# IPv6 -> IPv4, sent by the client at the gateway's inside MAC (argv[1]); argv[2] and
# argv[3] are the UDP and TCP flows' public ports.
CRAFT_OUT = CRAFT_COMMON + r"""
start("c0", "Q64-o-")
SRC, DST, POOL4, SERVER = "2001:db8:1::2", "%s", "%s", "%s"
def v6(hlim=64, tc=0, fl=0):
    return Ether(src=me, dst=gw) / IPv6(src=SRC, dst=DST, hlim=hlim, tc=tc, fl=fl)
def tcph(sport, flags, i, csum=None):
    return TCP(sport=sport, dport=7001, seq=3000000 + i * 5000, ack=1, flags=flags, window=512 + i,
               urgptr=(7 if "U" in flags else 0), chksum=csum)
def udp(size, **kw):   # size: UDP payload bytes
    return v6(**kw) / UDP(sport=40000, dport=7000) / pay(tag(), size)
def tcp(size, flags, i, **kw):
    return v6(**kw) / tcph(40001, flags, i) / pay(tag(), size)
HL, TC, FL = (64, 2, 255), (0, 0xb8, 0x03), (0, 0x12345, 0xfffff)
# The engine's: a UDP zero checksum (illegal in IPv6: dropped), hop limit 1 (Time Exceeded).
drop.append((v6() / UDP(sport=40000, dport=7000, chksum=0) / pay(tag(), 20), 0))
drop.append((v6(hlim=1) / UDP(sport=40000, dport=7000) / pay(tag(), 20), 0))
# The program's: small UDP (translated <= 1260: DF clear, ID from the flow's counter).
for i in range(9):
    fast.append((udp(12 + i * 37, hlim=HL[i %% 3], tc=TC[(i // 3) %% 3], fl=FL[i %% 3]), 1))
# At the boundary: translated 1260 (DF clear), 1261 and 1480 (DF set, ID 0).
for size, hl, tc in ((1232, 64, 0), (1233, 2, 0xb8), (1452, 255, 0x03), (1300, 64, 0x03)):
    fast.append((udp(size, hlim=hl, tc=tc), 1))
# TCP data segments: several flags (never SYN/FIN/RST), small and large.
for i, (size, flags) in enumerate(((10, "A"), (100, "PA"), (33, "AU"), (200, "PAE"), (50, "AC"),
                                   (1220, "PA"), (1221, "A"), (1440, "PA"), (900, "A"))):
    fast.append((tcp(size, flags, i, hlim=HL[i %% 3], tc=TC[(i + 1) %% 3], fl=FL[(i + 2) %% 3]), 1))
# Checksum edge cases, UDP and TCP, small (DF clear) and large (DF set).
for size in (30, 1300):
    edges(lambda w, c, t, size=size: v6(tc=0xb8) / UDP(sport=40000, dport=7000, chksum=c) / pay(t, size, w),
          lambda w, t, size=size: IP(src=POOL4, dst=SERVER) / UDP(sport=uport, dport=7000) / pay(t, size, w))
    edges(lambda w, c, t, size=size: v6(hlim=9) / tcph(40001, "PA", 20 + size, c) / pay(t, size, w),
          lambda w, t, size=size: IP(src=POOL4, dst=SERVER) / tcph(tport, "PA", 20 + size) / pay(t, size, w))
# The engine's, which it translates: a Destination Options header, a fragmented datagram.
slow.append((v6(hlim=63) / IPv6ExtHdrDestOpt() / UDP(sport=40000, dport=7000) / pay(tag(), 40), 1))
whole = v6(tc=0xb8)[IPv6] / IPv6ExtHdrFragment(id=0x51525354) / UDP(sport=40000, dport=7000) / pay(tag(), 1400)
for f in fragment6(whole, 800):
    slow.append((Ether(src=me, dst=gw) / f, 1))
summary()
""" % (SERVER6, POOL4, SERVER)

# IPv4 -> IPv6, sent by the server at the gateway's outside MAC (argv[1]) to the public
# endpoints 203.0.113.1:argv[2] (UDP) and :argv[3] (TCP).
CRAFT_IN = CRAFT_COMMON + r"""
start("s0", "Q64-i-")
SRC, DST, SERVER6, CLIENT6 = "%s", "%s", "%s", "%s"
def v4(ttl=64, tos=0, df=True, ident=0x4000, **kw):
    return Ether(src=me, dst=gw) / IP(src=SRC, dst=DST, ttl=ttl, tos=tos, id=ident,
                                      flags=("DF" if df else 0), **kw)
def tcph(dport, flags, i, csum=None):
    return TCP(sport=7001, dport=dport, seq=7000000 + i * 5000, ack=1, flags=flags, window=1024 + i,
               urgptr=(9 if "U" in flags else 0), chksum=csum)
def udp(size, **kw):   # size: UDP payload bytes
    return v4(**kw) / UDP(sport=7000, dport=uport) / pay(tag(), size)
def tcp(size, flags, i, **kw):
    return v4(**kw) / tcph(tport, flags, i) / pay(tag(), size)
TTL, TOS = (64, 2, 255, 9), (0, 0x10, 0xb8, 0x03)
# The engine's: a UDP zero checksum (dropped by default), TTL 1 (Time Exceeded), DF and
# one byte too big for the 1500-byte IPv6 link (Fragmentation Needed), a bad IPv4 header
# checksum.
drop.append((v4(ident=0x0101) / UDP(sport=7000, dport=uport, chksum=0) / pay(tag(), 20), 0))
drop.append((v4(ttl=1, ident=0x0102) / UDP(sport=7000, dport=uport) / pay(tag(), 20), 0))
drop.append((udp(1453, ident=0x0103), 0))
drop.append((v4(ident=0x0106, chksum=0xbad1) / UDP(sport=7000, dport=uport) / pay(tag(), 20), 0))
# The program's: small UDP, DF set and clear, various TTL/TOS/IDs.
for i in range(10):
    fast.append((udp(5 + i * 41, ttl=TTL[i %% 4], tos=TOS[(i // 2) %% 4], df=bool(i %% 2),
                     ident=0x1000 + i * 0x111), 1))
# The limits: DF clear up to 1260 bytes (IPv6 1280, lowest_ipv6_mtu), DF set up to 1480.
for size, df, ttl, tos in ((1232, False, 64, 0xb8), (1233, True, 2, 0), (1452, True, 255, 0x03),
                           (1000, False, 9, 0x10)):
    fast.append((udp(size, df=df, ttl=ttl, tos=tos, ident=0x2000 + size), 1))
# TCP data segments.
for i, (size, flags, df) in enumerate(((10, "A", True), (100, "PA", False), (33, "AU", True),
                                       (200, "PAE", False), (50, "AC", True), (1200, "PA", False),
                                       (1400, "A", True), (1440, "PA", True), (700, "A", False))):
    fast.append((tcp(size, flags, i, ttl=TTL[i %% 4], tos=TOS[(i + 1) %% 4], df=df,
                     ident=0x3000 + i), 1))
# Checksum edge cases, UDP and TCP, DF clear and set.
v6 = lambda: IPv6(src=SERVER6, dst=CLIENT6)
for size, df in ((30, False), (1300, True)):
    edges(lambda w, c, t, size=size, df=df:
              v4(df=df, tos=0x10) / UDP(sport=7000, dport=uport, chksum=c) / pay(t, size, w),
          lambda w, t, size=size: v6() / UDP(sport=7000, dport=40000) / pay(t, size, w))
    edges(lambda w, c, t, size=size, df=df: v4(df=df, ttl=9) / tcph(tport, "PA", 20 + size, c) / pay(t, size, w),
          lambda w, t, size=size: v6() / tcph(40001, "PA", 20 + size) / pay(t, size, w))
# The engine's, which it translates: IPv4 options; DF clear over 1260 bytes (fragmented
# for the 1280-byte lowest IPv6 MTU: two IPv6 fragments).
slow.append((v4(ident=0x0104, options=[IPOption_NOP(), IPOption_NOP(), IPOption_NOP(), IPOption_EOL()])
             / UDP(sport=7000, dport=uport) / pay(tag(), 40), 1))
slow.append((udp(1272, df=False, ident=0x0105, tos=0xb8), 2))
# A datagram that arrives fragmented (IPv6 fragments come out).
for f in fragment(v4(df=False, ident=0x0107, ttl=30)[IP] / UDP(sport=7000, dport=uport) / pay(tag(), 600), 304):
    slow.append((Ether(src=me, dst=gw) / f, 1))
summary()
""" % (SERVER, POOL4, SERVER6, CLIENT6)


def mac(g, ns, dev):
    return g.nsx(ns, "cat", f"/sys/class/net/{dev}/address").stdout.strip()


class Run(FastRun):
    """One NAT64 gateway (fast path on or off), the echo server, the client, and captures
    of what the gateway sends to the server (IPv4) and to the client (IPv6)."""

    # Where windows() sends its frame for another host (wirecmp.fresh_rx).
    poke_port = ("cli", "c0")

    def __init__(self, quicknat, fast, settings="rfc", backend="af_xdp", mode="nat64", gateway=""):
        self.fast, self.quicknat, self.mode = fast, quicknat, mode
        self.g = g = Scenario("qn64f", ("cli", "gw", "srv"))
        try:
            g.make_namespaces()
            g.link("cli", "c0", "gw", "g-in")
            g.link("gw", "g-out", "srv", "s0")
            if fast != "off" and backend == "af_xdp":
                # A veth takes XDP-redirected frames only with NAPI on, which GRO turns on
                # at the receiving end's peer (as in test_nat44.py / test_xdp_fast_path.py).
                for n, dev in (("cli", "c0"), ("srv", "s0")):
                    g.nsx(n, "ethtool", "-K", dev, "gro", "on", check=False)
            g.nsx("cli", "ip", "-6", "addr", "add", f"{CLIENT6}/64", "dev", "c0", "nodad")
            g.nsx("cli", "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
            g.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
            g.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
            g.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
            g.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
            self.sock = f"/run/qn-xdpfast64-{fast}-{g.ns['gw']}.sock"
            table, inside, outside = MODES[mode]
            config = CONFIG.format(fast=fast, sock=self.sock, options=SETTINGS[settings], backend=backend,
                                   mode=mode, table=table, inside=inside, outside=outside, gateway=gateway)
            self.qn = g.quicknat(quicknat, "gw", config, f"{mode}-xdp-fast-{fast}-{settings}")
            self.peers = f"/tmp/qn-xdpfast64-peers-{g.ns['srv']}.txt"
            self.pcap4 = f"/tmp/qn-xdpfast64-{fast}-{g.ns['srv']}.pcap"
            self.pcap6 = f"/tmp/qn-xdpfast64-{fast}-{g.ns['cli']}.pcap"
            g.defer(self.qn.stop)  # SIGTERM first: quicknat restores what it changed
            g.defer(lambda: subprocess.run(["rm", "-f", self.sock, self.peers, self.pcap4, self.pcap6]))
            g.popen("srv", sys.executable, "-c", ECHO, SERVER, self.peers)
            assert self.qn.wait_started() and self.qn.proc.poll() is None, self.qn.text()[-2000:]
            assert g.wait_listening("srv", SERVER, TCP_PORT)
            # The far side of each direction: IPv4 from the pool at the server, IPv6 from
            # the server's pref64 address at the client.
            for ns, dev, pcap, flt in (("srv", "s0", self.pcap4, f"ip and src host {POOL4}"),
                                       ("cli", "c0", self.pcap6, f"ip6 and src host {SERVER6}")):
                dump = g.popen(ns, "tcpdump", "-i", dev, "-U", "-n", "-w", pcap, flt,
                               stderr=subprocess.PIPE, text=True)
                assert wait_for(lambda: "listening" in (dump.stderr.readline() or ""), 5)
            self.cli = g.popen("cli", sys.executable, "-c", CLIENT, SERVER6,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert self.cli.stdout.readline().strip() == "ready", self.qn.text()[-2000:]
        except BaseException:
            g.close()
            raise

    def ping(self):
        self.cli.stdin.write("ping\n")
        self.cli.stdin.flush()
        ok = self.cli.stdout.readline().strip() == "ok"
        self.pinged = getattr(self, "pinged", 0) + ok   # each, one "ping-u" at the server
        return ok

    def established(self):
        """Exchanges messages until both flows are established and (fast path on) the
        reaper's walk installed both sessions in the XDP maps (SIIT: the sync installed
        all four flow directions, each hinted at its second packet); returns whether it
        did."""
        want = 2 if self.mode == "nat64" else 4
        def done():
            if not self.ping():
                return False
            if self.fast == "off":
                return True
            f = self.fast_stats() or {}
            return f.get("installs", 0) >= want and f.get("sessions", 0) >= want and f
        return wait_for(done, 10, step=0.05)

    def ways(self):
        """The fast path's and the sockets' names of the IPv6 -> IPv4 and IPv4 -> IPv6
        directions: (counter suffix, receive-count index) each. NAT64's inside is IPv6,
        SIIT's IPv4."""
        if self.mode == "nat64":
            return ("out", 0), ("in", 1)
        return ("in", 1), ("out", 0)

    def public_ports(self):
        """The public (pool4) ports of the UDP flow and the TCP connection, as the server saw them."""
        with open(self.peers) as f:
            seen = dict((k, (a, int(p))) for k, a, p in (line.split() for line in f if line.strip()))
        assert seen["udp"][0] == POOL4 and seen["tcp"][0] == POOL4, seen
        return seen["udp"][1], seen["tcp"][1]




@pytest.fixture(scope="module", params=VARIANTS)
def variant(request):
    """The mode and [MODE.options] of both runs (the whole suite runs once per variant)."""
    return variant_of(request.param)


@pytest.fixture(scope="module")
def settings(variant):
    return variant[1]


@pytest.fixture(scope="module")
def off(quicknat, backend, variant):
    mode, settings = variant
    yield from fast_fixture(backend, lambda: Run(quicknat, "off", settings, backend, mode), BACKENDS)


@pytest.fixture(scope="module")
def on(quicknat, backend, variant):
    mode, settings = variant
    yield from fast_fixture(backend, lambda: Run(quicknat, "on", settings, backend, mode), BACKENDS)


def test_off_the_flows_work_on_the_slow_path_and_the_fast_path_is_reported_off(off):
    assert off.established(), off.qn.text()[-3000:]
    st = off.ctl("status")["xdp_fast_path"]
    assert st["on"] is False and st["switch"] == "off", st
    assert off.fast_stats() is None
    # A stats line after the exchanges, and no fast-path counter in any.
    lines = off.qn.text().count("stats:")
    assert wait_for(lambda: off.qn.text().count("stats:") > lines, 5), off.qn.text()[-2000:]
    assert " xdp_fast=" not in off.qn.text(), off.qn.stats()


def test_on_established_udp_and_tcp_flows_are_installed(on):
    f = on.established()
    assert f, f"{on.fast_stats()} | {on.qn.stats()}"
    st = on.ctl("status")["xdp_fast_path"]
    assert st["on"] is True and st["switch"] == "on", st
    assert f["errors"] == 0 and f["map_full"] == 0, f


def test_the_bytes_on_the_wire_are_identical_with_and_without_the_fast_path(off, on, settings):
    # What run "on" did wrong besides the bytes: reported after the byte comparison.
    problems = []

    def one(run):
        """The run's crafted packets, both ways, and what came out (both runs at once:
        wirecmp.concurrently)."""
        assert run.established(), f"{run.fast}: {run.qn.text()[-3000:]}"
        uport, tport = run.public_ports()
        ports = (str(uport), str(tport))
        (w6, at6), (w4, at4) = run.ways()
        frames_sent = windows(run, (
            (w6, lambda: run.script("cli", CRAFT_OUT, mac(run.g, "gw", "g-in"), *ports), run.pcap4, at6),
            (w4, lambda: run.script("srv", CRAFT_IN, mac(run.g, "gw", "g-out"), *ports), run.pcap6, at4),
        ), "Q64-", problems)
        # Ethernet: this run's own receiving host and gateway MACs.
        for frames, dst, src in ((frames_sent[0][0], ("srv", "s0"), ("gw", "g-out")),
                                 (frames_sent[0][1], ("cli", "c0"), ("gw", "g-in"))):
            want = bytes.fromhex((mac(run.g, *dst) + mac(run.g, *src)).replace(":", ""))
            for k, fs in frames.items():
                assert all(f[:12] == want for f in fs), (run.fast, k, [f[:12].hex() for f in fs], want.hex())
        return frames_sent

    (got_off, sent_off), (got_on, sent_on) = concurrently(one, (off, on))
    got, sent = {"off": got_off, "on": got_on}, {"off": sent_off, "on": sent_on}
    assert sent["off"] == sent["on"]
    # The variant's settings were in force (else it tests nothing new).
    if settings != "rfc":
        tos, df = {"fixed": (32, 1), "zero": (0, 0)}[settings]
        tc = {"fixed": 72, "zero": 0}[settings]
        for f in (f for fs in got["off"][0].values() for f in fs):
            ff = int.from_bytes(f[20:22], "big")
            assert f[15] == tos and (ff & 0x3FFF or ff >> 14 == df), (settings, describe(f))
        for f in (f for fs in got["off"][1].values() for f in fs):
            assert int.from_bytes(f[14:16], "big") >> 4 & 0xFF == tc, (settings, describe(f))
    # Frame by frame, from the IP header on (a whole DF-clear IPv4 datagram's Identification
    # aside: the engine numbers it from a keyed per-tuple counter, the program from the
    # flow's; RFC 6864
    # asks only that it be unique among its source, destination and protocol's datagrams).
    differ = differences(got, ("IPv4 at the server", "IPv6 at the client"), translated=("IPv4 at the server",))
    assert not differ, (f"{len(differ)} frame(s) differ:\n" + "\n\n".join(differ)
                        + "".join(f"\nalso: {p}" for p in problems))
    assert not problems, "\n".join(problems)
    # RFC 6864 on the fast path: the UDP flow's whole DF-clear datagrams (the nine small
    # ones the program takes, in a row) carry successive Identifications of its counter.
    if settings != "fixed":
        udp = [f for fs in got["on"][0].values() for f in fs
               if f[12:14] == b"\x08\x00" and f[23] == 17 and int.from_bytes(f[20:22], "big") & 0x7FFF == 0]
        ids = [int.from_bytes(f[18:20], "big") for f in udp]
        steps = sum((b - a) % 65536 == 1 for a, b in zip(ids, ids[1:]))
        assert steps >= 8, f"IDs in capture order: {ids}"


def test_gso_super_packets_go_through_the_tc_fast_path_translated_whole(on, settings):
    """AF_PACKET: with every offload on, the IPv6 client's kernel sends 64 KB TSO
    super-packets with partial checksums; the tc program translates each whole (IPv6 ->
    IPv4, its GSO type switched by bpf_skb_change_proto) and the IPv4 server's kernel
    accepts what arrives (iperf3 completes: the partial checksums it left were right).
    The same from the server (iperf3 -R: IPv4 -> IPv6, gso_size cut by 20). With df =
    "clear" (the "zero" settings) each IPv4 segment would need an Identification of the
    flow's counter: the program leaves the client's super-packets to the engine's GSO path."""
    if on.qn.text().find("at the tc ingress hook") < 0:
        pytest.skip("an XDP program turns its veth peer's TSO off: no super-packets reach it")
    assert on.established(), on.qn.text()[-3000:]
    devs = (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0"))
    for n, dev in devs:
        on.g.nsx(n, "ethtool", "-K", dev, "tx", "on", "tso", "on", "gso", "on", "gro", "on",
                 check=False)
    on.g.popen("srv", "iperf3", "-s", "-B", SERVER, "-p", "5202", stdout=subprocess.DEVNULL)
    assert on.g.wait_listening("srv", SERVER, 5202)
    try:
        # Client to server (IPv6 -> IPv4, "out"), then server to client (-R: IPv4 -> IPv6,
        # "in", each super-packet's gso_size cut by 20).
        (w6, _), (w4, _) = on.ways()
        for way, reverse in ((w6, []), (w4, ["-R"])):
            before = on.fast_stats()
            r = on.g.nsx("cli", "iperf3", "-c", SERVER6, "-p", "5202", "-t", "2", "-J", *reverse,
                         check=False, timeout=30)
            assert r.returncode == 0 and '"sum_received"' in r.stdout, r.stdout[-500:] + r.stderr
            after = on.fast_stats()
            packets = after[f"packets_{way}"] - before[f"packets_{way}"]
            sent = after[f"bytes_{way}"] - before[f"bytes_{way}"]
            if settings == "zero" and way == w6:
                # DF clear: nothing as big as a super-packet (single segments may pass).
                assert packets == 0 or sent / packets < 1514, (way, before, after)
                continue
            assert packets > 100, (way, before, after)
            # The mean frame the program translated is a super-packet, not a segment.
            assert sent / packets > 4 * 1514, (way, packets, sent)
    finally:
        for n, dev in devs:
            on.g.offloads_off(n, dev)


def test_a_reload_takes_the_stateless_translators_flows_out_of_the_fast_path(on, variant):
    """SIIT: the program's entries are the translation of the configuration they were made
    by. A reload publishes another (here a fixed TOS): every entry is taken out at the
    sync after it, the flows are hinted again through the engine and installed anew, and
    no frame after the reload carries the old TOS, though the fast path carries them."""
    if variant != ("siit", "rfc"):
        pytest.skip("the SIIT flow table's reload (one variant)")
    assert on.established(), on.qn.text()[-3000:]
    pings = lambda: [f for f in read_pcap(on.pcap4) if f[23] == 17 and f[42:48] == b"ping-u"]
    # Every ping so far in the capture (tcpdump writes a moment after the server reads).
    assert wait_for(lambda: len(pings()) >= on.pinged, 5), (len(pings()), on.pinged)
    before, f0 = len(pings()), on.fast_stats()
    with open(on.qn.cfg.name) as f:
        text = f.read()
    with open(on.qn.cfg.name, "w") as f:
        f.write(text.replace("ipv4_mtu = 1500\n", "ipv4_mtu = 1500\ntos = 40\n"))
    lines = lambda: on.qn.text().count("reload (SIGHUP)")
    n = lines()
    on.qn.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: lines() > n, 10), on.qn.text()[-2000:]
    assert wait_for(lambda: on.fast_stats()["sessions"] == 0, 5), on.fast_stats()
    f1 = on.fast_stats()
    assert f1["removals"] - f0["removals"] >= 4, (f0, f1)
    # Hinted and installed again; the fast path then carries the pings.
    assert wait_for(lambda: on.ping() and on.fast_stats()["installs"] - f1["installs"] >= 4, 10, step=0.05)
    f2 = on.fast_stats()
    for _ in range(5):
        assert on.ping()
    assert on.fast_stats()["packets_in"] > f2["packets_in"], (f2, on.fast_stats())
    assert wait_for(lambda: len(pings()) >= before + 6, 5)
    after = pings()[before:]
    assert after and all(f[15] == 40 for f in after), [f[15] for f in after]


def test_a_moved_next_hop_is_written_over_in_the_stateless_translators_entries(on, variant):
    """SIIT: the server's MAC changes and the gateway's neighbour entry with it. The sync's
    next walk (each second) writes the flows leaving towards it over with the new next hop
    (an install and a removal counted, nothing left to the engine for long), and the pings
    after it reach the server through the fast path addressed to the new MAC."""
    if variant != ("siit", "rfc"):
        pytest.skip("the SIIT flow table's next hops (one variant)")
    assert on.established(), on.qn.text()[-3000:]
    f0 = on.fast_stats()
    new = "02:51:00:00:64:02"
    on.g.nsx("srv", "ip", "link", "set", "s0", "address", new)
    on.g.nsx("gw", "ip", "neigh", "replace", SERVER, "lladdr", new, "dev", "g-out", "nud", "reachable")

    def moved():
        f = on.fast_stats()
        return f["installs"] > f0["installs"] and f["removals"] > f0["removals"]
    assert wait_for(lambda: on.ping() and moved(), 10, step=0.2), (f0, on.fast_stats())
    f1 = on.fast_stats()
    assert f1["sessions"] == f0["sessions"] and f1["errors"] == 0, (f0, f1)
    sent = on.pinged
    for _ in range(5):
        assert on.ping()
    assert on.fast_stats()["packets_in"] > f1["packets_in"], (f1, on.fast_stats())
    pings = lambda: [f for f in read_pcap(on.pcap4) if f[23] == 17 and f[42:48] == b"ping-u"]
    assert wait_for(lambda: len(pings()) >= on.pinged, 5), (len(pings()), on.pinged)
    after = pings()[sent:]
    assert len(after) == 5 and all(f[:6] == bytes.fromhex(new.replace(":", "")) for f in after), \
        [f[:6].hex() for f in after]


@pytest.fixture(scope="module")
def small(quicknat, backend, variant):
    """SIIT with maps of two entries per interface and a 2 s idle time (one variant)."""
    if variant != ("siit", "rfc"):
        pytest.skip("the SIIT flow table's size and idle time (one variant)")
    yield from fast_fixture(backend, lambda: Run(
        quicknat, "on", "rfc", backend, "siit",
        gateway="xdp_fast_path_entries = 2\nxdp_fast_path_idle = 2\n"), BACKENDS)


# A third UDP flow from the client, [2001:db8:1::2]:40002: three echoed datagrams; prints
# how many came back.
THIRD = r"""
import socket, sys
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.bind(("2001:db8:1::2", 40002))
u.connect((sys.argv[1], 7000)); u.settimeout(3)
n = 0
for i in range(3):
    u.send(b"ping-3")
    n += u.recv(100) == b"ping-3"
print(n)
"""


def test_each_interfaces_map_holds_its_own_stateless_flow_directions(small):
    """SIIT puts a flow direction in the map of the link it arrives on. With
    `xdp_fast_path_entries = 2` each map holds two: the client's UDP flow and TCP
    connection fill both (two directions each way, four installed), and a third flow's
    directions are refused at a full map and counted (`map_full`), while the engine still
    translates them (its datagrams come back)."""
    r = small
    assert "at most 2 flow directions on each interface" in r.qn.text(), r.qn.text()[-2000:]
    f0 = r.established()
    assert f0, f"{r.fast_stats()} | {r.qn.stats()}"
    assert f0["sessions"] == 4 and f0["map_full"] == 0 and f0["errors"] == 0, f0
    out = r.g.nsx("cli", sys.executable, "-c", THIRD, SERVER6, check=False, timeout=30)
    assert out.stdout.strip() == "3", out.stdout + out.stderr
    # Each direction of the third flow is hinted at its second packet and refused.
    assert wait_for(lambda: r.fast_stats()["map_full"] >= 2, 5), r.fast_stats()
    f1 = r.fast_stats()
    assert f1["sessions"] == 4 and f1["installs"] == f0["installs"] and f1["errors"] == 0, (f0, f1)


def test_idle_flows_leave_the_stateless_translators_table_and_come_back_with_traffic(small):
    """SIIT with `xdp_fast_path_idle = 2`: flows that carry traffic only through the
    program keep their entries past the idle time (the walk reads the program's stamps);
    once the traffic stops, the walk takes every entry out (a removal counted each), and
    the flows' next packets go through the engine, are hinted and installed again, and
    are carried by the fast path once more."""
    r = small
    assert "taken out after 2 s idle" in r.qn.text(), r.qn.text()[-2000:]
    f0 = r.established()
    assert f0, f"{r.fast_stats()} | {r.qn.stats()}"
    # Busy through the fast path for twice the idle time: nothing is taken out.
    end = time.monotonic() + 4
    while time.monotonic() < end:
        assert r.ping()
    f1 = r.fast_stats()
    assert f1["removals"] == f0["removals"] and f1["sessions"] == f0["sessions"], (f0, f1)
    assert f1["packets_in"] > f0["packets_in"] and f1["packets_out"] > f0["packets_out"], (f0, f1)
    # Quiet: every entry is taken out by a walk after 2 s.
    assert wait_for(lambda: r.fast_stats()["sessions"] == 0, 10), r.fast_stats()
    f2 = r.fast_stats()
    assert f2["removals"] - f1["removals"] >= f1["sessions"] and f2["errors"] == 0, (f1, f2)
    # Back with traffic: through the engine, hinted, installed, then the fast path's.
    assert wait_for(lambda: r.ping() and r.fast_stats()["installs"] - f2["installs"] >= 4, 10, step=0.05), \
        (f2, r.fast_stats())
    f3 = r.fast_stats()
    for _ in range(5):
        assert r.ping()
    f4 = r.fast_stats()
    assert f4["packets_in"] > f3["packets_in"] and f4["packets_out"] > f3["packets_out"], (f3, f4)


def test_quicknat_stops_cleanly_and_leaves_no_xdp_program(off, on):
    for run in (off, on):
        rc, text = run.qn.stop()
        assert rc == 0 and "stopped." in text, f"{run.fast}: {text[-2000:]}"
        left = run.g.nsx("gw", "ip", "link", "show", check=False).stdout
        assert "xdp" not in left, f"{run.fast}: {left}"
