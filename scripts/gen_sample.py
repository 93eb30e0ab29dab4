#!/usr/bin/env python3
"""Generate examples/traffic.pcap: a small capture for the README's main command.

Inside hosts 10.0.0.1-10.0.0.8 (the network examples/nat44.toml translates) each
send a DNS query over UDP, open a TCP connection and ping an outside server; an
outside scanner probes the public pool (unsolicited, so the NAT drops it); one
ARP frame (not IP: left to the host) and one packet from an address no rule
covers complete the picture. Deterministic: re-running gives the same bytes.

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


def frames():
    out = Ether(src=IN_MAC, dst=OUT_MAC)
    inb = Ether(src=OUT_MAC, dst=IN_MAC)
    server = "198.51.100.2"
    for h in range(1, 9):
        host = f"10.0.0.{h}"
        yield out / IP(src=host, dst=server, id=h) / UDP(sport=40000 + h, dport=53) / Raw(b"\x12\x34\x01\x00\x00\x01" + bytes(6) + b"\x07example\x03org\x00\x00\x01\x00\x01")
        yield out / IP(src=host, dst=server, id=100 + h, flags="DF") / TCP(sport=50000 + h, dport=443, flags="S", seq=1000 * h, options=[("MSS", 1460)])
        yield out / IP(src=host, dst=server, id=200 + h) / ICMP(type=8, id=0x4000 + h, seq=1) / Raw(bytes(range(56)))
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
