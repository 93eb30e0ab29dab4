"""Differential test of quicknat's stateless IPv4/IPv6 translation (SIIT, RFC 7915)
against TAYGA, a real NAT64 (Debian package `tayga`).

One corpus of IPv6 and IPv4 packets (built with scapy) goes through both translators:

  * TAYGA runs in a network namespace of its own (`tayga -d`, its own config and data
    dir). The packets are written straight into its TUN device from the kernel side (an
    AF_PACKET socket bound to the TUN, so the kernel neither forwards, nor reassembles,
    nor decrements TTLs), one at a time, and what TAYGA writes back is captured on the
    same socket (incoming direction) within a bounded wait;
  * quicknat translates the same packets offline: `quicknat translate --config siit.toml
    in.pcap out.pcap` (raw IP pcap, link type 101).

Every input packet carries a marker ("QNTAG" + a 16-bit case number) in a place that
survives translation (payload, quoted payload, or a TCP experimental option), so outputs
are matched to inputs by content, not by timing or position. The translated packets are
then compared field by field with scapy as the independent parser (outer header, extension
headers, transport header, checksums recomputed, ICMP type/code/pointer/MTU, and the packet
quoted in ICMP errors). Differences the RFCs allow, or where TAYGA is known to deviate
from RFC 7915, are in ALLOW with a reason citing the RFC; anything else fails.

Addresses: the Well-Known Prefix 64:ff9b::/96 must not carry non-global IPv4 addresses
(RFC 6052 §3.1) and both translators refuse the documentation ranges under it, so the
IPv4 peers are in 192.88.99.0/24 (the deprecated 6to4 relay anycast block, RFC 7526;
global per RFC 6890). No packet leaves the namespace: it has no uplink, the TUN is the
only interface and the kernel there does not forward. The documentation ranges appear
as negative cases.

One test per corpus case (same or allow-listed passes, an unexplained difference fails),
and one that quicknat wrote no packet matching no case. This test never skips: when it
cannot compare anything (not root, no TUN, no tayga, no scapy, a crash of either
translator) every case is an error.

    sudo python3 -m pytest tests/e2e/test_tayga_diff.py [--quicknat PATH] [--tayga-vs-tayga]

With -s (or -rA), each case prints its table line and the fields that differ.
"""

import ctypes
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest

# scapy parses and builds the packets. Its absence must not stop pytest's collection
# (that would end the whole e2e run): every case then fails with the reason.
try:
    from scapy.all import (
        ICMP,
        IP,
        TCP,
        UDP,
        GRE,
        ICMPv6DestUnreach,
        ICMPv6EchoReply,
        ICMPv6EchoRequest,
        ICMPv6MLQuery,
        ICMPv6ND_NS,
        ICMPv6PacketTooBig,
        ICMPv6ParamProblem,
        ICMPv6TimeExceeded,
        ICMPv6Unknown,
        IPOption_LSRR,
        IPOption_RR,
        IPv6,
        IPv6ExtHdrFragment,
        IPv6ExtHdrHopByHop,
        IPv6ExtHdrRouting,
        Raw,
        conf,
        fragment6,
    )
    from scapy.layers.inet6 import in6_chksum
    from scapy.layers.inet import in4_chksum
    from scapy.utils import checksum

    conf.verb = 0
    SCAPY_MISSING = None
except ImportError as e:  # scripts/test.sh installs scapy (scripts/requirements.txt)
    SCAPY_MISSING = e

# --------------------------------------------------------------------------------------
# Addresses and configuration (the same for both translators)

PREF64 = "64:ff9b::/96"
H6, H4 = "2001:db8:1::10", "192.168.255.10"  # the EAM (TAYGA: `map`), RFC 7757
S4, S6 = "192.88.99.20", "64:ff9b::c058:6314"  # an IPv4 peer, RFC 6052 /96 embedding
T4, T6 = "192.88.99.7", "64:ff9b::c058:6307"  # another one
DOC4, DOC6 = "198.51.100.20", "64:ff9b::c633:6414"  # non-global under the WKP
PRIV4, PRIV6 = "10.1.2.3", "64:ff9b::a01:203"  # non-global under the WKP
UNMAPPED6 = "2001:db8:2::5"  # neither in the EAM nor under the prefix
TAYGA_V4, TAYGA_V6 = "192.168.255.1", "2001:db8:ffff::1"  # TAYGA's own addresses
TUN = "qnsiit0"

TAYGA_CONF = f"""tun-device {TUN}
ipv4-addr {TAYGA_V4}
ipv6-addr {TAYGA_V6}
prefix {PREF64}
map {H4} {H6}
data-dir {{datadir}}
"""

SIIT_TOML = f"""[siit]
pref64 = "{PREF64}"
eam = [ {{ ipv4 = "{H4}/32", ipv6 = "{H6}/128" }} ]
"""

MARK = b"QNTAG"
WAIT_FIRST = 0.6  # seconds to wait for TAYGA's first output for one input
WAIT_MORE = 0.05  # after an output, how long more may follow


def tag(i):
    return MARK + struct.pack("!H", i)


