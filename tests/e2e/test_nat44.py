#!/usr/bin/env python3
"""End-to-end test of `quicknat run` with real kernels on both sides.

Builds three network namespaces joined by veth pairs,

    cli (10.0.0.2, 10.0.0.20) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2)

runs quicknat as the NAT44 gateway in `gw` (the kernel there does not forward:
ip_forward=0, so every translated packet went through quicknat), and checks with
real traffic that:

  * ping from the client reaches the server and the replies come back;
  * a TTL that expires at the gateway is answered with ICMP Time Exceeded;
  * a TCP connection (HTTP) works and the server sees the public address 203.0.113.1;
  * a UDP exchange works and the server sees the public address;
  * a UDP datagram to a closed port comes back as ICMP port unreachable, translated
    back to the client (the client's socket reports "connection refused");
  * a hairpin connection (client -> 203.0.113.1:8080 -> 10.0.0.20:80 on the inside)
    works and the inside server sees the public address;
  * iperf3 moves TCP data through the gateway;
  * quicknat stops cleanly on SIGTERM, and everything is torn down (also on failure).

Usage: sudo python3 tests/e2e/test_nat44.py [--quicknat PATH] [--keep]
Prints one line per check and a final "N passed, M failed".
"""

import argparse
import os
import shutil
import signal
import re
import subprocess
import sys
import tempfile
import time

SUFFIX = str(os.getpid())
NS = {"cli": f"qn-cli-{SUFFIX}", "gw": f"qn-gw-{SUFFIX}", "srv": f"qn-srv-{SUFFIX}"}
PUBLIC = "203.0.113.1"
WORKERS = [1]  # set from --workers
SERVER = "198.51.100.2"

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = {workers}
stats_interval = 1

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]

[[nat44.forward]]
protocol = "tcp"
public = "203.0.113.1:8080"
inside = "10.0.0.20:80"
"""

# A tiny HTTP server that answers with the address the request came from.
HTTP_SERVER = r"""
import http.server, socketserver, sys
class S(http.server.ThreadingHTTPServer):
    def server_bind(self):
        # Skip HTTPServer's reverse-DNS lookup (socket.getfqdn): there is no DNS here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "test", self.server_address[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("peer=%s\n" % self.client_address[0]).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""

# A UDP server that answers each datagram with the sender's address.
# UDP_SERVER and UDP_CLIENT: see netns.


# Reads a TCP connection to the end and prints the SHA-256 of what arrived.
HASH_SINK = r"""
import hashlib, socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.2", 5202)); s.listen(1); s.settimeout(40)
while True:  # the readiness probe connects and closes first: skip empty connections
    c, _ = s.accept(); c.settimeout(40); h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        h.update(b); n += len(b)
    c.close()
    if n:
        break
print(h.hexdigest())
"""

# Sends N pseudo-random bytes to HOST:PORT in 256 KB writes; prints their SHA-256.
HASH_SOURCE = r"""
import hashlib, os, random, socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(7); h = hashlib.sha256()
s = socket.create_connection((host, port), timeout=30)
left = n
while left:
    b = rnd.randbytes(min(left, 1 << 18)); h.update(b); s.sendall(b); left -= len(b)
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
print(h.hexdigest())
"""








import netns as common  # noqa: E402
from netns import UDP_CLIENT, UDP_SERVER, sh  # noqa: E402,F401

# The command helpers, taking this test's short namespace names.
_names = common.Names(NS)
nsx, popen_ns, wait_listening, offloads_off, teardown = (
    _names.nsx, _names.popen, _names.wait_listening, _names.offloads_off, _names.teardown)

