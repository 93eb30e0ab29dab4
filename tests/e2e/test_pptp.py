"""PPTP (RFC 2637) through a live NAT44 gateway: two inside clients that chose the same
call id reach one server, and each call's enhanced GRE finds its own client.

The NAT44 topology of test_nat44.py (cli 10.0.0.2 and 10.0.0.20 == gw == srv
198.51.100.2, public 203.0.113.1). These kernels have no PPTP or GRE modules, so the
server (PAC) is a small program: a TCP listener on port 1723 that answers each
Outgoing-Call-Request with an Outgoing-Call-Reply of its own call id, and a raw GRE
socket that answers each call's GRE with GRE carrying the id the request gave. Each
client (PNS) is the same kind of program on its own address: the control connection
over the kernel's TCP, its GRE over a raw socket bound to its address.

Both clients ask with call id 1, as Linux's PPTP client does. The kernels are the
judges: the rewritten control messages pass both kernels' TCP checksums or they never
arrive; the server sees two different public call ids from the one public address; each
client gets its own id back in the reply and its own call's GRE, with its own id, and
nothing of the other's.

Then the other way round: a PPTP server inside (10.0.0.20, behind a port forward of
203.0.113.1:1723) and a client outside (the server namespace's address), whose GRE comes
before the server's: it reaches the server, and the call completes.

Runs once per backend (af_packet, af_xdp), with the fast path off and on; needs root.
    sudo python3 -m pytest tests/e2e/test_pptp.py [--quicknat PATH]
"""

import subprocess
import sys

import pytest

import test_nat44
from test_nat44 import PUBLIC, SERVER, Gateway

pytestmark = pytest.mark.needs_root

# The PAC on address BIND (default all): serves control connections and GRE as they
# come, until COUNT calls were cleared or TIMEOUT s have passed. Prints "call <peer> <pns id as seen> <pac id>" per Outgoing-Call-Request,
# "gre <source> <pac id>" per GRE packet, "clear <peer> <pns id as seen>" per
# Call-Clear-Request; answers each GRE with GRE of the call's peer id and
# "call-<pac id>", each clear with Call-Disconnect-Notify.
PAC = r"""
import select, socket, struct, sys, time
count, timeout = int(sys.argv[1]), float(sys.argv[2])
bind = sys.argv[3] if len(sys.argv) > 3 else "0.0.0.0"
MAGIC = 0x1A2B3C4D
def message(kind, body):
    return struct.pack("!HHIHH", 12 + len(body), 1, MAGIC, kind, 0) + body
lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind((bind, 1723)); lst.listen(4)
gre = socket.socket(socket.AF_INET, socket.SOCK_RAW, 47); gre.bind((bind, 0))
print("ready", flush=True)
peers, conns, calls, cleared = {}, {}, 0, 0
def handle(s, src, m):
    global calls, cleared
    kind, = struct.unpack("!H", m[8:10]); pns, = struct.unpack("!H", m[12:14])
    if kind == 7:  # Outgoing-Call-Request: Outgoing-Call-Reply (connected)
        pac = 1000 + calls
        calls += 1
        peers[pac] = pns
        print("call", src, pns, pac, flush=True)
        s.sendall(message(8, struct.pack("!HHBBH", pac, pns, 1, 0, 0) + bytes(12)))
    elif kind == 12:  # Call-Clear-Request: Call-Disconnect-Notify of the PAC's id
        pac = next(p for p, q in peers.items() if q == pns)
        print("clear", src, pns, flush=True)
        s.sendall(message(13, struct.pack("!HBBH", pac, 1, 0, 0) + bytes(130)))
        cleared += 1
end = time.monotonic() + timeout
while cleared < count and time.monotonic() < end:
    ready, _, _ = select.select([lst, gre, *conns], [], [], 0.5)
    for s in ready:
        if s is lst:
            c, (src, _) = lst.accept()
            conns[c] = (src, b"")
        elif s is gre:
            pkt, (src, _) = gre.recvfrom(65535)
            g = pkt[(pkt[0] & 0xf) * 4:]
            pac, = struct.unpack("!H", g[6:8])
            print("gre", src, pac, flush=True)
            data = b"call-%d" % pac
            gre.sendto(struct.pack("!BBHHH", 0x20, 0x01, 0x880B, len(data), peers[pac]) + data,
                       (src, 0))
        else:
            src, buf = conns[s]
            try:
                chunk = s.recv(4096)
            except ConnectionError:
                chunk = b""
            if not chunk:
                del conns[s]
                continue
            buf += chunk
            while len(buf) >= 2 and len(buf) >= struct.unpack("!H", buf[:2])[0]:
                n = struct.unpack("!H", buf[:2])[0]
                handle(s, src, buf[:n])
                buf = buf[n:]
            conns[s] = (src, buf)
"""

