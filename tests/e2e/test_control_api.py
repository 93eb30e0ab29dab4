"""The control API (JSON lines on the control socket) of a live NAT44 and a live NAT64
gateway, checked against the traffic sent through them.

    cli (10.0.0.2 | 2001:db8:1::2) == gw (quicknat) == srv (198.51.100.2: UDP echo :5353,
                                                          TCP :8080 telling the peer)

Three UDP flows with known source ports and one TCP connection (known port, held open)
go through the gateway; the servers answer with the peer they saw, which is the public
endpoint the gateway chose. Then `quicknat sessions|bindings|pool|census|stats|status
--json` must list exactly those tuples (TCP `established`), the filters narrow to the
right ones, the pool counts the ports, the counters count the packets, the status tells
the mode, backend and the SHA-256 of the configuration file. A peer that is not root is
refused, by the socket file's mode and, with the file opened to all, by the server
(SO_PEERCRED).

Needs root.
    sudo python3 -m pytest tests/e2e/test_control_api.py [--quicknat PATH]
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from netns import UDP_SERVER, Scenario, sh, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
SERVER6 = "2001:db8:64::c633:6402"  # SERVER in the Pref64
NOBODY = 65534

GATEWAY = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = 1
stats_interval = 1
control_socket = "{sock}"
"""

