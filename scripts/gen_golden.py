#!/usr/bin/env python3
"""Generate quicknat's golden pcaps (input and expected output).

For each scenario this writes tests/golden/<name>.in.pcap (what arrives at the
gateway) and tests/golden/<name>.expected.pcap (what the gateway must
transmit, in input order, with the input timestamps: the translated packet, or
the fragments it was cut into, or the ICMP error that answers it; dropped
packets are absent), plus the configurations they assume (CONFIGS: nat44.toml
for the NAT44 scenarios without a [gateway] table, <name>.toml for the
scenarios about the ICMP errors and fragments the gateway originates).

Expected packets are independent constructions: every packet is built by
scapy from its header fields, once with the addressing seen on the input side
and once with the translated addressing and TTL-1 (or as the RFCs say the
gateway's fragments and ICMP errors are made), and scapy computes all the
checksums. Nothing is derived from quicknat's own output.

The output is deterministic (fixed timestamps, IP IDs, sequence numbers and
payloads; the pcap files are written by hand), so re-running gives
byte-identical files. `--check` regenerates into a temporary directory and
compares byte-for-byte with the committed files.

Usage:
    python3 scripts/gen_golden.py [--out DIR]
    python3 scripts/gen_golden.py --check [--out DIR]
"""

import argparse
import filecmp
import os
import struct
import sys
import tempfile

from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_LSRR, IPOption_NOP, defragment, fragment
from scapy.layers.inet6 import (ICMPv6DestUnreach, ICMPv6PacketTooBig, ICMPv6TimeExceeded,
                                IPv6, IPv6ExtHdrFragment, ICMPv6ParamProblem,
                                IPv6ExtHdrRouting)
from scapy.layers.l2 import Ether
from scapy.layers.sctp import SCTP, SCTPChunkInit, SCTPChunkInitAck
from scapy.packet import Raw

# --- Topology ---------------------------------------------------------------

MAC_INSIDE = "02:00:00:00:00:01"  # the inside network's side of the link
MAC_OUTSIDE = "02:00:00:00:00:02"  # the outside network's side of the link

PUBLIC = "203.0.113.1"  # the NAT's only public address
SERVER = "198.51.100.2"
ROUTER = "198.51.100.254"  # an outside router that sends ICMP time exceeded
HOST_A = "10.0.0.2"
HOST_B = "10.0.0.3"
WEB = "10.0.0.20"  # target of the port forward 203.0.113.1:8080 -> 10.0.0.20:80
FWD_PORT = 8080
WEB_PORT = 80

TTL_INSIDE = 64  # TTL of packets sent by inside hosts (and by the server)
TTL_REMOTE = 50  # TTL of packets from far-away outside hosts

TS_START_NS = 1_700_000_000 * 1_000_000_000
TS_STEP_NS = 1_000_000  # 1 ms per input packet

CONFIG = """\
# Golden-test configuration: one public address so outputs are predictable.
[nat44]
filtering = "endpoint-independent"
hairpinning = true
port_preservation = true

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
ports = "1024-65535"

[[nat44.forward]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "10.0.0.20:80"

[[nat44.forward]]
protocol = "sctp"
public = "203.0.113.1:3868"
inside = "10.0.0.20:13868"
"""

# The gateway's own addresses and link MTUs (translate's only source of them is the
# configuration's [gateway] table): the sources of the ICMP errors it sends, and the
# sizes that decide when it owes one.
GW_INSIDE = "10.0.0.1"  # its address on the inside link
GW_OUTSIDE = "203.0.113.254"  # its address on the outside link (not the pool address)
INSIDE_MTU = 1480
OUTSIDE_MTU = 1400

CONFIG_NAT44_GATEWAY = """\
# Golden-test configuration: the NAT44 of nat44.toml, and the gateway's own addresses
# and link MTUs, so that it answers with the ICMP errors it owes.
[nat44]
filtering = "endpoint-independent"
hairpinning = true
port_preservation = true

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
ports = "1024-65535"

[[nat44.forward]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "10.0.0.20:80"

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["10.0.0.1"]
outside_addresses = ["203.0.113.254"]
inside_mtu = 1480
outside_mtu = 1400
"""

# IPv4 <-> IPv6. A network-specific prefix: the Well-Known Prefix may not embed the
# documentation addresses used here (RFC 6052 §3.1).
PREF64 = "2001:db8:64::"
V6_HOST = "2001:db8:1::10"  # an IPv6-only host
GW_INSIDE6 = "2001:db8:1::1"  # the gateway's IPv6 address (NAT64: inside, SIIT: outside)
SIIT_V4_OF_V6_HOST = "192.0.2.100"  # V6_HOST's IPv4 address by explicit mapping (SIIT)
SIIT_V4_HOST = "198.51.100.20"  # an IPv4 host on SIIT's IPv4 (inside) side
SIIT_GW_V4 = "198.51.100.1"  # the gateway's IPv4 address there
XLAT_IPV6_MTU = 1280  # lowest-ipv6-mtu (RFC 7915 §4.1)
XLAT_IPV4_MTU = 1400
# The identification of an IPv4 packet translated from an IPv6 one that is no fragment and
# gets DF (over 1260 bytes, RFC 7915 §5.1): "Set according to a Fragment Identification
# algorithm as discussed in [RFC6864]", which lets an atomic datagram carry any value
# (§4.1); quicknat writes 0. (Below 1260 bytes, without DF, the value is quicknat's own
# choice, so no scenario translates such a packet.)
XLAT_ATOMIC_ID = 0

CONFIG_SIIT_GATEWAY = """\
# Golden-test configuration: SIIT between an IPv4 inside and an IPv6 outside, with the
# gateway's addresses (sources of its ICMP errors) and the translator's MTUs.
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.0.2.100/32", ipv6 = "2001:db8:1::10/128" } ]

[siit.options]
ipv6_mtu = 1280
ipv4_mtu = 1400

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["198.51.100.1"]
outside_addresses = ["2001:db8:1::1"]
"""

# --- SIIT: errors for refused packets, their RFC 6791 source, EAM hairpinning
# The translator's own ICMPv4 errors are a router's (RFC 7915 §1.4, RFC 1812 §4.3.2.4):
# from its address on the IPv4 link ([gateway] inside_addresses), even with an RFC 6791
# pool ([siit] icmp_error_source 203.0.113.7) configured.
SIIT_ERR_SOURCE = "198.51.100.1"
SIIT_EAM_A = ("192.0.2.1", "2001:db8:aaaa::1")  # IPv6 nodes with EAM addresses
SIIT_EAM_B = ("192.0.2.2", "2001:db8:aaaa::2")

CONFIG_SIIT_ERRORS = """\
# Golden-test configuration: SIIT answering the packets it refuses (RFC 7915 §4.1, §4.4,
# §5.1, §5.4) from its own address on each side (the RFC 6791 pool is for translated
# errors of unmapped IPv6 routers), and hairpinning between two EAM-mapped IPv6 nodes (RFC 7757 §4, intrinsic).
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.0.2.0/24", ipv6 = "2001:db8:aaaa::/120" } ]
icmp_error_source = "203.0.113.7"
eam_hairpin = "intrinsic"

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["198.51.100.1"]
outside_addresses = ["2001:db8:1::1"]
"""

CONFIG_SIIT_HAIRPIN_SIMPLE = """\
# Golden-test configuration: SIIT with "simple" EAM hairpinning (RFC 7757 §4): every IPv6
# packet whose IPv4 destination is an EAM address goes back to the IPv6 side.
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.0.2.0/24", ipv6 = "2001:db8:aaaa::/120" } ]
eam_hairpin = "simple"
"""

CONFIG_NAT64_GATEWAY = """\
# Golden-test configuration: stateful NAT64, IPv6 hosts inside, one public IPv4 address,
# with the gateway's addresses (sources of its ICMP errors) and the translator's MTUs.
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
ports = "1024-65535"

[nat64.options]
ipv6_mtu = 1280
ipv4_mtu = 1400

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["2001:db8:1::1"]
outside_addresses = ["203.0.113.254"]
"""

# RFC 7915's two MTUs: SIIT with no MTU option, so the next hops are the
# links': the IPv4 (inside) link 1400 by [gateway] inside_mtu, the IPv6 (outside) link
# not given, so 1500; the lowest IPv6 MTU at its default of 1280.
MTU_V4_LINK = 1400
MTU_V6_LINK = 1500
MTU_LOWEST_V6 = 1280

CONFIG_SIIT_MTU = """\
# Golden-test configuration: SIIT with the next-hop MTUs left to the links (IPv4 inside
# 1400, IPv6 outside not given: 1500) and lowest_ipv6_mtu at its default, 1280.
[siit]
pref64 = "2001:db8:64::/96"
eam = [ { ipv4 = "192.0.2.100/32", ipv6 = "2001:db8:1::10/128" } ]

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["198.51.100.1"]
outside_addresses = ["2001:db8:1::1"]
inside_mtu = 1400
"""

CONFIG_NAT64_MTU = """\
# Golden-test configuration: NAT64 with the next-hop MTUs left to the links (IPv6 inside
# not given: 1500, IPv4 outside 1400) and lowest_ipv6_mtu at its default, 1280.
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
ports = "1024-65535"

[gateway]
inside = "in0"
outside = "out0"
inside_addresses = ["2001:db8:1::1"]
outside_addresses = ["203.0.113.254"]
outside_mtu = 1400
"""

# The configuration files written, by name.
CONFIGS = {
    "nat64_mtu.toml": CONFIG_NAT64_MTU,
    "siit_mtu.toml": CONFIG_SIIT_MTU,
    "nat44.toml": CONFIG,
    "nat44_gateway.toml": CONFIG_NAT44_GATEWAY,
    "siit_gateway.toml": CONFIG_SIIT_GATEWAY,
    "nat64_gateway.toml": CONFIG_NAT64_GATEWAY,
    "siit_errors.toml": CONFIG_SIIT_ERRORS,
    "siit_hairpin_simple.toml": CONFIG_SIIT_HAIRPIN_SIMPLE,
}

