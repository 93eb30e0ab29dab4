"""NAT event logging (RFC 8158 over IPFIX, RFC 5424 syslog) through the live gateway,
received by real collectors.

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2:
    UDP and TCP servers that answer with the peer they see; tshark capturing the IPFIX
    on udp/4739; nfacctd, pmacct's IPFIX collector, on udp/4740; a python syslog
    receiver on udp/5514)

The client opens 20 UDP flows and 5 TCP connections from known source ports; each
server answer says which public endpoint the gateway gave it. With short timeouts every
session then expires and its binding goes. The test checks that the collectors received,
for every flow, exactly one NAT44 BIB create, session create, session delete and BIB
delete with the inside, public and remote addresses, ports and protocol the traffic
showed; that the IPFIX sequence numbers count the data records (RFC 7011 §3.1); and
that every syslog line follows RFC 5424 and says the same.

The events do not depend on the I/O backend (the engine records them, a thread of its
own sends them from the kernel's UDP stack), so the collector matrix runs on af_packet;
af_xdp runs the IPFIX check alone.

Needs root, tshark and pmacct (scripts/test.sh installs them).
    sudo python3 -m pytest tests/e2e/test_natlog.py [--quicknat PATH]
"""

import json
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from netns import UDP_SERVER, Scenario, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
UDP_FLOWS = 20
TCP_FLOWS = 5

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat44]
port_preservation = false
[nat44.timeouts]
udp = 2
tcp_transitory = 2
tcp_closed = 2
tcp_established = 4
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
ports = "20000-29999"

[logging]
events = ["binding", "session", "limits"]
ipfix = "{ipfix}"
{syslog}
template_refresh = 2
observation_domain = 77
"""

# Answers each TCP connection with "peer=ADDR:PORT" and closes it.
TCP_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
while True:
    c, peer = s.accept()
    c.sendall(("peer=%s:%d" % peer).encode()); c.close()
"""

# argv: server, udp port, tcp port, n udp, n tcp. One UDP flow from each source port
# 30000+i, one TCP connection from each 31000+i; prints "udp SPORT PUBLIC" / "tcp ..."
# per answer.
CLIENT = r"""
import socket, sys
srv, up, tp, nu, nt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for i in range(nu):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    s.bind(("10.0.0.2", 30000 + i)); s.connect((srv, up)); s.send(b"hi")
    print("udp", 30000 + i, s.recv(100).decode().split("=")[1], flush=True); s.close()
for i in range(nt):
    s = socket.socket(); s.settimeout(3)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.0.0.2", 31000 + i)); s.connect((srv, tp))
    data = b""
    while True:
        d = s.recv(100)
        if not d: break
        data += d
    print("tcp", 31000 + i, data.decode().split("=")[1], flush=True); s.close()
"""

# A syslog receiver: every datagram on argv[1]:argv[2] appended as one line to argv[3].
SYSLOG_RECEIVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
with open(sys.argv[3], "a") as f:
    while True:
        data, _ = s.recvfrom(65535)
        f.write(data.decode() + "\n"); f.flush()
