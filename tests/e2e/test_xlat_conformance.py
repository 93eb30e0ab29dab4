"""Stateless translation checked by scapy, through `quicknat translate` (no namespaces).

Packets are built with scapy from the RFCs' layouts, replayed through `quicknat
translate` with a [siit] configuration, and what comes out is dissected and verified by
scapy (an oracle independent of quicknat's own parsers):

- RFC 4884 extensions in translated ICMP errors (RFC 7915 §4.2 / §5.2): the length
  attribute (ICMPv4 octet 5 in 32-bit words, ICMPv6 octet 4 in 64-bit words) describes
  the translated datagram, which is zero-padded to the word and to 128 octets; the
  extension structure follows unchanged (scapy parses it and its checksum holds); the
  error fits 1280 (IPv6) / 576 (IPv4) octets with the extension kept; a length that
  makes no sense is treated as no extension (length 0 out).
- RFC 7915 §5.1.1: the IPv4 Identification of an IPv6 atomic fragment is the low 16 bits
  of its Fragment header's Identification.
- RFC 8200 §8.1: IPv6 UDP with checksum 0 is dropped (counted as ipv6_udp_zero_checksum)
  unless `ipv6_udp_zero_checksum = "compute"`, which fills in a correct IPv4 checksum.

    python3 -m pytest tests/e2e/test_xlat_conformance.py [--quicknat PATH]
"""

import os
import subprocess
import tempfile

import pytest
from scapy.all import Ether, IP, IPv6, Raw, UDP, rdpcap, wrpcap
from scapy.layers.inet import ICMP, ICMPExtension_Header, ICMPExtension_Object
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6TimeExceeded, IPv6ExtHdrFragment, in6_chksum
from scapy.utils import checksum

V4_HOST = "198.51.100.20"  # seen from IPv6 as 2001:db8:64::c633:6414 (RFC 6052)
V4_HOST6 = "2001:db8:64::c633:6414"
V6_HOST = "2001:db8:1::10"  # seen from IPv4 as 192.0.2.100 (EAM, RFC 7757)
V6_HOST4 = "192.0.2.100"
V4_ROUTER = "203.0.113.9"
V4_ROUTER6 = "2001:db8:64::cb00:7109"

CONFIG = f"""
[siit]
pref64 = "2001:db8:64::/96"
eam = [ {{ ipv4 = "{V6_HOST4}/32", ipv6 = "{V6_HOST}/128" }} ]

[siit.options]
ipv6_mtu = 1500
ipv4_mtu = 1500
"""


