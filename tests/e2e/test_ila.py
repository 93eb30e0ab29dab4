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

Each check is a test of class TestIla, which runs once per backend and csum mode; the
steps that several tests look at (a traffic exchange under capture, the reload, the move)
run once, in file order, by the first test that needs them.

    sudo python3 -m pytest tests/e2e/test_ila.py [--quicknat PATH]
"""

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

import pytest

from netns import Scenario, once, popen_ns, sh, wait_for

pytestmark = pytest.mark.needs_root

SIR = "3333:0:0:1"
A = f"{SIR}::a"
B = f"{SIR}::b"
B2 = f"{SIR}::b2"  # a second address of B whose identifier starts unmapped
LOC_A = "2001:db8:a:0"
LOC_B1 = "2001:db8:b:1"
LOC_B2 = "2001:db8:b:2"
ID_A, ID_B, ID_B2 = "0:0:0:a", "0:0:0:b", "0:0:0:b2"

MODES = {
    # label: (csum_mode, ident_type, unmapped, xdp_fast_path)
    "adjust-transport": ("adjust-transport", "luid", "drop", "off"),
    "neutral-map": ("neutral-map", "use-format", "forward", "off"),
    # The same with the XDP fast path on (AF_XDP only): the mappings are copied into the
    # steering program's maps, which then carry most packets; every check must hold as
    # it does without (the move included: `ila set` must reach the maps).
    "adjust-transport-xdpfast": ("adjust-transport", "luid", "drop", "on"),
    "neutral-map-xdpfast": ("neutral-map", "use-format", "forward", "on"),
}

CONFIG = """
[gateway]
inside = "{inside}"
outside = "{outside}"
backend = "{backend}"
workers = 1
stats_interval = 1
control_socket = "{sock}"
xdp_fast_path = "{fast}"

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

    def __init__(self, ns, dev):
        self.ns, self.dev = ns, dev
        self.path = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
        self.proc = None

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


# ---------------------------------------------------------------------------- routers


