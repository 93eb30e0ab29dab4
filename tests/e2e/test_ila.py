#!/usr/bin/env python3
"""End-to-end test of quicknat's ILA mode (identifier-locator addressing) with real
kernels: two ILA routers (plus a third one the host moves to) and hosts that only know
SIR addresses.

    A (3333:0:0:1::a)                                       B (3333:0:0:1::b on lo)
      a0 ==== r1a [R1] r1n ==+                         +== r2n [R2] r2b ==== b0
                             |   "ILA network" (br0)   |
                             +== r3n [R3] r3b ==== b1 (B after the move)

Each router runs `quicknat run` with an [ila] table: inside faces its hosts (SIR -> ILA
on what they send), outside faces the ILA network (ILA -> SIR on what arrives there).
Every router knows every mapping (identifier -> locator):

    0:0:0:a -> 2001:db8:a:0      A, behind R1
    0:0:0:b -> 2001:db8:b:1      B, behind R2 (2001:db8:b:2 after the move: behind R3)

Routes: the hosts route the SIR /64 to their router (link-local next hops); the routers
route locators over the ILA network (R1: 2001:db8:b:1::/64 via R2, 2001:db8:b:2::/64 via
R3; R2 and R3: 2001:db8:a::/64 via R1) and the SIR addresses of their own hosts to the
host side. R1 also routes the whole SIR /64 to R2 (where unmapped identifiers go, and
R2 routes the SIR /64 to B) so "unmapped = forward" has somewhere to go. The routers'
kernels do not forward (net.ipv6.conf.all.forwarding=0): every packet that crosses a
router went through quicknat.

Checks, run twice: csum_mode "adjust-transport" (ident_type luid, unmapped "drop") and
csum_mode "neutral-map" (ident_type "use-format", unmapped "forward"):

  * ping6, TCP echo and UDP echo from A to B's SIR address; B's sockets see the SIR
    destination (getsockname), A sees B's SIR address as the source of the replies;
  * on the ILA network (tcpdump on the bridge) A -> B packets carry B's locator (and,
    with neutral-map, the C-bit and a checksum-neutral identifier), B -> A packets A's
    locator, never a SIR destination; every TCP/UDP/ICMPv6 checksum there, and on B's
    link, is valid for the addresses in the packet;
  * unmapped identifier: "drop" drops it and R1 counts it (no_mapping in its stats
    line); "forward" passes it unchanged (SIR destination on the ILA network) and B
    answers;
  * `quicknat ila list` shows the mappings; `quicknat ila reload` after editing the
    configuration files maps a new identifier and traffic to it flows;
  * B moves from R2 to R3 while a TCP connection from A exchanges data every 100 ms:
    B's link to R2 goes down, B routes via R3, and `quicknat ila set 0:0:0:b
    2001:db8:b:2` is sent to R3, R2 and R1; the connection survives (no reset, every
    message echoed, a bounded stall) and the ILA network then carries B's new locator;
  * every quicknat stops cleanly on SIGTERM (no XDP program left); namespaces removed.

Usage: sudo python3 tests/e2e/test_ila.py [--backend af_packet|af_xdp] [--quicknat PATH] [--keep]
Prints one line per check and a final "N passed, M failed".
"""

import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SUFFIX = str(os.getpid())
NS = {n: f"qi-{n}-{SUFFIX}" for n in ("a", "r1", "r2", "r3", "net", "b")}

SIR = "3333:0:0:1"
A = f"{SIR}::a"
B = f"{SIR}::b"
B2 = f"{SIR}::b2"  # a second address of B whose identifier starts unmapped
LOC_A = "2001:db8:a:0"
LOC_B1 = "2001:db8:b:1"
LOC_B2 = "2001:db8:b:2"
ID_A, ID_B, ID_B2 = "0:0:0:a", "0:0:0:b", "0:0:0:b2"

