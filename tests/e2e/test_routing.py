"""End-to-end tests of the routing integration: quicknat tells a real BIRD 2
which prefixes it serves, BIRD exports them by BGP (with BFD) to a router, and they are
withdrawn when the gateway stops forwarding. Once per backend, in file order:

  * the router's kernel table gets the announced prefixes: 0.0.0.0/0 over the inside
    session only, the public prefixes over the outside session only;
  * the standby prefix arrives with its AS path prepended 3 times (`birdc show route all`);
  * the outside interface set down withdraws everything (the health check: the default
    route goes from the inside session, which stays up); set up again, it comes back;
    `quicknat status` and /metrics tell it;
  * SIGKILL of quicknat withdraws the prefixes at the router in under 1 s (measured and
    printed: the kernel deletes the TUN device with the process, BIRD learns it by
    netlink and withdraws by BGP);
  * a restart announces again; a clean SIGTERM withdraws, and leaves no device behind;
  * nothing is left behind: no bird process, no namespace.

Topology (two namespaces; the gateway's BIRD runs examples/cluster/bird-gateway.conf
with its log sent to a file):

    rtr  r-in 10.0.0.2      ==  g-in 10.0.0.1      gw   quicknat [routing] + bird (AS 65001)
         r-out 198.51.100.2 ==  g-out 198.51.100.1
    (bird, AS 65010 on the inside session, AS 65020 on the outside one, BFD on both)

    sudo python3 -m pytest tests/e2e/test_routing.py [--quicknat PATH]
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from netns import Scenario, sh, wait_for

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "cluster" / "bird-gateway.conf"
PRIMARY = "203.0.113.0/29"
STANDBY = "203.0.113.8/29"
METRICS_PORT = 19464

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
workers = 1
stats_interval = 1
gso = false
control_socket = "{sock}"
metrics = "127.0.0.1:{metrics}"

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]

[routing]
announce = ["0.0.0.0/0", "{primary}"]
standby = ["{standby}"]
"""

# The router: one BIRD with a session per gateway link, everything learned into its
# main table.
ROUTER_BIRD = """
log "{log}" all;
router id 198.51.100.2;
protocol device {{ scan time 10; }}
protocol kernel {{ ipv4 {{ import none; export all; }}; }}
protocol bfd {{
	interface "*" {{ min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }};
}}
protocol bgp gw_inside {{
	local 10.0.0.2 as 65010;
	neighbor 10.0.0.1 as 65001;
	bfd on;
	connect delay time 1;
	connect retry time 1;
	error wait time 1, 2;
	ipv4 {{ import all; export none; }};
}}
protocol bgp gw_outside {{
	local 198.51.100.2 as 65020;
	neighbor 198.51.100.1 as 65001;
	bfd on;
	connect delay time 1;
	connect retry time 1;
	error wait time 1, 2;
	ipv4 {{ import all; export none; }};
}}
"""