# What the gateway's ICMP errors look like. Fields the RFCs leave open are set to the
# values quicknat documents (crates/xlat/src/icmp_reply.rs); each is allowed by the RFC
# named beside it.
ERR_TOS = 0xC0  # RFC 1812 §4.3.2.5: precedence 6 (internetwork control) SHOULD be used
ERR_TTL = 64  # the default TTL / hop limit a node originates packets with (IANA: 64)
ERR_IP_ID = 0  # RFC 6864 §4.1: an atomic datagram (DF set) may carry any ID
ICMP4_ERROR_MAX = 576  # RFC 1812 §4.3.2.3: quote as much as fits in 576 bytes
ICMP6_ERROR_MAX = 1280  # RFC 4443 §2.4 (c): ... without exceeding the minimum IPv6 MTU

LINKTYPE_ETHERNET = 1
SNAPLEN = 262144


# --- Packet builders ----------------------------------------------------------
#
# Each builder takes every field explicitly and leaves the checksum fields
# unset so scapy computes them (except where a test needs a specific value,
# such as a UDP checksum of 0).


def eth(outbound):
    """Ethernet header; MACs depend on which side the frame was sent from."""
    if outbound:
        return Ether(src=MAC_INSIDE, dst=MAC_OUTSIDE)
    return Ether(src=MAC_OUTSIDE, dst=MAC_INSIDE)


def ip(src, dst, ttl, ip_id, **kw):
    """IPv4 header with DF set (as Linux sends) unless flags is given."""
    kw.setdefault("flags", "DF")
    return IP(src=src, dst=dst, ttl=ttl, id=ip_id, tos=0, **kw)


def tcp_opts_syn(tsval, tsecr):
    """Linux-like SYN options: MSS, SACK permitted, timestamps, window scale."""
    return [
        ("MSS", 1460),
        ("SAckOK", b""),
        ("Timestamp", (tsval, tsecr)),
        ("NOP", None),
        ("WScale", 7),
    ]


def tcp_opts_ts(tsval, tsecr):
    """Options of an established segment: NOP, NOP, timestamps."""
    return [("NOP", None), ("NOP", None), ("Timestamp", (tsval, tsecr))]


def tcp_pkt(outbound, src, dst, sport, dport, ttl, ip_id, flags, seq, ack,
            options=(), payload=b"", window=64240):
    """An Ethernet/IPv4/TCP frame."""
    seg = TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
              window=window, options=list(options))
    pkt = eth(outbound) / ip(src, dst, ttl, ip_id) / seg
    if payload:
        pkt = pkt / Raw(payload)
    return pkt


def udp_pkt(outbound, src, dst, sport, dport, ttl, ip_id, payload,
            zero_checksum=False):
    """An Ethernet/IPv4/UDP frame; zero_checksum sends UDP checksum 0."""
    dgram = UDP(sport=sport, dport=dport)
    if zero_checksum:
        dgram.chksum = 0
    return eth(outbound) / ip(src, dst, ttl, ip_id) / dgram / Raw(payload)


def echo_pkt(outbound, src, dst, ttl, ip_id, icmp_type, ident, seq, payload):
    """An Ethernet/IPv4/ICMP echo request (8) or reply (0) frame."""
    return (eth(outbound) / ip(src, dst, ttl, ip_id)
            / ICMP(type=icmp_type, code=0, id=ident, seq=seq) / Raw(payload))


def icmp_error_pkt(src, dst, ttl, ip_id, icmp_type, code, quote):
    """An inbound Ethernet/IPv4/ICMP error frame carrying `quote` (bytes)."""
    return (eth(False) / ip(src, dst, ttl, ip_id, flags=0)
            / ICMP(type=icmp_type, code=code) / Raw(quote))


def l3(frame):
    """The IP packet a frame carries, as bytes (everything after the Ethernet header)."""
    return bytes(frame)[14:]


def back_to_sender(frame):
    """The Ethernet header of a packet the gateway sends back to the sender of `frame`:
    the same link, the addresses the other way round."""
    return Ether(src=frame[Ether].dst, dst=frame[Ether].src)


def icmp4_error(frame, gw, icmp):
    """The ICMPv4 error `icmp` (type, code and MTU set) the gateway sends from its address
    `gw` to the sender of the IPv4 packet in `frame` (RFC 792): the IP header and as
    much of the packet as fits in 576 bytes (RFC 1812 §4.3.2.3), as it arrived."""
    quote = l3(frame)[:ICMP4_ERROR_MAX - 28]
    return (back_to_sender(frame)
            / IP(src=gw, dst=frame[IP].src, tos=ERR_TOS, id=ERR_IP_ID, flags="DF",
                 ttl=ERR_TTL)
            / icmp / Raw(quote))


def icmp6_error(frame, gw6, icmp6):
    """The ICMPv6 error `icmp6` the gateway sends from `gw6` to the sender of the IPv6
    packet in `frame` (RFC 4443 §3.2, §3.3): as much of the packet as it arrived as fits
    without the error exceeding 1280 bytes (RFC 4443 §2.4 (c))."""
    quote = l3(frame)[:ICMP6_ERROR_MAX - 48]
    return (back_to_sender(frame)
            / IPv6(src=gw6, dst=frame[IPv6].src, tc=0, fl=0, hlim=ERR_TTL)
            / icmp6 / Raw(quote))


def udp4(outbound, src, dst, sport, dport, ttl, ip_id, payload, flags="DF", tos=0):
    """An Ethernet/IPv4/UDP frame with the given flags ("DF" or 0) and TOS."""
    return (eth(outbound) / IP(src=src, dst=dst, ttl=ttl, id=ip_id, tos=tos, flags=flags)
            / UDP(sport=sport, dport=dport) / Raw(payload))


def udp6(outbound, src, dst, sport, dport, hlim, payload, tc=0):
    """An Ethernet/IPv6/UDP frame (flow label 0)."""
    return (eth(outbound) / IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0)
            / UDP(sport=sport, dport=dport) / Raw(payload))


def filler(n, seed):
    """n payload bytes, different per seed."""
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def v6_addr(v4):
    """The IPv4 address v4 embedded in PREF64 (RFC 6052 §2.2, a /96: the last 32 bits)."""
    a, b, c, d = (int(x) for x in v4.split("."))
    return f"{PREF64}{a << 8 | b:x}:{c << 8 | d:x}"


def transport6(src, dst, l4):
    """The bytes of transport layer `l4` (a scapy UDP/TCP with payload) carried between
    the IPv6 addresses src and dst, checksum computed over their pseudo-header."""
    return bytes(IPv6(src=src, dst=dst) / l4)[40:]


def transport4(src, dst, l4):
    """The same over IPv4 (RFC 768 / RFC 793 pseudo-header)."""
    return bytes(IP(src=src, dst=dst) / l4)[20:]


def pieces(start, end, max_data):
    """How RFC 791 cuts the data bytes start..end into fragments of at most `max_data`
    bytes: every piece but the last a multiple of 8 long. [(from, to), ...]."""
    step = max_data // 8 * 8
    return [(a, min(a + step, end)) for a in range(start, end, step)]


def v6_fragments(outbound, src, dst, hlim, tc, ident, nh, data, cuts):
    """IPv6 fragments (RFC 8200 §4.5) of a datagram whose fragmentable part is `data`:
    one per (from, to) in `cuts`, M set on every piece that does not end the datagram."""
    return [eth(outbound) / IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=0)
            / IPv6ExtHdrFragment(nh=nh, offset=a // 8, m=int(b < len(data)), id=ident)
            / Raw(data[a:b])
            for a, b in cuts]


def v4_fragments(outbound, src, dst, ttl, tos, ident, proto, data, cuts):
    """IPv4 fragments (RFC 791) of a datagram whose data is `data`, DF clear, one per
    (from, to) in `cuts`, MF set on every piece that does not end the datagram."""
    return [eth(outbound)
            / IP(src=src, dst=dst, ttl=ttl, tos=tos, id=ident, proto=proto,
                 flags="MF" if b < len(data) else 0, frag=a // 8)
            / Raw(data[a:b])
            for a, b in cuts]


# --- Scenarios ------------------------------------------------------------------
#
# Each scenario returns a list of (input frame, expected frame, a list of them, or
# None): what the gateway transmits because of that input, in order. None means it
# drops the input frame and sends nothing.


def scenario_tcp():
    """A full HTTP/1.0 exchange 10.0.0.2:40000 <-> 198.51.100.2:80."""
    sport, dport = 40000, 80
    req = b"GET / HTTP/1.0\r\n\r\n"
    resp = b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n"
    c_isn, s_isn = 1_000_000, 7_000_000
    c1 = c_isn + 1            # client seq after SYN
    c2 = c1 + len(req)        # client seq after request
    s1 = s_isn + 1            # server seq after SYN-ACK
    s2 = s1 + len(resp)       # server seq after response

    # (outbound?, ip_id, flags, seq, ack, options, payload)
    segments = [
        (True, 0x1001, "S", c_isn, 0, tcp_opts_syn(100, 0), b""),
        (False, 0x0000, "SA", s_isn, c1, tcp_opts_syn(900, 100), b""),
        (True, 0x1002, "A", c1, s1, tcp_opts_ts(101, 900), b""),
        (True, 0x1003, "PA", c1, s1, tcp_opts_ts(101, 900), req),
        (False, 0x2001, "A", s1, c2, tcp_opts_ts(901, 101), b""),
        (False, 0x2002, "PA", s1, c2, tcp_opts_ts(901, 101), resp),
        (False, 0x2003, "FA", s2, c2, tcp_opts_ts(901, 101), b""),
        (True, 0x1004, "A", c2, s2 + 1, tcp_opts_ts(102, 901), b""),
        (True, 0x1005, "FA", c2, s2 + 1, tcp_opts_ts(102, 901), b""),
        (False, 0x2004, "A", s2 + 1, c2 + 1, tcp_opts_ts(902, 102), b""),
    ]
    pairs = []
    for outbound, ip_id, flags, seq, ack, opts, payload in segments:
        if outbound:
            pin = tcp_pkt(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, ip_id,
                          flags, seq, ack, opts, payload)
            pout = tcp_pkt(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1,
                           ip_id, flags, seq, ack, opts, payload)
        else:
            pin = tcp_pkt(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, ip_id,
                          flags, seq, ack, opts, payload, window=65160)
            pout = tcp_pkt(False, SERVER, HOST_A, dport, sport, TTL_REMOTE - 1,
                           ip_id, flags, seq, ack, opts, payload, window=65160)
        pairs.append((pin, pout))
    return pairs


def dns_query(txid, name):
    """Wire bytes of a DNS A query (hand-built so they never depend on scapy's DNS layer)."""
    qname = b"".join(bytes([len(p)]) + p for p in name.split(b".")) + b"\x00"
    return struct.pack("!HHHHHH", txid, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 1, 1)


def dns_answer(txid, name, addr):
    """Wire bytes of a DNS A response with one answer pointing at the question."""
    query = dns_query(txid, name)
    header = struct.pack("!HHHHHH", txid, 0x8180, 1, 1, 0, 0)
    answer = struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) + bytes(addr)
    return header + query[12:] + answer