NAT44 = """
[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

NAT64 = """
[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
"""

# Accepts connections and writes "peer=ADDR:PORT\n" to each; keeps them open.
TCP_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
held = []
while True:
    c, peer = s.accept(); c.sendall(("peer=%s:%d\n" % peer[:2]).encode()); held.append(c)
"""

# argv: bind address, source port, server, port: connects, prints the server's line, then
# holds the connection until stdin closes.
TCP_CLIENT = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[3] else socket.AF_INET
s = socket.socket(fam); s.settimeout(5)
s.bind((sys.argv[1], int(sys.argv[2]))); s.connect((sys.argv[3], int(sys.argv[4])))
print(s.recv(100).decode().strip(), flush=True)
sys.stdin.read()
"""

# argv: bind address, server, port, source ports...: one datagram per source port,
# prints each answer ("peer=...") on its own line.
UDP_FLOWS = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET
for p in sys.argv[4:]:
    s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3)
    s.bind((sys.argv[1], int(p))); s.connect((sys.argv[2], int(sys.argv[3])))
    for attempt in range(3):
        s.send(b"hello")
        try:
            print(s.recv(100).decode(), flush=True); break
        except socket.timeout:
            pass
    else:
        print("timeout", flush=True)
"""

CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'{"v":1,"cmd":"status"}\n'); print(s.recv(4096).decode())
"""


class Gateway(Scenario):
    def __init__(self, mode):
        super().__init__(f"qapi{mode[-2:]}", ("cli", "gw", "srv"))
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix="qn-api-")
        os.chmod(self.dir, 0o755)  # like /run: others may reach the socket file
        self.sock = os.path.join(self.dir, "ctl.sock")

    def setup(self, quicknat, backend, extra=""):
        self.quicknat_bin = quicknat
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        if self.mode == "nat44":
            self.client = "10.0.0.2"
            self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
            self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
            self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
            self.target = SERVER
            body = NAT44
        else:
            self.client = "2001:db8:1::2"
            self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
            self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
            self.nsx("cli", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:1::1")
            self.target = SERVER6
            body = NAT64
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        self.popen("srv", "python3", "-c", TCP_SERVER, SERVER, "8080")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        assert self.wait_listening("srv", SERVER, 8080)
        gateway = GATEWAY.format(backend=backend, sock=self.sock)
        if "workers =" in extra:
            gateway = gateway.replace("workers = 1\n", "")
        self.config = gateway + extra + body
        self.qn = self.quicknat(quicknat, "gw", self.config, f"api-{self.mode}-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]
        assert wait_for(lambda: os.path.exists(self.sock), 5), self.qn.text()[-2000:]

    def ctl(self, *args, check=True):
        r = sh(self.quicknat_bin, *args, "--socket", self.sock, check=False)
        if check:
            assert r.returncode == 0, r.stdout + r.stderr
        return r

    def json(self, *args):
        lines = [json.loads(l) for l in self.ctl(*args, "--json").stdout.splitlines()]
        assert lines and lines[-1]["v"] == 1 and lines[-1]["ok"] is True, lines
        return lines[:-1], lines[-1]


@pytest.fixture(params=["nat44", "nat64"])
def gw(request, quicknat, backend):
    g = Gateway(request.param)
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        left = g.close()
        shutil.rmtree(g.dir, ignore_errors=True)
        assert not left


def ep(addr, port):
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def test_the_api_lists_exactly_the_traffic_sent(gw, backend):
    # Traffic: three UDP flows and a TCP connection held open.
    udp_ports = [41001, 41002, 41003]
    started = time.monotonic()  # no session of this test's traffic is older than this
    r = gw.nsx("cli", "python3", "-c", UDP_FLOWS, gw.client, gw.target, "5353",
               *map(str, udp_ports), timeout=30)
    answers = r.stdout.split()
    assert len(answers) == 3 and all(a.startswith("peer=203.0.113.1:") for a in answers), r.stdout
    public = {p: a.removeprefix("peer=") for p, a in zip(udp_ports, answers)}
    tcp = gw.popen("cli", "python3", "-c", TCP_CLIENT, gw.client, "42000", gw.target, "8080",
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = tcp.stdout.readline().strip()
    assert line.startswith("peer=203.0.113.1:"), line + gw.qn.text()[-1500:]
    tcp_public = line.removeprefix("peer=")
    remote_inside = ep(gw.target, 5353)
    try:
        # The final ACK of the handshake has passed once the state says so.
        def established():
            items, _ = gw.json("sessions", "--proto", "tcp")
            return items if items and items[0]["state"] == "established" else None
        tcp_items = wait_for(established, 5)
        assert tcp_items, gw.json("sessions")

        items, end = gw.json("sessions")
        got = sorted((s["proto"], s["inside"], s["public"], s["remote"], s["remote_inside"],
                      s["origin"], s["state"]) for s in items)
        want = sorted([("udp", ep(gw.client, p), public[p], f"{SERVER}:5353", remote_inside, "inside", None)
                       for p in udp_ports]
                      + [("tcp", ep(gw.client, 42000), tcp_public, f"{SERVER}:8080",
                          ep(gw.target, 8080), "inside", "established")])
        assert got == want
        assert end["count"] == 4 and end["end"] == "sessions"
        for s in items:
            assert 0 <= s["idle_ms"] < 60_000 and s["expires_in_ms"] > 60_000, s
        # Age: from the session's creation (rounded up to the gateway clock's whole second
        # of it, so at most 1 s over), never less than idle; no older than the traffic.
        since_start_ms = (time.monotonic() - started) * 1000
        for s in items:
            assert s["idle_ms"] <= s["age_ms"] <= since_start_ms + 1000, (s, since_start_ms)
        # The UDP flows were answered before the TCP connection opened: created earlier.
        ages = {s["proto"]: s["age_ms"] for s in items}
        assert min(s["age_ms"] for s in items if s["proto"] == "udp") + 1000 >= ages["tcp"], items

        # Filters narrow to the right sessions.
        def insides(*f):
            return sorted(s["inside"] for s in gw.json("sessions", *f)[0])
        assert insides("--proto", "udp") == [ep(gw.client, p) for p in udp_ports]
        assert insides("--inside-port", "41002") == [ep(gw.client, 41002)]
        assert insides("--inside", gw.client, "--proto", "tcp") == [ep(gw.client, 42000)]
        pub_port = public[41003].rsplit(":", 1)[1]
        assert insides("--public", "203.0.113.1", "--public-port", pub_port) == [ep(gw.client, 41003)]
        assert insides("--remote", SERVER, "--remote-port", "8080") == [ep(gw.client, 42000)]
        assert insides("--remote", gw.target, "--remote-port", "5353") == [ep(gw.client, p) for p in udp_ports]
        assert insides("--inside", "10.9.9.9") == []
        assert len(gw.json("sessions", "--limit", "2")[0]) == 2

        # The readable table says the same.
        table = gw.ctl("sessions", "--proto", "tcp").stdout
        assert "PROTO" in table and "established" in table and tcp_public in table, table
        assert table.splitlines()[0].split()[-3:] == ["AGE", "IDLE", "EXPIRES"], table

        # Bindings: one per inside endpoint.
        b, end = gw.json("bindings")
        assert sorted((x["proto"], x["inside"], x["public"], x["sessions"]) for x in b) == sorted(
            [("udp", ep(gw.client, p), public[p], 1) for p in udp_ports]
            + [("tcp", ep(gw.client, 42000), tcp_public, 1)])

        # Pool: one address, three UDP ports and one TCP port, one subscriber.
        pool, _ = gw.json("pool")
        assert [(u["addr"], u["taken"]["udp"], u["taken"]["tcp"], u["bindings"], u["subscribers"])
                for u in pool] == [("203.0.113.1", 3, 1, 4, 1)], pool

        _, census = gw.json("census")
        c = census["census"]
        assert (c["live"], c["by_proto"], c["tcp"]["established"], c["bindings"]) == (
            4, {"tcp": 1, "udp": 3, "icmp": 0, "sctp": 0, "other": 0}, 1, 4), c

        # Counters: every packet of the exchange (3 UDP each way at least, TCP both ways),
        # by the engine or, once the TCP flow is established, the fast path.
        def stats():
            st = gw.json("stats")[1]["stats"]
            fast = (st.get("xdp_fast_path") or {}).get("packets", 0)
            return st if st["total"]["engine"]["forwarded"] + fast >= 3 * 2 + 4 else None
        st = wait_for(stats, 5)
        assert st, gw.json("stats")
        assert len(st["workers"]) == 1
        assert st["workers"][0]["engine"]["forwarded"] == st["total"]["engine"]["forwarded"]
        fast = st.get("xdp_fast_path") or {}
        assert st["total"]["io"]["rx_inside"] + fast.get("packets_out", 0) >= 5, st
        assert st["total"]["io"]["rx_outside"] + fast.get("packets_in", 0) >= 5, st
        assert set(st["drop_reasons"]) == set(st["total"]["engine"]["drops"])
        assert st["drop_reasons"]["no_mapping"].startswith("inbound to a public address")
        assert "drops:" in gw.ctl("stats").stdout

        _, status = gw.json("status")
        s = status["status"]
        assert s["mode"] == gw.mode
        assert (s["inside"]["name"], s["outside"]["name"], s["workers"]) == ("g-in", "g-out", 1)
        assert s["backend"].startswith("AF_XDP" if backend == "af_xdp" else "AF_PACKET"), s
        with open(gw.qn.cfg.name, "rb") as f:
            assert s["config"] == {"path": gw.qn.cfg.name, "sha256": hashlib.sha256(f.read()).hexdigest()}
        assert s["uptime_s"] >= 0 and s["sessions"] == 4

        # `quicknat reload` runs what SIGHUP runs: the file is unchanged, so nothing
        # changes, and the sessions listed before are all still there.
        r = gw.ctl("reload", check=False)
        assert r.returncode == 0 and "no change" in r.stdout, r.stdout + r.stderr
        assert gw.json("census")[1]["census"]["live"] >= 4
    finally:
        tcp.stdin.close()
        tcp.wait(timeout=10)


def test_an_unauthorised_peer_is_refused(gw, backend):
    ids = (f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    # The socket file (0600) keeps others out ...
    r = sh("setpriv", *ids, gw.quicknat_bin, "status", "--socket", gw.sock, check=False)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stdout + r.stderr
    # ... and opened to everyone, the server refuses a peer that is not root.
    os.chmod(gw.sock, 0o666)
    r = sh("setpriv", *ids, sys.executable, "-c", CLIENT, gw.sock, check=False)
    assert r.stdout.startswith("error permission denied"), r.stdout + r.stderr
    assert '"ok":true' not in r.stdout
    text = wait_for(lambda: (lambda t: t if "refused uid" in t else "")(gw.qn.text()), 3)
    assert f"warning: control: refused uid {NOBODY} gid {NOBODY}" in text, text
    # Root still gets its answer.
    assert gw.json("status")[1]["status"]["mode"] == gw.mode


def test_sessions_clear_ends_one_hosts_sessions_and_leaves_the_others(gw, backend):
    """`sessions clear --inside A`: the count first, then A's sessions and bindings end as
    at expiry, while host B's TCP connection and UDP flow keep their sessions (not
    re-created: same public endpoint, age not reset); A's next packet opens a new one."""
    a = gw.client
    b = "10.0.0.3" if gw.mode == "nat44" else "2001:db8:1::3"
    plen = "24" if gw.mode == "nat44" else "64"
    gw.nsx("cli", "ip", "addr", "add", f"{b}/{plen}", "dev", "c0",
           *(["nodad"] if gw.mode == "nat64" else []))

    def udp(host, *ports):
        r = gw.nsx("cli", "python3", "-c", UDP_FLOWS, host, gw.target, "5353",
                   *map(str, ports), timeout=30)
        answers = r.stdout.split()
        assert len(answers) == len(ports), r.stdout
        assert all(x.startswith("peer=203.0.113.1:") for x in answers), r.stdout
        return [x.removeprefix("peer=") for x in answers]

    udp(a, 43001, 43002)
    b_udp = udp(b, 43001)[0]
    tcp = gw.popen("cli", "python3", "-c", TCP_CLIENT, b, "42001", gw.target, "8080",
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = tcp.stdout.readline().strip()
    assert line.startswith("peer=203.0.113.1:"), line + gw.qn.text()[-1500:]
    try:
        def sessions_of(host):
            return {(s["proto"], s["inside"]): s for s in gw.json("sessions", "--inside", host)[0]}
        b_before = wait_for(lambda: (lambda s: s if len(s) == 2 and all(
            x["state"] in (None, "established") for x in s.values()) else None)(sessions_of(b)), 5)
        assert b_before, gw.json("sessions")
        assert len(sessions_of(a)) == 2

        # No filter and no --all: refused, nothing ended.
        r = gw.ctl("sessions", "clear", check=False)
        assert r.returncode != 0 and "--all" in r.stderr, r.stdout + r.stderr
        # A dry run counts and ends nothing.
        r = gw.ctl("sessions", "clear", "--inside", a, "--dry-run")
        assert r.stdout == "2 sessions would be cleared\n", r.stdout
        assert len(sessions_of(a)) == 2
        # The real one says how many match, then how many ended.
        cleared_at = time.monotonic()
        r = gw.ctl("sessions", "clear", "--inside", a)
        assert r.stdout == "2 sessions match\n2 sessions cleared\n", r.stdout + r.stderr
        assert sessions_of(a) == {}
        insides = [x["inside"] for x in gw.json("bindings")[0]]
        assert not any(i.startswith((a + ":", f"[{a}]:")) for i in insides), insides

        # B untouched: the same sessions, same public endpoints, not re-created.
        b_after = sessions_of(b)
        assert b_after.keys() == b_before.keys()
        for k, s in b_after.items():
            assert s["public"] == b_before[k]["public"], (s, b_before[k])
            assert s["age_ms"] >= b_before[k]["age_ms"], (s, b_before[k])
        assert udp(b, 43001) == [b_udp], "B's UDP flow keeps its public endpoint"

        # A's next packet creates a new session, younger than the clear.
        udp(a, 43001)
        new = sessions_of(a)
        assert list(new) == [("udp", ep(a, 43001))], new
        since_clear_ms = (time.monotonic() - cleared_at) * 1000
        assert new[("udp", ep(a, 43001))]["age_ms"] <= since_clear_ms + 1000, new
        # The reaper ended them, as it ends expired sessions: in its counters.
        st = gw.json("stats")[1]["stats"]
        assert st["reaper"]["sessions_expired"] >= 2, st["reaper"]
    finally:
        tcp.stdin.close()
        tcp.wait(timeout=10)


def thread_cpus(pid, prefix):
    """The CPUs each of process `pid`'s threads named `prefix...` may run on."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", f.read()).group(1)
        except FileNotFoundError:
            continue
        if name.startswith(prefix):
            out[name] = allowed
    return out


def test_workers_and_the_reaper_run_on_the_configured_cpus(quicknat, backend):
    """`[gateway] cpus` and `reaper_cpu`: the threads' affinity is what was asked for, and
    `status` says so; a CPU the machine does not offer is refused before anything starts."""
    ncpu = len(os.sched_getaffinity(0))
    last = max(os.sched_getaffinity(0))
    g = Gateway("nat44")
    try:
        g.setup(quicknat, backend, extra=f'workers = 2\ncpus = "{last}"\nreaper_cpu = {last}\n')
        pid = g.qn.proc.pid
        workers = wait_for(lambda: (lambda t: t if len(t) == 2 else None)(thread_cpus(pid, "qn-worker")), 5)
        assert workers and set(workers.values()) == {str(last)}, thread_cpus(pid, "qn")
        assert thread_cpus(pid, "qn-reaper") == {"qn-reaper": str(last)}
        # Threads not named in the configuration keep the process's whole mask.
        assert len(os.sched_getaffinity(pid)) == ncpu
        s = g.json("status")[1]["status"]["cpus"]
        assert (s["workers"], s["reaper"], s["configured"]) == ([last, last], last, True), s
        assert f"workers on CPUs {last},{last} (gateway.cpus); reaper on CPU {last}" in g.qn.text()
        table = g.ctl("status").stdout
        assert re.search(rf"cpus\s+workers {last},{last} \(gateway.cpus\), reaper {last}", table), table
        # The stats lines give each interval's frames per worker and their spread.
        g.nsx("cli", "python3", "-c", UDP_FLOWS, g.client, g.target, "5353",
              *map(str, range(41000, 41016)), timeout=30)

        def spread():
            lines = re.findall(r" worker_rx=(\d+),(\d+) worker_spread=(\S+)", g.qn.text())
            return next((x for x in lines if int(x[0]) + int(x[1]) > 0), None)
        got = wait_for(spread, 5)
        assert got, g.qn.text()[-1500:]
        lo, hi = sorted(map(int, got[:2]))
        assert got[2] == ("inf" if lo == 0 else f"{hi / lo:.2f}"), got
        # How the workers share the flows: on AF_PACKET the fanout program places them in
        # turn (16 flows out and their 16 replies: 32 IPv4 flows, 16 each, 17/15 at worst
        # when two CPUs place at once); on AF_XDP the queues decide.
        st = g.json("status")[1]["status"]
        pl = st["placement"]
        if st["backend"].startswith("AF_PACKET"):  # also AF_XDP's fallback
            assert pl["how"] == "flows", pl
            v4 = pl["flows_per_worker"]["ipv4"]
            assert sum(v4) >= 32 and min(v4) > 0 and max(v4) / min(v4) <= 1.2, pl
            # Each interface takes its own turns: the flows opened one after another
            # (each answered before the next) spread on both sides, not outbound on one
            # worker and replies on the other.
            workers = g.json("stats")[1]["stats"]["workers"]
            for side in ("rx_inside", "rx_outside"):
                got = [w["io"][side] for w in workers]
                assert min(got) >= 4, (side, got)
            assert re.search(r"placement\s+flows: ipv4 \d+,\d+ ipv6 \d+,\d+ \(", g.ctl("status").stdout)
        else:
            assert pl["how"] == "queues" and pl["flows_per_worker"] is None, pl
        # The NIC's receive hash: a veth has no settings, and the gateway says so.
        for dev in (st["inside"]["name"], st["outside"]["name"]):
            assert st["rx_hash"][dev]["supported"] is False, st["rx_hash"]
            assert f"receive hash: {dev} has no receive hash settings" in g.qn.text()
    finally:
        left = g.close()
        shutil.rmtree(g.dir, ignore_errors=True)
        assert not left
    # A CPU this machine does not have: refused with the file's line and the CPUs it has.
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(GATEWAY.format(backend=backend, sock="/tmp/qn-none.sock")
                + f'cpus = "{last + 1}"\n' + NAT44)
    try:
        r = sh(quicknat, "check-config", "--config", f.name, check=False)
        assert r.returncode != 0, r.stdout + r.stderr
        assert f"gateway.cpus: CPU {last + 1} is not one quicknat may run on" in r.stderr, r.stderr
    finally:
        os.unlink(f.name)


@pytest.mark.only(backend="af_packet")
def test_ila_lists_its_mappings_and_reloads_through_the_api(quicknat, backend):
    from test_hostops import IlaGateway  # an ILA gateway on one veth pair, its own socket
    g = IlaGateway(quicknat, None)
    try:
        def api(*args, check=True):
            r = sh(quicknat, *args, "--socket", g.sock, check=False)
            assert (r.returncode == 0) == check, r.stdout + r.stderr
            return r.stdout
        assert api("ila", "add", "0:0:0:7", "2001:db8:7:0").startswith("added")
        lines = [json.loads(l) for l in api("bindings", "--json").splitlines()]
        assert lines == [{"identifier": "0:0:0:7", "locator": "2001:db8:7:0"},
                         {"v": 1, "ok": True, "end": "bindings", "count": 1}], lines
        status = json.loads(api("status", "--json"))["status"]
        assert (status["mode"], status["reload"]) == ("ila", True), status
        assert json.loads(api("census", "--json"))["census"]["live"] == 1
        assert api("sessions", "--json").strip() == '{"count":0,"end":"sessions","ok":true,"v":1}'
        # `quicknat reload` is today's ILA reload: the file has no mappings, so it goes.
        assert api("reload").strip() == "ILA mappings 0 added, 0 changed, 1 removed, 0 unchanged"
        assert "0:0:0:7" not in api("ila", "list")
        text = wait_for(lambda: (lambda t: t if "reload ->" in t else "")(g.text()), 3)
        assert re_search(r"control: uid 0 pid \d+: reload -> .*1 removed", text), text
    finally:
        g.close()


def re_search(pattern, text):
    import re
    return re.search(pattern, text)
