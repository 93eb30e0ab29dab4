"""Shared helpers for the live end-to-end tests (tests/e2e/test_*.py).

Network namespaces with guaranteed teardown (a Scenario, closed by the fixture that made
it), commands inside them with bounded run times, a quicknat process with its log, small
traffic programs (HTTP, UDP, a frame counter, an ICMP error probe), and waiting helpers
that await a condition instead of sleeping.
"""

import functools
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# A tiny HTTP server (IPv4 or IPv6, by the address it binds) that answers
#   GET /            "peer=ADDR"
#   GET /big?n=N     N bytes
#   POST /           "got=N peer=ADDR" after reading the whole body
HTTP_SERVER = r"""
import http.server, socket, socketserver, sys
class S(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
    def server_bind(self):
        # Skip HTTPServer's reverse-DNS lookup (socket.getfqdn): there is no DNS here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "test", self.server_address[1]
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/big?n="):
            self.reply(b"x" * int(self.path[7:]))
        else:
            self.reply(("peer=%s\n" % self.client_address[0]).encode())
    def do_POST(self):
        left, got = int(self.headers.get("Content-Length", "0")), 0
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                break
            got += len(chunk); left -= len(chunk)
        self.reply(("got=%d peer=%s\n" % (got, self.client_address[0])).encode())
    def log_message(self, *a): pass
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""

# A UDP server that answers each datagram with the sender's address and port, or a
# datagram "big:N" with N bytes (the kernel's default path MTU discovery sets DF on it).
UDP_SERVER = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(65535)
    try:
        if data.startswith(b"big:"):
            s.sendto(b"y" * int(data[4:]), peer)
        else:
            s.sendto(("peer=%s:%d" % peer[:2]).encode(), peer)
    except OSError:
        pass  # EMSGSIZE once the path MTU is known: the client just times out
"""

# Sends one datagram (argv[3], default "hello") and prints the answer, "refused" (an
# ICMP error reached the socket) or "timeout".
UDP_CLIENT = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
s.connect((sys.argv[1], int(sys.argv[2])))
s.send(sys.argv[3].encode() if len(sys.argv) > 3 else b"hello")
try:
    print(s.recv(2048).decode())
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
"""

# Counts the frames seen on an interface by EtherType (both directions) until SIGTERM
# or a time limit; prints "ready", then one JSON object {"0x86dd": n, ...}.
FRAME_COUNTER = r"""
import json, signal, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind((sys.argv[1], 0))
s.settimeout(0.2)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
end = time.time() + float(sys.argv[2])
counts = {}
print("ready", flush=True)
while not stop and time.time() < end:
    try:
        d = s.recv(65535)
    except (socket.timeout, InterruptedError):
        continue
    if len(d) >= 14:
        k = "0x%04x" % struct.unpack("!H", d[12:14])[0]
        counts[k] = counts.get(k, 0) + 1
print(json.dumps(counts), flush=True)
"""


# Sends argv[3] bytes (a pattern) to argv[1]:argv[2] over UDP, IPv4 with DF clear, and
# prints the length of an intact echo, "corrupt" or "timeout"; with argv[4], sends that
# text instead and exits without waiting.
UDP_BIG = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
if fam == socket.AF_INET:
    s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: DF clear
s.connect((sys.argv[1], int(sys.argv[2])))
if len(sys.argv) > 4:
    s.send(sys.argv[4].encode()); sys.exit()
want = bytes(i % 251 for i in range(int(sys.argv[3])))
s.send(want)
try:
    d = s.recv(65535)
    print(len(d) if d == want else "corrupt")
except socket.timeout:
    print("timeout")
"""


def sh(*args, check=True, timeout=20, **kw):
    return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True, **kw)


def nsx(ns, *args, **kw):
    """Runs a command inside namespace `ns` (its full name), bounded by `timeout`."""
    return sh("ip", "netns", "exec", ns, *args, **kw)


def popen_ns(ns, *args, **kw):
    return subprocess.Popen(["ip", "netns", "exec", ns, *args], **kw)


def wait_for(pred, timeout, step=0.1):
    """Polls `pred` until it returns something true or `timeout` seconds pass; returns
    its last value."""
    end = time.time() + timeout
    while True:
        v = pred()
        if v or time.time() >= end:
            return v
        time.sleep(step)


def wait_listening(ns, addr, port, timeout=5.0):
    """Waits until a TCP listener accepts on addr:port (IPv4 or IPv6) inside `ns`."""
    probe = f"import socket; socket.create_connection(('{addr}', {port}), timeout=0.5).close()"
    end = time.time() + timeout
    while time.time() < end:
        if nsx(ns, sys.executable, "-c", probe, check=False).returncode == 0:
            return True
        time.sleep(0.1)
    return False


def wait_udp_bound(ns, addr, port, timeout=5.0):
    """Waits until a UDP socket is bound to addr:port inside `ns` (per `ss`)."""
    want = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"

    def bound():
        out = nsx(ns, "ss", "-Hlun", check=False).stdout
        return any(want in line.split() for line in out.splitlines())

    return wait_for(bound, timeout)