def scenario_udp():
    """DNS over UDP, once with checksums and once with UDP checksum 0."""
    pairs = []
    flows = [
        (5353, 0x3001, 0x4001, 0xBEEF, False),
        (5354, 0x3002, 0x4002, 0xCAFE, True),
    ]
    for sport, out_id, in_id, txid, zero in flows:
        q = dns_query(txid, b"example.com")
        a = dns_answer(txid, b"example.com", (93, 184, 216, 34))
        pairs.append((
            udp_pkt(True, HOST_A, SERVER, sport, 53, TTL_INSIDE, out_id, q, zero),
            udp_pkt(True, PUBLIC, SERVER, sport, 53, TTL_INSIDE - 1, out_id, q, zero),
        ))
        pairs.append((
            udp_pkt(False, SERVER, PUBLIC, 53, sport, TTL_REMOTE, in_id, a, zero),
            udp_pkt(False, SERVER, HOST_A, 53, sport, TTL_REMOTE - 1, in_id, a, zero),
        ))
    return pairs


def scenario_icmp_echo():
    """Three pings from 10.0.0.2 (identifier 4660) and their replies."""
    ident = 4660
    pairs = []
    for seq in (1, 2, 3):
        payload = bytes((seq * 16 + i) & 0xFF for i in range(56))
        out_id, in_id = 0x5000 + seq, 0x6000 + seq
        pairs.append((
            echo_pkt(True, HOST_A, SERVER, TTL_INSIDE, out_id, 8, ident, seq, payload),
            echo_pkt(True, PUBLIC, SERVER, TTL_INSIDE - 1, out_id, 8, ident, seq, payload),
        ))
        pairs.append((
            echo_pkt(False, SERVER, PUBLIC, TTL_REMOTE, in_id, 0, ident, seq, payload),
            echo_pkt(False, SERVER, HOST_A, TTL_REMOTE - 1, in_id, 0, ident, seq, payload),
        ))
    return pairs


def scenario_icmp_error():
    """ICMP port unreachable (full quote) and time exceeded (28-byte quote)."""
    pairs = []

    # 1. UDP 10.0.0.2:40001 -> 198.51.100.2:9999, answered by port unreachable.
    u_sport, u_dport, u_id, u_payload = 40001, 9999, 0x7001, b"is anyone there?"
    pairs.append((
        udp_pkt(True, HOST_A, SERVER, u_sport, u_dport, TTL_INSIDE, u_id, u_payload),
        udp_pkt(True, PUBLIC, SERVER, u_sport, u_dport, TTL_INSIDE - 1, u_id, u_payload),
    ))
    # The server's kernel quotes the whole datagram as it arrived (a few hops later).
    q_ttl = TTL_INSIDE - 4

    def quoted_udp(src):
        return bytes(ip(src, SERVER, q_ttl, u_id) / UDP(sport=u_sport, dport=u_dport)
                     / Raw(u_payload))

    pairs.append((
        icmp_error_pkt(SERVER, PUBLIC, TTL_REMOTE, 0x7101, 3, 3, quoted_udp(PUBLIC)),
        icmp_error_pkt(SERVER, HOST_A, TTL_REMOTE - 1, 0x7101, 3, 3, quoted_udp(HOST_A)),
    ))

    # 2. TCP SYN 10.0.0.2:40002 -> 198.51.100.2:443 sent with TTL 2, like
    # traceroute: it leaves the NAT with TTL 1 and the next router answers
    # with time exceeded, quoting the IP header (TTL 1) and 8 bytes of TCP.
    t_sport, t_dport, t_id, t_isn = 40002, 443, 0x7002, 3_000_000
    t_opts = [("MSS", 1460)]
    pairs.append((
        tcp_pkt(True, HOST_A, SERVER, t_sport, t_dport, 2, t_id, "S", t_isn, 0, t_opts),
        tcp_pkt(True, PUBLIC, SERVER, t_sport, t_dport, 1, t_id, "S", t_isn, 0, t_opts),
    ))

    def quoted_tcp(src):
        full = bytes(ip(src, SERVER, 1, t_id)
                     / TCP(sport=t_sport, dport=t_dport, seq=t_isn, ack=0, flags="S",
                           window=64240, options=t_opts))
        return full[:28]

    pairs.append((
        icmp_error_pkt(ROUTER, PUBLIC, TTL_INSIDE, 0x7102, 11, 0, quoted_tcp(PUBLIC)),
        icmp_error_pkt(ROUTER, HOST_A, TTL_INSIDE - 1, 0x7102, 11, 0, quoted_tcp(HOST_A)),
    ))
    return pairs


def scenario_hairpin():
    """Hairpinning through the port forward, and a plain port-forward flow."""
    pairs = []
    syn_opts = tcp_opts_syn(200, 0)
    synack_opts = tcp_opts_syn(300, 200)

    # 10.0.0.3:50000 -> 203.0.113.1:8080 becomes 203.0.113.1:50000 -> 10.0.0.20:80.
    pairs.append((
        tcp_pkt(True, HOST_B, PUBLIC, 50000, FWD_PORT, TTL_INSIDE, 0x8001, "S",
                11_000, 0, syn_opts),
        tcp_pkt(True, PUBLIC, WEB, 50000, WEB_PORT, TTL_INSIDE - 1, 0x8001, "S",
                11_000, 0, syn_opts),
    ))
    # 10.0.0.20:80 -> 203.0.113.1:50000 becomes 203.0.113.1:8080 -> 10.0.0.3:50000.
    pairs.append((
        tcp_pkt(True, WEB, PUBLIC, WEB_PORT, 50000, TTL_INSIDE, 0x8101, "SA",
                22_000, 11_001, synack_opts),
        tcp_pkt(True, PUBLIC, HOST_B, FWD_PORT, 50000, TTL_INSIDE - 1, 0x8101, "SA",
                22_000, 11_001, synack_opts),
    ))
    # 198.51.100.2:41000 -> 203.0.113.1:8080 becomes ... -> 10.0.0.20:80.
    pairs.append((
        tcp_pkt(False, SERVER, PUBLIC, 41000, FWD_PORT, TTL_REMOTE, 0x8201, "S",
                33_000, 0, syn_opts),
        tcp_pkt(False, SERVER, WEB, 41000, WEB_PORT, TTL_REMOTE - 1, 0x8201, "S",
                33_000, 0, syn_opts),
    ))
    # 10.0.0.20:80 -> 198.51.100.2:41000 leaves as 203.0.113.1:8080.
    pairs.append((
        tcp_pkt(True, WEB, SERVER, WEB_PORT, 41000, TTL_INSIDE, 0x8102, "SA",
                44_000, 33_001, synack_opts),
        tcp_pkt(True, PUBLIC, SERVER, FWD_PORT, 41000, TTL_INSIDE - 1, 0x8102, "SA",
                44_000, 33_001, synack_opts),
    ))
    return pairs


def udp_fragments(outbound, src, dst, sp, dp, ttl, ip_id, payload):
    """A UDP datagram (DF clear, its checksum over the whole) cut by scapy into frames of
    1480-byte fragments."""
    dgram = ip(src, dst, ttl, ip_id, flags=0) / UDP(sport=sp, dport=dp) / Raw(payload)
    return [eth(outbound) / f for f in fragment(dgram, fragsize=1480)]


def scenario_fragments():
    """A UDP datagram out in three fragments and the reply back in three, the reply's
    last fragment sent before its middle one (RFC 4787 REQ-14). scapy computes the UDP
    checksum over each whole datagram, then cuts it: the expected first fragments carry
    the checksum of the whole translated datagram."""
    sport, dport = 7000, 7001
    out_payload = bytes(i & 0xFF for i in range(3000))
    in_payload = bytes((i * 7 + 1) & 0xFF for i in range(2990))

    out_in = udp_fragments(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, 0x7A01, out_payload)
    out_exp = udp_fragments(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1, 0x7A01, out_payload)
    back_in = udp_fragments(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, 0x7B01, in_payload)
    back_exp = udp_fragments(False, SERVER, HOST_A, dport, sport, TTL_REMOTE - 1, 0x7B01, in_payload)
    order = [0, 2, 1]
    return (list(zip(out_in, out_exp))
            + [(back_in[i], back_exp[i]) for i in order])


def scenario_fragments_reordered():
    """A UDP datagram out in three fragments sent last first, and the reply back likewise
    (RFC 4787 REQ-14: fragments in any order). The two later fragments of each are held
    (nothing leaves for them) until the first comes; then the first leaves translated and
    the held ones right after it, in the order they arrived, each behind the first's link
    header: they go its way."""
    sport, dport = 7100, 7101
    out_payload = bytes((i * 3) & 0xFF for i in range(3000))
    in_payload = bytes((i * 5 + 2) & 0xFF for i in range(2990))

    out_in = udp_fragments(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, 0x7C01, out_payload)
    out_exp = udp_fragments(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1, 0x7C01, out_payload)
    back_in = udp_fragments(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, 0x7D01, in_payload)
    back_exp = udp_fragments(False, SERVER, HOST_A, dport, sport, TTL_REMOTE - 1, 0x7D01, in_payload)
    pairs = []
    for given, expected in ((out_in, out_exp), (back_in, back_exp)):
        pairs += [(given[2], None), (given[1], None),
                  (given[0], [expected[0], expected[2], expected[1]])]
    return pairs