"""

NFACCTD_CONF = """
daemonize: false
nfacctd_ip: {ip}
nfacctd_port: {port}
plugins: print[natlog]
aggregate[natlog]: src_host, src_port, dst_host, dst_port, proto, nat_event, post_nat_src_host, post_nat_src_port
print_output[natlog]: csv
print_output_file[natlog]: {out}
print_output_file_append[natlog]: true
print_refresh_time[natlog]: 1
"""

# RFC 5424 §6: HEADER SP STRUCTURED-DATA [SP MSG], one SD-ELEMENT here.
RFC5424 = re.compile(
    r"^<(?P<pri>\d{1,3})>1 (?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<host>[!-~]{1,255}) "
    r"(?P<app>[!-~]{1,48}) (?P<procid>[!-~]{1,128}) (?P<msgid>[!-~]{1,32}) "
    r"\[(?P<sdid>[^ =\]\"]+)(?P<params>( [^ =\]\"]+=\"[^\"]*\")*)\](?: (?P<msg>.*))?$"
)

# RFC 8158 Table 2 (IANA natEvent registry) values of the NAT44 events.
KIND = {4: "session-create", 5: "session-delete", 8: "bib-create", 9: "bib-delete"}
# How tshark (its own copy of the IANA registry) names them.
TSHARK_NAMES = ["NAT44 session create (4)", "NAT44 session delete (5)", "NAT44 BIB create (8)",
                "NAT44 BIB delete (9)"]


class NatLog(Scenario):
    def __init__(self):
        super().__init__("qlog", ("cli", "gw", "srv"))
        self.tmp = tempfile.mkdtemp(prefix="qn-natlog-")
        self.defer(lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    def setup(self, quicknat, backend, syslog=True, nfacctd=True, config=CONFIG):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        self.popen("srv", "python3", "-c", TCP_SERVER, SERVER, "8080")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        assert self.wait_listening("srv", SERVER, 8080)
        # The IPFIX as sent: tshark captures it (and decodes it afterwards).
        self.pcap = f"{self.tmp}/ipfix.pcap"
        self.tshark = self.popen("srv", "tshark", "-n", "-i", "s0", "-f", "udp port 4739",
                                 "-w", self.pcap, stderr=subprocess.PIPE, text=True)
        line = ""
        end = time.time() + 15
        while "Capturing on" not in line and time.time() < end:
            line = self.tshark.stderr.readline()
        assert "Capturing on" in line, line
        # A second IPFIX stream goes to nfacctd: a collector with its own decoder.
        ipfix = f"{SERVER}:4739"
        self.nfacctd_out = f"{self.tmp}/nfacctd.csv"
        if nfacctd:
            conf = f"{self.tmp}/nfacctd.conf"
            with open(conf, "w") as f:
                f.write(NFACCTD_CONF.format(ip=SERVER, port=4740, out=self.nfacctd_out))
            self.nfacctd = self.popen("srv", "nfacctd", "-f", conf, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            assert self.wait_udp_bound("srv", SERVER, 4740)
        self.syslog_file = f"{self.tmp}/syslog.txt"
        open(self.syslog_file, "w").close()
        syslog_line = ""
        if syslog:
            self.popen("srv", "python3", "-c", SYSLOG_RECEIVER, SERVER, "5514", self.syslog_file)
            assert self.wait_udp_bound("srv", SERVER, 5514)
            syslog_line = f'syslog = "{SERVER}:5514"'
        self.qn = self.quicknat(quicknat, "gw", config.format(backend=backend, ipfix=ipfix,
                                                              syslog=syslog_line),
                                f"natlog-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def drive(self):
        r = self.nsx("cli", "python3", "-c", CLIENT, SERVER, "5353", "8080", str(UDP_FLOWS),
                     str(TCP_FLOWS), timeout=60)
        flows = {}
        for line in r.stdout.splitlines():
            proto, sport, public = line.split()
            addr, port = public.split(":")
            flows[(6 if proto == "tcp" else 17, int(sport))] = (addr, int(port))
        assert len(flows) == UDP_FLOWS + TCP_FLOWS, r.stdout + r.stderr
        return flows

    def sessions(self):
        m = re.findall(r"\bsessions=(\d+)", self.qn.stats())
        return int(m[-1]) if m else -1

    def natlog_counter(self, name):
        m = re.findall(rf"natlog: .*\b{name}=(\d+)", self.qn.text())
        return int(m[-1]) if m else 0

    def ipfix_messages(self):
        """(header, records) per IPFIX message, decoded by tshark from the capture."""
        out = subprocess.run(["tshark", "-n", "-r", self.pcap, "-d", "udp.port==4739,cflow",
                              "-T", "json", "-O", "cflow"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        msgs = []
        for pkt in json.loads(out):
            cflow = pkt["_source"]["layers"]["cflow"]
            head = {k: cflow[k] for k in ("cflow.version", "cflow.sequence", "cflow.od_id")}
            records = []
            for set_key, fs in cflow.items():
                # "Set 2 [id=256] (3 flows)"; templates are "Set 1 [id=2] (Data Template)".
                if not set_key.startswith("Set ") or fs.get("cflow.flowset_id") == "2":
                    continue
                for key, rec in fs.items():
                    if key.startswith("Flow ") and isinstance(rec, dict):
                        records.append(rec)
            msgs.append((head, records))
        return msgs

    def syslog_lines(self):
        with open(self.syslog_file) as f:
            return [l for l in f.read().splitlines() if l]


def expected(flows):
    """{(kind, proto, inside port): (public addr, public port)} for every event due."""
    want = {}
    for (proto, sport), pub in flows.items():
        for kind in KIND.values():
            want[(kind, proto, sport)] = pub
    return want


def check_event(kind, proto, src, sport, pub, pport, dst, dport, flows, seen):
    """One NAT44 event against the traffic; records it in `seen`."""
    assert src == "10.0.0.2", (kind, src)
    assert (proto, sport) in flows, (kind, proto, sport)
    assert (pub, pport) == flows[(proto, sport)], (kind, proto, sport, pub, pport)
    if kind.startswith("session"):
        assert (dst, dport) == (SERVER, 8080 if proto == 6 else 5353), (kind, dst, dport)
    key = (kind, proto, sport)
    assert key not in seen, f"{key} logged twice"
    seen[key] = (pub, pport)


@pytest.fixture
def scenario():
    s = NatLog()
    yield s
    assert not s.close()


def run_flows_until_expired(s):
    flows = s.drive()
    # Every session expires (short timeouts), every binding goes with it, and the
    # exporter has sent every event (4 per flow).
    total = 4 * len(flows)
    assert wait_for(lambda: s.sessions() == 0, 30), s.qn.stats()
    assert wait_for(lambda: s.natlog_counter("events_sent") >= total, 15), s.qn.text()[-2000:]
    return flows, total


def test_every_event_reaches_the_ipfix_collector_and_syslog(quicknat, backend, scenario):
    s = scenario
    with_syslog = backend == "af_packet"
    s.setup(quicknat, backend, syslog=with_syslog, nfacctd=False)
    flows, total = run_flows_until_expired(s)
    assert s.natlog_counter("events_dropped") == 0
    assert wait_for(lambda: s.natlog_counter("ipfix_messages") >= 2, 10)
    s.tshark.terminate()
    s.tshark.wait(timeout=10)
    msgs = s.ipfix_messages()
    assert msgs, "no IPFIX message captured"
    seen = {}
    sequence = None
    for head, records in msgs:
        assert head["cflow.version"] == "10"
        assert head["cflow.od_id"] == "77"
        seq = int(head["cflow.sequence"])
        # RFC 7011 §3.1: the sequence number counts the data records sent before.
        if sequence is not None:
            assert seq == sequence, (seq, sequence)
        sequence = seq + len(records)
        for r in records:
            ev = int(r["cflow.nat_event"])
            assert ev in KIND, r
            check_event(KIND[ev], int(r["cflow.protocol"]), r["cflow.srcaddr"],
                        int(r["cflow.srcport"]), r["cflow.post_natsource_ipv4_address"],
                        int(r["cflow.post_naptsource_transport_port"]),
                        r.get("cflow.dstaddr"), int(r.get("cflow.dstport", 0)), flows, seen)
    assert seen == expected(flows), sorted(set(expected(flows)) ^ set(seen))
    assert sequence == total
    # tshark's own decode names the events as RFC 8158 does.
    text = subprocess.run(["tshark", "-n", "-r", s.pcap, "-d", "udp.port==4739,cflow", "-V"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    for name in TSHARK_NAMES:
        assert f"Nat Event: {name}" in text, name
    if not with_syslog:
        return
    # The same events as RFC 5424 syslog lines.
    lines = s.syslog_lines()
    assert len(lines) == total, lines[:5]
    seen = {}
    for line in lines:
        m = RFC5424.match(line)
        assert m, line
        assert int(m["pri"]) == 16 * 8 + 6 and m["app"] == "quicknat" and m["sdid"] == "nat@32473"
        p = dict(re.findall(r' ([^ =]+)="([^"]*)"', m["params"]))
        kind = KIND[int(p["natEvent"])]
        assert m["msgid"] == "nat44-" + kind
        check_event(kind, int(p["protocolIdentifier"]), p["sourceIPv4Address"],
                    int(p["sourceTransportPort"]), p["postNATSourceIPv4Address"],
                    int(p["postNAPTSourceTransportPort"]), p.get("destinationIPv4Address"),
                    int(p.get("destinationTransportPort", 0)), flows, seen)
    assert seen == expected(flows)


@pytest.mark.only(backend="af_packet")
def test_nfacctd_receives_every_event(quicknat, backend, scenario):
    s = scenario
    s.setup(quicknat, backend, syslog=False, nfacctd=True)
    flows, total = run_flows_until_expired(s)
    s.tshark.terminate()
    s.tshark.wait(timeout=10)
    # Replays the captured IPFIX payloads, in order, to nfacctd (the gateway sends to one
    # collector; this gives pmacct the very same datagrams).
    out = subprocess.run(["tshark", "-n", "-r", s.pcap, "-T", "fields", "-e", "udp.payload"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    payloads = [bytes.fromhex(l.replace(":", "")) for l in out.split()]
    assert payloads
    send = "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n" \
           "for h in sys.stdin.read().split(): s.sendto(bytes.fromhex(h), (sys.argv[1], 4740))\n"
    s.nsx("srv", "python3", "-c", send, SERVER, input="\n".join(p.hex() for p in payloads),
          timeout=20)

    def rows():
        try:
            with open(s.nfacctd_out) as f:
                return [l for l in f.read().splitlines() if l and not l.startswith("SRC_IP")]
        except FileNotFoundError:
            return []

    assert wait_for(lambda: len(rows()) >= total, 20), rows()
    with open(s.nfacctd_out) as f:
        header = f.readline().strip().split(",")
    seen = {}
    for row in rows():
        r = dict(zip(header, row.split(",")))
        proto = {"udp": 17, "tcp": 6}.get(r["PROTOCOL"].lower(), r["PROTOCOL"])
        check_event(KIND[int(r["NAT_EVENT"])], int(proto), r["SRC_IP"], int(r["SRC_PORT"]),
                    r["POST_NAT_SRC_IP"], int(r["POST_NAT_SRC_PORT"]), r["DST_IP"],
                    int(r["DST_PORT"]), flows, seen)
    assert seen == expected(flows)


# ---- NAT64: the events name the IPv6 host ----

CONFIG64 = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat64]
pref64 = "2001:db8:64::/96"
pool4 = ["203.0.113.1/32"]
[nat64.timeouts]
udp = 2

[logging]
events = ["binding", "session"]
ipfix = "{server}:4739"
syslog = "{server}:5514"
"""

