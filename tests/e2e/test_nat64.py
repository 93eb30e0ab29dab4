#!/usr/bin/env python3
"""End-to-end tests of `quicknat run` as a NAT64 and as both halves of 464XLAT, with
real kernels on every side.

Scenario 1, NAT64 (RFC 6146), pref64 2001:db8:64::/96, pool4 203.0.113.1:

    cli (2001:db8:1::2, ::80) == gw (g-in 2001:db8:1::1 | g-out 198.51.100.1) == srv (198.51.100.2) == far (192.0.2.2)
        IPv6 only                 quicknat [nat64]                               IPv4 router     link MTU 1300

  The gateway's kernel forwards neither family, so every packet that crosses went
  through quicknat. `srv` routes the pool to the gateway (as for NAT44's pool) and
  routes on to `far` over a 1300-byte link; `far` advertises an MSS of 1460 (route
  advmss), so the client's full-size segments meet the small link in the middle of the
  path: only Path MTU Discovery through the translator lets them through.
  Checks: ping6 <-> ping, TCP (the server sees the pool address), UDP, ICMP port
  unreachable -> ICMPv6 (ECONNREFUSED), a large download, a large upload across the
  1300-byte link (ICMPv4 Fragmentation Needed -> ICMPv6 Packet Too Big with MTU + 20),
  a static binding that publishes an IPv6 server to IPv4, clean SIGTERM.

Scenario 2, 464XLAT (RFC 6877):

    cli (192.0.0.2/29) == clat (x-in 192.0.0.1 | x-out 2001:db8:2::2) == mid (bridge) == gw (g-in 2001:db8:2::1 | g-out 198.51.100.1) == srv (198.51.100.2)
      IPv4-only app        quicknat [clat]                                  IPv6 only        quicknat [nat64]

  The CLAT maps 192.0.0.2 <-> 2001:db8:aaaa::2 and IPv4 destinations into the NAT64's
  pref64; the gw routes the CLAT prefix back to the CLAT. Checks: ping, TCP (and a
  large download), UDP from the IPv4 application to the IPv4 server, and that the
  middle link carried IPv6 only (frames counted by EtherType on the bridge port).

Usage: sudo python3 tests/e2e/test_nat64.py [--backend af_packet|af_xdp] [--quicknat PATH] [--keep]
Prints one line per check and a final "N passed, M failed".
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns import (  # noqa: E402
    HTTP_SERVER, ICMP_PROBE, UDP_CLIENT, UDP_SERVER, Checks, FrameCounter, Scenario, exit_on_sigterm,
    nsx, offloads_off, wait_listening,
)

PREF64 = "2001:db8:64::/96"
POOL4 = "203.0.113.1"
SERVER = "198.51.100.2"
SERVER6 = "2001:db8:64::c633:6402"   # 198.51.100.2 under PREF64 (RFC 6052, /96)
FAR = "192.0.2.2"
FAR6 = "2001:db8:64::c000:202"       # 192.0.2.2
SMALL_MTU = 1300

GATEWAY = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "{backend}"
workers = 1
stats_interval = 1
"""

# The options state the real link MTUs: quicknat does not read them from the interfaces,
# and its default IPv6 MTU is 1280 (then every IPv4 packet over 1260 bytes with DF set
# is refused with fragment_needed, see the ICMP check below).
NAT64 = """
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]

[nat64.options]
ipv6_mtu = 1500
ipv4_mtu = 1500

[[nat64.static]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "[2001:db8:1::80]:80"
"""

CLAT = """
[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "2001:db8:64::/96"

[clat.options]
ipv6_mtu = 1500
ipv4_mtu = 1480
"""


def link(a_ns, a_dev, b_ns, b_dev):
    subprocess.run(["ip", "link", "add", a_dev, "netns", a_ns, "type", "veth", "peer", "name", b_dev,
                    "netns", b_ns], check=True, capture_output=True, timeout=20)
    for ns, dev in ((a_ns, a_dev), (b_ns, b_dev)):
        nsx(ns, "ip", "link", "set", dev, "up")
        offloads_off(ns, dev)


