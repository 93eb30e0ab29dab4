#!/usr/bin/env python3
"""Generate examples/traffic.pcap: a small capture for the README's main command.

Inside hosts 10.0.0.1-10.0.0.8 (the network examples/nat44.toml translates) each
send a DNS query over UDP, open a TCP connection and ping an outside server, and the
server answers each (DNS answer, SYN-ACK, echo reply) to the public address and port
the NAT gave the host: a real round trip, the replies translated back to the inside.
An outside scanner probes the public pool (unsolicited, so the NAT drops it); one ARP
frame (not IP: left to the host) and one packet from an address no rule covers
complete the picture. Deterministic: re-running gives the same bytes.

Where the replies go: the NAT pairs each inside host with one pool address by an
unkeyed hash (conntrack::pool::PortPool::paired_addr, stable across runs and the same
live and in a replay; `paired` below is the same function) and keeps the source port
and ICMP identifier (port_preservation = true, the example's default). Were either
to change, the replies would be dropped and the tests on the demo
(crates/quicknat/tests/demo.rs) fail.

Usage: python3 scripts/gen_sample.py [OUT.pcap]
"""

import os
import struct
import sys

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

TS0 = 1_700_000_000 * 1_000_000
IN_MAC, OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"


POOL = (203 << 24) | (0 << 16) | (113 << 8) | 0  # 203.0.113.0/28, examples/nat44.toml
POOL_SIZE = 16


def paired(host):
    """The pool address the NAT pairs an inside host with (conntrack's paired_index)."""
    a, b, c, d = (int(x) for x in host.split("."))
    h = (((a << 24) | (b << 16) | (c << 8) | d) * 0x9E3779B97F4A7C15) % (1 << 64)
    n = POOL + (((h >> 32) * POOL_SIZE) >> 32)
    return ".".join(str((n >> s) & 0xFF) for s in (24, 16, 8, 0))


def dns_query():
    return b"\x12\x34\x01\x00\x00\x01" + bytes(6) + b"\x07example\x03org\x00\x00\x01\x00\x01"


def dns_answer():
    # The query's header with QR and RA set and one answer: example.org A 192.0.2.80.
    return (b"\x12\x34\x81\x80\x00\x01\x00\x01" + bytes(4) + b"\x07example\x03org\x00\x00\x01\x00\x01"
            + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04" + bytes([192, 0, 2, 80]))


def frames():
    out = Ether(src=IN_MAC, dst=OUT_MAC)
    inb = Ether(src=OUT_MAC, dst=IN_MAC)
    server = "198.51.100.2"
    for h in range(1, 9):
        host = f"10.0.0.{h}"
        public = paired(host)
        yield out / IP(src=host, dst=server, id=h) / UDP(sport=40000 + h, dport=53) / Raw(dns_query())
        yield out / IP(src=host, dst=server, id=100 + h, flags="DF") / TCP(sport=50000 + h, dport=443, flags="S", seq=1000 * h, options=[("MSS", 1460)])
        yield out / IP(src=host, dst=server, id=200 + h) / ICMP(type=8, id=0x4000 + h, seq=1) / Raw(bytes(range(56)))
        # The server's answers, to the host's public address and preserved port.
        yield inb / IP(src=server, dst=public, id=300 + h) / UDP(sport=53, dport=40000 + h) / Raw(dns_answer())
        yield inb / IP(src=server, dst=public, id=400 + h, flags="DF") / TCP(sport=443, dport=50000 + h, flags="SA", seq=7000 * h, ack=1000 * h + 1, options=[("MSS", 1460)])
        yield inb / IP(src=server, dst=public, id=500 + h) / ICMP(type=0, id=0x4000 + h, seq=1) / Raw(bytes(range(56)))
    for port in (22, 23, 3389):
        yield inb / IP(src="192.0.2.66", dst="203.0.113.3") / TCP(sport=60000, dport=port, flags="S")
    yield out / ARP(op=1, psrc="10.0.0.1", pdst="10.0.0.254", hwsrc=IN_MAC)
    yield out / IP(src="172.16.0.9", dst=server) / UDP(sport=1234, dport=53)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "traffic.pcap")
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for i, fr in enumerate(frames()):
            b = bytes(fr)
            ts = TS0 + i * 1000
            f.write(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(b), len(b)))
            f.write(b)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