def setup():
    for n in NS.values():
        sh("ip", "netns", "add", n)
    # One receive queue per worker (AF_XDP binds worker i to queue i; AF_PACKET fans out).
    q = ("numtxqueues", str(WORKERS[0]), "numrxqueues", str(WORKERS[0]))
    sh("ip", "link", "add", "c0", "netns", NS["cli"], *q, "type", "veth", "peer", "name", "g-in", "netns", NS["gw"], *q)
    sh("ip", "link", "add", "s0", "netns", NS["srv"], *q, "type", "veth", "peer", "name", "g-out", "netns", NS["gw"], *q)
    nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
    nsx("cli", "ip", "addr", "add", "10.0.0.20/24", "dev", "c0")
    nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
    nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
    nsx("srv", "ip", "addr", "add", "198.51.100.2/24", "dev", "s0")
    for ns, devs in (("cli", ["c0", "lo"]), ("gw", ["g-in", "g-out", "lo"]), ("srv", ["s0", "lo"])):
        for d in devs:
            nsx(ns, "ip", "link", "set", d, "up")
    nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
    nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
    # The gateway's kernel must not forward: everything that crosses goes through quicknat.
    nsx("gw", "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
    for ns, dev in (("cli", "c0"), ("gw", "g-in"), ("gw", "g-out"), ("srv", "s0")):
        offloads_off(ns, dev)



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quicknat", default=os.path.join(os.path.dirname(__file__), "..", "..", "target", "release", "quicknat"))
    ap.add_argument("--keep", action="store_true", help="leave the namespaces for inspection")
    ap.add_argument("--backend", default="af_packet", choices=["af_packet", "af_xdp"])
    ap.add_argument("--workers", type=int, default=1, choices=[1, 2, 4], help="worker threads (and queues per veth)")
    args = ap.parse_args()
    WORKERS[0] = args.workers
    if os.geteuid() != 0:
        print("e2e_live: needs root (network namespaces)")
        print("0 passed, 1 failed")
        return 1
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail and not ok else ''}", flush=True)

    cfg = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    cfg.write(CONFIG.replace("{backend}", args.backend).replace("{workers}", str(args.workers)))
    cfg.close()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    procs = []
    try:
        setup()
        qn = popen_ns("gw", os.path.abspath(args.quicknat), "run", "--config", cfg.name, stdout=log, stderr=log)
        procs.append(qn)
        procs.append(popen_ns("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80"))
        procs.append(popen_ns("srv", sys.executable, "-c", UDP_SERVER, SERVER, "5353"))
        procs.append(popen_ns("cli", sys.executable, "-c", HTTP_SERVER, "10.0.0.20", "80"))
        if shutil.which("iperf3"):
            procs.append(popen_ns("srv", "iperf3", "-s", "-B", SERVER, "-1"))
        wait_listening("srv", SERVER, 80)
        wait_listening("cli", "10.0.0.20", 80)
        time.sleep(0.5)
        check(f"quicknat started ({args.backend})", qn.poll() is None, open(log.name).read()[-2000:])
        if args.backend == "af_xdp":
            started = open(log.name).read()
            check("AF_XDP backend in use (no fallback)", "AF_XDP (copy mode)" in started, started[-2000:])

        r = nsx("cli", "ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, check=False)
        check("ping through the NAT", r.returncode == 0, r.stdout + r.stderr)

        # TTL 1: the gateway answers ICMP Time Exceeded from its inside address.
        r = nsx("cli", "ping", "-c", "1", "-t", "1", "-W", "2", SERVER, check=False)
        check("TTL expiring at the gateway is answered with ICMP Time Exceeded", "Time to live exceeded" in r.stdout, r.stdout + r.stderr)

        r = nsx("cli", "curl", "-s", "--max-time", "5", f"http://{SERVER}/", check=False)
        check("TCP (HTTP) through the NAT, server sees the public address", r.stdout.strip() == f"peer={PUBLIC}", r.stdout + r.stderr)

        r = nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER, "5353", check=False)
        check("UDP through the NAT, server sees the public address", r.stdout.startswith(f"peer={PUBLIC}:"), r.stdout + r.stderr)

        r = nsx("cli", sys.executable, "-c", UDP_CLIENT, SERVER, "9", check=False)
        check("ICMP port unreachable translated back to the client", r.stdout.strip() == "refused", r.stdout + r.stderr)

        r = nsx("cli", "curl", "-s", "--max-time", "5", "--interface", "10.0.0.2", f"http://{PUBLIC}:8080/", check=False)
        check("hairpin through the port forward, inside server sees the public address", r.stdout.strip() == f"peer={PUBLIC}", r.stdout + r.stderr)

        if shutil.which("iperf3"):
            r = nsx("cli", "iperf3", "-c", SERVER, "-t", "2", "-J", check=False, timeout=30)
            ok = r.returncode == 0 and '"sum_received"' in r.stdout
            gbps = ""
            if ok:
                import json
                gbps = "%.2f Gbit/s" % (json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9)
            check(f"iperf3 TCP through the NAT ({gbps})", ok, r.stdout[-500:] + r.stderr)

        if args.backend == "af_packet":
            # GSO pass-through: the client's TSO makes 64 KB super-packets, quicknat passes
            # them on behind virtio-net headers; the gateway's outside interface has its
            # transmit offloads off, so its kernel segments them and completes every
            # checksum in software, and the server's kernel verifies each one. A wrong
            # partial checksum would stall the transfer or corrupt the hash.
            nsx("cli", "ethtool", "-K", "c0", "tx", "on", "tso", "on", "gso", "on", check=False)
            nsx("gw", "ethtool", "-K", "g-out", "tx", "off", "tso", "off", "gso", "off", check=False)
            sink = popen_ns("srv", sys.executable, "-c", HASH_SINK, stdout=subprocess.PIPE, text=True)
            wait_listening("srv", SERVER, 5202)
            r = nsx("cli", sys.executable, "-c", HASH_SOURCE, SERVER, "5202", str(16 << 20), check=False, timeout=60)
            try:
                got, _ = sink.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                sink.kill()
                got, _ = sink.communicate()
            text = open(log.name).read()
            nsx("cli", "ethtool", "-K", "c0", "tx", "off", "tso", "off", "gso", "off", check=False)
            # The counters reach the log once a second: wait for a line written after the
            # transfer.
            gso = []
            for _ in range(30):
                time.sleep(0.2)
                gso = re.findall(r" gso=(\d+)", open(log.name).read())
                if gso and int(gso[-1]) > 0:
                    break
            check("16 MiB TCP with GSO super-packets passed through, every segment's checksum verified by the server",
                  r.returncode == 0 and got.strip() == r.stdout.strip() and len(got.strip()) == 64
                  and bool(gso) and int(gso[-1]) > 0,
                  f"sent {r.stdout.strip()} got {got.strip()} {r.stderr[-300:]} gso counters {gso[-3:]}")

        # An interface going down and up must not kill the daemon or stop forwarding.
        nsx("gw", "ip", "link", "set", "g-out", "down")
        time.sleep(0.5)
        nsx("gw", "ip", "link", "set", "g-out", "up")
        r = None
        for _ in range(10):
            r = nsx("cli", "ping", "-c", "1", "-W", "1", SERVER, check=False)
            if r.returncode == 0:
                break
            time.sleep(0.5)
        check("forwarding resumes after the outside interface goes down and up", qn.poll() is None and r.returncode == 0, (r.stdout + r.stderr) if r else "")

        qn.send_signal(signal.SIGTERM)
        try:
            rc = qn.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        text = open(log.name).read()
        check("quicknat stops cleanly on SIGTERM", rc == 0 and "stopped." in text, text[-2000:])
        xdp_left = nsx("gw", "ip", "link", "show", check=False).stdout
        check("no XDP program left attached", "xdp" not in xdp_left, xdp_left)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if not args.keep:
            teardown()
        os.unlink(cfg.name)
    print(open(log.name).read()[-1500:], file=sys.stderr)
    os.unlink(log.name)
    left = [n for n in NS.values() if n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout]
    if not args.keep:
        check("namespaces removed", not left, str(left))
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