def scenario_drops():
    """Five packets the NAT must drop, between two valid outbound UDP packets."""
    sport, dport = 6000, 7000

    def valid(ip_id, payload):
        return (
            udp_pkt(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, ip_id, payload),
            udp_pkt(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1, ip_id, payload),
        )

    # Inbound to a public port with no mapping (6000 is mapped, 33333 is not).
    no_mapping = udp_pkt(False, SERVER, PUBLIC, 53, 33333, TTL_REMOTE, 0x9002, b"unsolicited")

    # IPv4 total length claims 40 bytes more than the frame carries.
    short = udp_pkt(True, HOST_A, SERVER, 6001, dport, TTL_INSIDE, 0x9003, b"cut short")
    short_len = 20 + 8 + len(b"cut short")
    short[IP].len = short_len + 40
    short[UDP].len = 8 + len(b"cut short")

    # An outbound packet whose TTL would reach 0 at the NAT.
    ttl_one = udp_pkt(True, HOST_A, SERVER, 6002, dport, 1, 0x9004, b"ttl one")

    # A non-first fragment (offset 1480 bytes = 185 * 8) of a UDP datagram whose first
    # fragment never came: held for it (fragment_held), so nothing is sent.
    fragment = (eth(True) / ip(HOST_A, SERVER, TTL_INSIDE, 0x9005, flags=0, frag=185, proto=17)
                / Raw(bytes(range(64))))

    # IHL 4 (a 16-byte header, below the 20-byte minimum).
    bad_ihl = udp_pkt(True, HOST_A, SERVER, 6003, dport, TTL_INSIDE, 0x9006, b"bad ihl")
    bad_ihl[IP].ihl = 4

    return [
        valid(0x9001, b"before the drops"),
        (no_mapping, None),
        (short, None),
        (ttl_one, None),
        (fragment, None),
        (bad_ihl, None),
        valid(0x9007, b"after the drops"),
    ]


def scenario_nat44_gateway():
    """NAT44 with the gateway's addresses and link MTUs (nat44_gateway.toml): the ICMP
    errors it owes (Time Exceeded, RFC 1812 §5.3.1; Fragmentation Needed with the
    next-hop MTU, RFC 1191 §4), from its address on the link the packet came in by
    (RFC 1812 §4.3.2.4), and the packets no router may answer (RFC 1122 §3.2.2, RFC 1812
    §4.3.2.7). Outbound packets leave by the outside link (MTU 1400), inbound ones by the
    inside link (MTU 1480)."""
    sport, dport = 6100, 7000
    pairs = []

    def outbound_udp(sp, ttl, ip_id, payload, flags="DF"):
        return (udp4(True, HOST_A, SERVER, sp, dport, ttl, ip_id, payload, flags),
                udp4(True, PUBLIC, SERVER, sp, dport, ttl - 1, ip_id, payload, flags))

    # 1. Opens the mapping 10.0.0.2:6100 <-> 203.0.113.1:6100.
    pairs.append(outbound_udp(sport, TTL_INSIDE, 0xA001, b"open a mapping"))

    # 2. TTL 1 from the inside: Time Exceeded (11/0) from the inside address, quoting the
    # whole packet.
    pin = udp4(True, HOST_A, SERVER, 6101, dport, 1, 0xA002, b"ttl one, outbound")
    pairs.append((pin, icmp4_error(pin, GW_INSIDE, ICMP(type=11, code=0))))

    # 3. TTL 2 is forwarded, with TTL 1.
    pairs.append(outbound_udp(sport, 2, 0xA003, b"ttl two"))

    # 4. TTL 1 from the outside to the mapped public endpoint: Time Exceeded from the
    # outside address, quoting the packet as it arrived (addressed to the public side).
    pin = udp4(False, SERVER, PUBLIC, dport, sport, 1, 0xA004, b"ttl one, inbound")
    pairs.append((pin, icmp4_error(pin, GW_OUTSIDE, ICMP(type=11, code=0))))

    # 5. DF, exactly the outside MTU (1400 bytes): forwarded.
    pairs.append(outbound_udp(sport, TTL_INSIDE, 0xA005, filler(OUTSIDE_MTU - 28, 1)))

    # 6. DF, one byte more: Fragmentation Needed (3/4) carrying the outside link's MTU
    # (RFC 1191 §4), quoting the first 548 bytes.
    pin = udp4(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, 0xA006,
               filler(OUTSIDE_MTU - 27, 2))
    pairs.append((pin, icmp4_error(pin, GW_INSIDE,
                                   ICMP(type=3, code=4, nexthopmtu=OUTSIDE_MTU))))

    # 7. The same without DF: a NAT44 gateway does not fragment; dropped (too_big), and
    # no ICMP error exists for it.
    pin = udp4(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, 0xA007,
               filler(OUTSIDE_MTU - 27, 3), flags=0)
    pairs.append((pin, None))

    # 8. Inbound, DF, one byte over the inside MTU: Fragmentation Needed from the outside
    # address, carrying the inside link's MTU.
    pin = udp4(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, 0xA008,
               filler(INSIDE_MTU - 27, 4))
    pairs.append((pin, icmp4_error(pin, GW_OUTSIDE,
                                   ICMP(type=3, code=4, nexthopmtu=INSIDE_MTU))))

    # 9. An ICMP query (echo request) with TTL 1 is answered: only errors are not.
    pin = (eth(True) / ip(HOST_A, SERVER, 1, 0xA009)
           / ICMP(type=8, code=0, id=4661, seq=1) / Raw(b"traceroute by ping"))
    pairs.append((pin, icmp4_error(pin, GW_INSIDE, ICMP(type=11, code=0))))

    # 10. The first fragment of a datagram (MF, offset 0) with TTL 1 is answered.
    dgram = ip(HOST_A, SERVER, 1, 0xA00A, flags=0) / UDP(sport=6102, dport=dport) / Raw(
        filler(64, 5))
    first, later = (eth(True) / f for f in fragment(dgram, fragsize=40))
    pairs.append((first, icmp4_error(first, GW_INSIDE, ICMP(type=11, code=0))))

    # 11-15: dropped as ttl_expired and never answered (RFC 1122 §3.2.2: "An ICMP error
    # message MUST NOT be sent as the result of receiving: ...").
    # 11. "a non-initial fragment" (the rest of the datagram of 10).
    pairs.append((later, None))
    # 12. "an ICMP error message": a port unreachable from the inside with TTL 1.
    quoted = bytes(ip(SERVER, HOST_A, TTL_REMOTE - 1, 0xA0FF)
                   / UDP(sport=dport, dport=6199) / Raw(b"to a closed port"))
    pairs.append((eth(True) / ip(HOST_A, SERVER, 1, 0xA00C, flags=0)
                  / ICMP(type=3, code=3) / Raw(quoted), None))
    # 13. "a datagram whose source address does not define a single host": a broadcast
    # address.
    pairs.append((udp4(False, "255.255.255.255", PUBLIC, 67, sport, 1, 0xA00D,
                       b"broadcast source"), None))
    # 14. ... a multicast address, ... a Class E address, ... a zero address (RFC 1812
    # §4.3.2.7: "a network prefix of zero").
    pairs.append((udp4(False, "224.0.0.9", PUBLIC, 520, sport, 1, 0xA00E,
                       b"multicast source"), None))
    pairs.append((udp4(False, "240.0.0.1", PUBLIC, 520, sport, 1, 0xA011,
                       b"class e source"), None))
    pairs.append((udp4(False, "0.1.2.3", PUBLIC, 520, sport, 1, 0xA012,
                       b"network zero source"), None))
    # 15. "a datagram destined to an IP broadcast or IP multicast address" (the host's
    # traffic: quicknat leaves it to the kernel live and skips it in translate).
    pairs.append((udp4(True, HOST_A, "239.1.2.3", 6103, 5000, 1, 0xA00F,
                       b"multicast destination"), None))

    # 16. Traffic goes on.
    pairs.append(outbound_udp(sport, TTL_INSIDE, 0xA010, b"still here"))
    return pairs