# A PNS on address BIND: opens a control connection to SERVER, asks for a call with id
# CALL, prints "reply <peer id> <pac id>" from the answer, sends one GRE packet on the
# call, prints "gre <source> <call id> <data>" of the GRE that comes back; then, on a
# line on its stdin, clears the call and prints "disconnect <type> <pac id>" of the
# PAC's answer.
PNS = r"""
import socket, struct, sys
bind, server, call = sys.argv[1], sys.argv[2], int(sys.argv[3])
MAGIC = 0x1A2B3C4D
c = socket.socket(); c.settimeout(10); c.bind((bind, 0)); c.connect((server, 1723))
body = struct.pack("!HH", call, 7) + bytes(152)
c.sendall(struct.pack("!HHIHH", 168, 1, MAGIC, 7, 0) + body)
def message(size):
    m = b""
    while len(m) < size:
        chunk = c.recv(size - len(m))
        if not chunk:
            break
        m += chunk
    assert len(m) == struct.unpack("!H", m[:2])[0] == size, m
    return m
rep = message(32)
pac, peer = struct.unpack("!HH", rep[12:16])
print("reply", peer, pac, flush=True)
g = socket.socket(socket.AF_INET, socket.SOCK_RAW, 47); g.bind((bind, 0)); g.settimeout(10)
data = b"lcp"
g.sendto(struct.pack("!BBHHH", 0x20, 0x01, 0x880B, len(data), pac) + data, (server, 0))
pkt, (src, _) = g.recvfrom(65535)
h = pkt[(pkt[0] & 0xf) * 4:]
cid, = struct.unpack("!H", h[6:8])
print("gre", src, cid, h[8:].decode(), flush=True)
sys.stdin.readline()  # the test's go: every client's call is open
# Call-Clear-Request of the call; the PAC answers Call-Disconnect-Notify of its own id.
c.sendall(struct.pack("!HHIHHHH", 16, 1, MAGIC, 12, 0, call, 0))
rep = message(148)
kind, pac_id = struct.unpack("!HxxH", rep[8:14])
print("disconnect", kind, pac_id, flush=True)
c.close()
"""

CLIENTS = ["10.0.0.2", "10.0.0.20"]
# The inside server of the served case, behind a port forward of 1723.
INSIDE_SERVER = "10.0.0.20"
FORWARD = f"""
[[nat44.forward]]
protocol = "tcp"
public = "{PUBLIC}:1723"
inside = "{INSIDE_SERVER}:1723"
"""


# With the fast path on too: the control connections must stay in the engine, which
# reads them, while the fast path takes every other established flow.
@pytest.fixture(scope="module", params=["off", "on"], ids=["slow", "xdp-fast"])
def gw(quicknat, backend, request):
    g = Gateway()
    base = test_nat44.CONFIG
    try:
        test_nat44.CONFIG = base + FORWARD
        try:
            g.setup(quicknat, backend, request.param)
        finally:
            test_nat44.CONFIG = base
        yield g
    finally:
        g.close()