STATUS_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'{"v":1,"cmd":"status"}\n'); print(s.recv(65536).decode())
"""

METRICS_CLIENT = r"""
import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=3).read().decode())
"""


def gateway_bird_config(log):
    """examples/cluster/bird-gateway.conf as shipped, its log sent to `log`."""
    text = EXAMPLE.read_text()
    assert "log syslog all;" in text
    return text.replace("log syslog all;", f'log "{log}" all;')


class RoutingLab(Scenario):
    def __init__(self):
        super().__init__("qrt", ("rtr", "gw"))
        self.dir = tempfile.mkdtemp(prefix="qn-routing-")
        self.sock = os.path.join(self.dir, "ctl.sock")
        self.birds = {}
        self.gw = None

    def setup(self, quicknat, backend):
        self.binary, self.backend = quicknat, backend
        self.make_namespaces()
        self.link("rtr", "r-in", "gw", "g-in")
        self.link("rtr", "r-out", "gw", "g-out")
        for n, dev, addr in (("rtr", "r-in", "10.0.0.2/24"), ("gw", "g-in", "10.0.0.1/24"),
                             ("rtr", "r-out", "198.51.100.2/24"), ("gw", "g-out", "198.51.100.1/24")):
            self.nsx(n, "ip", "addr", "add", addr, "dev", dev)
        self.start_bird("gw", gateway_bird_config(os.path.join(self.dir, "gw-bird.log")))
        self.start_bird("rtr", ROUTER_BIRD.format(log=os.path.join(self.dir, "rtr-bird.log")))
        self.defer(lambda: shutil.rmtree(self.dir, ignore_errors=True))
        assert wait_for(lambda: self.established() == {"gw_inside", "gw_outside"}, 30), \
            self.birdc("rtr", "show", "protocols")

    def start_bird(self, name, text):
        conf = os.path.join(self.dir, f"{name}-bird.conf")
        with open(conf, "w") as f:
            f.write(text)
        sock = os.path.join(self.dir, f"{name}-bird.ctl")
        # -f: in the foreground, a child of this test, killed and reaped at teardown.
        p = self.popen(name, "bird", "-f", "-c", conf, "-s", sock, "-P", os.path.join(self.dir, f"{name}-bird.pid"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert wait_for(lambda: os.path.exists(sock) or p.poll() is not None, 10) and p.poll() is None, \
            p.stderr.read().decode() if p.poll() is not None else "no control socket"
        self.birds[name] = (p, sock)

    def birdc(self, name, *args):
        return sh("birdc", "-s", self.birds[name][1], *args, check=False).stdout

    def established(self):
        out = self.birdc("rtr", "show", "protocols")
        return {l.split()[0] for l in out.splitlines() if "Established" in l}

    def routes(self):
        """The router's kernel routes learned by BIRD: {prefix: next hop}."""
        out = self.nsx("rtr", "ip", "-4", "route", "show", "proto", "bird").stdout
        got = {}
        for line in out.splitlines():
            m = re.match(r"(\S+) via (\S+)", line)
            if m:
                got["0.0.0.0/0" if m.group(1) == "default" else m.group(1)] = m.group(2)
        return got

    def start_gateway(self, label):
        text = CONFIG.format(backend=self.backend, sock=self.sock, metrics=METRICS_PORT,
                             primary=PRIMARY, standby=STANDBY)
        self.gw = self.quicknat(self.binary, "gw", text, label)
        assert self.gw.wait_started(), self.gw.text()
        return self.gw

    def status(self):
        out = self.nsx("gw", sys.executable, "-c", STATUS_CLIENT, self.sock).stdout
        return json.loads(out.splitlines()[0])["status"]

    def metric(self, name):
        out = self.nsx("gw", sys.executable, "-c", METRICS_CLIENT, str(METRICS_PORT)).stdout
        m = re.search(rf"^{name} (\S+)$", out, re.M)
        return m and m.group(1)

    def close(self):
        left = super().close()
        self.birds_left = [p.pid for p, _ in self.birds.values() if p.poll() is None]
        return left


ALL = {"0.0.0.0/0": "10.0.0.1", PRIMARY: "198.51.100.1", STANDBY: "198.51.100.1"}


@pytest.fixture(scope="module")
def lab(quicknat, backend):
    if not shutil.which("bird") or not shutil.which("birdc"):
        pytest.skip("needs BIRD 2 (apt-get install bird2; scripts/test.sh installs it)")
    t = RoutingLab()
    try:
        t.setup(quicknat, backend)
        yield t
    finally:
        t.close()


def test_the_router_learns_the_announced_prefixes(lab):
    assert lab.routes() == {}, "nothing before quicknat runs"
    lab.start_gateway("announce")
    assert wait_for(lambda: lab.routes() == ALL, 10), (lab.routes(), lab.birdc("gw", "show", "route", "all"))
    # Each session carries what its router needs: the default route inside, the public
    # prefixes outside.
    inside = lab.birdc("rtr", "show", "route", "protocol", "gw_inside")
    outside = lab.birdc("rtr", "show", "route", "protocol", "gw_outside")
    assert "0.0.0.0/0" in inside and PRIMARY not in inside and STANDBY not in inside, inside
    assert PRIMARY in outside and STANDBY in outside and "0.0.0.0/0" not in outside, outside
    st = lab.status()["routing"]
    assert st["announced"] is True and st["reason"] == "healthy", st
    assert st["prefixes"] == ["0.0.0.0/0", PRIMARY, f"{STANDBY} (standby)"], st
    assert lab.metric("quicknat_routes_announced") == "1"
    assert "routing: announced 0.0.0.0/0" in lab.gw.text()


