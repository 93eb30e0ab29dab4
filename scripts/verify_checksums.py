#!/usr/bin/env python3
"""Independently verify the checksums of every IPv4 packet in pcap files.

An oracle for quicknat's output that shares no code with it: packets are read
and dissected with scapy, and every checksum is recomputed here with a
hand-written RFC 1071 sum over the packet's own bytes:

  * the IPv4 header checksum;
  * the TCP, UDP (a UDP checksum of 0 means "none" and is valid) or ICMP
    checksum, unless the packet is a fragment;
  * for ICMP errors (types 3, 4, 5, 11, 12): the quoted IPv4 header checksum,
    and, when the quote holds the whole quoted datagram, its UDP/TCP checksum.

Prints one line per bad packet and a final line `N passed, M failed`.
Exit status: 0 if all passed, 1 if any failed, 2 on a usage or I/O error.

Usage:
    python3 scripts/verify_checksums.py FILE.pcap [FILE.pcap ...]
"""

import argparse
import struct
import sys

from scapy.error import Scapy_Exception
from scapy.layers.inet import IP
from scapy.utils import PcapReader

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
ICMP_ERROR_TYPES = (3, 4, 5, 11, 12)


def ones_sum(data):
    """RFC 1071 one's-complement sum of data (odd length padded with a zero byte)."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def checksum(data):
    """The Internet checksum of data: the complement of its one's-complement sum."""
    return ~ones_sum(data) & 0xFFFF


def zero_at(data, offset):
    """data with the 16-bit field at offset set to zero."""
    return data[:offset] + b"\x00\x00" + data[offset + 2:]


def check_ipv4_header(ip, what, problems):
    """Check the header checksum of the IPv4 packet starting at ip.

    Returns the header length, or None if the header is malformed (reported).
    """
    if len(ip) < 20 or ip[0] >> 4 != 4:
        problems.append(f"{what}not a complete IPv4 header ({len(ip)} bytes)")
        return None
    ihl = (ip[0] & 0x0F) * 4
    if ihl < 20 or len(ip) < ihl:
        problems.append(f"{what}bad header length {ihl} ({len(ip)} bytes present)")
        return None
    got = struct.unpack_from("!H", ip, 10)[0]
    want = checksum(zero_at(ip[:ihl], 10))
    if got != want:
        problems.append(f"{what}IPv4 header checksum {got:#06x}, should be {want:#06x}")
    return ihl


def check_l4(proto, src, dst, seg, what, problems):
    """Check a complete TCP, UDP or ICMP message `seg` carried between src and dst."""
    if proto in (PROTO_TCP, PROTO_UDP):
        name, off, minlen = ("TCP", 16, 20) if proto == PROTO_TCP else ("UDP", 6, 8)
        if len(seg) < minlen:
            problems.append(f"{what}{name} header truncated ({len(seg)} bytes)")
            return
        got = struct.unpack_from("!H", seg, off)[0]
        if proto == PROTO_UDP and got == 0:
            return  # RFC 768: no checksum was computed.
        pseudo = src + dst + struct.pack("!BBH", 0, proto, len(seg))
        want = checksum(pseudo + zero_at(seg, off))
        if proto == PROTO_UDP and want == 0:
            want = 0xFFFF  # RFC 768: a computed zero is sent as all ones.
        if got != want:
            problems.append(f"{what}{name} checksum {got:#06x}, should be {want:#06x}")
    elif proto == PROTO_ICMP:
        if len(seg) < 8:
            problems.append(f"{what}ICMP header truncated ({len(seg)} bytes)")
            return
        got = struct.unpack_from("!H", seg, 2)[0]
        want = checksum(zero_at(seg, 2))
        if got != want:
            problems.append(f"{what}ICMP checksum {got:#06x}, should be {want:#06x}")


def check_ipv4(ip, what, problems, quoted=False):
    """Check an IPv4 packet: header, then its transport checksum where verifiable.

    For a quoted packet (inside an ICMP error) the transport checksum is only
    checked if the quote holds the whole datagram; a shorter quote is normal.
    Problems are appended to `problems`, each message prefixed with `what`
    ("" for the packet itself, "quoted " for an ICMP error's quote).
    """
    ihl = check_ipv4_header(ip, what, problems)
    if ihl is None:
        return
    total = struct.unpack_from("!H", ip, 2)[0]
    if total < ihl:
        problems.append(f"{what}IPv4 total length {total} below header length {ihl}")
        return
    if total > len(ip):
        if not quoted:
            problems.append(f"{what}IPv4 total length {total} but only {len(ip)} bytes present")
        return
    flags_frag = struct.unpack_from("!H", ip, 6)[0]
    if flags_frag & 0x3FFF:
        return  # A fragment: the transport checksum covers bytes not in this packet.
    proto = ip[9]
    src, dst = ip[12:16], ip[16:20]
    seg = ip[ihl:total]
    check_l4(proto, src, dst, seg, what, problems)
    if proto == PROTO_ICMP and not quoted and len(seg) >= 8 and seg[0] in ICMP_ERROR_TYPES:
        quote = seg[8:]
        if len(quote) >= 20:
            check_ipv4(quote, "quoted ", problems, quoted=True)


def ip_offset(pkt):
    """Byte offset of the IPv4 header in the frame, found by walking scapy's layers."""
    off = 0
    layer = pkt
    while not isinstance(layer, IP):
        off += len(bytes(layer)) - len(bytes(layer.payload))
        layer = layer.payload
    return off


class TruncatedCapture(Exception):
    """The capture file ends inside a record (scapy only warns about this)."""


def check_structure(path):
    """Raise TruncatedCapture if a classic pcap file ends inside a record.

    Other formats (pcapng) are left to scapy.
    """
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        return
    off, index = 24, 1
    if len(data) < off:
        raise TruncatedCapture(f"global header truncated ({len(data)} of 24 bytes)")
    while off < len(data):
        if off + 16 > len(data):
            raise TruncatedCapture(f"record {index} header at byte offset {off} is truncated")
        incl = struct.unpack_from(order + "I", data, off + 8)[0]
        if off + 16 + incl > len(data):
            raise TruncatedCapture(f"record {index} at byte offset {off} is truncated")
        off += 16 + incl
        index += 1


def verify_file(path):
    """Verify one pcap; return (passed, failed)."""
    check_structure(path)
    passed = failed = 0
    with PcapReader(path) as reader:
        for index, pkt in enumerate(reader, start=1):
            if IP not in pkt:
                passed += 1  # Nothing this tool checks.
                continue
            frame = bytes(getattr(pkt, "original", None) or bytes(pkt))
            problems = []
            check_ipv4(frame[ip_offset(pkt):], "", problems)
            if problems:
                failed += 1
                print(f"{path}: packet {index}: " + "; ".join(problems))
            else:
                passed += 1
    return passed, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pcaps", nargs="+", metavar="FILE.pcap", help="classic pcap files")
    args = parser.parse_args()  # exits with status 2 on a usage error
    passed = failed = 0
    for path in args.pcaps:
        try:
            p, f = verify_file(path)
        except (OSError, Scapy_Exception, TruncatedCapture) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            return 2
        passed += p
        failed += f
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