class Router:
    """One ILA router: `quicknat run` in namespace `ns` with its configuration, control
    socket and log in `tmp`."""

    def __init__(self, name, ns, inside, outside, backend, mode, tmp):
        self.name, self.ns, self.inside, self.outside = name, ns, inside, outside
        self.backend = backend
        self.csum, self.ident, self.unmapped, self.fast = mode
        self.sock = os.path.join(tmp, f"{name}.sock")
        self.cfg = os.path.join(tmp, f"{name}.toml")
        self.logpath = os.path.join(tmp, f"{name}.log")
        self.proc = None
        self.final = None

    def write_config(self, mappings):
        text = "".join(f'\n[[ila.mapping]]\nidentifier = "{i}"\nlocator = "{l}"\n' for i, l in mappings)
        with open(self.cfg, "w") as f:
            f.write(CONFIG.format(inside=self.inside, outside=self.outside, backend=self.backend, sock=self.sock,
                                  csum=self.csum, ident=self.ident, unmapped=self.unmapped, fast=self.fast,
                                  mappings=text))

    def start(self, quicknat):
        self.quicknat = quicknat
        self.log = open(self.logpath, "w")
        self.proc = popen_ns(self.ns, quicknat, "run", "--config", self.cfg, stdout=self.log, stderr=self.log)

    def text(self):
        if self.final is not None:
            return self.final
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

    def cleanup(self):
        """Kills the process if it still runs; keeps the log text (the files go with the
        scenario's directory)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.final is None:
            self.final = self.text()


# ---------------------------------------------------------------------------- topology


class IlaNetwork(Scenario):
    """Hosts A and B, routers R1, R2, R3 and the ILA network (a bridge in `net`), for one
    backend and csum mode. The steps that several tests check run once (@once), each
    after the steps that precede it in the script order, so a test selected alone sees
    the same state as in a full run."""

    def __init__(self, quicknat, backend, mode):
        super().__init__("qi", ("a", "r1", "r2", "r3", "net", "b"))
        self.binary, self.backend = quicknat, backend
        self.mode = MODES[mode]
        self.csum, self.ident, self.unmapped, self.fast = self.mode
        self.tmp = tempfile.mkdtemp(prefix="qi-")
        self.routers, self.captures = {}, []

    def setup(self):
        missing = [t for t in ("tcpdump", "ping") if not shutil.which(t)]
        if missing:
            raise RuntimeError(f"e2e_ila: missing tools {missing} (scripts/test.sh installs them)")
        self.add_namespaces()
        for n in self.ns:
            # No duplicate address detection: addresses are usable at once.
            for key in ("default", "all"):
                self.nsx(n, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.accept_dad=0")
                self.nsx(n, "sysctl", "-q", "-w", f"net.ipv6.conf.{key}.forwarding=0")
            self.nsx(n, "ip", "link", "set", "lo", "up")

        def veth(ns1, d1, ns2, d2):
            sh("ip", "link", "add", d1, "netns", self.ns[ns1], "type", "veth", "peer", "name", d2, "netns", self.ns[ns2])

        veth("a", "a0", "r1", "r1a")
        veth("r1", "r1n", "net", "n1")
        veth("r2", "r2n", "net", "n2")
        veth("r3", "r3n", "net", "n3")
        veth("b", "b0", "r2", "r2b")
        veth("b", "b1", "r3", "r3b")
        self.nsx("net", "ip", "link", "add", "br0", "type", "bridge")
        for d in ("n1", "n2", "n3"):
            self.nsx("net", "ip", "link", "set", d, "master", "br0")
        # Fixed link-local addresses: the next hops of every route.
        lls = [("a", "a0", "fe80::a"), ("r1", "r1a", "fe80::1"), ("r1", "r1n", "fe80::1"),
               ("r2", "r2n", "fe80::2"), ("r3", "r3n", "fe80::3"), ("r2", "r2b", "fe80::2"),
               ("b", "b0", "fe80::b"), ("r3", "r3b", "fe80::3"), ("b", "b1", "fe80::b")]
        for n, dev, ll in lls:
            self.nsx(n, "ip", "-6", "addr", "add", f"{ll}/64", "dev", dev, "nodad")
        for n, dev, _ in lls:
            self.nsx(n, "ip", "link", "set", dev, "up")
            self.offloads_off(n, dev)
        for d in ("n1", "n2", "n3", "br0"):
            self.nsx("net", "ip", "link", "set", d, "up")
            self.offloads_off("net", d)
        if self.fast == "on":
            # The routers' veth peers take XDP-redirected frames only with NAPI (GRO on).
            for n, dev in (("a", "a0"), ("net", "n1"), ("net", "n2"), ("net", "n3"), ("b", "b0"), ("b", "b1")):
                self.nsx(n, "ethtool", "-K", dev, "gro", "on", check=False)
        # Hosts: SIR addresses; the SIR /64 via their router.
        self.nsx("a", "ip", "-6", "addr", "add", f"{A}/128", "dev", "a0", "nodad")
        self.nsx("a", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::1", "dev", "a0", "src", A)
        self.nsx("b", "ip", "-6", "addr", "add", f"{B}/128", "dev", "lo")
        self.nsx("b", "ip", "-6", "addr", "add", f"{B2}/128", "dev", "lo")
        self.nsx("b", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::2", "dev", "b0", "src", B)
        # Routers: locators over the ILA network, their hosts' SIR addresses to the host side.
        self.nsx("r1", "ip", "-6", "route", "add", f"{LOC_B1}::/64", "via", "fe80::2", "dev", "r1n")
        self.nsx("r1", "ip", "-6", "route", "add", f"{LOC_B2}::/64", "via", "fe80::3", "dev", "r1n")
        self.nsx("r1", "ip", "-6", "route", "add", f"{A}/128", "via", "fe80::a", "dev", "r1a")
        self.nsx("r1", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::2", "dev", "r1n")
        self.nsx("r2", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "r2n")
        self.nsx("r2", "ip", "-6", "route", "add", f"{SIR}::/64", "via", "fe80::b", "dev", "r2b")
        self.nsx("r3", "ip", "-6", "route", "add", "2001:db8:a::/64", "via", "fe80::1", "dev", "r3n")
        self.nsx("r3", "ip", "-6", "route", "add", f"{B}/128", "via", "fe80::b", "dev", "r3b")

        self.base = [(ID_A, LOC_A), (ID_B, LOC_B1)]
        for name, ins, out in (("r1", "r1a", "r1n"), ("r2", "r2b", "r2n"), ("r3", "r3b", "r3n")):
            r = Router(name, self.ns[name], ins, out, self.backend, self.mode, self.tmp)
            r.write_config(self.base)
            self.routers[name] = r
            r.start(self.binary)
        self.r1, self.r2, self.r3 = self.routers["r1"], self.routers["r2"], self.routers["r3"]
        self.popen("b", sys.executable, "-c", TCP_SERVER, "7000")
        self.popen("b", sys.executable, "-c", UDP_SERVER, "7001", B, B2)

    def capture(self, name, dev):
        c = Capture(self.ns[name], dev)
        self.captures.append(c)
        return c

    def log_tails(self, n=1200):
        return [(f"ila {r.name}", r.text()[-n:]) for r in self.routers.values()]

    def close(self):
        if self.left is None:
            for r in self.routers.values():
                r.cleanup()
            for c in self.captures:
                c.stop()
                c.cleanup()
        left = super().close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left

    # -------------------------------------------------------------- the steps, in order

    @once
    def up(self):
        """Whether the three routers started (their start-up and control lines)."""
        up = all(r.ready() for r in self.routers.values())
        if up:
            self.wait_listening("b", B, 7000)  # local to B: does not cross a router
        return up

    def require_up(self):
        if not self.up():
            pytest.fail("the ILA routers did not start (see test_three_quicknat_ila_routers_started)")

    @once
    def sir_traffic(self):
        """A -> B by SIR address: ping, TCP, UDP, with the ILA network and B's link
        captured."""
        self.require_up()
        with self.capture("net", "br0") as mid, self.capture("b", "b0") as blink:
            ping = self.nsx("a", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", B, check=False)
            tcp = self.nsx("a", sys.executable, "-c", TCP_CLIENT, B, "7000", check=False)
            udp = self.nsx("a", sys.executable, "-c", UDP_CLIENT, B, "7001", "3", "2", check=False)
        pk = mid.packets()
        a_ip, b_ip = ipaddress.IPv6Address(A), ipaddress.IPv6Address(B)
        return {
            "ping": ping, "tcp": tcp, "udp": udp,
            "to_b": [p for p in pk if parse6(p)[0] == a_ip],   # on the ILA network
            "to_a": [p for p in pk if parse6(p)[0] == b_ip],
            "on_b_link": [p for p in blink.packets() if parse6(p)[0] == a_ip],
        }

    def ila_ok(self, dst, loc, sir):
        """Whether `dst` on the ILA network is SIR address `sir` under locator `loc`."""
        if self.csum == "neutral-map":
            # C-bit set, identifier's low 16 bits absorb the locator change: the address
            # sum equals the SIR address's.
            d, s = int(dst), int(sir)
            return (d >> 64 == addr64_to_int(loc) and (d >> 60) & 1 == 1
                    and (d & 0x0FFF_FFFF_FFFF_0000) == (s & 0x0FFF_FFFF_FFFF_0000)
                    and sum16(dst.packed) == sum16(sir.packed))
        return int(dst) == (addr64_to_int(loc) << 64) | (int(sir) & (2**64 - 1))

    @once
    def unmapped_traffic(self):
        """UDP to B2 (3333:0:0:1::b2), whose identifier has no mapping yet: (client
        output, packets to B2's SIR address on the ILA network, R1's no_mapping before)."""
        self.sir_traffic()
        before = self.r1.stats().get("no_mapping", 0)
        with self.capture("net", "br0") as mid:
            r = self.nsx("a", sys.executable, "-c", UDP_CLIENT, B2, "7001", "3", "1", check=False)
        sir_mid = [p for p in mid.packets() if parse6(p)[1] == ipaddress.IPv6Address(B2)]
        return r, sir_mid, before

    @once
    def reload(self):
        """Maps B2 (behind R2) by editing the configuration files; R1 and R2 are told with
        `quicknat ila reload` (their outputs), R3 later with SIGHUP."""
        self.unmapped_traffic()
        mapped = self.base + [(ID_B2, LOC_B1)]
        outs = []
        for r in self.routers.values():
            r.write_config(mapped)
            if r is not self.r3:
                outs.append(r.ila("reload"))
        return outs

    @once
    def sighup(self):
        """SIGHUP to R3: whether its log says it re-read the mappings (1 added)."""
        self.reload()
        self.r3.proc.send_signal(signal.SIGHUP)
        return wait_for(lambda: "reload (SIGHUP): ILA mappings" in self.r3.text() and "1 added" in self.r3.text(), 5)

    @once
    def reload_traffic(self):
        """UDP to the newly mapped B2: (client output, A's packets to B's locator)."""
        self.sighup()
        a_ip = ipaddress.IPv6Address(A)
        with self.capture("net", "br0") as mid:
            r = self.nsx("a", sys.executable, "-c", UDP_CLIENT, B2, "7001", "3", "2", check=False)
        lb2 = [p for p in mid.packets() if parse6(p)[0] == a_ip and int(parse6(p)[1]) >> 64 == addr64_to_int(LOC_B1)]
        return r, lb2

    @once
    def move(self):
        """B moves from R2 to R3 while a TCP connection exchanges data every 100 ms."""
        self.reload_traffic()
        with self.capture("net", "br0") as mid:
            client = self.popen("a", sys.executable, "-c", MOVE_CLIENT, B, "7000", "6", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
            time.sleep(2.0)  # the connection runs 2 s on the old path before the move
            t_move = time.time()
            self.nsx("b", "ip", "link", "set", "b0", "down")  # B leaves R2's link
            self.nsx("b", "ip", "-6", "route", "replace", f"{SIR}::/64", "via", "fe80::3", "dev", "b1", "src", B)
            sets = [rt.ila("set", ID_B, LOC_B2) for rt in (self.r3, self.r2, self.r1)]  # new egress first, ingress last
            t_moved = time.time()
            try:
                out, err = client.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                client.kill()
                out, err = client.communicate()
        try:
            rep = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rep = {"error": f"no report: {out[-300:]} {err[-500:]}", "times": [], "sent": 0, "echoed": 0}
        times = [rep.get("start", t_move)] + rep["times"]
        a_ip, b_ip = ipaddress.IPv6Address(A), ipaddress.IPv6Address(B)
        return {
            "sets": sets, "rep": rep, "t_move": t_move, "t_moved": t_moved,
            "gaps": [b - a for a, b in zip(times, times[1:])],
            "after": sum(1 for t in rep["times"] if t > t_moved),
            "new": [p for p in mid.packets() if parse6(p)[0] == a_ip and int(parse6(p)[1]) >> 64 == addr64_to_int(LOC_B2)],
            "from_b": [p for p in mid.packets() if parse6(p)[0] == b_ip],
        }

    @once
    def stop(self):
        """SIGTERM to every router: {name: exit code or None}."""
        rcs = {n: r.stop() for n, r in self.routers.items()}
        for n, r in self.routers.items():
            last = [l for l in r.text().splitlines() if "stopped." in l]
            print(f"  {n}: {last[-1].split('stopped. ')[-1] if last else 'no summary'}")
        return rcs


@pytest.fixture(scope="class", params=list(MODES))
def mode(request):
    """The csum mode (with its ident_type and unmapped policy, see MODES)."""
    return request.param


@pytest.fixture(scope="class")
def ila(quicknat, backend, mode):
    if MODES[mode][3] == "on" and backend != "af_xdp":
        pytest.skip("the XDP fast path runs on the AF_XDP backend only")
    net = IlaNetwork(quicknat, backend, mode)
    try:
        net.setup()
        yield net
    finally:
        net.close()


# ---------------------------------------------------------------------------- the checks


class TestIla:
    def test_three_quicknat_ila_routers_started(self, ila):
        assert ila.up(), "\n".join(r.name + ": " + r.text()[-800:] for r in ila.routers.values())

    @pytest.mark.only(backend="af_xdp")
    def test_af_xdp_backend_in_use_no_fallback(self, ila):
        ila.require_up()
        ok = all("AF_XDP (copy mode)" in r.text() for r in ila.routers.values())
        assert ok, ila.r1.text()[-1500:]

    def test_ila_list_shows_the_configured_mappings(self, ila):
        ila.require_up()
        res = ila.r1.ila("list")
        want = {f"{ID_A} {LOC_A}", f"{ID_B} {LOC_B1}"}
        assert res.returncode == 0 and set(res.stdout.split("\n")) - {""} == want, res.stdout + res.stderr

    # --- A -> B by SIR address: ping, TCP, UDP; the ILA network and B's link captured.

    def test_ping6_a_to_bs_sir_address_replies_come_back(self, ila):
        r = ila.sir_traffic()["ping"]
        assert r.returncode == 0 and f"from {B}" in r.stdout, r.stdout + r.stderr

    def test_tcp_a_to_b_b_sees_its_sir_address_as_destination_and_a_as_source_echo_intact(self, ila):
        r = ila.sir_traffic()["tcp"]
        assert r.stdout.strip() == f"local={B} peer={A} echo=ok", r.stdout + r.stderr

    def test_udp_a_to_b_b_sees_its_sir_address_echoes_come_back(self, ila):
        r = ila.sir_traffic()["udp"]
        assert "answers=3" in r.stdout and f"to={B} from={A} hello 0" in r.stdout, r.stdout + r.stderr

    def test_ila_network_a_to_b_packets_carry_bs_locator_tcp_udp_icmpv6_never_the_sir_address(self, ila):
        to_b = ila.sir_traffic()["to_b"]
        b_ip = ipaddress.IPv6Address(B)
        protos = {parse6(p)[2] for p in to_b}
        bad_b = [str(parse6(p)[1]) for p in to_b if not ila.ila_ok(parse6(p)[1], LOC_B1, b_ip)]
        assert len(to_b) >= 10 and not bad_b and {6, 17, 58} <= protos, \
            (f"{len(to_b)} packets, protocols {protos}, wrong destinations {bad_b[:5]} "
             f"(expected {ila_addr(LOC_B1, ID_B)} or its checksum-neutral form)")

    def test_ila_network_b_to_a_packets_carry_as_locator(self, ila):
        to_a = ila.sir_traffic()["to_a"]
        a_ip = ipaddress.IPv6Address(A)
        bad_a = [str(parse6(p)[1]) for p in to_a if not ila.ila_ok(parse6(p)[1], LOC_A, a_ip)]
        assert len(to_a) >= 10 and not bad_a, \
            f"{len(to_a)} packets, wrong destinations {bad_a[:5]} (expected {ila_addr(LOC_A, ID_A)})"

    def test_ila_network_every_tcp_udp_icmpv6_checksum_is_valid_for_the_ila_addresses(self, ila):
        t = ila.sir_traffic()
        both = t["to_a"] + t["to_b"]
        bad = [p for p in both if l4_checksum_ok(p) is False]
        assert not bad and t["to_b"], f"{len(bad)} bad of {len(both)}: {[bytes(p[:60]).hex() for p in bad[:2]]}"

    def test_bs_link_packets_from_a_arrive_with_bs_sir_destination_and_valid_checksums(self, ila):
        bpk = ila.sir_traffic()["on_b_link"]
        b_ip = ipaddress.IPv6Address(B)
        bad = [p for p in bpk if parse6(p)[1] != b_ip or l4_checksum_ok(p) is False]
        assert len(bpk) >= 10 and not bad, f"{len(bpk)} packets, {len(bad)} bad: {[str(parse6(p)[1]) for p in bad[:3]]}"

    # The same packets on both links: the transport checksum field is untouched with
    # neutral-map (the identifier absorbed the change) and rewritten by adjust-transport.

    @staticmethod
    def checksum_pairs(ila):
        t = ila.sir_traffic()
        on_b = {l4_key(p): l4_csum(p) for p in t["on_b_link"]}
        pairs = [(l4_csum(p), on_b[l4_key(p)]) for p in t["to_b"] if l4_key(p) in on_b]
        return pairs, sum(1 for m, b in pairs if m == b)

    @pytest.mark.only(mode="neutral-map")
    def test_checksum_neutral_the_transport_checksum_is_the_same_on_the_ila_network_and_bs_link(self, ila):
        pairs, same = self.checksum_pairs(ila)
        assert len(pairs) >= 10 and same == len(pairs), f"{same} of {len(pairs)} matched packets unchanged"

    @pytest.mark.only(mode="adjust-transport")
    def test_adjust_transport_the_transport_checksum_is_rewritten_between_the_ila_network_and_bs_link(self, ila):
        pairs, same = self.checksum_pairs(ila)
        assert len(pairs) >= 10 and same == 0, f"{same} of {len(pairs)} matched packets unchanged"

    # --- Unmapped identifier (B2 = 3333:0:0:1::b2 has no mapping yet). The
    # adjust-transport mode has unmapped = "drop", neutral-map has "forward".

    @pytest.mark.only(mode="adjust-transport")
    def test_unmapped_drop_datagrams_to_an_unmapped_sir_address_are_dropped(self, ila):
        r, sir_mid, _ = ila.unmapped_traffic()
        assert "answers=0" in r.stdout and not sir_mid, r.stdout + f" ({len(sir_mid)} seen on the ILA network)"

    @pytest.mark.only(mode="adjust-transport")
    def test_unmapped_drop_r1_counts_them_no_mapping_in_its_stats_line(self, ila):
        _, _, before = ila.unmapped_traffic()
        counted = wait_for(lambda: ila.r1.stats().get("no_mapping", 0) - before >= 3, 4)
        assert counted, (f"no_mapping before {before}, now {ila.r1.stats().get('no_mapping')}: "
                         f"{[l for l in ila.r1.text().splitlines() if 'stats' in l][-1:]}")

    @pytest.mark.only(mode="neutral-map")
    def test_unmapped_forward_datagrams_to_an_unmapped_sir_address_pass_unchanged_and_b_answers(self, ila):
        r, sir_mid, _ = ila.unmapped_traffic()
        assert "answers=3" in r.stdout and f"to={B2} from={A}" in r.stdout and len(sir_mid) >= 3, \
            r.stdout + r.stderr + f" ({len(sir_mid)} with the SIR destination seen on the ILA network)"

    @pytest.mark.only(mode="neutral-map")
    def test_unmapped_forward_r1_dropped_nothing(self, ila):
        ila.unmapped_traffic()
        fwd = ila.r1.stats()
        assert "no_mapping" not in fwd, str(fwd)

    # --- quicknat ila reload: map B2 (behind R2) by editing the configuration files.

    def test_ila_reload_applies_the_edited_configuration_1_added(self, ila):
        outs = ila.reload()
        assert all(o.returncode == 0 and "1 added" in o.stdout for o in outs), \
            " | ".join(o.stdout + o.stderr for o in outs)

    def test_sighup_rereads_the_configuration_file_1_added(self, ila):
        assert ila.sighup(), ila.r3.text()[-600:]

    def test_ila_list_shows_the_reloaded_mapping(self, ila):
        ila.sighup()
        res = ila.r1.ila("list")
        assert f"{ID_B2} {LOC_B1}" in res.stdout.split("\n"), res.stdout + res.stderr

    def test_after_reload_traffic_to_the_newly_mapped_identifier_crosses_with_bs_locator_and_is_answered(self, ila):
        r, lb2 = ila.reload_traffic()
        assert "answers=3" in r.stdout and f"to={B2} from={A}" in r.stdout and len(lb2) >= 3, \
            r.stdout + r.stderr + f" ({len(lb2)} with the locator on the ILA network)"

    # --- B moves from R2 to R3 while a TCP connection exchanges data every 100 ms.

    def test_ila_set_moves_bs_identifier_to_the_new_locator_on_all_routers(self, ila):
        sets = ila.move()["sets"]
        assert all(s.returncode == 0 and f"(was {LOC_B1})" in s.stdout for s in sets), \
            " | ".join(s.stdout + s.stderr for s in sets)

    def test_b_moves_r2_to_r3_the_tcp_connection_survives_every_message_echoed(self, ila):
        m = ila.move()
        rep = m["rep"]
        assert rep["error"] is None and rep["sent"] >= 20 and rep["echoed"] == rep["sent"] and m["after"] >= 10, \
            (f"error={rep['error']} sent={rep['sent']} echoed={rep['echoed']} after move={m['after']} "
             f"(move took {m['t_moved'] - m['t_move']:.2f}s)")

    def test_b_moves_longest_stall_below_3s(self, ila, record_property):
        gaps = ila.move()["gaps"]
        stall = max(gaps) if gaps else 99
        record_property("longest_stall_s", f"{stall:.2f}")
        assert stall < 3.0, f"longest stall {stall:.2f}s, gaps {sorted(gaps)[-3:]}"

    def test_after_the_move_the_ila_network_carries_bs_new_locator_and_bs_replies_still_reach_a(self, ila):
        m = ila.move()
        assert len(m["new"]) >= 10 and len(m["from_b"]) >= 10, f"{len(m['new'])} to {LOC_B2}, {len(m['from_b'])} from B"

    def test_ila_list_shows_bs_new_locator(self, ila):
        ila.move()
        res = ila.r1.ila("list")
        assert f"{ID_B} {LOC_B2}" in res.stdout.split("\n"), res.stdout + res.stderr

    def test_after_the_move_a_new_exchange_ping6_reaches_b_at_its_new_locator(self, ila):
        ila.move()
        r = ila.nsx("a", "ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", B, check=False)
        assert r.returncode == 0, r.stdout + r.stderr

    # --- The XDP fast path (its variants only).

    def test_xdp_fast_path_carried_the_traffic_both_ways_on_r1_and_r3(self, ila):
        """With the fast path on, the XDP program itself forwarded packets in both
        directions on R1 (A's router) and R3 (B's after the move: its mapping came from
        `ila set`), installed the mappings and had no map errors; off, the routers report
        no fast-path counters at all."""
        ila.move()
        ila.nsx("a", "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", B, check=False)
        if ila.fast != "on":
            assert "xdp_fast=" not in ila.r1.text(), ila.r1.text()[-600:]
            return
        def counters():
            return {n: ila.routers[n].stats() for n in ("r1", "r3")}
        ok = lambda: all(c.get("xdp_fast_out", 0) > 0 and c.get("xdp_fast_in", 0) > 0 for c in counters().values())
        wait_for(ok, timeout=5)
        c = counters()
        assert ok() and all(v.get("xdp_fast_installs", 0) >= 2 and v.get("xdp_fast_errors", 1) == 0
                            for v in c.values()), c

    # --- Stop.

    def test_every_quicknat_stops_cleanly_on_sigterm(self, ila):
        rcs = ila.stop()
        ok = all(rc == 0 and "stopped." in ila.routers[n].text() for n, rc in rcs.items())
        assert ok, str(rcs) + " " + " | ".join(r.text()[-400:] for r in ila.routers.values())

    def test_no_xdp_program_left_attached(self, ila):
        ila.stop()
        xdp = "".join(ila.nsx(n, "ip", "link", "show", check=False).stdout for n in ("r1", "r2", "r3"))
        assert "xdp" not in xdp, xdp

    def test_namespaces_removed(self, ila):
        left = ila.close()
        assert not left, str(left)