def test_the_standby_prefix_has_the_longer_as_path(lab):
    def path(prefix):
        out = lab.birdc("rtr", "show", "route", "all", prefix)
        m = re.search(r"BGP\.as_path: (.*)", out)
        return m and m.group(1).split()

    assert path(PRIMARY) == ["65001"]
    assert path(STANDBY) == ["65001"] * 4, "prepended 3 times for krt_metric >= 1000"
    assert path("0.0.0.0/0") == ["65001"]


def test_the_outside_link_down_withdraws_and_up_announces_again(lab):
    lab.nsx("gw", "ip", "link", "set", "g-out", "down")
    t0 = time.monotonic()
    # The inside session stays up: the default route goes because quicknat withdrew it.
    assert wait_for(lambda: "0.0.0.0/0" not in lab.routes(), 3), lab.routes()
    took = time.monotonic() - t0
    assert "gw_inside" in lab.established()
    st = lab.status()["routing"]
    assert st["announced"] is False and st["reason"] == "outside interface g-out down", st
    assert lab.metric("quicknat_routes_announced") == "0"
    assert "withdrew 0.0.0.0/0" in lab.gw.text() and "outside interface g-out down" in lab.gw.text()
    print(f"\nlink down -> default route withdrawn at the inside router: {took * 1000:.0f} ms")
    lab.nsx("gw", "ip", "link", "set", "g-out", "up")
    assert wait_for(lambda: "0.0.0.0/0" in lab.routes(), 3), lab.routes()
    # The outside session comes back (BFD took it down with the link) with the prefixes.
    assert wait_for(lambda: lab.routes() == ALL, 30), (lab.routes(), lab.birdc("rtr", "show", "protocols"))
    st = lab.status()["routing"]
    assert st["announced"] is True and st["announcements"] == 2 and st["withdrawals"] == 1, st


def test_sigkill_withdraws_at_the_router_within_a_second(lab, record_property):
    assert lab.routes() == ALL
    t0 = time.monotonic()
    lab.gw.proc.send_signal(signal.SIGKILL)
    gone = wait_for(lambda: not lab.routes(), 5, step=0.01)
    took = time.monotonic() - t0
    assert gone, lab.routes()
    print(f"\nSIGKILL -> prefixes gone from the router's kernel table: {took * 1000:.0f} ms")
    record_property(f"sigkill_withdrawal_ms_{lab.backend}", round(took * 1000))
    assert took < 1.0
    lab.gw.proc.wait(timeout=5)
    assert "qn-announce" not in lab.nsx("gw", "ip", "link", "show").stdout


def test_a_restart_announces_again(lab):
    lab.start_gateway("restart")
    assert wait_for(lambda: lab.routes() == ALL, 10), lab.routes()


def test_sigterm_withdraws_and_removes_the_device(lab):
    t0 = time.monotonic()
    rc, text = lab.gw.stop()
    assert rc == 0, text
    assert wait_for(lambda: not lab.routes(), 3, step=0.01), lab.routes()
    print(f"\nSIGTERM -> prefixes gone from the router: {(time.monotonic() - t0) * 1000:.0f} ms")
    assert "routing: withdrew" in text and ": stopping" in text, text
    assert "qn-announce" not in lab.nsx("gw", "ip", "link", "show").stdout
    assert lab.nsx("gw", "ip", "route", "show", "table", "250").stdout.strip() == ""


def test_nothing_is_left_behind(lab):
    pids = [p.pid for p, _ in lab.birds.values()]
    assert lab.close() == [], "namespaces left"
    assert lab.birds_left == [], "bird processes left"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"bird {pid} still there"