@pytest.fixture(scope="module")
def run(gw):
    """Both clients' calls, open at once through one server, then cleared."""
    assert gw.qn.wait_started(), gw.qn.text()[-2000:]
    pac = gw.popen("srv", sys.executable, "-c", PAC, str(len(CLIENTS)), "20",
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert pac.stdout.readline().strip() == "ready"
    procs = {addr: gw.popen("cli", sys.executable, "-c", PNS, addr, SERVER, "1",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
             for addr in CLIENTS}
    # Each client's call is open (its GRE came back, or it failed) before any is cleared.
    early = {}
    for addr, p in procs.items():
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("gre "):
                break
        early[addr] = "".join(lines)
    clients = {}
    for addr, p in procs.items():
        try:
            out, err = p.communicate("go\n", timeout=30)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            p.kill()
            out, err = p.communicate()
        clients[addr] = (p.returncode, early[addr] + out, err)
    out, err = pac.communicate(timeout=30)
    return {"pac": out, "pac_err": err, "clients": clients, "stats": gw.qn.stats()}


def test_both_clients_complete_their_calls(run):
    for addr, (rc, out, err) in run["clients"].items():
        assert rc == 0, f"{addr}: {out}{err} | {run['pac']}{run['pac_err']} | {run['stats']}"


def test_the_server_sees_two_calls_from_the_public_address_under_different_ids(run):
    calls = [l.split() for l in run["pac"].splitlines() if l.startswith("call ")]
    assert [c[1] for c in calls] == [PUBLIC, PUBLIC], run["pac"]
    ids = [int(c[2]) for c in calls]
    assert len(set(ids)) == 2, f"one public call id for two clients: {run['pac']}"
    # The call's GRE came from the public address with the server's own ids.
    gre = [l.split() for l in run["pac"].splitlines() if l.startswith("gre ")]
    assert sorted(g[1:] for g in gre) == [[PUBLIC, "1000"], [PUBLIC, "1001"]], run["pac"]


def fields(out, kind):
    return next(l.split()[1:] for l in out.splitlines() if l.startswith(kind + " "))


def test_each_client_gets_its_own_id_back_and_its_own_calls_gre(run):
    pacs = set()
    for addr in CLIENTS:
        _, out, _ = run["clients"][addr]
        peer, pac = fields(out, "reply")
        assert peer == "1", out
        assert fields(out, "gre") == [SERVER, "1", f"call-{pac}"], out
        pacs.add(pac)
    assert pacs == {"1000", "1001"}, run["clients"]


def test_a_call_is_cleared_under_its_public_id_and_disconnected(run):
    calls = {l.split()[3]: l.split()[2] for l in run["pac"].splitlines() if l.startswith("call ")}
    clears = sorted(l.split()[1:] for l in run["pac"].splitlines() if l.startswith("clear "))
    assert clears == sorted([PUBLIC, calls[p]] for p in ("1000", "1001")), run["pac"]
    for addr in CLIENTS:
        _, out, _ = run["clients"][addr]
        assert fields(out, "disconnect") == ["13", fields(out, "reply")[1]], out


def test_the_control_connections_stayed_in_the_engine(gw, run):
    # Nothing refused: no full call table, no GRE call mistaken for another host's.
    assert gw.qn.dropped("pptp_calls_full") == 0, run["stats"]
    assert gw.qn.dropped("address_only_in_use") == 0, run["stats"]


@pytest.fixture(scope="module")
def served(gw, run):
    """An outside client's call to the inside server behind the port forward; the client
    sends its GRE first."""
    pac = gw.popen("cli", sys.executable, "-c", PAC, "1", "20", INSIDE_SERVER,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert pac.stdout.readline().strip() == "ready"
    p = gw.popen("srv", sys.executable, "-c", PNS, SERVER, PUBLIC, "1",
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate("go\n", timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    pac_out, pac_err = pac.communicate(timeout=30)
    return {"rc": p.returncode, "out": out, "err": err, "pac": pac_out + pac_err,
            "stats": gw.qn.stats()}


def test_an_outside_client_reaches_the_inside_server_its_gre_first(served):
    assert served["rc"] == 0, served
    # The server saw the client's own address and id: nothing rewritten.
    assert fields(served["pac"], "call")[:2] == [SERVER, "1"], served["pac"]
    assert fields(served["pac"], "gre") == [SERVER, "1000"], served["pac"]
    assert fields(served["out"], "reply") == ["1", "1000"], served["out"]
    assert fields(served["out"], "gre") == [PUBLIC, "1", "call-1000"], served["out"]
    assert fields(served["out"], "disconnect") == ["13", "1000"], served["out"]


def test_quicknat_stops_cleanly_on_sigterm(gw):
    rc, text = gw.stop()
    assert rc == 0 and "stopped." in text, text[-2000:]


def test_namespaces_removed(gw):
    left = gw.close()
    assert not left, str(left)
