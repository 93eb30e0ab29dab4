#!/usr/bin/env python3
"""Independently verify the checksums of every IPv4 and IPv6 packet in pcap files.

An oracle for quicknat's output that shares no code with it: packets are read
and dissected with scapy, and every checksum is recomputed here with a
hand-written RFC 1071 sum over the packet's own bytes:

  * the IPv4 header checksum;
  * the TCP, UDP or ICMP checksum of an IPv4 packet (a UDP checksum of 0 means
    "none" and is valid), and the TCP, UDP or ICMPv6 checksum of an IPv6 packet
    over its pseudo-header (RFC 8200 §8.1: a UDP checksum of 0 is not valid);
  * for a fragment: the checksum of the datagram its file's fragments
    reassemble to, when they hold all of it (charged to its first fragment);
  * for ICMP errors (types 3, 4, 5, 11, 12) and ICMPv6 errors (types below
    128): the quoted IPv4 header checksum, and, when the quote holds the whole
    quoted datagram, its transport checksum.

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
from scapy.layers.inet6 import IPv6
from scapy.utils import PcapReader

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ICMPV6 = 58
PROTO_IPV6_FRAG = 44
# IPv6 extension headers walked over to the transport header: hop-by-hop options,
# routing, destination options.
IPV6_SKIPPED = (0, 43, 60)
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


def pseudo_header(src, dst, proto, length):
    """The pseudo-header of RFC 768 / RFC 793 (IPv4) or RFC 8200 §8.1 (IPv6)."""
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!I3xB", length, proto)


def check_l4(proto, src, dst, seg, what, problems):
    """Check a complete TCP, UDP, ICMP or ICMPv6 message `seg` carried between src and dst
    (4-byte addresses: over IPv4, 16-byte: over IPv6)."""
    v6 = len(src) == 16
    if proto in (PROTO_TCP, PROTO_UDP):
        name, off, minlen = ("TCP", 16, 20) if proto == PROTO_TCP else ("UDP", 6, 8)
        if len(seg) < minlen:
            problems.append(f"{what}{name} header truncated ({len(seg)} bytes)")
            return
        got = struct.unpack_from("!H", seg, off)[0]
        if proto == PROTO_UDP and got == 0:
            if v6:
                problems.append(f"{what}UDP checksum 0 over IPv6 (RFC 8200 §8.1)")
            return  # RFC 768: no checksum was computed.
        want = checksum(pseudo_header(src, dst, proto, len(seg)) + zero_at(seg, off))
        if proto == PROTO_UDP and want == 0:
            want = 0xFFFF  # RFC 768: a computed zero is sent as all ones.
        if got != want:
            problems.append(f"{what}{name} checksum {got:#06x}, should be {want:#06x}")
    elif proto == PROTO_ICMPV6 and v6:
        if len(seg) < 8:
            problems.append(f"{what}ICMPv6 header truncated ({len(seg)} bytes)")
            return
        got = struct.unpack_from("!H", seg, 2)[0]
        want = checksum(pseudo_header(src, dst, proto, len(seg)) + zero_at(seg, 2))
        if got != want:
            problems.append(f"{what}ICMPv6 checksum {got:#06x}, should be {want:#06x}")
    elif proto == PROTO_ICMP:
        if len(seg) < 8:
            problems.append(f"{what}ICMP header truncated ({len(seg)} bytes)")
            return
        got = struct.unpack_from("!H", seg, 2)[0]
        want = checksum(zero_at(seg, 2))
        if got != want:
            problems.append(f"{what}ICMP checksum {got:#06x}, should be {want:#06x}")


class Fragments:
    """The fragments of one capture, gathered by datagram to check the transport
    checksum of each datagram they hold whole."""

    def __init__(self):
        self.datagrams = {}

    def add(self, key, index, offset, more, proto, data):
        """Files the `data` bytes at `offset` of the datagram `key` (family, source,
        destination, identification and, for IPv4, protocol) from packet `index`."""
        self.datagrams.setdefault(key, []).append((offset, more, proto, data, index))

    def check(self, problems_of):
        """Checks every datagram whose fragments are all there (contiguous from offset 0
        to one without more fragments); a problem goes to its first fragment's packet."""
        for key, parts in self.datagrams.items():
            parts.sort(key=lambda p: p[0])
            data, first = b"", None
            for offset, more, proto, piece, index in parts:
                if offset != len(data):
                    break
                if offset == 0:
                    first = (proto, index)
                data += piece
                if not more:
                    src, dst = key[1], key[2]
                    check_l4(first[0], src, dst, data, "reassembled datagram: ",
                             problems_of(first[1]))
                    break


