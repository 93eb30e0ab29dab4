#!/usr/bin/env python3
"""Generate quicknat's golden NAT44 pcaps (input and expected output).

For each scenario this writes tests/golden/<name>.in.pcap (what arrives at the
NAT) and tests/golden/<name>.expected.pcap (what the NAT must transmit, in
input order, with the input timestamps; dropped packets are absent), plus the
engine configuration tests/golden/nat44.toml they assume.

Expected packets are independent constructions: every packet is built by
scapy from its header fields, once with the addressing seen on the input side
and once with the translated addressing and TTL-1, and scapy computes all the
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

from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
from scapy.layers.l2 import Ether
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
"""

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


# --- Scenarios ------------------------------------------------------------------
#
# Each scenario returns a list of (input frame, expected frame or None).
# None means the NAT must drop the input frame.


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


def scenario_fragments():
    """A UDP datagram out in three fragments and the reply back in three, the reply's
    last fragment sent before its middle one (RFC 4787 REQ-14). scapy computes the UDP
    checksum over each whole datagram, then cuts it: the expected first fragments carry
    the checksum of the whole translated datagram."""
    sport, dport = 7000, 7001
    out_payload = bytes(i & 0xFF for i in range(3000))
    in_payload = bytes((i * 7 + 1) & 0xFF for i in range(2990))

    def frags(outbound, src, dst, sp, dp, ttl, ip_id, payload):
        dgram = ip(src, dst, ttl, ip_id, flags=0) / UDP(sport=sp, dport=dp) / Raw(payload)
        return [eth(outbound) / f for f in fragment(dgram, fragsize=1480)]

    out_in = frags(True, HOST_A, SERVER, sport, dport, TTL_INSIDE, 0x7A01, out_payload)
    out_exp = frags(True, PUBLIC, SERVER, sport, dport, TTL_INSIDE - 1, 0x7A01, out_payload)
    back_in = frags(False, SERVER, PUBLIC, dport, sport, TTL_REMOTE, 0x7B01, in_payload)
    back_exp = frags(False, SERVER, HOST_A, dport, sport, TTL_REMOTE - 1, 0x7B01, in_payload)
    order = [0, 2, 1]
    return (list(zip(out_in, out_exp))
            + [(back_in[i], back_exp[i]) for i in order])


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
    # fragment never came: dropped as fragment_out_of_order.
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


SCENARIOS = [
    ("tcp", scenario_tcp),
    ("udp", scenario_udp),
    ("icmp_echo", scenario_icmp_echo),
    ("icmp_error", scenario_icmp_error),
    ("hairpin", scenario_hairpin),
    ("fragments", scenario_fragments),
    ("drops", scenario_drops),
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
            if pexp is not None:
                exps.append((ts, bytes(pexp)))
        for suffix, recs in (("in", ins), ("expected", exps)):
            fname = f"{name}.{suffix}.pcap"
            with open(os.path.join(out_dir, fname), "wb") as f:
                f.write(pcap_bytes(recs))
            written.append(fname)
    with open(os.path.join(out_dir, "nat44.toml"), "w", encoding="utf-8", newline="\n") as f:
        f.write(CONFIG)
    written.append("nat44.toml")
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