MODES = [
    # (label, csum_mode, ident_type, unmapped)
    ("adjust-transport", "adjust-transport", "luid", "drop"),
    ("neutral-map", "neutral-map", "use-format", "forward"),
]

CONFIG = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "{backend}"
workers = 1
stats_interval = 1
control_socket = "{sock}"

[ila]
sir_prefix = "3333:0:0:1::/64"
csum_mode = "{csum}"
ident_type = "{ident}"
unmapped = "{unmapped}"
{mappings}
"""

# TCP echo server: the first line it sends is the local (destination) address of the
# connection, then it echoes every line.
TCP_SERVER = r"""
import socket, sys, threading
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[1]))); s.listen(16)
def serve(c):
    with c:
        c.sendall(("local=%s peer=%s\n" % (c.getsockname()[0], c.getpeername()[0])).encode())
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# UDP echo server, one socket per address (so the reply names the address the datagram
# was sent to).
UDP_SERVER = r"""
import select, socket, sys
socks = []
for a in sys.argv[2:]:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.bind((a, int(sys.argv[1]))); socks.append(s)
while True:
    for s in select.select(socks, [], [])[0]:
        d, peer = s.recvfrom(2048)
        s.sendto(("to=%s from=%s " % (s.getsockname()[0], peer[0])).encode() + d, peer)
"""

TCP_CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
f = s.makefile("rwb")
hello = f.readline().decode().strip()
f.write(b"ping-pong " * 50 + b"\n"); f.flush()
echo = f.readline()
print(hello, "echo=ok" if echo == b"ping-pong " * 50 + b"\n" else "echo=bad")
"""

UDP_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[4]))
s.connect((sys.argv[1], int(sys.argv[2])))
got = 0
for i in range(int(sys.argv[3])):
    s.send(b"hello %d" % i)
    try:
        print(s.recv(2048).decode()); got += 1
    except (socket.timeout, ConnectionRefusedError) as e:
        print("no answer: %r" % e)
print("answers=%d" % got)
"""

# The moving-host client: one 100-byte message every 100 ms for `duration` seconds on one
# TCP connection, echoes read by a second thread. Prints a JSON report.
MOVE_CLIENT = r"""
import json, socket, sys, threading, time
addr, port, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((addr, port), timeout=5)
s.settimeout(None)
f = s.makefile("rb")
f.readline()
rep = {"sent": 0, "echoed": 0, "error": None, "times": [], "start": time.time()}
def reader():
    try:
        for i in range(10**9):
            line = f.readline()
            if not line:
                rep["error"] = rep["error"] or "connection closed by peer"
                return
            if line != b"msg %06d " % i + b"x" * 89 + b"\n":
                rep["error"] = "bad echo %r" % line[:20]
                return
            rep["echoed"] += 1
            rep["times"].append(time.time())
    except OSError as e:
        rep["error"] = rep["error"] or repr(e)
t = threading.Thread(target=reader, daemon=True); t.start()
end = time.time() + duration
try:
    while time.time() < end and rep["error"] is None:
        s.sendall(b"msg %06d " % rep["sent"] + b"x" * 89 + b"\n")
        rep["sent"] += 1
        time.sleep(0.1)
except OSError as e:
    rep["error"] = repr(e)
drain = time.time() + 10
while rep["echoed"] < rep["sent"] and time.time() < drain and rep["error"] is None:
    time.sleep(0.05)
s.close()
print(json.dumps(rep))
"""









import netns as common  # noqa: E402
from netns import sh  # noqa: E402,F401

# The command helpers, taking this test's short namespace names.
_names = common.Names(NS)
nsx, popen_ns, wait_listening, offloads_off, teardown = (
    _names.nsx, _names.popen, _names.wait_listening, _names.offloads_off, _names.teardown)



def addr64_to_int(a):
    """'2001:db8:b:1' (four hex groups) -> 64-bit integer."""
    v = 0
    for g in a.split(":"):
        v = (v << 16) | int(g, 16)
    return v