def scenario_siit_gateway():
    """SIIT (siit_gateway.toml): IPv4 inside, IPv6 outside, lowest-ipv6-mtu 1280, IPv4
    MTU 1400. RFC 7915 §4.1: an IPv4 packet without DF too big for the IPv6 side is cut
    so that each translated fragment fits, one with DF is answered with Fragmentation
    Needed; §5.1 / §1.4: an IPv6 packet too big for the IPv4 MTU is answered with Packet
    Too Big; the TTL / Hop Limit running out at the translator is answered in the
    sender's family. The IPv4 host is 198.51.100.20 (2001:db8:64::c633:6414 seen from
    IPv6), the IPv6 host 2001:db8:1::10 (192.0.2.100 seen from IPv4, by its EAM)."""
    h4, h4_6 = SIIT_V4_HOST, v6_addr(SIIT_V4_HOST)
    h6, h6_4 = V6_HOST, SIIT_V4_OF_V6_HOST
    sport, dport = 5000, 6000
    max_data = XLAT_IPV6_MTU - 48  # RFC 7915 §4.1: "1280 minus 40 ... and 8 ..."
    pairs = []

    def out4(ip_id, payload, flags="DF", ttl=TTL_INSIDE, tos=0):
        return udp4(True, h4, h6_4, sport, dport, ttl, ip_id, payload, flags, tos)

    def as6(payload, ttl=TTL_INSIDE, tos=0):
        # RFC 7915 §4.1: Traffic Class from TOS, flow label 0, hop limit TTL - 1, no
        # Fragment header for a packet that is not a fragment (DF or not).
        return udp6(True, h4_6, h6, sport, dport, ttl - 1, payload, tc=tos)

    # 1. A small IPv4 packet with DF, and 2. one without: each one IPv6 packet, without a
    # Fragment header ("MUST NOT include the Fragment Header for the non-fragmented").
    pairs.append((out4(0xB001, b"small, DF"), as6(b"small, DF")))
    pairs.append((out4(0xB002, b"small, no DF", flags=0, tos=0x28),
                  as6(b"small, no DF", tos=0x28)))

    # 3. DF, 1260 bytes: its translation is exactly 1280 bytes and goes through.
    pay = filler(XLAT_IPV6_MTU - 20 - 28, 11)
    pairs.append((out4(0xB003, pay), as6(pay)))

    # 4. DF, 1261 bytes: "the MTU of the next-hop interface is less than the total length
    # value of the IPv4 packet plus 20": Fragmentation Needed, MTU 1260 (1280 - 20, the
    # largest IPv4 packet whose translation fits), from the gateway's IPv4 address.
    pin = out4(0xB004, filler(XLAT_IPV6_MTU - 20 - 27, 12))
    pairs.append((pin, icmp4_error(pin, SIIT_GW_V4,
                                   ICMP(type=3, code=4, nexthopmtu=XLAT_IPV6_MTU - 20))))

    # 5. No DF, 3000 bytes (TOS 0x28): cut into IPv4 fragments of at most 1232 data
    # bytes, each translated: IPv6 fragments with the IPv4 identification (high 16 bits
    # zero), offsets 0, 154 and 308 (x 8 bytes), M set on all but the last, in order; the
    # UDP checksum (first fragment) is the whole IPv6 datagram's.
    pay = filler(3000 - 28, 13)
    pin = out4(0xB005, pay, flags=0, tos=0x28)
    data = transport6(h4_6, h6, UDP(sport=sport, dport=dport) / Raw(pay))
    pairs.append((pin, v6_fragments(True, h4_6, h6, TTL_INSIDE - 1, 0x28, 0xB005, 17,
                                    data, pieces(0, len(data), max_data))))

    # 6. A datagram the IPv4 sender fragmented itself (1480-byte pieces): every fragment
    # too big for the IPv6 side is cut again, keeping the identification; offsets carry
    # on from the fragment's own, and MF stays set up to the datagram's real end.
    pay = filler(3000 - 8, 14)
    dgram = ip(h4, h6_4, TTL_INSIDE, 0xB006, flags=0) / UDP(sport=sport, dport=dport) / Raw(pay)
    data = transport6(h4_6, h6, UDP(sport=sport, dport=dport) / Raw(pay))
    for f in fragment(dgram, fragsize=1480):
        start = f[IP].frag * 8
        end = start + len(f[IP].payload)
        pairs.append((eth(True) / f,
                      v6_fragments(True, h4_6, h6, TTL_INSIDE - 1, 0, 0xB006, 17, data,
                                   pieces(start, end, max_data))))

    # 7. IPv4 TTL 1: ICMPv4 Time Exceeded from the gateway's IPv4 address.
    pin = out4(0xB007, b"ttl one", ttl=1)
    pairs.append((pin, icmp4_error(pin, SIIT_GW_V4, ICMP(type=11, code=0))))

    # 8. A non-initial IPv4 fragment with TTL 1: dropped, never answered.
    pairs.append((eth(True) / IP(src=h4, dst=h6_4, ttl=1, id=0xB008, frag=100, proto=17)
                  / Raw(filler(40, 15)), None))

    # From the IPv6 side.
    def in6(payload, hlim=TTL_REMOTE):
        return udp6(False, h6, h4_6, dport, sport, hlim, payload)

    # 9. 1420 bytes: its translation is 1400 bytes, the IPv4 MTU, and goes through with
    # DF set ("If the size of the translated IPv4 packet is ... [over] 1260 bytes, it is
    # set to one") and TTL = Hop Limit - 1.
    pay = filler(XLAT_IPV4_MTU - 28, 16)
    pairs.append((in6(pay), udp4(False, h6_4, h4, dport, sport, TTL_REMOTE - 1,
                                 XLAT_ATOMIC_ID, pay)))

    # 10. 1421 bytes: too big for the IPv4 side: Packet Too Big (2/0) from the gateway's
    # IPv6 address with the MTU as the IPv6 sender counts it, 1400 + 20, quoting 1232
    # bytes.
    pin = in6(filler(XLAT_IPV4_MTU - 27, 17))
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6,
                                   ICMPv6PacketTooBig(mtu=XLAT_IPV4_MTU + 20))))

    # 11. Hop Limit 1: ICMPv6 Time Exceeded (3/0, "hop limit exceeded in transit").
    pin = in6(b"hop limit one", hlim=1)
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6, ICMPv6TimeExceeded(code=0))))

    # 12. An ICMPv6 error with Hop Limit 1: dropped, never answered (RFC 4443 §2.4 (e.1)).
    quoted = bytes(IPv6(src=h4_6, dst=h6, hlim=TTL_INSIDE - 1)
                   / UDP(sport=sport, dport=7777) / Raw(b"to a closed port"))
    pairs.append((eth(False) / IPv6(src=h6, dst=h4_6, hlim=1)
                  / ICMPv6DestUnreach(code=4) / Raw(quoted), None))

    # 13. A datagram the IPv6 sender fragmented (identification 0x12345678): IPv4
    # fragments with the low-order 16 bits as identification, DF clear, MF from M, the
    # same offsets, TTL = Hop Limit - 1 (RFC 7915 §5.1.1); the first carries the whole
    # IPv4 datagram's UDP checksum.
    pay = filler(2000, 18)
    data6 = transport6(h6, h4_6, UDP(sport=dport, dport=sport) / Raw(pay))
    data4 = transport4(h6_4, h4, UDP(sport=dport, dport=sport) / Raw(pay))
    cuts = pieces(0, len(data6), max_data)
    frags6 = v6_fragments(False, h6, h4_6, TTL_REMOTE, 0, 0x12345678, 17, data6, cuts)
    frags4 = v4_fragments(False, h6_4, h4, TTL_REMOTE - 1, 0, 0x5678, 17, data4, cuts)
    pairs.extend(zip(frags6, frags4))
    return pairs


def scenario_siit_errors():
    """SIIT (siit_errors.toml): the ICMP errors RFC 7915 owes the sender of a packet the
    translator refuses, the translator's ICMPv4 errors sourced from its IPv4 link's
    address (not the RFC 6791 pool's), and EAM hairpinning. The IPv4 host is 198.51.100.20;
    A (2001:db8:aaaa::1) and B (::2) are IPv6 nodes whose IPv4 addresses 192.0.2.1 and
    .2 come from the EAM entry 192.0.2.0/24 <-> 2001:db8:aaaa::/120."""
    h4, h4_6 = SIIT_V4_HOST, v6_addr(SIIT_V4_HOST)
    (a4, a6), (b4, b6) = SIIT_EAM_A, SIIT_EAM_B
    pairs = []

    def lsrr(ip_id, pointer, payload):
        # RFC 791 §3.1 loose source route (type 131, length 7, one address), NOP-padded;
        # the UDP checksum over the real destination (scapy would use the route's last).
        l4 = transport4(h4, a4, UDP(sport=5000, dport=6000) / Raw(payload))
        return (eth(True) / IP(src=h4, dst=a4, ttl=TTL_INSIDE, id=ip_id, flags="DF",
                               proto=17, options=[IPOption_LSRR(pointer=pointer,
                                                                routers=["203.0.113.9"]),
                                                  IPOption_NOP()])
                / Raw(l4))

    # 1. An unexpired loose source route (pointer 4 <= length 7): "the packet MUST instead
    # be discarded, and an ICMPv4 "Destination Unreachable, Source Route Failed" (Type 3,
    # Code 5) error message SHOULD be returned to the sender" (§4.1), from the gateway's
    # IPv4 address.
    pin = lsrr(0xC001, 4, b"source routed")
    pairs.append((pin, icmp4_error(pin, SIIT_ERR_SOURCE, ICMP(type=3, code=5))))

    # 2. An expired one (pointer 8 > length 7): options "MUST be ignored"; translated.
    pin = lsrr(0xC002, 8, b"route done")
    pairs.append((pin, udp6(True, h4_6, a6, 5000, 6000, TTL_INSIDE - 1, b"route done")))

    # 3. TTL 1: Time Exceeded, from the gateway's IPv4 address too.
    pin = udp4(True, h4, a4, 5000, 6000, 1, 0xC003, b"ttl one")
    pairs.append((pin, icmp4_error(pin, SIIT_ERR_SOURCE, ICMP(type=11, code=0))))

    # 4. ICMPv6 carried in IPv4 (protocol 58): refused; §4.4's default answer, Destination
    # Unreachable, Communication Administratively Prohibited (Type 3, Code 13).
    pin = (eth(True) / IP(src=h4, dst=a4, ttl=TTL_INSIDE, id=0xC004, flags="DF", proto=58)
           / Raw(b"\x80\x00\x00\x00\x00\x01\x00\x01ping"))
    pairs.append((pin, icmp4_error(pin, SIIT_ERR_SOURCE, ICMP(type=3, code=13))))

    # 5. A Routing header with Segments Left 1: "an ICMPv6 "parameter problem/erroneous
    # header field encountered" (Type 4, Code 0) error message, with the Pointer field
    # indicating the first byte of the Segments Left field" (§5.1): 40 + 3.
    # (The UDP checksum is taken over the header's destination, as a checker without
    # routing-header rules verifies a quote; nothing translates this packet anyway.)
    pin = (eth(False) / IPv6(src=a6, dst=h4_6, hlim=TTL_REMOTE, fl=0)
           / IPv6ExtHdrRouting(type=2, segleft=1, addresses=["2001:db8:9::9"], nh=17)
           / Raw(transport6(a6, h4_6, UDP(sport=6000, dport=5000) / Raw(b"routed"))))
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6, ICMPv6ParamProblem(code=0, ptr=43))))

    # 6. A destination neither in the EAM table nor in the Pref64: §5.4's default answer,
    # Destination Unreachable, Communication with Destination Administratively Prohibited
    # (Type 1, Code 1), from the gateway's outside address.
    pin = udp6(False, a6, "2001:db8:77::1", 6000, 5000, TTL_REMOTE, b"nowhere")
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6, ICMPv6DestUnreach(code=1))))

    # 7. An ICMPv6 error about it would never be answered (RFC 4443 §2.4 (e.1)).
    quoted = bytes(IPv6(src=h4_6, dst=a6, hlim=1) / UDP(sport=5000, dport=6000))
    pairs.append((eth(False) / IPv6(src=a6, dst="2001:db8:77::1", hlim=TTL_REMOTE)
                  / ICMPv6DestUnreach(code=4) / Raw(quoted), None))

    # 8. A reaches B at B's IPv4 address in the Pref64: translated to IPv4 (192.0.2.1 ->
    # 192.0.2.2), an EAM destination, and straight back to IPv6 (RFC 7757 §4), the source
    # now A's IPv4 address in the Pref64 so that B answers through the translator; out of
    # the IPv6 side again, one hop (hop limit - 1), flow label 0 (RFC 7915 §4.1).
    pin = udp6(False, a6, v6_addr(b4), 6000, 7000, TTL_REMOTE, b"to B via EAM", tc=0x28)
    pairs.append((pin, udp6(False, v6_addr(a4), b6, 6000, 7000, TTL_REMOTE - 1,
                            b"to B via EAM", tc=0x28)))

    # 9. B's answer to A's Pref64 address hairpins the same way.
    pin = udp6(False, b6, v6_addr(a4), 7000, 6000, TTL_REMOTE, b"to A via EAM")
    pairs.append((pin, udp6(False, v6_addr(b4), a6, 7000, 6000, TTL_REMOTE - 1,
                            b"to A via EAM")))
    return pairs