def make_namespaces(ns):
    for n in ns.values():
        subprocess.run(["ip", "netns", "add", n], check=True, capture_output=True, timeout=20)
        nsx(n, "ip", "link", "set", "lo", "up")
        # Only quicknat forwards in the translator namespaces; routers turn this back on.
        nsx(n, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
        nsx(n, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=0")


def curl(ns, url, *extra, timeout=20):
    return nsx(ns, "curl", "-s", "-g", "--max-time", str(timeout - 5), *extra, url, check=False, timeout=timeout)


def expect(r, want):
    return r.returncode == 0 and r.stdout.strip() == want


def started(c, qn, label, backend):
    ok = qn.wait_started()
    c.check(f"{label}: quicknat started ({backend})", ok and qn.proc.poll() is None, qn.text()[-2000:])
    if backend == "af_xdp":
        c.check(f"{label}: AF_XDP backend in use (no fallback)", "AF_XDP (copy mode)" in qn.text(), qn.text()[-2000:])


def stopped(c, qn, label):
    rc, text = qn.stop()
    c.check(f"{label}: quicknat stops cleanly on SIGTERM", rc == 0 and "stopped." in text, text[-2000:])
    return text


def scenario_nat64(c, args):
    with Scenario(c, "nat64", "qn64", ("cli", "gw", "srv", "far"), args.keep) as sc:
        ns = sc.ns
        make_namespaces(ns)
        link(ns["cli"], "c0", ns["gw"], "g-in")
        link(ns["gw"], "g-out", ns["srv"], "s0")
        link(ns["srv"], "s1", ns["far"], "f0")
        for n, dev, mtu in ((ns["srv"], "s1", SMALL_MTU), (ns["far"], "f0", SMALL_MTU)):
            nsx(n, "ip", "link", "set", dev, "mtu", str(mtu))
        nsx(ns["cli"], "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        nsx(ns["cli"], "ip", "-6", "addr", "add", "2001:db8:1::80/64", "dev", "c0", "nodad")
        nsx(ns["cli"], "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
        nsx(ns["gw"], "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        nsx(ns["gw"], "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        nsx(ns["gw"], "ip", "route", "add", "192.0.2.0/24", "via", SERVER)
        nsx(ns["srv"], "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        nsx(ns["srv"], "ip", "addr", "add", "192.0.2.1/24", "dev", "s1")
        nsx(ns["srv"], "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        nsx(ns["srv"], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        nsx(ns["far"], "ip", "addr", "add", "192.0.2.2/24", "dev", "f0")
        # far's own link is small, but it advertises the MSS of a 1500-byte path: the
        # client sends full-size segments and learns the path MTU the hard way.
        nsx(ns["far"], "ip", "route", "add", "default", "via", "192.0.2.1", "advmss", "1460")

        qn = sc.quicknat(args.quicknat, "gw", GATEWAY.format(inside="g-in", outside="g-out", backend=args.backend) + NAT64, "nat64")
        sc.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        sc.popen("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353")
        sc.popen("far", sys.executable, "-c", HTTP_SERVER, FAR, "80")
        sc.popen("cli", sys.executable, "-c", HTTP_SERVER, "2001:db8:1::80", "80")
        for n, a in ((ns["srv"], SERVER), (ns["far"], FAR), (ns["cli"], "2001:db8:1::80")):
            wait_listening(n, a, 80)
        started(c, qn, "nat64", args.backend)
        detail = lambda r: f"{(r.stdout + r.stderr).strip()[-600:]} | {qn.stats()}"  # noqa: E731

        r = nsx(ns["cli"], "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", SERVER6, check=False)
        c.check("nat64: ping6 to the IPv4 server's embedded address (ICMPv6 <-> ICMPv4 echo)", r.returncode == 0, detail(r))

        r = curl(ns["cli"], f"http://[{SERVER6}]/")
        c.check("nat64: TCP (HTTP), the IPv4 server sees the pool address", expect(r, f"peer={POOL4}"), detail(r))

        r = nsx(ns["cli"], sys.executable, "-c", UDP_CLIENT, SERVER6, "5353", check=False)
        c.check("nat64: UDP request/response, the server sees the pool address", r.stdout.startswith(f"peer={POOL4}:"), detail(r))

        r = nsx(ns["cli"], sys.executable, "-c", UDP_CLIENT, SERVER6, "9", check=False)
        c.check("nat64: ICMPv4 port unreachable comes back as ICMPv6 (ECONNREFUSED)", r.stdout.strip() == "refused", detail(r))

        # A traceroute step: hop limit 2 expires at the IPv4 router srv (the gateway
        # counts as the first hop), whose ICMPv4 Time Exceeded comes back as ICMPv6 Time
        # Exceeded (type 3) from srv's embedded address.
        r = nsx(ns["cli"], sys.executable, "-c", ICMP_PROBE, FAR6, "33434", "2", check=False)
        c.check("nat64: ICMPv4 Time Exceeded from an IPv4 router comes back as ICMPv6 Time Exceeded",
                r.stdout.strip() == f"type=3 code=0 from={SERVER6}", detail(r))
        # Hop limit 1 expires at the translator itself, which must answer like any router
        # (RFC 7915 §5.1: "MUST check for zero and send the ICMPv4 TTL Exceeded or ICMPv6
        # Hop Limit Exceeded error").
        r = nsx(ns["cli"], sys.executable, "-c", ICMP_PROBE, FAR6, "33434", "1", check=False)
        c.check("nat64: hop limit 1 expires at the translator, which answers ICMPv6 Time Exceeded",
                r.stdout.strip().startswith("type=3 code=0 from="), detail(r))

        n = 4 << 20
        r = curl(ns["cli"], f"http://[{SERVER6}]/big?n={n}", "-o", "/dev/null", "-w", "%{size_download}", timeout=30)
        c.check("nat64: large TCP download (4 MiB, IPv4 server -> IPv6 client)", expect(r, str(n)), detail(r))

        # The upload crosses srv's 1300-byte link: srv answers the translated DF packets
        # with ICMPv4 Fragmentation Needed (MTU 1300), which must reach the client as
        # ICMPv6 Packet Too Big with MTU 1320 (RFC 7915 §4.2: +20).
        blob = tempfile.NamedTemporaryFile(delete=False, suffix=".bin")
        blob.write(os.urandom(n))
        blob.close()
        try:
            r = curl(ns["cli"], f"http://[{FAR6}]/", "-H", "Expect:", "--data-binary", f"@{blob.name}", timeout=30)
        finally:
            os.unlink(blob.name)
        c.check(f"nat64: large TCP upload across a {SMALL_MTU}-byte IPv4 link (PMTUD through the translator)",
                expect(r, f"got={n} peer={POOL4}"), detail(r))
        rt = nsx(ns["cli"], "ip", "-6", "route", "get", FAR6, check=False)
        c.check(f"nat64: the client learned path MTU {SMALL_MTU + 20} from a translated Packet Too Big",
                f"mtu {SMALL_MTU + 20}" in rt.stdout, rt.stdout + rt.stderr + " | " + qn.stats())

        # RFC 7915 §4.1: an IPv4 packet with DF set that is too big for the IPv6 side once
        # translated (1500 + 20 > 1500) "MUST" be answered with ICMPv4 Fragmentation
        # Needed carrying 1480; the server's kernel then records that path MTU.
        r = nsx(ns["cli"], sys.executable, "-c", UDP_CLIENT, SERVER6, "5353", "big:1472", check=False)
        rt = nsx(ns["srv"], "ip", "route", "get", POOL4, check=False)
        c.check("nat64: an IPv4 DF packet too big for the IPv6 side is answered with ICMPv4 Fragmentation Needed (MTU 1480)",
                "mtu 1480" in rt.stdout,
                f"client got {r.stdout.strip()[:20]!r}; server's route: {rt.stdout.strip()} | {qn.stats()}")

        r = curl(ns["srv"], f"http://{POOL4}:8080/")
        c.check("nat64: static binding publishes the IPv6 server to IPv4 (it sees the IPv4 client's embedded address)",
                expect(r, f"peer={SERVER6}"), detail(r))

        stopped(c, qn, "nat64")
        left = nsx(ns["gw"], "ip", "link", "show", check=False).stdout
        c.check("nat64: no XDP program left attached", "xdp" not in left, left)
        print(qn.text()[-1500:], file=sys.stderr)


def scenario_464xlat(c, args):
    counter = None
    with Scenario(c, "464xlat", "qn464", ("cli", "clat", "mid", "gw", "srv"), args.keep) as sc:
        sc.defer(lambda: counter and counter.finish())
        ns = sc.ns
        make_namespaces(ns)
        link(ns["cli"], "c0", ns["clat"], "x-in")
        link(ns["clat"], "x-out", ns["mid"], "m1")
        link(ns["mid"], "m2", ns["gw"], "g-in")
        link(ns["gw"], "g-out", ns["srv"], "s0")
        # The middle: a plain bridge with no addresses, where frames are counted.
        nsx(ns["mid"], "ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        for dev in ("m1", "m2"):
            nsx(ns["mid"], "ip", "link", "set", dev, "master", "br0")
        nsx(ns["mid"], "ip", "link", "set", "br0", "up")
        # The host's IPv4 link is 20 bytes smaller than the IPv6 path, as a CLAT host sets
        # it up (RFC 6877 §6.3 ...the translated packet fits the IPv6 MTU).
        nsx(ns["cli"], "ip", "link", "set", "c0", "mtu", "1480")
        nsx(ns["clat"], "ip", "link", "set", "x-in", "mtu", "1480")
        nsx(ns["cli"], "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        nsx(ns["cli"], "ip", "route", "add", "default", "via", "192.0.0.1")
        nsx(ns["clat"], "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        nsx(ns["clat"], "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        nsx(ns["clat"], "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        nsx(ns["gw"], "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "g-in", "nodad")
        nsx(ns["gw"], "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        nsx(ns["gw"], "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        nsx(ns["srv"], "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
        nsx(ns["srv"], "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")

        clat = sc.quicknat(args.quicknat, "clat", GATEWAY.format(inside="x-in", outside="x-out", backend=args.backend) + CLAT, "clat")
        nat64 = sc.quicknat(args.quicknat, "gw", GATEWAY.format(inside="g-in", outside="g-out", backend=args.backend) + NAT64, "plat")
        sc.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        sc.popen("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353")
        wait_listening(ns["srv"], SERVER, 80)
        started(c, clat, "464xlat clat", args.backend)
        started(c, nat64, "464xlat plat", args.backend)
        detail = lambda r: f"{(r.stdout + r.stderr).strip()[-600:]} | clat {clat.stats()} | plat {nat64.stats()}"  # noqa: E731

        counter = FrameCounter(ns["mid"], "m1")
        c.check("464xlat: frame counter on the middle link ready", counter.ready)

        r = nsx(ns["cli"], "ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, check=False)
        c.check("464xlat: ping from the IPv4-only client to the IPv4 server", r.returncode == 0, detail(r))

        r = curl(ns["cli"], f"http://{SERVER}/")
        c.check("464xlat: TCP (HTTP), the server sees the pool address", expect(r, f"peer={POOL4}"), detail(r))

        n = 4 << 20
        r = curl(ns["cli"], f"http://{SERVER}/big?n={n}", "-o", "/dev/null", "-w", "%{size_download}", timeout=30)
        c.check("464xlat: large TCP download (4 MiB) through both translators", expect(r, str(n)), detail(r))

        r = nsx(ns["cli"], sys.executable, "-c", UDP_CLIENT, SERVER, "5353", check=False)
        c.check("464xlat: UDP request/response, the server sees the pool address", r.stdout.startswith(f"peer={POOL4}:"), detail(r))

        counts = counter.finish()
        counter = None
        v4 = (counts or {}).get("0x0800", 0) + (counts or {}).get("0x0806", 0)
        v6 = (counts or {}).get("0x86dd", 0)
        c.check(f"464xlat: the middle link carried IPv6 only ({v6} IPv6 frames, {v4} IPv4/ARP)",
                counts is not None and v6 > 0 and v4 == 0, str(counts))

        stopped(c, clat, "464xlat clat")
        stopped(c, nat64, "464xlat plat")
        left = "".join(nsx(ns[n], "ip", "link", "show", check=False).stdout for n in ("clat", "gw"))
        c.check("464xlat: no XDP program left attached", "xdp" not in left, left)
        print(clat.text()[-1000:] + nat64.text()[-1000:], file=sys.stderr)


# Echoes every datagram back to its sender (IPv4 or IPv6 by the bound address); with a
# third argument "nodf", sends with DF clear (IP_PMTUDISC_DONT), as many IPv4 hosts do.
UDP_ECHO = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
if sys.argv[3:] == ["nodf"]:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(data, peer)
"""

# Sends one datagram of argv[3] bytes (over IPv4 with DF clear) and prints the length of
# an intact answer, "corrupt" or "timeout".
UDP_BIG = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
if fam == socket.AF_INET:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: DF clear
s.connect((sys.argv[1], int(sys.argv[2])))
want = bytes(i % 251 for i in range(int(sys.argv[3])))
s.send(want)
try:
    d = s.recv(65535)
    print(len(d) if d == want else "corrupt")
except socket.timeout:
    print("timeout")
"""


def check_fragmented(c, qn, client_ns, dst, name):
    """A 1400-byte datagram from `client_ns` to `dst`:7007 and its echo cross `qn` as
    translated fragments (one retry: the first may go while neighbours resolve)."""
    for _ in range(2):
        r = nsx(client_ns, sys.executable, "-c", UDP_BIG, dst, "7007", "1400", check=False)
        if r.stdout.strip() == "1400":
            break
    fragmented = qn.wait_counter("fragmented")
    c.check(name, r.stdout.strip() == "1400" and fragmented,
            f"{(r.stdout + r.stderr).strip()[-300:]} | {qn.stats()}")


def scenario_nat64_fragments(c, args):
    """An IPv4 server answering without DF, too big for the NAT64's IPv6 MTU (1280): the
    translator cuts the datagram, NAT44's fragment tracking carries the later fragments,
    and the IPv6 client reassembles the echo."""
    with Scenario(c, "nat64 fragments", "qnf64", ("cli", "gw", "srv"), args.keep) as sc:
        ns = sc.ns
        make_namespaces(ns)
        link(ns["cli"], "c0", ns["gw"], "g-in")
        link(ns["gw"], "g-out", ns["srv"], "s0")
        nsx(ns["cli"], "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        nsx(ns["cli"], "ip", "-6", "route", "add", PREF64, "via", "2001:db8:1::1")
        nsx(ns["gw"], "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        nsx(ns["gw"], "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        nsx(ns["srv"], "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        nsx(ns["srv"], "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        cfg = NAT64.replace("ipv6_mtu = 1500", "ipv6_mtu = 1280")
        qn = sc.quicknat(args.quicknat, "gw", GATEWAY.format(inside="g-in", outside="g-out", backend=args.backend) + cfg, "nat64")
        sc.popen("srv", sys.executable, "-c", UDP_ECHO, SERVER, "7007", "nodf")
        started(c, qn, "nat64 fragments", args.backend)
        time.sleep(0.3)
        check_fragmented(c, qn, ns["cli"], SERVER6, "nat64 fragments: a 1400-byte IPv4 answer without DF reaches the IPv6 client as translated fragments (1280-byte IPv6 MTU)")
        stopped(c, qn, "nat64 fragments")


def scenario_fragmentation(c, args):
    """RFC 7915 §4.1: an IPv4 packet without DF, too big for the IPv6 side once
    translated, is fragmented by the translator (here a CLAT with ipv6_mtu 1280)."""
    with Scenario(c, "fragmentation", "qnfr", ("v4", "clat", "v6"), args.keep) as sc:
        ns = sc.ns
        make_namespaces(ns)
        link(ns["v4"], "c0", ns["clat"], "x-in")
        link(ns["clat"], "x-out", ns["v6"], "v0")
        nsx(ns["v4"], "ip", "addr", "add", "192.0.0.2/29", "dev", "c0")
        nsx(ns["v4"], "ip", "route", "add", "default", "via", "192.0.0.1")
        nsx(ns["clat"], "ip", "addr", "add", "192.0.0.1/29", "dev", "x-in")
        nsx(ns["clat"], "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "x-out", "nodad")
        nsx(ns["clat"], "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        nsx(ns["v6"], "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "v0", "nodad")
        nsx(ns["v6"], "ip", "-6", "addr", "add", f"{SERVER6}/128", "dev", "lo", "nodad")
        nsx(ns["v6"], "ip", "-6", "route", "add", "2001:db8:aaaa::/64", "via", "2001:db8:2::2")
        cfg = CLAT.replace("ipv6_mtu = 1500", "ipv6_mtu = 1280").replace("ipv4_mtu = 1480", "ipv4_mtu = 1500")
        clat = sc.quicknat(args.quicknat, "clat", GATEWAY.format(inside="x-in", outside="x-out", backend=args.backend) + cfg, "clat")
        sc.popen("v6", sys.executable, "-c", UDP_ECHO, SERVER6, "7007")
        started(c, clat, "fragmentation clat", args.backend)
        time.sleep(0.3)
        check_fragmented(c, clat, ns["v4"], SERVER, "fragmentation: a 1400-byte IPv4 datagram without DF crosses a 1280-byte IPv6 MTU as translated fragments and its echo comes back intact")
        stopped(c, clat, "fragmentation clat")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quicknat", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "quicknat"))
    ap.add_argument("--keep", action="store_true", help="leave the namespaces for inspection")
    ap.add_argument("--backend", default="af_packet", choices=["af_packet", "af_xdp"])
    ap.add_argument("--only", choices=["nat64", "464xlat", "fragmentation", "nat64-fragments"], help="run one scenario")
    args = ap.parse_args()
    c = Checks()
    if os.geteuid() != 0:
        c.check("e2e_nat64: needs root (network namespaces)", False)
        return c.summary()
    exit_on_sigterm()
    for name, fn in (("nat64", scenario_nat64), ("464xlat", scenario_464xlat),
                     ("fragmentation", scenario_fragmentation),
                     ("nat64-fragments", scenario_nat64_fragments)):
        if args.only and args.only != name:
            continue
        try:
            fn(c, args)
        except Exception as e:  # a setup step failed: count it, go on with the next scenario
            c.check(f"{name}: scenario ran to the end", False, f"{type(e).__name__}: {e} {getattr(e, 'stderr', '') or ''}")
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