HOST6 = "2001:db8:1::2"
SERVER6 = "2001:db8:64::c633:6402"  # 198.51.100.2 in the pref64

# argv: server, port, n: one UDP flow from each source port 30000+i; "udp SPORT PUBLIC".
CLIENT6 = r"""
import socket, sys
srv, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(3)
    s.bind((sys.argv[4], 30000 + i)); s.connect((srv, port)); s.send(b"hi")
    print("udp", 30000 + i, s.recv(100).decode().split("=")[1], flush=True); s.close()
"""


class NatLog64(NatLog):
    def setup64(self, quicknat, backend):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "-6", "addr", "add", f"{HOST6}/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        self.syslog_file = f"{self.tmp}/syslog.txt"
        open(self.syslog_file, "w").close()
        self.popen("srv", "python3", "-c", SYSLOG_RECEIVER, SERVER, "5514", self.syslog_file)
        assert self.wait_udp_bound("srv", SERVER, 5514)
        self.qn = self.quicknat(quicknat, "gw", CONFIG64.format(backend=backend, server=SERVER),
                                f"natlog64-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]


@pytest.mark.only(backend="af_packet")
def test_nat64_events_name_the_ipv6_host(quicknat, backend):
    s = NatLog64()
    try:
        s.setup64(quicknat, backend)
        n = 10
        r = s.nsx("cli", "python3", "-c", CLIENT6, SERVER6, "5353", str(n), HOST6, timeout=60)
        flows = {}
        for line in r.stdout.splitlines():
            _, sport, public = line.split()
            addr, port = public.split(":")
            flows[int(sport)] = (addr, int(port))
        assert len(flows) == n, r.stdout + r.stderr
        assert wait_for(lambda: s.sessions() == 0, 30), s.qn.stats()
        assert wait_for(lambda: len(s.syslog_lines()) >= 4 * n, 15), s.syslog_lines()
        seen = set()
        for line in s.syslog_lines():
            m = RFC5424.match(line)
            assert m, line
            p = dict(re.findall(r' ([^ =]+)="([^"]*)"', m["params"]))
            # RFC 8158: NAT64 session create/delete 6/7, BIB create/delete 10/11.
            kind = {6: "session-create", 7: "session-delete", 10: "bib-create",
                    11: "bib-delete"}[int(p["natEvent"])]
            assert m["msgid"] == "nat64-" + kind
            assert p["sourceIPv6Address"] == HOST6, line
            sport = int(p["sourceTransportPort"])
            pub = (p["postNATSourceIPv4Address"], int(p["postNAPTSourceTransportPort"]))
            assert pub == flows[sport], line
            if kind.startswith("session"):
                assert p["destinationIPv4Address"] == SERVER, line
            assert (kind, sport) not in seen, line
            seen.add((kind, sport))
        assert len(seen) == 4 * n
    finally:
        assert not s.close()


# --- port-block allocation ---

# Blocks of 16 ports: the 25 flows of one subscriber (UDP and TCP share its blocks) need
# two; ports come back 1 s after their binding goes, and then the blocks are released.
PBA_CONFIG = CONFIG.replace(
    "port_preservation = false\n",
    "port_preservation = false\nport_block_size = 16\nport_reuse_hold = 1\n",
).replace('events = ["binding", "session", "limits"]', 'events = ["block"]')
PBA_BLOCK = 16


def check_blocks(events, flows):
    """events: (natEvent, src, public addr, start, end). Every flow's public port lies in
    exactly one allocated block, each block is released once, nothing else is logged."""
    alloc = [e for e in events if e[0] == 16]
    freed = [e for e in events if e[0] == 17]
    assert len(events) == len(alloc) + len(freed), events
    blocks = {(e[3], e[4]) for e in alloc}
    assert len(blocks) == len(alloc) == -(-len(flows) // PBA_BLOCK), events
    assert sorted(e[1:] for e in freed) == sorted(e[1:] for e in alloc), events
    for _, src, pub, start, end in alloc:
        assert (src, pub) == ("10.0.0.2", "203.0.113.1"), events
        assert end - start + 1 == PBA_BLOCK and 20000 <= start and end <= 29999, events
    for key, (pub, port) in flows.items():
        assert pub == "203.0.113.1", (key, pub)
        holders = [b for b in blocks if b[0] <= port <= b[1]]
        assert len(holders) == 1, (key, port, sorted(blocks))


def test_port_blocks_reach_the_collectors_with_the_ports_the_servers_saw(
        quicknat, backend, scenario):
    s = scenario
    with_syslog = backend == "af_packet"
    s.setup(quicknat, backend, syslog=with_syslog, nfacctd=False, config=PBA_CONFIG)
    flows = s.drive()
    blocks = -(-len(flows) // PBA_BLOCK)
    # Every session expires, its binding goes, its port waits out the 1 s hold, and the
    # blocks are released: one allocation and one release event per block.
    assert wait_for(lambda: s.sessions() == 0, 30), s.qn.stats()
    assert wait_for(lambda: s.natlog_counter("events_sent") >= 2 * blocks, 20), \
        s.qn.text()[-2000:]
    assert s.natlog_counter("events_dropped") == 0
    assert wait_for(lambda: s.natlog_counter("ipfix_messages") >= 2, 10)
    s.tshark.terminate()
    s.tshark.wait(timeout=10)
    events = []
    for _, records in s.ipfix_messages():
        for r in records:
            events.append((int(r["cflow.nat_event"]), r["cflow.srcaddr"],
                           r["cflow.post_natsource_ipv4_address"],
                           int(r["cflow.port_range_start"]), int(r["cflow.port_range_end"])))
    check_blocks(events, flows)
    if not with_syslog:
        return
    events = []
    for line in s.syslog_lines():
        m = RFC5424.match(line)
        assert m, line
        p = dict(re.findall(r' ([^ =]+)="([^"]*)"', m["params"]))
        ev = int(p["natEvent"])
        assert m["msgid"] == {16: "port-block-allocate", 17: "port-block-release"}[ev], line
        events.append((ev, p["sourceIPv4Address"], p["postNATSourceIPv4Address"],
                       int(p["portRangeStart"]), int(p["portRangeEnd"])))
    check_blocks(events, flows)


# --- the "limits" class end to end (a subscriber over its port limit) ---

LIMIT = 4
LIMITS_CONFIG = CONFIG.replace(
    "port_preservation = false\n",
    f"port_preservation = false\nmax_ports_per_host = {LIMIT}\n",
).replace('events = ["binding", "session", "limits"]', 'events = ["limits"]')

# argv: server, port, n: one datagram from each source port 30000+i, no answer awaited.
BURST = r"""
import socket, sys
for i in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("10.0.0.2", 30000 + i)); s.sendto(b"hi", (sys.argv[1], int(sys.argv[2]))); s.close()
"""


@pytest.mark.only(backend="af_packet")
def test_a_subscriber_over_its_port_limit_reaches_the_collectors(quicknat, backend, scenario):
    s = scenario
    s.setup(quicknat, backend, syslog=True, nfacctd=False, config=LIMITS_CONFIG)
    n = LIMIT + 4
    s.nsx("cli", "python3", "-c", BURST, SERVER, "5353", str(n), timeout=30)
    # The flows past the limit are refused, each a counted drop and one quota event
    # (RFC 8158 natEvent 13, natQuotaExceededEvent 3 = maximum entries per user).
    assert wait_for(lambda: s.natlog_counter("events_sent") >= n - LIMIT, 15), s.qn.text()[-2000:]
    assert wait_for(lambda: len(s.syslog_lines()) >= n - LIMIT, 5), s.syslog_lines()
    lines = s.syslog_lines()
    assert len(lines) == n - LIMIT, lines
    for line in lines:
        m = RFC5424.match(line)
        assert m, line
        p = dict(re.findall(r' ([^ =]+)="([^"]*)"', m["params"]))
        assert (p["natEvent"], p["natQuotaExceededEvent"], p["limit"]) == ("13", "3", str(LIMIT)), line
        assert p["subscriber"].startswith("10.0.0.2"), line
    assert wait_for(lambda: s.natlog_counter("ipfix_messages") >= 1, 10)
    s.tshark.terminate()
    s.tshark.wait(timeout=10)
    events = [int(r["cflow.nat_event"]) for _, rs in s.ipfix_messages() for r in rs]
    assert events == [13] * (n - LIMIT), events
    # ... and each a drop counted with its reason (the stats line, once a second).
    def limited():
        m = re.findall(r"\bsubscriber_limit=(\d+)", s.qn.stats())
        return int(m[-1]) if m else 0
    assert wait_for(lambda: limited() >= n - LIMIT, 5) and limited() == n - LIMIT, s.qn.stats()


# A pool of 4 ports per address and no per-host limit: the fifth flow of one inside host
# finds no free port on its (paired) address.
POOL_PORTS = 4
EXHAUST_CONFIG = CONFIG.replace('ports = "20000-29999"', f'ports = "20000-{20000 + POOL_PORTS - 1}"').replace(
    "port_preservation = false\n", "port_preservation = false\nmax_ports_per_host = 0\n",
).replace('events = ["binding", "session", "limits"]', 'events = ["limits"]')


@pytest.mark.only(backend="af_packet")
@pytest.mark.parametrize("pool,nat_event", [("203.0.113.1/32", 12), ("203.0.113.0/31", 3)],
                         ids=["ports-exhausted", "addresses-exhausted"])
def test_an_exhausted_pool_reaches_the_collectors_once_a_second(quicknat, backend, scenario,
                                                                pool, nat_event):
    # RFC 8158 natEvent 12 (NAT ports exhausted: the rule's one address ran out of ports)
    # or 3 (NAT addresses exhausted: a pool of several addresses, the host's paired one
    # is full), with the pool's address; throttled to one event a second however many
    # packets are refused, each of which is a counted pool_exhausted drop.
    s = scenario
    config = EXHAUST_CONFIG.replace('pool = ["203.0.113.1/32"]', f'pool = ["{pool}"]')
    s.setup(quicknat, backend, syslog=True, nfacctd=False, config=config)
    over = 12
    n = POOL_PORTS + over
    started = time.monotonic()
    s.nsx("cli", "python3", "-c", BURST, SERVER, "5353", str(n), timeout=30)
    # The burst lasts well under a second here; allow for a second boundary inside it.
    seconds = int(time.monotonic() - started) + 2

    def refused():
        m = re.findall(r"\bpool_exhausted=(\d+)", s.qn.stats())
        return int(m[-1]) if m else 0
    assert wait_for(lambda: refused() >= over, 10), s.qn.stats()
    assert refused() == over, s.qn.stats()
    assert wait_for(lambda: len(s.syslog_lines()) >= 1, 10), s.qn.text()[-2000:]
    assert wait_for(lambda: s.natlog_counter("ipfix_messages") >= 1, 10)
    lines = s.syslog_lines()
    assert 1 <= len(lines) <= seconds, (seconds, lines)
    first = pool.split("/")[0]
    for line in lines:
        m = RFC5424.match(line)
        assert m, line
        p = dict(re.findall(r' ([^ =]+)="([^"]*)"', m["params"]))
        assert p["natEvent"] == str(nat_event), line
        assert p["postNATSourceIPv4Address"] == first, line
        assert p["subscriber"].startswith("10.0.0.2"), line
    s.tshark.terminate()
    s.tshark.wait(timeout=10)
    records = [r for _, rs in s.ipfix_messages() for r in rs]
    assert [int(r["cflow.nat_event"]) for r in records] == [nat_event] * len(lines), records
    assert all(r["cflow.post_natsource_ipv4_address"] == first for r in records), records