def scenario_siit_hairpin_simple():
    """SIIT (siit_hairpin_simple.toml), "simple" EAM hairpinning: unlike "intrinsic"
    (scenario_siit_errors), a packet hairpins whenever its IPv4 destination is an EAM
    address, even one addressed to B's own IPv6 address; an ordinary IPv4 destination
    still leaves on the IPv4 side."""
    (a4, a6), (b4, b6) = SIIT_EAM_A, SIIT_EAM_B
    h4 = SIIT_V4_HOST
    pairs = []
    # 1. A to B's own IPv6 address (2001:db8:aaaa::2 -> 192.0.2.2 by the EAM): back to
    # IPv6, A's source in the Pref64 (RFC 7757 §4), hop limit - 1, flow label 0.
    pin = udp6(False, a6, b6, 6000, 7000, TTL_REMOTE, b"to B directly")
    pairs.append((pin, udp6(False, v6_addr(a4), b6, 6000, 7000, TTL_REMOTE - 1,
                            b"to B directly")))
    # 2. A to B through the Pref64: the same.
    pin = udp6(False, a6, v6_addr(b4), 6000, 7000, TTL_REMOTE, b"to B via Pref64")
    pairs.append((pin, udp6(False, v6_addr(a4), b6, 6000, 7000, TTL_REMOTE - 1,
                            b"to B via Pref64")))
    # 3. A to an IPv4 host: translated to IPv4 (1300 bytes: over 1260, so DF set and the
    # Identification quicknat's documented 0, RFC 7915 §5.1).
    pay = filler(1300 - 28, 21)
    pin = udp6(False, a6, v6_addr(h4), 6000, 7000, TTL_REMOTE, pay)
    pairs.append((pin, udp4(False, a4, h4, 6000, 7000, TTL_REMOTE - 1, XLAT_ATOMIC_ID,
                            pay)))
    return pairs


def scenario_nat64_gateway():
    """Stateful NAT64 (nat64_gateway.toml): IPv6 hosts inside, 203.0.113.1 outside,
    lowest-ipv6-mtu 1280, IPv4 MTU 1400. The session is opened from the inside first;
    then the translator's fragments (RFC 7915 §4.1) and the ICMP errors it owes in the
    sender's family (RFC 6146 §3.5, RFC 7915 §4, §5): ICMPv6 from its inside address,
    ICMPv4 from its outside address. The server 198.51.100.2 is 2001:db8:64::c633:6402
    seen from IPv6."""
    h6, srv6 = V6_HOST, v6_addr(SERVER)
    sport, dport = 40000, 7000
    max_data = XLAT_IPV6_MTU - 48
    pairs = []

    def out6(payload, hlim=TTL_INSIDE):
        return udp6(True, h6, srv6, sport, dport, hlim, payload)

    def in4(ip_id, payload, flags="DF", ttl=TTL_REMOTE):
        return udp4(False, SERVER, PUBLIC, dport, sport, ttl, ip_id, payload, flags)

    def as6(payload, hlim):
        return udp6(False, srv6, h6, dport, sport, hlim, payload)

    # 1. Opens the session [2001:db8:1::10]:40000 <-> 203.0.113.1:40000 (port kept).
    # 1300 bytes as IPv4: DF set (over 1260), so the identification is free (RFC 6864).
    pay = filler(1300 - 28, 21)
    pairs.append((out6(pay), udp4(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1,
                                  XLAT_ATOMIC_ID, pay)))

    # 2. A small reply without DF: one IPv6 packet, no Fragment header.
    pairs.append((in4(0xC002, b"small reply", flags=0), as6(b"small reply", TTL_REMOTE - 1)))

    # 3. DF, 1260 bytes: translated to exactly 1280 bytes.
    pay = filler(XLAT_IPV6_MTU - 20 - 28, 22)
    pairs.append((in4(0xC003, pay), as6(pay, TTL_REMOTE - 1)))

    # 4. DF, 1261 bytes: Fragmentation Needed, MTU 1260, from the outside address,
    # quoting the packet as it arrived (to the public address and port).
    pin = in4(0xC004, filler(XLAT_IPV6_MTU - 20 - 27, 23))
    pairs.append((pin, icmp4_error(pin, GW_OUTSIDE,
                                   ICMP(type=3, code=4, nexthopmtu=XLAT_IPV6_MTU - 20))))

    # 5. No DF, 3000 bytes: three IPv6 fragments to the IPv6 host, identification from
    # the IPv4 one, offsets 0, 154, 308, M on the first two.
    pay = filler(3000 - 28, 24)
    data = transport6(srv6, h6, UDP(sport=dport, dport=sport) / Raw(pay))
    pairs.append((in4(0xC005, pay, flags=0),
                  v6_fragments(False, srv6, h6, TTL_REMOTE - 1, 0, 0xC005, 17, data,
                               pieces(0, len(data), max_data))))

    # 6. From the inside, 1421 bytes (1401 as IPv4): Packet Too Big, MTU 1420, from the
    # inside address.
    pin = out6(filler(XLAT_IPV4_MTU - 27, 25))
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6,
                                   ICMPv6PacketTooBig(mtu=XLAT_IPV4_MTU + 20))))

    # 7. From the inside, Hop Limit 1: ICMPv6 Time Exceeded from the inside address.
    pin = out6(b"hop limit one", hlim=1)
    pairs.append((pin, icmp6_error(pin, GW_INSIDE6, ICMPv6TimeExceeded(code=0))))

    # 8. From the outside, TTL 1: ICMPv4 Time Exceeded from the outside address.
    pin = in4(0xC008, b"ttl one", ttl=1)
    pairs.append((pin, icmp4_error(pin, GW_OUTSIDE, ICMP(type=11, code=0))))

    # 9. TTL 2 is forwarded with Hop Limit 1: the TTL is decremented once, not once by
    # the translation and again by the NAT.
    pairs.append((in4(0xC009, b"ttl two", ttl=2), as6(b"ttl two", 1)))

    # 10-11. SCTP with its ports (RFC 6146 §3.5 beyond TCP/UDP/ICMP, as netfilter):
    # [2001:db8:1::10]:5000 -> 203.0.113.1:5000 (port kept), and back; SIIT leaves the
    # CRC32c alone (it covers no addresses). Out 1300 bytes as IPv4: DF set, ID free;
    # back 200 bytes with DF: within the lowest IPv6 MTU.
    out_sctp = SCTP(sport=5000, dport=2905, tag=0x0BADCAFE) / Raw(filler(1300 - 20 - 12, 26))
    back_sctp = SCTP(sport=2905, dport=5000, tag=0x0BADCAFE) / Raw(filler(200 - 20 - 12, 27))
    pairs.append((eth(True) / IPv6(src=h6, dst=srv6, hlim=TTL_INSIDE, tc=0, fl=0) / out_sctp,
                  eth(True) / IP(src=PUBLIC, dst=SERVER, ttl=TTL_INSIDE - 1, id=XLAT_ATOMIC_ID,
                                 tos=0, flags="DF") / out_sctp))
    pairs.append((eth(False) / IP(src=SERVER, dst=PUBLIC, ttl=TTL_REMOTE, id=0xC00B, tos=0,
                                  flags="DF") / back_sctp,
                  eth(False) / IPv6(src=srv6, dst=h6, hlim=TTL_REMOTE - 1, tc=0, fl=0) / back_sctp))
    return pairs