def check_ipv4(ip, what, problems, quoted=False, frags=None, index=0):
    """Check an IPv4 packet: header, then its transport checksum where verifiable.

    For a quoted packet (inside an ICMP error) the transport checksum is only
    checked if the quote holds the whole datagram; a shorter quote is normal.
    Problems are appended to `problems`, each message prefixed with `what`
    ("" for the packet itself, "quoted " for an ICMP error's quote). A fragment
    goes to `frags` (packet `index`) for its datagram to be checked whole.
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
    proto = ip[9]
    src, dst = ip[12:16], ip[16:20]
    seg = ip[ihl:total]
    if flags_frag & 0x3FFF:
        # A fragment: the transport checksum covers bytes not in this packet.
        if frags is not None:
            ident = struct.unpack_from("!H", ip, 4)[0]
            frags.add((4, src, dst, ident, proto), index, (flags_frag & 0x1FFF) * 8,
                      bool(flags_frag & 0x2000), proto, seg)
        return
    check_l4(proto, src, dst, seg, what, problems)
    if proto == PROTO_ICMP and not quoted and len(seg) >= 8 and seg[0] in ICMP_ERROR_TYPES:
        quote = seg[8:]
        if len(quote) >= 20:
            check_ipv4(quote, "quoted ", problems, quoted=True)


def check_ipv6(ip, what, problems, quoted=False, frags=None, index=0):
    """Check an IPv6 packet's transport checksum (after any hop-by-hop, routing,
    destination options and Fragment headers) where verifiable, as check_ipv4 does."""
    if len(ip) < 40 or ip[0] >> 4 != 6:
        problems.append(f"{what}not a complete IPv6 header ({len(ip)} bytes)")
        return
    end = 40 + struct.unpack_from("!H", ip, 4)[0]
    if end > len(ip):
        if not quoted:
            problems.append(f"{what}IPv6 payload length {end - 40} but only "
                            f"{len(ip) - 40} bytes present")
        return
    src, dst = ip[8:24], ip[24:40]
    nh, off, frag = ip[6], 40, None
    while nh in IPV6_SKIPPED or nh == PROTO_IPV6_FRAG:
        if off + 8 > end:
            problems.append(f"{what}IPv6 extension header {nh} truncated")
            return
        if nh == PROTO_IPV6_FRAG:
            offset_m = struct.unpack_from("!H", ip, off + 2)[0]
            ident = struct.unpack_from("!I", ip, off + 4)[0]
            frag = ((offset_m >> 3) * 8, bool(offset_m & 1), ident)
            nh, off = ip[off], off + 8
        else:
            nh, off = ip[off], off + (ip[off + 1] + 1) * 8
    seg = ip[off:end]
    if frag is not None and (frag[0] or frag[1]):
        if frags is not None:
            frags.add((6, src, dst, frag[2]), index, frag[0], frag[1], nh, seg)
        return
    check_l4(nh, src, dst, seg, what, problems)
    if nh == PROTO_ICMPV6 and not quoted and len(seg) >= 8 and seg[0] < 128:
        quote = seg[8:]
        if len(quote) >= 40:
            check_ipv6(quote, "quoted ", problems, quoted=True)


def ip_layer(pkt):
    """The frame's outermost IPv4 or IPv6 layer and its byte offset, found by walking
    scapy's layers; (None, None) if it carries neither."""
    off = 0
    layer = pkt
    while layer and not isinstance(layer, (IP, IPv6)):
        off += len(bytes(layer)) - len(bytes(layer.payload))
        layer = layer.payload
    return (layer, off) if layer else (None, None)


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
    problems = {}
    frags = Fragments()
    with PcapReader(path) as reader:
        for index, pkt in enumerate(reader, start=1):
            found = problems.setdefault(index, [])
            layer, off = ip_layer(pkt)
            if layer is None:
                continue  # Nothing this tool checks.
            frame = bytes(getattr(pkt, "original", None) or bytes(pkt))
            check = check_ipv4 if isinstance(layer, IP) else check_ipv6
            check(frame[off:], "", found, frags=frags, index=index)
    frags.check(lambda index: problems[index])
    failed = 0
    for index, found in problems.items():
        if found:
            failed += 1
            print(f"{path}: packet {index}: " + "; ".join(found))
    return len(problems) - failed, failed


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