def ila_addr(loc, ident):
    return ipaddress.IPv6Address((addr64_to_int(loc) << 64) | addr64_to_int(ident))


def fold(s):
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def sum16(b):
    if len(b) % 2:
        b += b"\0"
    return fold(sum(struct.unpack(f"!{len(b) // 2}H", b)))


# ---------------------------------------------------------------------------- capture


class Capture:
    """tcpdump on one interface of one namespace, written to a pcap file."""

    all = []  # every capture made, stopped and removed by run_mode's cleanup

    def __init__(self, ns, dev):
        self.ns, self.dev = ns, dev
        self.path = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
        self.proc = None
        Capture.all.append(self)

    def __enter__(self):
        self.err = open(self.path + ".err", "w+")
        self.proc = popen_ns(self.ns, "tcpdump", "-i", self.dev, "-n", "-U", "--immediate-mode", "-s", "2048", "-w", self.path, "ip6",
                             stdout=subprocess.DEVNULL, stderr=self.err)
        end = time.time() + 5
        while time.time() < end and "listening on" not in open(self.path + ".err").read():
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            time.sleep(0.2)  # let the last packets land
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def packets(self):
        """IPv6 packets (bytes from the IPv6 header on) of the Ethernet capture."""
        out = []
        try:
            data = open(self.path, "rb").read()
        except OSError:
            return out
        if len(data) < 24:
            return out
        endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
        off = 24
        while off + 16 <= len(data):
            _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
            frame = data[off + 16:off + 16 + incl]
            off += 16 + incl
            if len(frame) >= 54 and frame[12:14] == b"\x86\xdd":
                out.append(frame[14:])
        return out

    def cleanup(self):
        for p in (self.path, self.path + ".err"):
            try:
                os.unlink(p)
            except OSError:
                pass


def parse6(p):
    """(src, dst, next header, l4 bytes) of an IPv6 packet without extension headers."""
    plen = struct.unpack("!H", p[4:6])[0]
    return (ipaddress.IPv6Address(p[8:24]), ipaddress.IPv6Address(p[24:40]), p[6], p[40:40 + plen])


def l4_checksum_ok(p):
    """Whether the TCP/UDP/ICMPv6 checksum is right for the addresses in the packet
    (None when the packet carries none of them)."""
    _, _, nh, l4 = parse6(p)
    if nh not in (6, 17, 58):
        return None
    if nh == 17 and l4[6:8] == b"\0\0":
        return False  # a zero UDP checksum is not allowed over IPv6
    pseudo = p[8:40] + struct.pack("!IxxxB", len(l4), nh)
    return fold(sum16(pseudo) + sum16(l4)) == 0xFFFF


CSUM_AT = {6: 16, 17: 6, 58: 2}


def l4_csum(p):
    _, _, nh, l4 = parse6(p)
    at = CSUM_AT.get(nh)
    return l4[at:at + 2] if at is not None else None


def l4_key(p):
    """A packet's identity across the two routers: protocol and transport bytes with
    the checksum field blanked (the addresses differ between the links)."""
    _, _, nh, l4 = parse6(p)
    at = CSUM_AT.get(nh)
    if at is None:
        return (nh, l4)
    return (nh, l4[:at] + b"\0\0" + l4[at + 2:])


# ---------------------------------------------------------------------------- topology