def scenario_siit_mtu():
    """SIIT (siit_mtu.toml), RFC 7915's two MTUs: an IPv4 packet with DF is held to the
    next-hop IPv6 MTU (1500, the link's), one without DF to lowest-ipv6-mtu (1280);
    Fragmentation Needed becomes Packet Too Big by §4.2's formula with the real next hops;
    IPv6 fragments too big for the 1400-byte IPv4 next hop are cut in IPv4 (§5.1.1: DF
    cleared, "allowing this packet to be further fragmented")."""
    h4, h4_6 = SIIT_V4_HOST, v6_addr(SIIT_V4_HOST)
    h6, h6_4 = V6_HOST, SIIT_V4_OF_V6_HOST
    sport, dport = 5100, 6100
    pairs = []

    def out4(ip_id, total, flags="DF", seed=0):
        return udp4(True, h4, h6_4, sport, dport, TTL_INSIDE, ip_id,
                    filler(total - 28, seed), flags)

    def as6(pin):
        return udp6(True, h4_6, h6, sport, dport, TTL_INSIDE - 1, bytes(pin[Raw].load))

    # 1. DF, 1328 bytes: "If the DF bit is set and the MTU of the next-hop interface is
    # less than the total length value of the IPv4 packet plus 20" -- 1500 is not less
    # than 1348: one IPv6 packet, no Fragment header (§4.1).
    pin = out4(0xD001, 1328, seed=31)
    pairs.append((pin, as6(pin)))

    # 2. DF, 1480 bytes: exactly 1500 as IPv6, the next hop's MTU: goes through.
    pin = out4(0xD002, MTU_V6_LINK - 20, seed=32)
    pairs.append((pin, as6(pin)))

    # 3. DF, 1481 bytes: Fragmentation Needed with the next hop's MTU - 20 = 1480.
    pin = out4(0xD003, MTU_V6_LINK - 19, seed=33)
    pairs.append((pin, icmp4_error(pin, SIIT_GW_V4,
                                   ICMP(type=3, code=4, nexthopmtu=MTU_V6_LINK - 20))))

    # 4. No DF, 1328 bytes: "larger than ... "lowest-ipv6-mtu" ... SHOULD be fragmented",
    # pieces of at most 1280 - 48 = 1232 data bytes, whatever the next hop takes.
    pin = out4(0xD004, 1328, flags=0, seed=34)
    data = transport6(h4_6, h6, UDP(sport=sport, dport=dport) / Raw(pin[Raw].load))
    pairs.append((pin, v6_fragments(True, h4_6, h6, TTL_INSIDE - 1, 0, 0xD004, 17, data,
                                    pieces(0, len(data), MTU_LOWEST_V6 - 48))))

    # 5. An IPv4 router (198.51.100.254) answers a 1400-byte DF packet the IPv6 host sent
    # with Fragmentation Needed, MTU 1261, quoting its IPv4 header and UDP header. §4.2:
    # "minimum(advertised MTU+20, MTU_of_IPv6_nexthop, (MTU_of_IPv4_nexthop)+20)" =
    # min(1281, 1500, 1420) = 1281. The quoted packet is translated back to what the IPv6
    # host sent (Hop Limit as quoted, the UDP checksum its own).
    pay = filler(1400 - 28, 35)
    q_ttl = TTL_REMOTE - 1
    sent4 = bytes(IP(src=h6_4, dst=h4, ttl=q_ttl, id=0, flags="DF", tos=0)
                  / UDP(sport=dport, dport=sport) / Raw(pay))
    sent6 = bytes(IPv6(src=h6, dst=h4_6, hlim=q_ttl, tc=0, fl=0)
                  / UDP(sport=dport, dport=sport) / Raw(pay))
    pin = (eth(True) / IP(src=ROUTER, dst=h6_4, ttl=TTL_INSIDE, id=0xD005, flags=0)
           / ICMP(type=3, code=4, nexthopmtu=1261) / Raw(sent4[:28]))
    pairs.append((pin, eth(True) / IPv6(src=v6_addr(ROUTER), dst=h6, hlim=TTL_INSIDE - 1,
                                        tc=0, fl=0)
                  / ICMPv6PacketTooBig(mtu=1281) / Raw(sent6[:48])))

    # 6. A datagram the IPv6 host fragmented (1448, 1448 and 112 data bytes, id
    # 0x0bad1dea): each fragment becomes an IPv4 fragment (id 0x1dea, DF clear, MF from
    # M); the two of 1468 bytes exceed the 1400-byte IPv4 next hop and are cut again
    # (RFC 791: pieces of 1376 data bytes, offsets from the fragment's own, MF kept on all
    # but the datagram's last piece).
    pay = filler(3000, 36)
    data6 = transport6(h6, h4_6, UDP(sport=dport, dport=sport) / Raw(pay))
    data4 = transport4(h6_4, h4, UDP(sport=dport, dport=sport) / Raw(pay))
    cuts6 = [(0, 1448), (1448, 2896), (2896, len(data6))]
    frags6 = v6_fragments(False, h6, h4_6, TTL_REMOTE, 0, 0x0BAD1DEA, 17, data6, cuts6)
    sent = []
    for f6, (a, b) in zip(frags6, cuts6):
        frags4 = v4_fragments(False, h6_4, h4, TTL_REMOTE - 1, 0, 0x1DEA, 17, data4,
                              pieces(a, b, MTU_V4_LINK - 20))
        assert all(len(l3(f)) <= MTU_V4_LINK for f in frags4)
        sent.extend(frags4)
        pairs.append((f6, frags4))
    # What the IPv4 host gets, reassembled by scapy, is the datagram the IPv6 host sent.
    whole = defragment([IP(l3(f)) for f in sent])
    assert len(whole) == 1 and bytes(whole[0][IP].payload) == data4, "reassembly"
    assert whole[0][UDP].load == pay
    return pairs


def scenario_nat64_mtu():
    """NAT64 (nat64_mtu.toml), RFC 7915's two MTUs across the stateful translator (RFC
    6146 §3.5 translates with RFC 7915): DF held to the 1500-byte IPv6 link on the
    established-flow path, no DF to lowest-ipv6-mtu 1280, Fragmentation Needed 1261
    becoming Packet Too Big 1281, and the IPv6 host's fragments cut in IPv4 for the
    1400-byte outside link, from the pool address and port."""
    h6, srv6 = V6_HOST, v6_addr(SERVER)
    sport, dport = 41000, 7100
    pairs = []

    def in4(ip_id, total, flags="DF", seed=0):
        return udp4(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, ip_id,
                    filler(total - 28, seed), flags)

    def as6(pin):
        return udp6(False, srv6, h6, dport, sport, TTL_REMOTE - 1, bytes(pin[Raw].load))

    # 1. Opens the session [2001:db8:1::10]:41000 <-> 203.0.113.1:41000 (port kept); DF
    # set (1300 bytes as IPv4, over 1260), so the identification is free (RFC 6864).
    pay = filler(1300 - 28, 41)
    pairs.append((udp6(True, h6, srv6, sport, dport, TTL_INSIDE, pay),
                  udp4(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1,
                       XLAT_ATOMIC_ID, pay)))

    # 2. DF, 1328 bytes: 1348 as IPv6 fits the 1500-byte IPv6 next hop (§4.1): whole.
    pin = in4(0xE002, 1328, seed=42)
    pairs.append((pin, as6(pin)))

    # 3. No DF, 1328 bytes: cut for lowest-ipv6-mtu, 1232 data bytes a piece.
    pin = in4(0xE003, 1328, flags=0, seed=43)
    data = transport6(srv6, h6, UDP(sport=dport, dport=sport) / Raw(pin[Raw].load))
    pairs.append((pin, v6_fragments(False, srv6, h6, TTL_REMOTE - 1, 0, 0xE003, 17, data,
                                    pieces(0, len(data), MTU_LOWEST_V6 - 48))))

    # 4. An IPv4 router answers a 1400-byte DF packet of the session with Fragmentation
    # Needed, MTU 1261 (IP header and UDP header quoted): Packet Too Big with
    # min(1261 + 20, 1500, 1400 + 20) = 1281 (§4.2) to the IPv6 host, quoting what it sent.
    pay = filler(1400 - 28, 44)
    q_ttl = TTL_INSIDE - 3
    sent4 = bytes(IP(src=PUBLIC, dst=SERVER, ttl=q_ttl, id=0, flags="DF", tos=0)
                  / UDP(sport=sport, dport=dport) / Raw(pay))
    sent6 = bytes(IPv6(src=h6, dst=srv6, hlim=q_ttl, tc=0, fl=0)
                  / UDP(sport=sport, dport=dport) / Raw(pay))
    pin = (eth(False) / IP(src=ROUTER, dst=PUBLIC, ttl=TTL_REMOTE, id=0xE004, flags=0)
           / ICMP(type=3, code=4, nexthopmtu=1261) / Raw(sent4[:28]))
    pairs.append((pin, eth(False) / IPv6(src=v6_addr(ROUTER), dst=h6, hlim=TTL_REMOTE - 1,
                                         tc=0, fl=0)
                  / ICMPv6PacketTooBig(mtu=1281) / Raw(sent6[:48])))

    # 5. The IPv6 host's own fragments (1448, 1448, 112 data bytes, id 0x0bad1dea): IPv4
    # fragments from the pool address (id 0x1dea, DF clear, §5.1.1); those over the
    # 1400-byte outside link are cut again (RFC 791), offsets from their own, MF kept.
    pay = filler(3000, 45)
    data6 = transport6(h6, srv6, UDP(sport=sport, dport=dport) / Raw(pay))
    data4 = transport4(PUBLIC, SERVER, UDP(sport=sport, dport=dport) / Raw(pay))
    cuts6 = [(0, 1448), (1448, 2896), (2896, len(data6))]
    frags6 = v6_fragments(True, h6, srv6, TTL_INSIDE, 0, 0x0BAD1DEA, 17, data6, cuts6)
    sent = []
    for f6, (a, b) in zip(frags6, cuts6):
        frags4 = v4_fragments(True, PUBLIC, SERVER, TTL_INSIDE - 1, 0, 0x1DEA, 17, data4,
                              pieces(a, b, MTU_V4_LINK - 20))
        sent.extend(frags4)
        pairs.append((f6, frags4))
    whole = defragment([IP(l3(f)) for f in sent])
    assert len(whole) == 1 and bytes(whole[0][IP].payload) == data4, "reassembly"
    return pairs


def sctp_pkt(outbound, src, dst, sport, dport, ttl, ip_id, tag, chunk):
    """An Ethernet/IPv4/SCTP frame; scapy computes the CRC32c (RFC 9260 Appendix A)."""
    return eth(outbound) / ip(src, dst, ttl, ip_id) / SCTP(sport=sport, dport=dport, tag=tag) / chunk