def payload(i, n=24):
    body = tag(i) + b"-payload-"
    return (body * (n // len(body) + 1))[:n]


# --------------------------------------------------------------------------------------
# The corpus. Each case: (name, packet, note). Case numbers are the markers.


def corpus():
    cases = []

    def add(name, pkt, note=""):
        cases.append((name, pkt, note))

    def n():
        return len(cases) + 1  # the marker of the case being built

    sport = lambda: 20000 + n()  # noqa: E731  (ports unique per case, for readability)

    # ---------------- IPv6 -> IPv4 ----------------
    opts = lambda i: [  # noqa: E731
        ("MSS", 1440),
        ("SAckOK", b""),
        ("Timestamp", (12345, 0)),
        ("NOP", None),
        ("WScale", 7),
        (253, tag(i) + b"\x00"),  # RFC 6994 experimental option carrying the marker
    ]
    add("6to4 tcp syn+options", IPv6(src=H6, dst=S6) / TCP(sport=sport(), dport=80, flags="S", seq=1000, options=opts(n())))
    add("6to4 tcp data", IPv6(src=H6, dst=S6) / TCP(sport=sport(), dport=80, flags="PA", seq=1001, ack=7) / payload(n(), 100))
    add("6to4 tcp tclass 0xb8 flow 0x12345", IPv6(src=H6, dst=S6, tc=0xB8, fl=0x12345) / TCP(sport=sport(), dport=443, flags="A") / payload(n()))
    add("6to4 tcp tclass 0x03 (ECN CE)", IPv6(src=H6, dst=S6, tc=0x03) / TCP(sport=sport(), dport=443, flags="A") / payload(n()))
    add("6to4 udp", IPv6(src=H6, dst=S6) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 udp hlim 2", IPv6(src=H6, dst=S6, hlim=2) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 udp hlim 255", IPv6(src=H6, dst=S6, hlim=255) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 udp hlim 1 (expires)", IPv6(src=H6, dst=S6, hlim=1) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 udp bad checksum", IPv6(src=H6, dst=S6) / UDP(sport=sport(), dport=53, chksum=0x1234) / payload(n()))
    add("6to4 udp 1300 bytes (> 1260)", IPv6(src=H6, dst=S6) / UDP(sport=sport(), dport=53) / payload(n(), 1252))
    add("6to4 gre (other protocol)", IPv6(src=H6, dst=S6, nh=47) / GRE(proto=0x0800) / payload(n()))
    add("6to4 icmp echo request", IPv6(src=H6, dst=S6) / ICMPv6EchoRequest(id=n(), seq=1) / payload(n()))
    add("6to4 icmp echo reply", IPv6(src=H6, dst=S6) / ICMPv6EchoReply(id=n(), seq=2) / payload(n()))

    # ICMPv6 errors sent by H6 about a packet S6 -> H6 of the same flow.
    def q6(i, l4="udp"):
        inner = IPv6(src=S6, dst=H6, hlim=60)
        if l4 == "udp":
            return inner / UDP(sport=53, dport=30000 + i) / payload(i)
        if l4 == "tcp":
            return inner / TCP(sport=80, dport=30000 + i, flags="A", seq=5) / payload(i)
        return inner / ICMPv6EchoRequest(id=i, seq=9) / payload(i)

    for code, what in [(4, "port unreachable"), (0, "no route"), (1, "admin prohibited"), (2, "beyond scope"), (3, "address unreachable")]:
        add(f"6to4 icmp unreach code {code} ({what})", IPv6(src=H6, dst=S6) / ICMPv6DestUnreach(code=code) / q6(n()))
    add("6to4 icmp unreach quoting tcp", IPv6(src=H6, dst=S6) / ICMPv6DestUnreach(code=4) / q6(n(), "tcp"))
    add("6to4 icmp unreach quoting echo", IPv6(src=H6, dst=S6) / ICMPv6DestUnreach(code=1) / q6(n(), "icmp"))
    for mtu in (1400, 1280, 9000):
        add(f"6to4 packet too big mtu {mtu}", IPv6(src=H6, dst=S6) / ICMPv6PacketTooBig(mtu=mtu) / q6(n()))
    for code in (0, 1):
        add(f"6to4 time exceeded code {code}", IPv6(src=H6, dst=S6) / ICMPv6TimeExceeded(code=code) / q6(n()))
    for ptr, what in [(7, "hop limit"), (24, "dst addr"), (6, "next header"), (4, "payload length"), (2, "flow label")]:
        add(f"6to4 param problem ptr {ptr} ({what})", IPv6(src=H6, dst=S6) / ICMPv6ParamProblem(code=0, ptr=ptr) / q6(n()))
    add("6to4 param problem code 1 (next header)", IPv6(src=H6, dst=S6) / ICMPv6ParamProblem(code=1, ptr=6) / q6(n()))

    # Fragments: one UDP datagram in two fragments (checksum over the whole datagram).
    i = n()
    whole = IPv6(src=H6, dst=S6) / IPv6ExtHdrFragment(id=0xABC00000 + i) / UDP(sport=sport(), dport=53) / payload(i, 120)
    frags = fragment6(whole, 104)
    add("6to4 fragment first", frags[0])
    first_i = i
    f2 = frags[1].copy()
    f2[Raw].load = tag(n()) + bytes(f2[Raw].load)[7:]  # mark it; its bytes are opaque anyway
    f2[IPv6ExtHdrFragment].id = 0xABC00000 + n()
    add("6to4 fragment non-first", f2)
    del first_i
    add("6to4 atomic fragment (M=0, offset 0)", IPv6(src=H6, dst=S6) / IPv6ExtHdrFragment(id=0x12340000 + n(), m=0, offset=0) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 hop-by-hop header + udp", IPv6(src=H6, dst=S6) / IPv6ExtHdrHopByHop() / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 routing header segleft 0", IPv6(src=H6, dst=S6) / IPv6ExtHdrRouting(addresses=["2001:db8:9::1"], segleft=0) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 routing header segleft 1 (drop)", IPv6(src=H6, dst="2001:db8:9::1") / IPv6ExtHdrRouting(addresses=[S6], segleft=1) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 src via prefix (64:ff9b::T4)", IPv6(src=T6, dst=S6) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 neighbor solicitation (drop)", IPv6(src=H6, dst=S6, hlim=255) / ICMPv6ND_NS(tgt=S6) / payload(n()))
    add("6to4 MLD query (drop)", IPv6(src=H6, dst=S6, hlim=1) / ICMPv6MLQuery() / payload(n()))
    add("6to4 unknown icmp info type 200 (drop)", IPv6(src=H6, dst=S6) / ICMPv6Unknown(type=200, msgbody=payload(n())))
    add("6to4 src unmapped (drop)", IPv6(src=UNMAPPED6, dst=S6) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 dst outside prefix (drop)", IPv6(src=H6, dst="2001:db8:3::1") / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 dst WKP+documentation addr (drop)", IPv6(src=H6, dst=DOC6) / UDP(sport=sport(), dport=53) / payload(n()))
    add("6to4 dst WKP+10/8 (drop)", IPv6(src=H6, dst=PRIV6) / UDP(sport=sport(), dport=53) / payload(n()))

    # ---------------- IPv4 -> IPv6 ----------------
    add("4to6 tcp syn+options DF", IP(src=S4, dst=H4, flags="DF", id=n()) / TCP(sport=sport(), dport=80, flags="S", options=opts(n())))
    add("4to6 tcp data DF", IP(src=S4, dst=H4, flags="DF", id=n()) / TCP(sport=sport(), dport=80, flags="PA", seq=9, ack=3) / payload(n(), 100))
    add("4to6 tcp data no DF", IP(src=S4, dst=H4, id=n()) / TCP(sport=sport(), dport=80, flags="PA") / payload(n(), 100))
    add("4to6 tcp tos 0xb8", IP(src=S4, dst=H4, tos=0xB8, flags="DF", id=n()) / TCP(sport=sport(), dport=443, flags="A") / payload(n()))
    add("4to6 tcp tos 0x03 (ECN CE)", IP(src=S4, dst=H4, tos=0x03, flags="DF", id=n()) / TCP(sport=sport(), dport=443, flags="A") / payload(n()))
    add("4to6 udp DF", IP(src=S4, dst=H4, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 udp no DF", IP(src=S4, dst=H4, id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 udp ttl 2", IP(src=S4, dst=H4, ttl=2, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 udp ttl 255", IP(src=S4, dst=H4, ttl=255, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 udp ttl 1 (expires)", IP(src=S4, dst=H4, ttl=1, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 udp checksum zero", IP(src=S4, dst=H4, flags="DF", id=n()) / UDP(sport=sport(), dport=53, chksum=0) / payload(n()))
    add("4to6 udp bad checksum", IP(src=S4, dst=H4, flags="DF", id=n()) / UDP(sport=sport(), dport=53, chksum=0x1234) / payload(n()))
    add("4to6 udp dst via prefix (T4)", IP(src=S4, dst=T4, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 gre (other protocol)", IP(src=S4, dst=H4, flags="DF", id=n(), proto=47) / GRE(proto=0x86DD) / payload(n()))
    add("4to6 ip options (record route)", IP(src=S4, dst=H4, flags="DF", id=n(), options=[IPOption_RR(routers=["192.88.99.1"])]) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 ip options (LSRR, unexpired)", IP(src=S4, dst=H4, flags="DF", id=n(), options=[IPOption_LSRR(routers=["192.88.99.1"], pointer=4)]) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 icmp echo request", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=8, id=n(), seq=1) / payload(n()))
    add("4to6 icmp echo reply", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=0, id=n(), seq=2) / payload(n()))

    # ICMPv4 errors sent by S4 about a packet H4 -> S4 of the same flow.
    def q4(i, l4="udp"):
        inner = IP(src=H4, dst=S4, ttl=60, id=0x4000 + i, flags="DF")
        if l4 == "udp":
            return inner / UDP(sport=30000 + i, dport=53) / payload(i)
        if l4 == "tcp":
            return inner / TCP(sport=30000 + i, dport=80, flags="A", seq=5) / payload(i)
        return inner / ICMP(type=8, id=i, seq=9) / payload(i)

    for code, what in [(3, "port"), (0, "net"), (1, "host"), (2, "protocol"), (9, "net admin prohibited"), (13, "comm admin prohibited"), (5, "source route failed")]:
        add(f"4to6 icmp unreach code {code} ({what})", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=3, code=code) / q4(n()))
    add("4to6 icmp unreach quoting tcp", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=3, code=3) / q4(n(), "tcp"))
    add("4to6 icmp unreach quoting echo", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=3, code=1) / q4(n(), "icmp"))
    for mtu in (1400, 1000, 0):
        add(f"4to6 frag needed mtu {mtu}", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=3, code=4, nexthopmtu=mtu) / q4(n()))
    add("4to6 time exceeded code 0", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=11, code=0) / q4(n()))
    for ptr, what in [(8, "ttl"), (12, "src addr"), (9, "protocol"), (1, "tos"), (4, "identification")]:
        add(f"4to6 param problem ptr {ptr} ({what})", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=12, code=0, ptr=ptr) / q4(n()))
    add("4to6 timestamp request (drop)", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=13, id=n()) / payload(n()))
    add("4to6 source quench (drop)", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=4) / q4(n()))
    add("4to6 redirect (drop)", IP(src=S4, dst=H4, flags="DF", id=n()) / ICMP(type=5, code=1, gw="192.88.99.1") / q4(n()))

    i = n()
    whole4 = IP(src=S4, dst=H4, id=0x7700 + i) / UDP(sport=sport(), dport=53) / payload(i, 120)
    raw4 = bytes(whole4)
    first = IP(raw4[:20] + raw4[20:124])  # 8 + 96 bytes of UDP
    first.flags = "MF"
    first.len = None
    first.chksum = None
    add("4to6 fragment first", IP(bytes(first)))
    j = n()
    rest = IP(src=S4, dst=H4, id=0x7700 + j, flags=0, frag=13, proto=17) / Raw(tag(j) + raw4[131:])
    add("4to6 fragment non-first", rest)
    add("4to6 fragment first, udp checksum zero (drop)", IP(src=S4, dst=H4, id=0x7700 + n(), flags="MF") / UDP(sport=sport(), dport=53, chksum=0, len=200) / payload(n(), 64))
    add("4to6 src documentation addr (drop)", IP(src=DOC4, dst=H4, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    add("4to6 dst 10/8 under WKP (drop)", IP(src=S4, dst=PRIV4, flags="DF", id=n()) / UDP(sport=sport(), dport=53) / payload(n()))
    return [(name, bytes(p), note) for name, p, note in cases]


# --------------------------------------------------------------------------------------
# pcap (raw IP, link type 101) without any library, so the format is exactly what we say


def write_pcap(path, packets):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        for k, p in enumerate(packets):
            f.write(struct.pack("<IIII", 1_700_000_000 + k, 0, len(p), len(p)))
            f.write(p)


def read_pcap(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        e = ">"
    else:
        raise ValueError(f"{path}: not a pcap file (magic {magic:#x})")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(e + "IIII", data[off : off + 16])
        frame = data[off + 16 : off + 16 + caplen]
        off += 16 + caplen
        if linktype == 1:
            frame = frame[14:]
        elif linktype != 101:
            raise ValueError(f"{path}: unexpected link type {linktype}")
        out.append(frame)
    return linktype, out


# --------------------------------------------------------------------------------------
# Running TAYGA


def sh(*args, check=True, timeout=20):
    return subprocess.run(args, check=check, timeout=timeout, capture_output=True, text=True)


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Tayga:
    """TAYGA in a namespace of its own; `run()` feeds it packets through its TUN."""

    def __init__(self, workdir, log):
        self.ns = f"qn-tayga-{os.getpid()}"
        self.workdir = workdir
        self.log = log
        self.proc = None
        self.ns_made = False

    def start(self):
        tayga = shutil.which("tayga", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if not tayga:
            raise RuntimeError("tayga is not installed (Debian package `tayga`)")
        if not os.path.exists("/dev/net/tun"):
            raise RuntimeError("/dev/net/tun is missing: TAYGA cannot run here")
        sh("ip", "netns", "add", self.ns)
        self.ns_made = True
        ex = ("ip", "netns", "exec", self.ns)
        # No IPv6 on the TUN on the kernel side: no router solicitations or MLD from the
        # kernel into TAYGA, and nothing the kernel does with what TAYGA writes back.
        sh(*ex, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        sh(*ex, "sysctl", "-qw", "net.ipv4.ip_forward=0")
        datadir = os.path.join(self.workdir, "tayga-data")
        os.makedirs(datadir, exist_ok=True)
        conf_path = os.path.join(self.workdir, "tayga.conf")
        with open(conf_path, "w") as f:
            f.write(TAYGA_CONF.format(datadir=datadir))
        sh(*ex, tayga, "--config", conf_path, "--mktun")
        sh(*ex, "ip", "link", "set", TUN, "up")
        self.proc = subprocess.Popen(
            [*ex, tayga, "-d", "--config", conf_path],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # TAYGA attaches to the TUN at once; give it a bounded moment and check it lives.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tayga exited with {self.proc.returncode} (log: {self.log.name})")
            flags = sh(*ex, "cat", f"/sys/class/net/{TUN}/flags").stdout.strip()
            carrier = sh(*ex, "cat", f"/sys/class/net/{TUN}/operstate").stdout.strip()
            if carrier in ("up", "unknown") and int(flags, 16) & 1:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        if self.proc.poll() is not None:
            raise RuntimeError(f"tayga exited with {self.proc.returncode} (log: {self.log.name})")

    def _socket(self):
        here = os.open("/proc/self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            setns(there)
            try:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0003))
                s.bind((TUN, 0x0003))
            finally:
                setns(here)
        finally:
            os.close(here)
            os.close(there)
        return s

    def run(self, packets):
        """One list of output packets (raw IP) per input, in input order."""
        s = self._socket()
        results = []
        try:
            for p in packets:
                while select.select([s], [], [], 0)[0]:  # drain stragglers
                    s.recv(65535)
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tayga died (exit {self.proc.returncode}, log: {self.log.name})")
                ethertype = 0x86DD if p[0] >> 4 == 6 else 0x0800
                s.sendto(p, (TUN, ethertype))
                outs = []
                deadline = time.monotonic() + WAIT_FIRST
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([s], [], [], left)[0]:
                        break
                    data, addr = s.recvfrom(65535)
                    if addr[2] == socket.PACKET_OUTGOING:
                        continue  # our own injection, seen on its way into the TUN
                    outs.append(data)
                    deadline = min(deadline, time.monotonic() + WAIT_MORE)
                results.append(outs)
        finally:
            s.close()
        return results

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        if self.ns_made:
            sh("ip", "netns", "exec", self.ns, "ip", "link", "del", TUN, check=False)
            sh("ip", "netns", "del", self.ns, check=False)
            self.ns_made = False


# --------------------------------------------------------------------------------------
# quicknat, offline


def run_quicknat(binary, workdir, packets):
    conf_path = os.path.join(workdir, "siit.toml")
    with open(conf_path, "w") as f:
        f.write(SIIT_TOML)
    inp, outp = os.path.join(workdir, "in.pcap"), os.path.join(workdir, "quicknat-out.pcap")
    write_pcap(inp, packets)
    r = subprocess.run(
        [binary, "translate", "--config", conf_path, inp, outp], capture_output=True, text=True, timeout=60
    )
    if r.returncode != 0:
        raise RuntimeError(f"quicknat translate failed ({r.returncode}):\n{r.stderr.strip()}")
    linktype, out = read_pcap(outp)
    if linktype != 101:
        raise RuntimeError(f"quicknat wrote link type {linktype}, the input was 101")
    return out, r.stderr.strip()


# --------------------------------------------------------------------------------------
# Field extraction (scapy parses; checksums recomputed independently)


def find_tag(raw):
    k = raw.find(MARK)
    return None if k < 0 or k + 7 > len(raw) else struct.unpack("!H", raw[k + 5 : k + 7])[0]


def l4_fields(f, pre, proto, seg, csum_fn, whole):
    """Transport fields of `seg` (bytes). `whole`: the segment is complete and not a
    fragment, so its checksum can be checked."""
    if proto == 6 and len(seg) >= 20:
        t = TCP(seg)
        for k in ("sport", "dport", "seq", "ack", "dataofs", "flags", "window", "urgptr"):
            f[pre + "tcp." + k] = str(getattr(t, k))
        f[pre + "tcp.options"] = seg[20 : t.dataofs * 4].hex()
        f[pre + "tcp.chksum"] = hex(t.chksum)
        if whole:
            f[pre + "tcp.chksum_ok"] = csum_fn(6, seg) == 0
        f[pre + "tcp.payload"] = seg[t.dataofs * 4 :].hex()
    elif proto == 17 and len(seg) >= 8:
        u = UDP(seg[:8])
        for k in ("sport", "dport", "len"):
            f[pre + "udp." + k] = str(getattr(u, k))
        f[pre + "udp.chksum"] = hex(u.chksum)
        if whole:
            f[pre + "udp.chksum_ok"] = u.chksum != 0 and csum_fn(17, seg) in (0, 0xFFFF)
        f[pre + "udp.payload"] = seg[8:].hex()
    elif proto in (1, 58) and len(seg) >= 8:
        v = "icmp" if proto == 1 else "icmp6"
        f[pre + v + ".type"], f[pre + v + ".code"] = seg[0], seg[1]
        f[pre + v + ".rest"] = seg[4:8].hex()  # id/seq, pointer, MTU or unused
        if whole:
            ok = checksum(seg) == 0 if proto == 1 else csum_fn(58, seg) == 0
            f[pre + v + ".chksum_ok"] = ok
        body = seg[8:]
        error = (proto == 1 and seg[0] in (3, 11, 12)) or (proto == 58 and seg[0] < 128)
        if error and body and not pre:
            ip_fields(f, "inner.", body, inner=True)
        else:
            f[pre + v + ".body"] = body.hex()
    else:
        f[pre + "l4.raw"] = seg.hex()


def ip_fields(f, pre, raw, inner=False):
    ver = raw[0] >> 4
    f[pre + "version"] = ver
    if ver == 4:
        ip = IP(raw)
        ihl = ip.ihl * 4
        f[pre + "ip.tos"] = hex(ip.tos)
        f[pre + "ip.len"] = ip.len
        f[pre + "ip.id"] = hex(ip.id)
        f[pre + "ip.DF"] = bool(ip.flags.DF)
        f[pre + "ip.MF"] = bool(ip.flags.MF)
        f[pre + "ip.frag"] = ip.frag
        f[pre + "ip.ttl"] = ip.ttl
        f[pre + "ip.proto"] = ip.proto
        f[pre + "ip.src"], f[pre + "ip.dst"] = ip.src, ip.dst
        f[pre + "ip.options"] = raw[20:ihl].hex()
        f[pre + "ip.chksum_ok"] = checksum(raw[:ihl]) == 0
        end = ip.len if not inner else len(raw)
        if not inner and len(raw) != ip.len:
            f[pre + "ip.trailing"] = len(raw) - ip.len
        seg = raw[ihl:end]
        whole = not inner and ip.frag == 0 and not ip.flags.MF
        if ip.frag == 0:
            l4_fields(f, pre, ip.proto, seg, lambda p, d: in4_chksum(p, ip, d), whole)
        else:
            f[pre + "l4.raw"] = seg.hex()
    elif ver == 6:
        ip6 = IPv6(raw[:40])
        f[pre + "ip6.tc"] = hex(ip6.tc)
        f[pre + "ip6.fl"] = hex(ip6.fl)
        f[pre + "ip6.plen"] = ip6.plen
        f[pre + "ip6.hlim"] = ip6.hlim
        f[pre + "ip6.src"], f[pre + "ip6.dst"] = ip6.src, ip6.dst
        nh, off, chain, fragment = ip6.nh, 40, [], None
        while nh in (0, 43, 44, 60) and off + 8 <= len(raw):
            chain.append(nh)
            if nh == 44:
                fo = struct.unpack("!H", raw[off + 2 : off + 4])[0]
                fragment = (fo >> 3, fo & 1, struct.unpack("!I", raw[off + 4 : off + 8])[0])
                f[pre + "frag.offset"], f[pre + "frag.M"] = fragment[0], fragment[1]
                f[pre + "frag.id"] = hex(fragment[2])
                nh, off = raw[off], off + 8
            else:
                nh, off = raw[off], off + 8 + raw[off + 1] * 8
        f[pre + "ip6.chain"] = ",".join(map(str, chain + [nh]))
        if not inner and len(raw) != 40 + ip6.plen:
            f[pre + "ip6.trailing"] = len(raw) - 40 - ip6.plen
        seg = raw[off : 40 + ip6.plen] if not inner else raw[off:]
        whole = not inner and (fragment is None or fragment[:2] == (0, 0))
        full = IPv6(raw) if not inner else ip6
        if fragment is None or fragment[0] == 0:
            l4_fields(f, pre, nh, seg, lambda p, d: in6_chksum(p, full, d), whole)
        else:
            f[pre + "l4.raw"] = seg.hex()
    else:
        f[pre + "garbage"] = raw.hex()
    return f


def fields(raw):
    return ip_fields({}, "", raw)


# --------------------------------------------------------------------------------------
# What may differ, and why. Each rule: (case-name substring or "*", field (a trailing "*"
# matches a prefix; "DROP" = translated by one side only), who translated it when the rule
# is about DROP ("tayga"/"quicknat"/None), check, reason). `check(fq)` gets quicknat's
# fields (None if quicknat dropped) and says whether quicknat does what the RFC says: the
# rule then excuses TAYGA, never a quicknat that disagrees with both TAYGA and the RFC.

# RFC 7915 Figure 6 (ICMPv6 Parameter Problem pointer -> ICMPv4) and Figure 3 (reverse).
PTR6TO4 = {0: 0, 1: 1, 4: 2, 5: 2, 6: 9, 7: 8, **{k: 12 for k in range(8, 24)}, **{k: 16 for k in range(24, 40)}}
PTR4TO6 = {0: 0, 1: 1, 2: 4, 3: 4, 8: 7, 9: 6, **{k: 8 for k in range(12, 16)}, **{k: 24 for k in range(16, 20)}}


def ptr_case(name):
    return int(name.split("ptr ")[1].split()[0])


def df_rfc7915(pre):
    # RFC 7915 §5.1: "If the size of the translated IPv4 packet is less than or equal to
    # 1260 bytes, it is set to zero; otherwise, it is set to one."
    return lambda fq, name: fq is not None and fq[pre + "ip.DF"] == (fq[pre + "ip.len"] > 1260)


# RFC 7915's MTU formulas (§4.2, §5.2) use the next-hop MTUs. TAYGA takes both from its
# TUN (1500); quicknat (no MTU keys in siit.toml, no [gateway] MTUs) from the links, which
# `quicknat translate` counts as 1500 when not told: both translators report the same
# MTUs, so no MTU allow-list entries are needed.


ALLOW = [
    ("*", "ip.id", None, None,
     "RFC 7915 §5.1: the Identification of an unfragmented packet comes from the translator's "
     "own generator (TAYGA: 0 with DF, else a per-host counter)"),
    ("*", "inner.ip.id", None, None,
     "RFC 7915 §5.3: the quoted packet is translated like any packet, Identification included"),
    ("6to4", "ip.DF", None, df_rfc7915(""),
     "RFC 7915 §5.1: DF=0 up to 1260 bytes, 1 above; TAYGA 0.9.2 always sets DF (the RFC 6145 "
     "§5.1 rule RFC 7915 replaced)"),
    ("6to4", "inner.ip.DF", None, df_rfc7915("inner."),
     "RFC 7915 §5.3/§5.1: same DF rule for the quoted packet; TAYGA 0.9.2 always sets DF"),
    ("6to4 param problem ptr", "DROP", "quicknat",
     lambda fq, name: fq["icmp.type"] == 12 and fq["icmp.code"] == 0
     and int(fq["icmp.rest"][:2], 16) == PTR6TO4.get(ptr_case(name)),
     "RFC 7915 §5.2: Parameter Problem code 0 -> type 12 code 0, pointer per Figure 6; TAYGA "
     "0.9.2 drops every ICMPv6 Parameter Problem code 0"),
    ("4to6 param problem ptr", "DROP", "quicknat",
     lambda fq, name: fq["icmp6.type"] == 4 and fq["icmp6.code"] == 0
     and int(fq["icmp6.rest"], 16) == PTR4TO6.get(ptr_case(name)),
     "RFC 7915 §4.2: Parameter Problem -> type 4 code 0, pointer per Figure 3; TAYGA 0.9.2 "
     "drops every ICMPv4 Parameter Problem"),
    ("6to4 icmp unreach code 3", "DROP", "quicknat",
     lambda fq, name: (fq["icmp.type"], fq["icmp.code"]) == (3, 1),
     "RFC 7915 §5.2: Destination Unreachable code 3 (address unreachable) -> type 3 code 1; "
     "TAYGA 0.9.2 drops it"),
    ("LSRR, unexpired", "DROP", "tayga", lambda fq, name: fq is None,
     "RFC 7915 §4.1: an unexpired source route option -> discard (and ICMPv4 3/5); TAYGA 0.9.2 "
     "translates the packet, ignoring the option"),
    ("4to6 udp checksum zero", "DROP", "quicknat",
     lambda fq, name: fq["udp.chksum_ok"],
     "RFC 7915 §4.5: a stateless translator may drop an IPv4 UDP datagram with checksum 0 or "
     "compute one (configurable); TAYGA drops, quicknat computes a correct one"),
]


def allowed(name, key, who, fq):
    """The reason a difference in `key` is fine, or None; ("broken", reason) when a rule
    matches but quicknat does not follow the RFC either."""
    for pat, field, w, check, reason in ALLOW:
        if pat != "*" and pat not in name:
            continue
        if w is not None and w != who:
            continue
        if field == key or (field.endswith("*") and key.startswith(field[:-1])):
            try:
                ok = check is None or check(fq, name)
            except (KeyError, ValueError, TypeError):
                ok = False
            return reason if ok else ("broken", reason)
    return None


def compare(name, tay, qn):
    """(verdict, detail lines). tay/qn: the translated packet or None (dropped)."""
    if tay is None and qn is None:
        return "same", ["dropped by both"]
    fq = fields(qn) if qn is not None else None
    if tay is None or qn is None:
        who = "quicknat" if tay is None else "tayga"
        what = f"only {who} translated it"
        reason = allowed(name, "DROP", who, fq)
        if isinstance(reason, tuple):
            return "differs", [f"{what}, and quicknat does not follow the RFC either: {reason[1]}"]
        if reason:
            return "allowed", [f"{what}: {reason}"]
        return "differs", [what]
    ft = fields(tay)
    diffs, reasons = [], []
    for k in sorted(set(ft) | set(fq), key=lambda k: (k.startswith("inner."), k)):
        a, b = ft.get(k, "-"), fq.get(k, "-")
        if a == b:
            continue
        r = allowed(name, k, None, fq)
        if isinstance(r, tuple):
            diffs.append(f"{k}: tayga={a} quicknat={b} (not the RFC value either: {r[1]})")
        elif r:
            reasons.append(f"{k}: tayga={a} quicknat={b}: {r}")
        else:
            diffs.append(f"{k}: tayga={a} quicknat={b}")
    if diffs:
        return "differs", diffs + reasons
    if reasons:
        return "allowed", reasons
    return "same", []



# --------------------------------------------------------------------------------------
# The tests: both translators run once over the whole corpus (a module-scoped fixture),
# then one test per case compares the two outputs.


def _build_corpus():
    """(cases, error): the corpus, or why it could not be built (then one placeholder case
    that fails with the reason: an empty parametrisation would be a skip)."""
    if SCAPY_MISSING is not None:
        return [], f"scapy is not installed ({SCAPY_MISSING}); scripts/test.sh installs it"
    try:
        return corpus(), None
    except Exception as e:  # noqa: BLE001 -- reported by every case, never a collection abort
        return [], f"building the corpus failed: {type(e).__name__}: {e}"


CASES, CORPUS_ERROR = _build_corpus()


def case_id(idx, name):
    return f"{idx:02d}-" + re.sub(r"[^\w.+]+", "-", name).strip("-")


class Translations:
    """What both translators made of the corpus: TAYGA's outputs per input (in input
    order), quicknat's translated packets by marker, and quicknat's packets that match no
    case."""

    def __init__(self, tayga_out, qn_list, qn_err):
        self.tayga_out, self.qn_err = tayga_out, qn_err
        # quicknat: only translated packets, in input order; match them by marker.
        self.qn_by_tag, self.stray = {}, []
        for o in qn_list:
            t = find_tag(o)
            if t is None or t in self.qn_by_tag or not 1 <= t <= len(CASES):
                self.stray.append(o)
            else:
                self.qn_by_tag[t] = o

    def log_tails(self):
        """quicknat translate's stderr, for failure reports (see conftest)."""
        return [("translate stderr", self.qn_err)] if self.qn_err else []


@pytest.fixture(scope="module")
def translations(quicknat, pytestconfig):
    """Runs TAYGA and quicknat over the corpus once. Anything that stops the comparison
    raises, so every case is an error (never a skip)."""
    if CORPUS_ERROR:
        raise RuntimeError(f"tayga_diff: cannot run: {CORPUS_ERROR}")
    if os.geteuid() != 0:
        raise RuntimeError("tayga_diff: cannot run: needs root (network namespaces, TUN)")
    packets = [p for _, p, _ in CASES]
    workdir = tempfile.mkdtemp(prefix="qn-tayga-")
    log = open(os.path.join(workdir, "tayga.log"), "w")
    tayga = Tayga(workdir, log)
    try:
        try:
            tayga.start()
            tayga_out = tayga.run(packets)
            write_pcap(os.path.join(workdir, "tayga-out.pcap"), [o for outs in tayga_out for o in outs])
            if pytestconfig.getoption("tayga_vs_tayga"):
                outs = tayga.run(packets)
                qn_list, qn_err = [o for out in outs for o in out if o[0] >> 4 != p_ver(o, packets)], ""
            else:
                qn_list, qn_err = run_quicknat(quicknat, workdir, packets)
        finally:
            tayga.stop()
            log.close()
    except Exception as e:  # noqa: BLE001 -- any failure to run is a loud failure
        with open(log.name) as f:
            tail = f.read()[-1500:]
        raise RuntimeError(f"tayga_diff: cannot run: {e}" + (f"\n--- tayga log (tail)\n{tail}" if tail else "")) from e
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return Translations(tayga_out, qn_list, qn_err)


def p_ver(o, packets):  # only for --tayga-vs-tayga: the input's version of a tagged output
    t = find_tag(o)
    return packets[t - 1][0] >> 4 if t and t <= len(packets) else o[0] >> 4


@pytest.mark.parametrize(
    "idx", range(1, len(CASES) + 1) if CASES else [0],
    ids=[case_id(i, name) for i, (name, _, _) in enumerate(CASES, start=1)] if CASES else ["corpus-not-built"])
def test_translation_same_as_tayga_or_allowed_by_the_rfc(translations, idx):
    name, p, _ = CASES[idx - 1]
    ver_in = p[0] >> 4
    outs = translations.tayga_out[idx - 1]
    translated = [o for o in outs if o[0] >> 4 != ver_in and find_tag(o) == idx]
    errors_back = [o for o in outs if o[0] >> 4 == ver_in]
    tay = translated[0] if translated else None
    qn = translations.qn_by_tag.get(idx)
    verdict, detail = compare(name, tay, qn)
    if len(translated) > 1:
        verdict, detail = "differs", [f"tayga wrote {len(translated)} packets"] + detail
    tcol = "xlated" if tay else ("drop+icmp" if errors_back else "drop")
    qcol = "xlated" if qn else "drop"
    shown = {"same": "same", "allowed": "allow-listed", "differs": "DIFFERS"}[verdict]
    line = f"{idx:>3} {name}: tayga {tcol}, quicknat {qcol}: {shown}"
    print(line)
    for d in detail:
        print(f"      {d}")
    assert verdict != "differs", "\n".join([line] + [f"      {d}" for d in detail])


def test_quicknat_wrote_no_packet_that_matches_no_case(translations):
    stray = translations.stray
    assert not stray, f"quicknat wrote {len(stray)} packet(s) that match no input case: " + \
        ", ".join(o[:48].hex() for o in stray[:3])
