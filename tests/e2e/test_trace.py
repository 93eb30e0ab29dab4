"""`quicknat trace` on a live NAT44 and NAT64 gateway, and `quicknat translate --trace` on
a capture of the same traffic.

    cli (10.0.0.2 | 2001:db8:1::2) == gw (quicknat) == srv (198.51.100.2: UDP echo :5353)

A trace is armed over the control socket for every packet with the public address
203.0.113.1 (before or after translation). Probe datagrams are sent until the trace shows
one (it is armed), then: a UDP flow from a new source port (its first packet creates the
session, the answer finds it), a ping (the same for ICMP), and a datagram from the server
to a public port nobody has (dropped as no_mapping). Each record must say where the packet
arrived, what the mode decided and where it went. The end line says how many packets the
fast path forwarded meanwhile (a number with the fast path on, null with it off).

Needs root.
    sudo python3 -m pytest tests/e2e/test_trace.py [--quicknat PATH]
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

from netns import popen_ns, sh, wait_for
# `gw`: a live NAT44 and NAT64 gateway with its control socket (the control API's fixture).
from test_control_api import SERVER, UDP_FLOWS, gw  # noqa: F401

pytestmark = pytest.mark.needs_root

PUBLIC = "203.0.113.1"
PROBE_PORT = 40999


def udp(gw, *ports):
    r = gw.nsx("cli", "python3", "-c", UDP_FLOWS, gw.client, gw.target, "5353",
               *map(str, ports), timeout=30)
    assert all(a.startswith(f"peer={PUBLIC}:") for a in r.stdout.split()), r.stdout
    return r.stdout.split()


class Lines(list):
    """JSON lines collected by a reader thread; `drained()` waits until it has read the
    last one (after the process exited, its final lines may still be in the pipe)."""

    def drained(self, timeout=10):
        self.reader.join(timeout)
        return self


def follow(proc):
    """The JSON lines `proc` prints, collected by a thread as they come."""
    lines = Lines()

    def read():
        for line in proc.stdout:
            lines.append(json.loads(line))
    lines.reader = threading.Thread(target=read, daemon=True)
    lines.reader.start()
    return lines


class Capture:
    """tcpdump of the IP packets namespace `ns` sends on `dev`, to a pcap file."""

    def __init__(self, ns, dev, path):
        self.path, self.err = path, open(path + ".err", "w+")
        self.proc = popen_ns(ns, "tcpdump", "-i", dev, "-Q", "out", "-n", "-U",
                             "--immediate-mode", "-s", "2048", "-w", path, "ip or ip6",
                             stdout=subprocess.DEVNULL, stderr=self.err)
        assert wait_for(lambda: "listening on" in open(path + ".err").read()
                        or self.proc.poll() is not None, 5)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=5)


def decisions(records):
    """What the mode decided for each record, without the interface names (a capture
    replay has none)."""
    return [(r["arrived"], r["packet"], r["translated"], r["verdict"], r["drop_reason"],
             [s for s in r["steps"] if not s.startswith(("received", "sent"))])
            for r in records]


def test_a_trace_shows_sessions_made_and_found_and_a_drop_with_its_reason(gw, quicknat):
    # The packets each peer sends, captured as they leave it: replayed below.
    tmp = tempfile.mkdtemp(prefix="qn-trace-")
    caps = [Capture(gw.ns["cli"], "c0", os.path.join(tmp, "cli.pcap")),
            Capture(gw.ns["srv"], "s0", os.path.join(tmp, "srv.pcap"))]
    trace = subprocess.Popen(
        [quicknat, "trace", "--host", PUBLIC, "-n", "40", "--timeout", "30", "--json",
         "--socket", gw.sock],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = follow(trace)
    try:
        # Armed once a probe shows up in it.
        def probe_seen():
            udp(gw, PROBE_PORT)
            return any(str(PROBE_PORT) in r.get("packet", "") for r in records)
        assert wait_for(probe_seen, 10), (records, trace.poll())
        start = len(records)
        udp(gw, 41000)
        # A fixed echo identifier inside the pool's port range, so the gateway keeps it and
        # the replay (a new process, its own random port choices) decides the same; ping's
        # own random one below 1024 was translated to a random id, different in the replay.
        ping = gw.nsx("cli", "ping", "-c", "1", "-W", "2", "-e", "4242", gw.target,
                      check=False, timeout=10)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        gw.nsx("srv", "python3", "-c",
               "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
               f"s.sendto(b'x', ('{PUBLIC}', 9))", timeout=10)
        # Five records at least: UDP out and back, echo request and reply, the refused
        # datagram.
        assert wait_for(lambda: any(r.get("drop_reason") for r in records[start:]), 15), records
    finally:
        trace.terminate()
        trace.wait(timeout=10)
        for c in caps:
            c.stop()
    ours = [r for r in records[start:] if str(PROBE_PORT) not in r["packet"]]
    # The same capture replayed: the same decisions, packet for packet.
    merged = os.path.join(tmp, "both.pcap")
    sh("mergecap", "-F", "pcap", "-w", merged, caps[0].path, caps[1].path)
    r = sh(quicknat, "translate", "--config", gw.qn.cfg.name, "--trace", "--json",
           "--host", PUBLIC, merged, os.path.join(tmp, "out.pcap"), check=False)
    assert r.returncode == 0, r.stderr
    offline = [json.loads(l) for l in r.stdout.splitlines()]
    assert all(o["worker"] is None for o in offline), offline
    replayed = {d[1]: d for d in decisions(offline)}
    for live in decisions(ours):
        assert replayed.get(live[1]) == live, (live, replayed.get(live[1]))
    shutil.rmtree(tmp, ignore_errors=True)
    by = lambda pred: [r for r in ours if pred(r)]
    out = by(lambda r: r["arrived"] == "inside" and "41000" in r["packet"])
    back = by(lambda r: r["arrived"] == "outside" and r["packet"].startswith("udp")
              and "> 203.0.113.1:" in r["packet"] and ":5353 >" in r["packet"])
    assert out and back, ours
    o = out[0]
    assert o["steps"][0] == "received on the inside (g-in)", o
    assert "session created" in o["steps"], o
    assert o["verdict"] == "forwarded" and o["drop_reason"] is None, o
    assert o["translated"].startswith(f"udp {PUBLIC}:"), o
    assert "sent on the outside (g-out)" in o["steps"], o
    b = back[-1]
    assert "session found" in b["steps"], b
    assert f":41000" in b["translated"] and b["verdict"] == "forwarded", b
    assert "sent on the inside (g-in)" in b["steps"], b
    icmp = by(lambda r: r["packet"].startswith("icmp"))
    assert len(icmp) >= 2, ours
    assert "session created" in icmp[0]["steps"] and "session found" in icmp[-1]["steps"], icmp
    drop = by(lambda r: r["drop_reason"] is not None)
    assert drop and drop[0]["drop_reason"] == "no_mapping", ours
    assert drop[0]["verdict"] == "dropped" and drop[0]["arrived"] == "outside", drop
    assert any(s.startswith("dropped: no_mapping (") for s in drop[0]["steps"]), drop
    # Every record says which worker saw it.
    assert all(r["worker"] == 0 for r in ours), ours


def test_a_trace_by_drop_reason_ends_at_its_count_and_says_what_the_fast_path_did(gw, quicknat):
    # Only refused packets: the flows around them are not taken.
    trace = subprocess.Popen(
        [quicknat, "trace", "--drop-reason", "no_mapping", "-n", "2", "--timeout", "20",
         "--json", "--socket", gw.sock],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def done():
            udp(gw, 42000)
            gw.nsx("srv", "python3", "-c",
                   "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                   f"s.sendto(b'x', ('{PUBLIC}', 9))", timeout=10)
            return trace.poll() is not None
        assert wait_for(done, 15), "the trace did not end at its count"
        out, err = trace.communicate(timeout=10)
    finally:
        if trace.poll() is None:
            trace.kill()
    assert trace.returncode == 0, err
    lines = [json.loads(l) for l in out.splitlines()]
    assert [r["drop_reason"] for r in lines[:-1]] == ["no_mapping", "no_mapping"], lines
    end = lines[-1]
    assert (end["end"], end["count"], end["complete"]) == ("trace", 2, True), end
    fast_on = gw.json("status")[1]["status"]["xdp_fast_path"]["on"]
    assert isinstance(end["fast_path_packets"], int) if fast_on else end["fast_path_packets"] is None, end
    # The readable form ends with its summary, also when the time is up first.
    r = sh(quicknat, "trace", "--port", "1", "-n", "1", "--timeout", "1", "--socket", gw.sock,
           check=False)
    assert r.returncode == 0 and "0 packets traced (timed out before the count)" in r.stdout, r.stdout + r.stderr


def test_a_tcp_connection_is_traced_from_its_syn_and_the_fast_path_is_counted(gw, quicknat):
    """A rate-limited HTTP download (about 2 s): its SYN creates the session, the SYN-ACK
    finds it; with the fast path on, the established flow's packets leave the workers and
    the end line counts them."""
    from netns import HTTP_SERVER
    gw.popen("srv", "python3", "-c", HTTP_SERVER, SERVER, "80")
    assert gw.wait_listening("srv", SERVER, 80)
    trace = subprocess.Popen(
        [quicknat, "trace", "--proto", "tcp", "--port", "80", "-n", "10000", "--timeout", "6",
         "--json", "--socket", gw.sock],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = follow(trace)
    # Armed once a first connection's SYN shows up; the download is the next connection.
    url = f"http://{ '[' + gw.target + ']' if ':' in gw.target else gw.target }"
    assert wait_for(lambda: gw.nsx("cli", "curl", "-s", "-o", "/dev/null", "--max-time", "2",
                                   url + "/", check=False, timeout=5) is not None
                    and any(r.get("packet", "").startswith("tcp") for r in records), 10), records
    start = len(records)
    r = gw.nsx("cli", "curl", "-s", "-o", "/dev/null", "--local-port", "43210",
               "--limit-rate", "500k", "-w", "%{size_download}", url + "/big?n=1000000",
               timeout=30)
    assert r.stdout == "1000000", r.stdout
    trace.wait(timeout=20)
    records.drained()
    ours = [r for r in records[start:] if "43210" in r.get("packet", "")]
    end = records[-1]
    assert end.get("end") == "trace", end
    syn = ours[0]
    assert syn["arrived"] == "inside" and "session created" in syn["steps"], ours[:3]
    assert any(r["arrived"] == "outside" and "session found" in r["steps"] for r in ours), ours[:4]
    fast_on = gw.json("status")[1]["status"]["xdp_fast_path"]["on"]
    print(f"fast path on: {fast_on}; traced {len(ours)}; end {end}")  # shown with -s
    if fast_on:
        # Some 700 segments and their ACKs: the workers saw the handshake and a few more.
        assert end["fast_path_packets"] > 100, (end, len(ours))
        assert len(ours) < 400, len(ours)
    else:
        assert end["fast_path_packets"] is None, end