def offloads_off(ns, dev):
    """Turns segmentation/receive offloads off: quicknat sees MTU-sized frames only."""
    if shutil.which("ethtool"):
        nsx(ns, "ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off", check=False)


def netns_list():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


# Every namespace name a Scenario of this process handed out: conftest deletes any of
# them still present when the session ends (a last net under the fixtures' teardown).
LIVE = set()


def teardown(names):
    """Kills every process in the namespaces `names` and deletes them."""
    for n in names:
        pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def remove_leftovers():
    """Deletes the namespaces of this process that are still there; returns their names."""
    present = set(netns_list().split())
    left = sorted(n for n in LIVE if n in present)
    teardown(left)
    LIVE.clear()
    return left


def once(method):
    """Runs a no-argument method at most once per object and hands every later caller its
    result (or raises its exception again): the steps of a topology that several tests
    check, run in file order by the first test that needs them."""

    @functools.wraps(method)
    def wrapper(self):
        done = self.__dict__.setdefault("_once", {})
        key = method.__name__
        if key not in done:
            try:
                done[key] = (True, method(self))
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # noqa: BLE001 -- handed to every test of the step
                done[key] = (False, e)
        ok, value = done[key]
        if not ok:
            raise value
        return value

    return wrapper


class Quicknat:
    """One `quicknat run --config` process inside a namespace, logging to a temp file."""

    def __init__(self, binary, ns, config_text, label, env=None):
        self.label = label
        self.final = None
        self.cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False, prefix=f"qn-{label}-")
        self.cfg.write(config_text)
        self.cfg.close()
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False, prefix=f"qn-{label}-")
        self.proc = popen_ns(ns, os.path.abspath(binary), "run", "--config", self.cfg.name,
                             stdout=self.log, stderr=self.log,
                             env=None if env is None else {**os.environ, **env})

    def text(self):
        if self.final is not None:
            return self.final
        with open(self.log.name) as f:
            return f.read()

    def wait_started(self, timeout=10.0):
        """Waits (bounded) for the start-up line "quicknat: MODE (...)" or an exit."""
        end = time.time() + timeout
        while time.time() < end and self.proc.poll() is None:
            if "quicknat: " in self.text():
                return True
            time.sleep(0.1)
        return False

    def stats(self):
        """The last stats line, for failure details."""
        lines = [l for l in self.text().splitlines() if "stats:" in l]
        return lines[-1] if lines else "(no stats line yet)"

    def dropped(self, reason):
        """The count of drop `reason` on the last stats line (0 before any)."""
        seen = re.findall(rf"[\[ ]{reason}=(\d+)", self.stats())
        return int(seen[-1]) if seen else 0

    def wait_counter(self, name, at_least=1, timeout=5.0):
        """Waits (bounded) for a stats line whose counter `name` is at least `at_least`
        (the counters reach the log once per stats_interval); returns whether it came."""
        end = time.time() + timeout
        while True:
            seen = [int(v) for v in re.findall(rf" {name}=(\d+)", self.stats())]
            if seen and seen[-1] >= at_least:
                return True
            if time.time() >= end:
                return False
            time.sleep(0.2)

    def stop(self, timeout=5.0):
        """SIGTERM; returns (exit code or None, log text)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, self.text()

    def cleanup(self):
        """Kills the process if it still runs and removes its files (the log text stays
        readable through text())."""
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.final is None:
            try:
                self.final = self.text()
            except OSError:
                self.final = ""
        for f in (self.cfg.name, self.log.name):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


class Scenario:
    """The namespaces, helper processes and quicknat instances of one test topology.
    `close()` kills and deletes everything and returns the namespaces still listed after
    that; the fixture that made the scenario calls it at teardown (also when a test failed
    or the run was interrupted), the test "namespaces removed" calls it earlier to check.

    Namespace names: PREFIX-SHORT-PID-N, unique within the run."""

    _serial = itertools.count(1)

    def __init__(self, prefix, names):
        serial = next(Scenario._serial)
        self.ns = {k: f"{prefix}-{k}-{os.getpid()}-{serial}" for k in names}
        LIVE.update(self.ns.values())
        self.procs, self.quicknats, self.deferred = [], [], []
        self.left = None

    # Commands taking the short namespace names ("cli", "gw", ...).
    def nsx(self, name, *args, **kw):
        return nsx(self.ns[name], *args, **kw)

    def wait_listening(self, name, addr, port, timeout=5.0):
        return wait_listening(self.ns[name], addr, port, timeout)

    def wait_udp_bound(self, name, addr, port, timeout=5.0):
        return wait_udp_bound(self.ns[name], addr, port, timeout)

    def offloads_off(self, name, dev):
        offloads_off(self.ns[name], dev)

    def add_namespaces(self):
        for n in self.ns.values():
            sh("ip", "netns", "add", n)

    def make_namespaces(self):
        """Adds the namespaces, loopback up, forwarding off in each (only quicknat forwards
        in a translator's namespace; a router namespace turns it back on)."""
        self.add_namespaces()
        for n in self.ns:
            self.nsx(n, "ip", "link", "set", "lo", "up")
            self.nsx(n, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
            self.nsx(n, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=0")

    def link(self, a, a_dev, b, b_dev, mtu=None, own_link_local=False):
        """A veth pair from `a_dev` in namespace `a` to `b_dev` in `b`, up, offloads off.
        `own_link_local`: no EUI-64 link-local address (the test gives its own), so the
        ICMPv6 error source the gateway picks among them is known."""
        sh("ip", "link", "add", a_dev, "netns", self.ns[a], "type", "veth", "peer", "name", b_dev,
           "netns", self.ns[b])
        for n, dev in ((a, a_dev), (b, b_dev)):
            if mtu:
                self.nsx(n, "ip", "link", "set", dev, "mtu", str(mtu))
            if own_link_local:
                self.nsx(n, "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.addr_gen_mode=1")
            self.nsx(n, "ip", "link", "set", dev, "up")
            self.offloads_off(n, dev)

    def popen(self, name, *args, **kw):
        """A helper process in namespace `name` (short name), killed at the end."""
        p = popen_ns(self.ns[name], *args, **kw)
        self.procs.append(p)
        return p

    def quicknat(self, binary, name, config_text, label, env=None):
        """A quicknat in namespace `name` (with `env` added to its environment), killed and
        its files removed at the end."""
        q = Quicknat(binary, self.ns[name], config_text, label, env)
        self.quicknats.append(q)
        return q

    def defer(self, fn):
        """Runs `fn` first at the end."""
        self.deferred.append(fn)

    def log_tails(self, n=1500):
        """(label, last `n` characters of its log) per quicknat, for failure reports."""
        out = []
        for q in self.quicknats:
            try:
                out.append((q.label, q.text()[-n:]))
            except OSError as e:
                out.append((q.label, f"(log unreadable: {e})"))
        return out

    def close(self):
        """Tears everything down (once); returns the namespaces still listed after it."""
        if self.left is not None:
            return self.left
        for fn in self.deferred:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 -- teardown goes on
                print(f"teardown step failed: {e!r}", file=sys.stderr)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for q in self.quicknats:
            q.cleanup()
        teardown(self.ns.values())
        present = set(netns_list().split())
        self.left = [n for n in self.ns.values() if n in present]
        LIVE.difference_update(n for n in self.ns.values() if n not in present)
        return self.left


class FrameCounter:
    """Counts frames by EtherType on `dev` in `ns` while traffic runs."""

    def __init__(self, ns, dev, limit=60):
        self.proc = popen_ns(ns, sys.executable, "-u", "-c", FRAME_COUNTER, dev, str(limit),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.ready = self.proc.stdout.readline().strip() == "ready"

    def finish(self, timeout=5.0):
        """Stops the counter; returns {ethertype: frames} or None if it failed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return None
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None

# Sends one UDP datagram with the given IPv6 hop limit (IPv4 TTL) and reports the ICMP
# error that comes back on the socket's error queue: "type=T code=C from=ADDR", or
# "none". argv: address port hops
ICMP_PROBE = r"""
import select, socket, struct, sys
addr, port, hops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
v6 = ":" in addr
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, 25, 1)                         # IPV6_RECVERR
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, hops)
else:
    s.setsockopt(socket.IPPROTO_IP, 11, 1)                           # IP_RECVERR
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, hops)
s.connect((addr, port)); s.send(b"probe")
p = select.poll(); p.register(s, select.POLLERR)
if not p.poll(3000):
    print("none"); sys.exit()
_, anc, _, _ = s.recvmsg(512, 512, socket.MSG_ERRQUEUE)
for level, kind, data in anc:
    # struct sock_extended_err: errno u32, origin u8, type u8, code u8, pad u8, info u32,
    # data u32, then the offender's sockaddr.
    errno_, origin, typ, code = struct.unpack_from("=IBBB", data)
    off = data[16:]
    who = socket.inet_ntop(socket.AF_INET6, off[8:24]) if v6 else socket.inet_ntop(socket.AF_INET, off[4:8])
    print("type=%d code=%d from=%s" % (typ, code, who)); sys.exit()
print("none")
"""


def mask_translated_ident(ip):
    """`ip` (bytes from the IP header on) with the IPv4 Identification and header checksum
    zeroed when it is a whole datagram with DF clear: a translator numbers those from a
    keyed per-(source, destination, protocol) counter (RFC 6864), unpredictable and so
    different in every run by design. Fragments keep their datagram's ID and are left as
    they are; so is a header whose checksum is wrong, so that still shows."""
    if len(ip) < 20 or ip[0] >> 4 != 4:
        return ip
    ihl = (ip[0] & 0xF) * 4
    flags = int.from_bytes(ip[6:8], "big")
    if flags & 0x7FFF or len(ip) < ihl:  # DF, MF or an offset
        return ip
    total = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, ihl, 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    if total != 0xFFFF:
        return ip
    return ip[:4] + b"\0\0" + ip[6:10] + b"\0\0" + ip[12:]