def translate(quicknat, packets, extra=""):
    """Replays `packets` (IP layers) through `quicknat translate`; returns the output IP
    packets and translate's report."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg, inp, outp = (os.path.join(tmp, n) for n in ("c.toml", "in.pcap", "out.pcap"))
        with open(cfg, "w") as f:
            f.write(CONFIG + extra)
        wrpcap(inp, [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p for p in packets])
        r = subprocess.run([quicknat, "translate", "--config", cfg, inp, outp],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        out = [bytes(f.payload) for f in rdpcap(outp)] if os.path.getsize(outp) > 24 else []
        return out, r.stdout + r.stderr


def mpls_ext(labels):
    """An RFC 4884 extension structure (version 2, checksum filled in by scapy) with one
    RFC 4950 MPLS label stack object (class 1, c-type 1)."""
    stack = b"".join(((l << 12) | (int(i == len(labels) - 1) << 8) | 1).to_bytes(4, "big")
                     for i, l in enumerate(labels))
    return bytes(ICMPExtension_Header() / ICMPExtension_Object(classnum=1, classtype=1) / Raw(stack))


def labels_of(ext_bytes):
    """The MPLS labels of an extension structure, as scapy parses it; its checksum holds."""
    h = ICMPExtension_Header(ext_bytes)
    assert h.version == 2
    assert checksum(ext_bytes) == 0
    obj = h[ICMPExtension_Object]
    assert (obj.classnum, obj.classtype, obj.len) == (1, 1, len(ext_bytes) - 4)
    stack = bytes(obj.payload)
    return [int.from_bytes(stack[i:i + 4], "big") >> 12 for i in range(0, len(stack), 4)]


def padded(b, word):
    """RFC 4884: the original datagram field, zero-padded to the word and to 128 octets."""
    n = max(128, -(-len(b) // word) * word)
    return b + bytes(n - len(b))


def v4_error_with_ext(icmp_type, code, quote, ext, length=None):
    field = padded(quote, 4)
    length = len(field) // 4 if length is None else length
    return IP(src=V4_ROUTER, dst=V6_HOST4, ttl=60) / ICMP(type=icmp_type, code=code, length=length) / Raw(field + ext)


def v6_error_with_ext(cls, code, quote, ext, length=None):
    field = padded(quote, 8)
    length = len(field) // 8 if length is None else length
    return IPv6(src=V6_HOST, dst=V4_HOST6, hlim=60) / cls(code=code, length=length) / Raw(field + ext)


def quote4(payload_len):
    """What the IPv6 host (192.0.2.100 to IPv4) sent, as the IPv4 router quotes it."""
    return bytes(IP(src=V6_HOST4, dst=V4_HOST, ttl=1, flags="DF") / UDP(sport=40000, dport=33434)
                 / Raw(bytes(range(256)) * (payload_len // 256) + bytes(range(payload_len % 256))))


def quote6(payload_len):
    """What the IPv4 host (2001:db8:64::c633:6414 to IPv6) sent, quoted by an IPv6 node."""
    return bytes(IPv6(src=V4_HOST6, dst=V6_HOST, hlim=1) / UDP(sport=40000, dport=33434)
                 / Raw(bytes([0x5A]) * payload_len))


def icmp6_checksum_ok(pkt):
    return in6_chksum(58, pkt, bytes(pkt.payload)) == 0


@pytest.mark.parametrize("payload", [72, 201, 500])
def test_icmp4_time_exceeded_extension_becomes_icmp6_with_length(quicknat, payload):
    ext = mpls_ext([16001, 16002])
    q = quote4(payload)
    (out,), _ = translate(quicknat, [v4_error_with_ext(11, 0, q, ext)])
    p = IPv6(out)
    assert (p.src, p.dst) == (V4_ROUTER6, V6_HOST)
    te = p[ICMPv6TimeExceeded]
    assert (te.type, te.code) == (3, 0)
    assert icmp6_checksum_ok(p)
    # The translated datagram: IPv6 header + what followed the IPv4 header.
    q6 = 40 + len(q) - 20
    field = max(128, -(-q6 // 8) * 8)
    assert te.length * 8 == field
    body = out[48:]
    inner = IPv6(body[:q6])
    assert (inner.src, inner.dst, inner.nh) == (V6_HOST, V4_HOST6, 17)
    assert bytes(inner[UDP].payload) == q[28:]
    assert body[q6:field] == bytes(field - q6)
    # The extension, unchanged, where scapy's own RFC 4884 parsing finds it.
    assert body[field:] == ext
    assert labels_of(body[field:]) == [16001, 16002]
    # scapy dissects extensions only at RFC 4884's compatibility offset (a 128-octet
    # field, whatever the length attribute says): it must agree there.
    if field == 128:
        assert te.ext is not None and bytes(te.ext) == ext


@pytest.mark.parametrize("cls,code,want", [(ICMPv6DestUnreach, 4, (3, 3)), (ICMPv6TimeExceeded, 0, (11, 0))])
def test_icmp6_error_extension_becomes_icmp4_with_length(quicknat, cls, code, want):
    ext = mpls_ext([24000])
    q = quote6(92)
    (out,), _ = translate(quicknat, [v6_error_with_ext(cls, code, q, ext)])
    p = IP(out)
    assert (p.src, p.dst) == (V6_HOST4, V4_HOST)
    icmp = p[ICMP]
    assert (icmp.type, icmp.code) == want
    assert checksum(out[20:]) == 0
    q4 = 20 + len(q) - 40
    field = max(128, -(-q4 // 4) * 4)
    assert icmp.length * 4 == field
    body = out[28:]
    inner = IP(body[:q4])
    assert (inner.src, inner.dst, inner.proto, inner.len) == (V4_HOST, V6_HOST4, 17, q4)
    assert body[q4:field] == bytes(field - q4)
    assert body[field:] == ext
    assert labels_of(body[field:]) == [24000]
    assert field == 128 and icmp.ext is not None and bytes(icmp.ext) == ext


def test_truncated_to_the_minimum_mtu_keeping_the_extension(quicknat):
    # 4 -> 6: a 1018-byte datagram (1040 translated) and a 248-byte extension do not fit
    # 1280 together: the datagram is cut, the extension kept.
    ext = mpls_ext(list(range(100, 160)))
    assert len(ext) == 248
    (out,), _ = translate(quicknat, [v4_error_with_ext(3, 1, quote4(990), ext)])
    p = IPv6(out)
    assert len(out) == 1280
    du = p[ICMPv6DestUnreach]
    assert (du.type, du.code) == (1, 0)
    assert icmp6_checksum_ok(p)
    field = du.length * 8
    assert field == 1280 - 48 - 248
    assert out[48 + field:] == ext
    assert labels_of(out[48 + field:]) == list(range(100, 160))
    # The quoted header still tells the original length.
    assert IPv6(out[48:88]).plen == 998

    # 6 -> 4: cut to 576 bytes.
    ext = mpls_ext(list(range(10)))
    (out,), _ = translate(quicknat, [v6_error_with_ext(ICMPv6TimeExceeded, 0, quote6(900), ext)])
    p = IP(out)
    assert len(out) == 576 == p.len
    assert checksum(out[20:]) == 0
    assert out[28 + p[ICMP].length * 4:] == ext
    assert labels_of(ext) == list(range(10))


def test_nonsensical_length_is_no_extension(quicknat):
    ext = mpls_ext([7])
    q = quote4(100)
    # Past the end of the message: everything is quoted, the length goes out as 0.
    (out,), _ = translate(quicknat, [v4_error_with_ext(11, 0, q, ext, length=200)])
    p = IPv6(out)
    assert p[ICMPv6TimeExceeded].length == 0
    assert icmp6_checksum_ok(p)
    assert out[-len(ext):] == ext
    assert len(out) == 48 + 40 + len(padded(q, 4)) - 20 + len(ext)


def test_atomic_fragment_identification(quicknat):
    # RFC 7915 §5.1.1: Identification from the low-order 16 bits, DF clear.
    pkt = (IPv6(src=V6_HOST, dst=V4_HOST6, hlim=30) / IPv6ExtHdrFragment(id=0x12345678, m=0, offset=0)
           / UDP(sport=1, dport=2) / Raw(b"atomic"))
    (out,), _ = translate(quicknat, [pkt])
    p = IP(out)
    assert (p.id, p.flags.DF, p.flags.MF, p.frag) == (0x5678, False, False, 0)
    udp_ok = UDP(bytes(p[UDP]))
    del udp_ok.chksum
    assert IP(bytes(IP(src=p.src, dst=p.dst) / udp_ok))[UDP].chksum == p[UDP].chksum


def test_ipv6_udp_zero_checksum_dropped_or_computed(quicknat):
    pkt = IPv6(src=V6_HOST, dst=V4_HOST6, hlim=30) / UDP(sport=7, dport=9, chksum=0) / Raw(b"zero")
    out, report = translate(quicknat, [pkt])
    assert out == []
    assert "ipv6_udp_zero_checksum" in report
    (out,), _ = translate(quicknat, [pkt], extra='ipv6_udp_zero_checksum = "compute"\n')
    p = IP(out)
    assert p[UDP].chksum != 0
    want = IP(src=p.src, dst=p.dst) / UDP(sport=7, dport=9) / Raw(b"zero")
    assert p[UDP].chksum == IP(bytes(want))[UDP].chksum
