#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from what the
repository already holds: the golden captures' packets, the example and golden
configuration files, a few rtnetlink messages like the kernel's, and hand-made step lists
for the sequence targets. Run again after adding a golden capture; the fuzzers add their
own finds in the directories they are given (scripts/fuzz.sh keeps those outside the
repository)."""

import glob
import hashlib
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def records(path):
    """The IP packets of a little-endian classic pcap (Ethernet or raw IP)."""
    d = open(path, "rb").read()
    link = struct.unpack("<I", d[20:24])[0]
    off, out = 24, []
    while off + 16 <= len(d):
        incl = struct.unpack("<I", d[off + 8:off + 12])[0]
        frame = d[off + 16:off + 16 + incl]
        off += 16 + incl
        if link == 1:
            et = struct.unpack(">H", frame[12:14])[0]
            ip = frame[18:] if et == 0x8100 else frame[14:]
        else:
            ip = frame
        out.append((frame, ip))
    return out


def golden(name):
    return records(os.path.join(ROOT, "tests", "golden", name + ".in.pcap"))


def main():
    # wire: whole frames and bare IP packets.
    for f in sorted(glob.glob(os.path.join(ROOT, "tests", "golden", "*.in.pcap"))):
        for frame, ip in records(f)[:4]:
            put("wire", frame)
            put("wire", ip)
    # Translation: control byte (setup, checksums filled, direction), then the packet.
    per_mode = {
        "translate_nat44": ["tcp", "udp", "icmp_echo", "icmp_error", "fragments", "hairpin", "drops", "nat44_gateway"],
        "translate_nat64": ["nat64_gateway", "nat64_mtu"],
        "translate_siit": ["siit_errors", "siit_gateway", "siit_hairpin_simple", "siit_mtu"],
        "translate_clat": ["siit_gateway", "siit_errors"],
    }
    for target, names in per_mode.items():
        for setup, name in enumerate(names):
            for _, ip in golden(name)[:6]:
                for direction in (0x00, 0x20):
                    put(target, bytes([(setup % 8) | direction]) + ip)
    # ILA: packets to the SIR prefix 2001:db8:5::/64, identifiers 1 and 2, and back.
    def v6(src, dst, nh, l4):
        return struct.pack(">IHBB", 0x60000000, len(l4), nh, 64) + src + dst + l4
    sir = bytes.fromhex("20010db8000500000000000000000001")
    sir2 = bytes.fromhex("20010db8000500000000000000000002")
    loc = bytes.fromhex("20010db8aaaa00010000000000000001")
    host = bytes.fromhex("20010db8000100000000000000000009")
    udp = struct.pack(">HHHH", 4000, 53, 12, 0) + b"ping"
    tcp = struct.pack(">HHIIBBHHH", 4000, 80, 1, 0, 0x50, 0x02, 0xffff, 0, 0)
    echo = bytes([128, 0, 0, 0, 0, 1, 0, 1]) + b"abcd"
    for setup in range(3):
        for l4, nh in ((udp, 17), (tcp, 6), (echo, 58)):
            put("translate_ila", bytes([setup]) + v6(host, sir, nh, l4))
            put("translate_ila", bytes([setup]) + v6(host, sir2, nh, l4))
            put("translate_ila", bytes([setup | 0x20]) + v6(host, loc, nh, l4))
    # Sequences: (dt, op, a, b, c, d) steps. op: 0 built outbound, 1 built inbound,
    # 2 reply to the last forwarded, 3 raw; 0x08 reaper first, 0x10 poll held SYNs.
    seqs = [
        # a TCP handshake, data, FIN both ways, then time passes
        [(1, 0, 0, 0, 0x00, 0), (1, 2), (1, 0, 0, 0, 0x40, 5), (1, 2), (1, 0, 0, 0, 0x60, 0), (1, 2), (200, 0x0a)],
        # UDP flows from several hosts, replies, expiry
        [(1, 0, 1 | 4 * h, h, 0, 8) for h in range(8)] + [(1, 2), (255, 0x0a), (1, 0, 1, 0, 0, 0)],
        # ICMP echo and its reply
        [(1, 0, 2, 7, 0, 4), (1, 2), (100, 0x0a)],
        # unsolicited inbound SYN held, then answered; a forward's flow
        [(1, 1, 0, 0x40, 0, 0), (30, 0x12), (1, 1, 0, 0x80, 0, 0)],
        # fragments: first then later
        [(1, 0, 3, 0, 0, 0), (1, 0, 3, 0, 0, 0x20), (1, 2)],
        # ports of the pool exhausted: 17 hosts x flows
        [(0, 0, 1 | 4 * (i % 8), i, 0, 0) for i in range(40)] + [(255, 0x0a), (255, 0x0a)],
    ]
    for target in ("sequence_nat44", "sequence_nat64"):
        for s in seqs:
            put(target, b"".join(bytes(step) for step in s))
    # Configuration files.
    for f in sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml")) + glob.glob(os.path.join(ROOT, "tests", "golden", "*.toml"))):
        put("config", open(f, "rb").read())
    # pcap: the small captures whole.
    for f in ["udp", "tcp", "icmp_echo", "hairpin", "drops"]:
        put("pcap", open(os.path.join(ROOT, "tests", "golden", f + ".in.pcap"), "rb").read())
    # pcapng (io::pcapng): the same captures as pcapng in both byte orders, with what
    # Wireshark's tools write besides packets (options, statistics, a second section).
    def pcapng(pcap, big):
        e = ">" if big else "<"
        def block(ty, body):
            body += b"\0" * (-len(body) % 4)
            return struct.pack(e + "II", ty, 12 + len(body)) + body + struct.pack(e + "I", 12 + len(body))
        def opt(code, value):
            return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)
        shb = block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1) + opt(4, b"seed") + opt(0, b""))
        link = struct.unpack("<I", pcap[20:24])[0]
        idb = block(1, struct.pack(e + "HHI", link, 0, 0) + opt(9, bytes([9])) + opt(2, b"eth0") + opt(0, b""))
        out = shb + idb
        at, n = 24, 0
        while at + 16 <= len(pcap):
            sec, usec, incl, orig = struct.unpack("<IIII", pcap[at:at + 16])
            data = pcap[at + 16:at + 16 + incl]
            at += 16 + incl
            ts = (sec * 1_000_000 + usec) * 1000
            if n % 4 == 3:
                out += block(3, struct.pack(e + "I", orig) + data)  # simple packet block
            else:
                out += block(6, struct.pack(e + "IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, incl, orig) + data
                             + b"\0" * (-len(data) % 4) + opt(2, struct.pack(e + "I", 1)) + opt(0, b""))
            n += 1
        out += block(5, struct.pack(e + "III", 0, 0, 0) + opt(0, b""))  # interface statistics
        return out
    for f in ["udp", "tcp", "drops"]:
        pcap = open(os.path.join(ROOT, "tests", "golden", f + ".in.pcap"), "rb").read()
        put("pcap", pcapng(pcap, big=False))
        put("pcap", pcapng(pcap, big=True))
        put("pcap", pcapng(pcap, big=False) + pcapng(pcap, big=True))
    # rtnetlink messages (host byte order, little-endian here), as the kernel sends them.
    def nlmsg(ty, body, flags=0x2, seq=1):
        return struct.pack("<IHHII", 16 + len(body), ty, flags, seq, 0) + body + b"\0" * (-len(body) % 4)
    def attr(ty, payload):
        return struct.pack("<HH", 4 + len(payload), ty) + payload + b"\0" * (-len(payload) % 4)
    rtmsg4 = bytes([2, 24, 0, 0, 254, 3, 0, 1]) + b"\0\0\0\0"
    route4 = nlmsg(24, rtmsg4 + attr(1, bytes([10, 0, 0, 0])) + attr(5, bytes([10, 0, 0, 1])) + attr(4, struct.pack("<I", 2)))
    rtmsg6 = bytes([10, 64, 0, 0, 254, 3, 0, 1]) + b"\0\0\0\0"
    route6 = nlmsg(24, rtmsg6 + attr(1, bytes.fromhex("20010db8000100000000000000000000")) + attr(4, struct.pack("<I", 3)))
    ndmsg4 = struct.pack("<BxxxiHBB", 2, 2, 0x02, 0, 0)
    neigh4 = nlmsg(28, ndmsg4 + attr(1, bytes([10, 0, 0, 1])) + attr(2, bytes([2, 0, 0, 0, 0, 1])))
    ndmsg6 = struct.pack("<BxxxiHBB", 10, 2, 0x04, 0, 0)
    neigh6 = nlmsg(29, ndmsg6 + attr(1, bytes.fromhex("fe800000000000000000000000000001")) + attr(2, bytes([2, 0, 0, 0, 0, 2])))
    ifaddr = nlmsg(20, struct.pack("<BBBBI", 2, 24, 0, 0, 2) + attr(2, bytes([10, 0, 0, 1])) + attr(1, bytes([10, 0, 0, 1])))
    err = nlmsg(2, struct.pack("<i", -17) + b"\0" * 16)
    done = nlmsg(3, struct.pack("<i", 0))
    for m in (route4, route6, neigh4, neigh6, ifaddr, err, done, route4 + neigh4 + done, route6 + neigh6 + ifaddr + err):
        put("netlink", m)
    # Every message type and attribute parse_datagram reads (the `netlink` target runs every
    # parser on every message): an ECMP route (RTA_MULTIPATH, two rtnexthops with
    # gateways), a route with RTA_PREFSRC and RTA_TABLE, the deletions (events), an IPv6
    # address, a blackhole route.
    def nexthop(ifindex, gw):
        a = attr(5, gw)
        return struct.pack("<HBBi", 8 + len(a), 0, 0, ifindex) + a
    ecmp = nlmsg(24, rtmsg4 + attr(1, bytes([10, 1, 0, 0])) + attr(9, nexthop(2, bytes([192, 168, 0, 1])) + nexthop(3, bytes([192, 168, 1, 1]))))
    src_tbl = nlmsg(24, rtmsg4 + attr(1, bytes([10, 2, 0, 0])) + attr(7, bytes([10, 0, 0, 1])) + attr(15, struct.pack("<I", 254)) + attr(4, struct.pack("<I", 2)))
    blackhole6 = nlmsg(24, bytes([10, 48, 0, 0, 254, 3, 0, 6]) + b"\0\0\0\0" + attr(1, bytes.fromhex("20010db8000200000000000000000000")) + attr(4, struct.pack("<I", 1)))
    del_route = nlmsg(25, route4[16:])
    del_neigh6 = nlmsg(29, neigh6[16:])
    del_neigh4 = nlmsg(29, ndmsg4 + attr(1, bytes([10, 0, 0, 1])))
    ifaddr6 = nlmsg(20, struct.pack("<BBBBI", 10, 64, 0, 0, 2) + attr(1, bytes.fromhex("20010db8000100000000000000000001")))
    for m in (ecmp, src_tbl, blackhole6, del_route, del_neigh6, del_neigh4, ifaddr6,
              ecmp + del_route + src_tbl + blackhole6 + del_neigh4 + ifaddr6 + done):
        put("netlink", m)


if __name__ == "__main__":
    main()