def setup():
    for n in NS.values():
        sh("ip", "netns", "add", n)
    for ns in NS:
        # No duplicate address detection: addresses are usable at once.
        for key in ("default", "all"):
            nsx(ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.accept_dad=0")
            nsx(ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.forwarding=0")
        nsx(ns, "ip", "link", "set", "lo", "up")

    def veth(ns1, d1, ns2, d2):
        sh("ip", "link", "add", d1, "netns", NS[ns1], "type", "veth", "peer", "name", d2, "netns", NS[ns2])

    veth("a", "a0", "r1", "r1a")
    veth("r1", "r1n", "net", "n1")
    veth("r2", "r2n", "net", "n2")
    veth("r3", "r3n", "net", "n3")
    veth("b", "b0", "r2", "r2b")
    veth("b", "b1", "r3", "r3b")
    nsx("net", "ip", "link", "add", "br0", "type", "bridge")
    for d in ("n1", "n2", "n3"):
        nsx("net", "ip", "link", "set", d, "master", "br0")
    # Fixed link-local addresses: the next hops of every route.
    lls = [("a", "a0", "fe80::a"), ("r1", "r1a", "fe80::1"), ("r1", "r1n", "fe80::1"),
           ("r2", "r2n", "fe80::2"), ("r3", "r3n", "fe80::3"), ("r2", "r2b", "fe80::2"),
           ("b", "b0", "fe80::b"), ("r3", "r3b", "fe80::3"), ("b", "b1", "fe80::b")]
    for ns, dev, ll in lls:
        nsx(ns, "ip", "-6", "addr", "add", f"{ll}/64", "dev", dev, "nodad")
    for ns, dev, _ in lls:
        nsx(ns, "ip", "link", "set", dev, "up")
        offloads_off(ns, dev)
    for d in ("n1", "n2", "n3", "br0"):
        nsx("net", "ip", "link", "set", d, "up")
        offloads_off("net", d)
    # Hosts: SIR addresses; the SIR /64 via their router.
    nsx("a", "ip", "-6", "addr", "add", f"{A}/128", "dev", "a0", "nodad")
    nsx("a", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::1", "dev", "a0", "src", A)
    nsx("b", "ip", "-6", "addr", "add", f"{B}/128", "dev", "lo")
    nsx("b", "ip", "-6", "addr", "add", f"{B2}/128", "dev", "lo")
    nsx("b", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::2", "dev", "b0", "src", B)
    # Routers: locators over the ILA network, their hosts' SIR addresses to the host side.
    nsx("r1", "ip", "-6", "route", "add", f"{LOC_B1}::/64", "via", "fe80::2", "dev", "r1n")
    nsx("r1", "ip", "-6", "route", "add", f"{LOC_B2}::/64", "via", "fe80::3", "dev", "r1n")
    nsx("r1", "ip", "-6", "route", "add", f"{A}/128", "via", "fe80::a", "dev", "r1a")
    nsx("r1", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::2", "dev", "r1n")
    nsx("r2", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "r2n")
    nsx("r2", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::b", "dev", "r2b")
    nsx("r3", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "r3n")
    nsx("r3", "ip", "-6", "route", "add", f"{B}/128", "via", "fe80::b", "dev", "r3b")




# ---------------------------------------------------------------------------- routers


class Router:
    def __init__(self, name, inside, outside, backend, csum, ident, unmapped, tmp):
        self.name, self.inside, self.outside = name, inside, outside
        self.backend, self.csum, self.ident, self.unmapped = backend, csum, ident, unmapped
        self.sock = os.path.join(tmp, f"{name}.sock")
        self.cfg = os.path.join(tmp, f"{name}.toml")
        self.logpath = os.path.join(tmp, f"{name}.log")
        self.proc = None

    def write_config(self, mappings):
        text = "".join(f'\n[[ila.mapping]]\nidentifier = "{i}"\nlocator = "{l}"\n' for i, l in mappings)
        with open(self.cfg, "w") as f:
            f.write(CONFIG.format(inside=self.inside, outside=self.outside, backend=self.backend, sock=self.sock,
                                  csum=self.csum, ident=self.ident, unmapped=self.unmapped, mappings=text))

    def start(self, quicknat):
        self.quicknat = quicknat
        self.log = open(self.logpath, "w")
        self.proc = popen_ns(self.name, quicknat, "run", "--config", self.cfg, stdout=self.log, stderr=self.log)

    def text(self):
        try:
            return open(self.logpath).read()
        except OSError:
            return ""

    def ready(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            if "control: ILA mappings" in self.text() and "quicknat: ila" in self.text():
                return True
            time.sleep(0.1)
        return False

    def ila(self, *args):
        return sh(self.quicknat, "ila", *args, "--socket", self.sock, check=False, timeout=10)

    def stats(self):
        """The last stats line's counters as a dict (drops[...] entries included)."""
        lines = [l for l in self.text().splitlines() if "stats: " in l]
        if not lines:
            return {}
        d = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", lines[-1])}
        return d

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def wait_for(pred, timeout, step=0.1):
    end = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() >= end:
            return v
        time.sleep(step)




# ---------------------------------------------------------------------------- one run


def run_mode(args, label, csum, ident, unmapped, check):
    tmp = tempfile.mkdtemp(prefix="qi-")
    procs = []
    routers = {}
    tag = f"[{label}]"
    try:
        setup()
        q = os.path.abspath(args.quicknat)
        base = [(ID_A, LOC_A), (ID_B, LOC_B1)]
        for name, ins, out in (("r1", "r1a", "r1n"), ("r2", "r2b", "r2n"), ("r3", "r3b", "r3n")):
            r = Router(name, ins, out, args.backend, csum, ident, unmapped, tmp)
            r.write_config(base)
            r.start(q)
            routers[name] = r
        r1, r2, r3 = routers["r1"], routers["r2"], routers["r3"]
        procs.append(popen_ns("b", sys.executable, "-c", TCP_SERVER, "7000"))
        procs.append(popen_ns("b", sys.executable, "-c", UDP_SERVER, "7001", B, B2))
        up = all(r.ready() for r in routers.values())
        check(f"{tag} three quicknat ILA routers started ({args.backend})", up,
              "\n".join(r.name + ": " + r.text()[-800:] for r in routers.values()))
        if not up:
            return
        if args.backend == "af_xdp":
            ok = all("AF_XDP (copy mode)" in r.text() for r in routers.values())
            check(f"{tag} AF_XDP backend in use (no fallback)", ok, r1.text()[-1500:])
        wait_listening("b", B, 7000)  # local to B: does not cross a router

        res = r1.ila("list")
        want = {f"{ID_A} {LOC_A}", f"{ID_B} {LOC_B1}"}
        check(f"{tag} quicknat ila list shows the configured mappings", res.returncode == 0 and set(res.stdout.split("\n")) - {""} == want,
              res.stdout + res.stderr)

        # --- A -> B by SIR address: ping, TCP, UDP; capture the ILA network and B's link.
        with Capture("net", "br0") as mid, Capture("b", "b0") as blink:
            r = nsx("a", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", B, check=False)
            check(f"{tag} ping6 A -> B's SIR address, replies come back", r.returncode == 0 and f"from {B}" in r.stdout, r.stdout + r.stderr)
            r = nsx("a", sys.executable, "-c", TCP_CLIENT, B, "7000", check=False)
            check(f"{tag} TCP A -> B: B sees its SIR address as destination and A's as source, echo intact",
                  r.stdout.strip() == f"local={B} peer={A} echo=ok", r.stdout + r.stderr)
            r = nsx("a", sys.executable, "-c", UDP_CLIENT, B, "7001", "3", "2", check=False)
            check(f"{tag} UDP A -> B: B sees its SIR address, echoes come back",
                  "answers=3" in r.stdout and f"to={B} from={A} hello 0" in r.stdout, r.stdout + r.stderr)
        pk = mid.packets()
        la, lb = ila_addr(LOC_A, ID_A), ila_addr(LOC_B1, ID_B)
        a_ip, b_ip = ipaddress.IPv6Address(A), ipaddress.IPv6Address(B)
        to_b = [p for p in pk if parse6(p)[0] == a_ip]
        to_a = [p for p in pk if parse6(p)[0] == b_ip]
        protos = {parse6(p)[2] for p in to_b}
        if csum == "neutral-map":
            # C-bit set, identifier's low 16 bits absorb the locator change: the address
            # sum equals the SIR address's.
            def ila_ok(dst, loc, sir):
                d, s = int(dst), int(sir)
                return (d >> 64 == addr64_to_int(loc) and (d >> 60) & 1 == 1
                        and (d & 0x0FFF_FFFF_FFFF_0000) == (s & 0x0FFF_FFFF_FFFF_0000)
                        and sum16(dst.packed) == sum16(sir.packed))
        else:
            def ila_ok(dst, loc, sir):
                return int(dst) == (addr64_to_int(loc) << 64) | (int(sir) & (2**64 - 1))
        bad_b = [str(parse6(p)[1]) for p in to_b if not ila_ok(parse6(p)[1], LOC_B1, b_ip)]
        bad_a = [str(parse6(p)[1]) for p in to_a if not ila_ok(parse6(p)[1], LOC_A, a_ip)]
        check(f"{tag} ILA network: A -> B packets carry B's locator {LOC_B1} (TCP, UDP and ICMPv6 seen), never the SIR address",
              len(to_b) >= 10 and not bad_b and {6, 17, 58} <= protos,
              f"{len(to_b)} packets, protocols {protos}, wrong destinations {bad_b[:5]} (expected {lb} or its checksum-neutral form)")
        check(f"{tag} ILA network: B -> A packets carry A's locator {LOC_A}",
              len(to_a) >= 10 and not bad_a, f"{len(to_a)} packets, wrong destinations {bad_a[:5]} (expected {la})")
        bad = [p for p in to_a + to_b if l4_checksum_ok(p) is False]
        check(f"{tag} ILA network: every TCP/UDP/ICMPv6 checksum is valid for the ILA addresses",
              not bad and to_b, f"{len(bad)} bad of {len(to_a + to_b)}: {[bytes(p[:60]).hex() for p in bad[:2]]}")
        bpk = [p for p in blink.packets() if parse6(p)[0] == a_ip]
        bad = [p for p in bpk if parse6(p)[1] != b_ip or l4_checksum_ok(p) is False]
        check(f"{tag} B's link: packets from A arrive with B's SIR destination and valid checksums",
              len(bpk) >= 10 and not bad, f"{len(bpk)} packets, {len(bad)} bad: {[str(parse6(p)[1]) for p in bad[:3]]}")
        # The same packets on both links: the transport checksum field is untouched with
        # neutral-map (the identifier absorbed the change) and rewritten by adjust-transport.
        on_b = {l4_key(p): l4_csum(p) for p in bpk}
        pairs = [(l4_csum(p), on_b[l4_key(p)]) for p in to_b if l4_key(p) in on_b]
        same = sum(1 for m, b in pairs if m == b)
        if csum == "neutral-map":
            check(f"{tag} checksum-neutral: the transport checksum is the same on the ILA network and on B's link",
                  len(pairs) >= 10 and same == len(pairs), f"{same} of {len(pairs)} matched packets unchanged")
        else:
            check(f"{tag} adjust-transport: the transport checksum is rewritten between the ILA network and B's link",
                  len(pairs) >= 10 and same == 0, f"{same} of {len(pairs)} matched packets unchanged")

        # --- Unmapped identifier (B2 = 3333:0:0:1::b2 has no mapping yet).
        before = r1.stats().get("no_mapping", 0)
        with Capture("net", "br0") as mid:
            r = nsx("a", sys.executable, "-c", UDP_CLIENT, B2, "7001", "3", "1", check=False)
        sir_mid = [p for p in mid.packets() if parse6(p)[1] == ipaddress.IPv6Address(B2)]
        if unmapped == "drop":
            counted = wait_for(lambda: r1.stats().get("no_mapping", 0) - before >= 3, 4)
            check(f"{tag} unmapped = drop: datagrams to an unmapped SIR address are dropped", "answers=0" in r.stdout and not sir_mid,
                  r.stdout + f" ({len(sir_mid)} seen on the ILA network)")
            check(f"{tag} unmapped = drop: R1 counts them (no_mapping in its stats line)", counted,
                  f"no_mapping before {before}, now {r1.stats().get('no_mapping')}: {[l for l in r1.text().splitlines() if 'stats' in l][-1:]}")
        else:
            check(f"{tag} unmapped = forward: datagrams to an unmapped SIR address pass unchanged and B answers",
                  "answers=3" in r.stdout and f"to={B2} from={A}" in r.stdout and len(sir_mid) >= 3,
                  r.stdout + r.stderr + f" ({len(sir_mid)} with the SIR destination seen on the ILA network)")
            fwd = r1.stats()
            check(f"{tag} unmapped = forward: R1 dropped nothing", "no_mapping" not in fwd, str(fwd))

        # --- quicknat ila reload: map B2 (behind R2) by editing the configuration files.
        # R1 and R2 are told with `quicknat ila reload`, R3 with SIGHUP.
        mapped = base + [(ID_B2, LOC_B1)]
        outs = []
        for r in routers.values():
            r.write_config(mapped)
            if r is not r3:
                outs.append(r.ila("reload"))
        check(f"{tag} quicknat ila reload applies the edited configuration (1 added)",
              all(o.returncode == 0 and "1 added" in o.stdout for o in outs), " | ".join(o.stdout + o.stderr for o in outs))
        r3.proc.send_signal(signal.SIGHUP)
        hup_ok = wait_for(lambda: "reload (SIGHUP): ILA mappings" in r3.text() and "1 added" in r3.text(), 5)
        check(f"{tag} SIGHUP re-reads the configuration file (1 added)", hup_ok, r3.text()[-600:])
        res = r1.ila("list")
        check(f"{tag} quicknat ila list shows the reloaded mapping", f"{ID_B2} {LOC_B1}" in res.stdout.split("\n"), res.stdout + res.stderr)
        with Capture("net", "br0") as mid:
            r = nsx("a", sys.executable, "-c", UDP_CLIENT, B2, "7001", "3", "2", check=False)
        lb2 = [p for p in mid.packets() if parse6(p)[0] == a_ip and int(parse6(p)[1]) >> 64 == addr64_to_int(LOC_B1)]
        check(f"{tag} after reload: traffic to the newly mapped identifier crosses with B's locator and is answered",
              "answers=3" in r.stdout and f"to={B2} from={A}" in r.stdout and len(lb2) >= 3,
              r.stdout + r.stderr + f" ({len(lb2)} with the locator on the ILA network)")

        # --- B moves from R2 to R3 while a TCP connection exchanges data every 100 ms.
        with Capture("net", "br0") as mid:
            client = popen_ns("a", sys.executable, "-c", MOVE_CLIENT, B, "7000", "6", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
            procs.append(client)
            time.sleep(2.0)
            t_move = time.time()
            nsx("b", "ip", "link", "set", "b0", "down")  # B leaves R2's link
            nsx("b", "ip", "-6", "route", "replace", f"{SIR}::/64", "via", "fe80::3", "dev", "b1", "src", B)
            sets = [rt.ila("set", ID_B, LOC_B2) for rt in (r3, r2, r1)]  # new egress first, ingress last
            t_moved = time.time()
            try:
                out, err = client.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                client.kill()
                out, err = client.communicate()
        check(f"{tag} quicknat ila set moves B's identifier to {LOC_B2} on all routers",
              all(s.returncode == 0 and f"(was {LOC_B1})" in s.stdout for s in sets), " | ".join(s.stdout + s.stderr for s in sets))
        try:
            rep = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rep = {"error": f"no report: {out[-300:]} {err[-500:]}", "times": [], "sent": 0, "echoed": 0}
        times = [rep.get("start", t_move)] + rep["times"]
        gaps = [b - a for a, b in zip(times, times[1:])]
        stall = max(gaps) if gaps else 99
        after = sum(1 for t in rep["times"] if t > t_moved)
        check(f"{tag} B moves (locator {LOC_B1} -> {LOC_B2}, R2 -> R3): the TCP connection survives, every message echoed",
              rep["error"] is None and rep["sent"] >= 20 and rep["echoed"] == rep["sent"] and after >= 10,
              f"error={rep['error']} sent={rep['sent']} echoed={rep['echoed']} after move={after} (move took {t_moved - t_move:.2f}s)")
        check(f"{tag} B moves: longest stall {stall:.2f}s (bound 3 s)", stall < 3.0, f"gaps {sorted(gaps)[-3:]}")
        new = [p for p in mid.packets() if parse6(p)[0] == a_ip and int(parse6(p)[1]) >> 64 == addr64_to_int(LOC_B2)]
        from_r3 = [p for p in mid.packets() if parse6(p)[0] == b_ip]
        check(f"{tag} after the move the ILA network carries B's new locator, and B's replies still reach A",
              len(new) >= 10 and len(from_r3) >= 10, f"{len(new)} to {LOC_B2}, {len(from_r3)} from B")
        res = r1.ila("list")
        check(f"{tag} quicknat ila list shows B's new locator", f"{ID_B} {LOC_B2}" in res.stdout.split("\n"), res.stdout + res.stderr)
        r = nsx("a", "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", B, check=False)
        check(f"{tag} after the move a new exchange (ping6) reaches B at its new locator", r.returncode == 0, r.stdout + r.stderr)

        # --- Stop.
        rcs = {n: r.stop() for n, r in routers.items()}
        ok = all(rc == 0 and "stopped." in routers[n].text() for n, rc in rcs.items())
        check(f"{tag} every quicknat stops cleanly on SIGTERM", ok,
              str(rcs) + " " + " | ".join(r.text()[-400:] for r in routers.values()))
        for n, r in routers.items():
            last = [l for l in r.text().splitlines() if "stopped." in l]
            print(f"  {tag} {n}: {last[-1].split('stopped. ')[-1] if last else 'no summary'}", file=sys.stderr)
        xdp = "".join(nsx(n, "ip", "link", "show", check=False).stdout for n in ("r1", "r2", "r3"))
        check(f"{tag} no XDP program left attached", "xdp" not in xdp, xdp)
    finally:
        for r in routers.values():
            if r.proc and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for c in Capture.all:
            c.stop()
            c.cleanup()
        Capture.all.clear()
        if args.keep:
            print(f"kept namespaces {list(NS.values())}, logs in {tmp}", file=sys.stderr)
        else:
            teardown()
            for r in routers.values():
                print(f"--- {tag} {r.name} log (tail)\n{r.text()[-1200:]}", file=sys.stderr)
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quicknat", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "quicknat"))
    ap.add_argument("--backend", default="af_packet", choices=["af_packet", "af_xdp"])
    ap.add_argument("--mode", choices=[m[0] for m in MODES], help="run one csum mode only")
    ap.add_argument("--keep", action="store_true", help="leave the namespaces (first mode only) for inspection")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("e2e_ila: needs root (network namespaces)")
        print("0 passed, 1 failed")
        return 1
    missing = [t for t in ("tcpdump", "ping") if not shutil.which(t)]
    if missing:
        print(f"FAIL e2e_ila: missing tools {missing} (scripts/test.sh installs them)")
        print("0 passed, 1 failed")
        return 1
    results = []

    def check(name, ok, detail=""):
        ok = bool(ok)
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + str(detail)) if detail and not ok else ''}", flush=True)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for label, csum, ident, unmapped in MODES:
            if args.mode and args.mode != label:
                continue
            try:
                run_mode(args, label, csum, ident, unmapped, check)
            except subprocess.SubprocessError as e:
                check(f"[{label}] setup and commands ran", False, f"{e} {getattr(e, 'stderr', '')}")
            if args.keep:
                break
    except KeyboardInterrupt:
        check("interrupted", False)
        teardown()
    left = [n for n in NS.values() if n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout]
    if not args.keep:
        check("namespaces removed", not left, str(left))
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