def scenario_other_protocols():
    """SCTP with its ports, ESP and GRE by address only, SCTP in IP fragments refused
    (nat44.toml, which forwards SCTP 203.0.113.1:3868 to 10.0.0.20:13868).

    1-2. An SCTP INIT from 10.0.0.2:5000 leaves from 203.0.113.1:5000 (port kept, so
         the CRC32c too); the INIT ACK comes back to 10.0.0.2:5000.
    3-4. An INIT to the forwarded 203.0.113.1:3868 reaches 10.0.0.20:13868 and its INIT
         ACK leaves from 3868: the ports change, and scapy's CRC32c of each expected
         packet is what the NAT must write.
    5-8. ESP and GRE out and back by address only, their bytes untouched.
    9.   The first fragment of an SCTP packet cut by IP: refused (`fragment`); its
         second fragment, whose first never passes, is held, then lost."""
    srv_in = "10.0.0.20"
    init = SCTPChunkInit(init_tag=0x1234ABCD, a_rwnd=106496, n_out_streams=10,
                         n_in_streams=10, init_tsn=0x01020304)
    ack = SCTPChunkInitAck(init_tag=0x5678EF01, a_rwnd=106496, n_out_streams=10,
                           n_in_streams=10, init_tsn=0x0A0B0C0D)
    pairs = [
        (sctp_pkt(True, HOST_A, SERVER, 5000, 2905, TTL_INSIDE, 0x7001, 0, init),
         sctp_pkt(True, PUBLIC, SERVER, 5000, 2905, TTL_INSIDE - 1, 0x7001, 0, init)),
        (sctp_pkt(False, SERVER, PUBLIC, 2905, 5000, TTL_REMOTE, 0x7002, 0x1234ABCD, ack),
         sctp_pkt(False, SERVER, HOST_A, 2905, 5000, TTL_REMOTE - 1, 0x7002, 0x1234ABCD, ack)),
        (sctp_pkt(False, SERVER, PUBLIC, 40000, 3868, TTL_REMOTE, 0x7003, 0, init),
         sctp_pkt(False, SERVER, srv_in, 40000, 13868, TTL_REMOTE - 1, 0x7003, 0, init)),
        (sctp_pkt(True, srv_in, SERVER, 13868, 40000, TTL_INSIDE, 0x7004, 0x1234ABCD, ack),
         sctp_pkt(True, PUBLIC, SERVER, 3868, 40000, TTL_INSIDE - 1, 0x7004, 0x1234ABCD, ack)),
    ]
    esp = bytes.fromhex("00001000" "00000001") + filler(48, 61)
    gre = bytes.fromhex("00000800") + filler(40, 62)
    for proto, body, ip_id in ((50, esp, 0x7010), (47, gre, 0x7020)):
        pairs.append((eth(True) / ip(HOST_A, SERVER, TTL_INSIDE, ip_id, proto=proto) / Raw(body),
                      eth(True) / ip(PUBLIC, SERVER, TTL_INSIDE - 1, ip_id, proto=proto) / Raw(body)))
        pairs.append((eth(False) / ip(SERVER, PUBLIC, TTL_REMOTE, ip_id + 1, proto=proto) / Raw(body),
                      eth(False) / ip(SERVER, HOST_A, TTL_REMOTE - 1, ip_id + 1, proto=proto) / Raw(body)))
    data = transport4(HOST_A, SERVER, SCTP(sport=5001, dport=2905, tag=7) / Raw(filler(300, 63)))
    for f in v4_fragments(True, HOST_A, SERVER, TTL_INSIDE, 0, 0x7030, 132, data, [(0, 160), (160, len(data))]):
        pairs.append((f, None))
    return pairs


def scenario_pptp():
    """PPTP through NAT44 (RFC 2637), its messages built by scapy's PPTP layers: two
    inside clients that chose the same call id (1) reach one server under public call
    ids 256 and 257, and each call's enhanced GRE finds its own client.

    1-2.  A's control connection (10.0.0.2:40001 -> 198.51.100.2:1723): SYN out, SYN ACK in.
    3-4.  B's (10.0.0.3:40002), likewise.
    5-6.  Outgoing-Call-Requests of call id 1 from A and B leave as call ids 256 and 257,
          their TCP checksums as scapy computes them for the rewritten message.
    7-8.  The server's Outgoing-Call-Replies (its ids 500 and 501, peer ids 256 and 257)
          reach A and B with peer id 1.
    9-10. A's and B's GRE (the server's ids 500 and 501) leave from 203.0.113.1, untouched.
    11-12. The server's GRE for public ids 257 and 256 reach B and A with call id 1."""
    from scapy.layers.pptp import PPTPOutgoingCallReply, PPTPOutgoingCallRequest
    from scapy.layers.ppp import GRE_PPTP, PPP

    flows = ((HOST_A, 40001, 256, 500), (HOST_B, 40002, 257, 501))
    pairs = []
    ip_id = 0x7100
    for host, port, _, _ in flows:
        pairs.append((tcp_pkt(True, host, SERVER, port, 1723, TTL_INSIDE, ip_id, "S", 1000, 0),
                      tcp_pkt(True, PUBLIC, SERVER, port, 1723, TTL_INSIDE - 1, ip_id, "S", 1000, 0)))
        pairs.append((tcp_pkt(False, SERVER, PUBLIC, 1723, port, TTL_REMOTE, ip_id + 1, "SA", 5000, 1001),
                      tcp_pkt(False, SERVER, host, 1723, port, TTL_REMOTE - 1, ip_id + 1, "SA", 5000, 1001)))
        ip_id += 2

    def control(outbound, src, dst, sport, dport, ttl, ident, msg, seq, ack):
        return (eth(outbound) / ip(src, dst, ttl, ident)
                / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags="PA", window=502) / msg)

    for host, port, public_id, _ in flows:
        pairs.append((control(True, host, SERVER, port, 1723, TTL_INSIDE, ip_id,
                              PPTPOutgoingCallRequest(call_id=1, call_serial_number=7), 1001, 5001),
                      control(True, PUBLIC, SERVER, port, 1723, TTL_INSIDE - 1, ip_id,
                              PPTPOutgoingCallRequest(call_id=public_id, call_serial_number=7), 1001, 5001)))
        ip_id += 1
    for host, port, public_id, pac_id in flows:
        pairs.append((control(False, SERVER, PUBLIC, 1723, port, TTL_REMOTE, ip_id,
                              PPTPOutgoingCallReply(call_id=pac_id, peer_call_id=public_id), 5001, 1169),
                      control(False, SERVER, host, 1723, port, TTL_REMOTE - 1, ip_id,
                              PPTPOutgoingCallReply(call_id=pac_id, peer_call_id=1), 5001, 1169)))
        ip_id += 1
    lcp = PPP(proto=0xC021) / Raw(filler(14, 64))
    for host, _, _, pac_id in flows:
        pairs.append((eth(True) / ip(host, SERVER, TTL_INSIDE, ip_id) / GRE_PPTP(call_id=pac_id) / lcp,
                      eth(True) / ip(PUBLIC, SERVER, TTL_INSIDE - 1, ip_id) / GRE_PPTP(call_id=pac_id) / lcp))
        ip_id += 1
    for host, _, public_id, _ in reversed(flows):
        pairs.append((eth(False) / ip(SERVER, PUBLIC, TTL_REMOTE, ip_id) / GRE_PPTP(call_id=public_id) / lcp,
                      eth(False) / ip(SERVER, host, TTL_REMOTE - 1, ip_id) / GRE_PPTP(call_id=1) / lcp))
        ip_id += 1
    return pairs


SCENARIOS = [
    ("tcp", scenario_tcp),
    ("udp", scenario_udp),
    ("icmp_echo", scenario_icmp_echo),
    ("icmp_error", scenario_icmp_error),
    ("hairpin", scenario_hairpin),
    ("fragments", scenario_fragments),
    ("fragments_reordered", scenario_fragments_reordered),
    ("other_protocols", scenario_other_protocols),
    ("pptp", scenario_pptp),
    ("drops", scenario_drops),
    ("nat44_gateway", scenario_nat44_gateway),
    ("siit_gateway", scenario_siit_gateway),
    ("nat64_gateway", scenario_nat64_gateway),
    ("siit_errors", scenario_siit_errors),
    ("siit_hairpin_simple", scenario_siit_hairpin_simple),
    ("siit_mtu", scenario_siit_mtu),
    ("nat64_mtu", scenario_nat64_mtu),
]


# --- Output -----------------------------------------------------------------------


def pcap_bytes(records):
    """A little-endian microsecond classic pcap file of (ts_ns, frame bytes)."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)]
    for ts_ns, frame in records:
        sec, frac_ns = divmod(ts_ns, 1_000_000_000)
        out.append(struct.pack("<IIII", sec, frac_ns // 1000, len(frame), len(frame)))
        out.append(frame)
    return b"".join(out)


def generate(out_dir):
    """Write every golden file into out_dir; return the file names written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, build in SCENARIOS:
        ins, exps = [], []
        for i, (pin, pexp) in enumerate(build()):
            ts = TS_START_NS + i * TS_STEP_NS
            ins.append((ts, bytes(pin)))
            if pexp is None:
                continue
            for p in pexp if isinstance(pexp, list) else [pexp]:
                exps.append((ts, bytes(p)))
        for suffix, recs in (("in", ins), ("expected", exps)):
            fname = f"{name}.{suffix}.pcap"
            with open(os.path.join(out_dir, fname), "wb") as f:
                f.write(pcap_bytes(recs))
            written.append(fname)
    for fname, text in CONFIGS.items():
        with open(os.path.join(out_dir, fname), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        written.append(fname)
    return written


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(repo, "tests", "golden"),
                        help="directory of the golden files (default: tests/golden)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temp dir and compare with --out byte-for-byte")
    args = parser.parse_args()

    if not args.check:
        for fname in generate(args.out):
            print(os.path.join(args.out, fname))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        names = generate(tmp)
        stale = []
        for fname in names:
            committed = os.path.join(args.out, fname)
            if not os.path.exists(committed):
                stale.append(f"{committed}: missing")
            elif not filecmp.cmp(committed, os.path.join(tmp, fname), shallow=False):
                stale.append(f"{committed}: differs from a fresh generation")
    if stale:
        for line in stale:
            print(line, file=sys.stderr)
        print("golden files are stale: run `python3 scripts/gen_golden.py` and review the diff",
              file=sys.stderr)
        return 1
    print(f"{len(names)} golden files match the generator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
