"""Prometheus metrics (`[gateway] metrics`) scraped by the real Prometheus server.

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2, UDP echo)

A NAT44 gateway serves /metrics on 127.0.0.1:9464 inside its namespace (a management
address, as an operator would bind it); Prometheus (Debian package `prometheus`) runs in
the same namespace with a 1 s scrape interval. Known traffic: 200 UDP round trips from
the client (each answered: 400 packets forwarded, 200 frames received on the inside), and
25 datagrams from the server to a pool port nobody mapped (`no_mapping` drops). The test
waits until Prometheus reports the target up, then queries its HTTP API until it reports
at least those counts, and reads the build info (mode, backend). Then: a second gateway
whose metrics address is taken refuses to start, naming the address; a bad `metrics`
value is a configuration error naming file, line and field.

Needs root.
    sudo python3 -m pytest tests/e2e/test_metrics.py [--quicknat PATH]
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import pytest

from netns import UDP_SERVER, Scenario, once, sh, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
POOL = "203.0.113.1"
METRICS = "127.0.0.1:9464"
PROMETHEUS = "127.0.0.1:19090"
ROUND_TRIPS = 200
PAYLOAD = 100
UNMAPPED = 25

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1
metrics = "{metrics}"
# Every packet through the engine, whose counters the metrics are checked against.
xdp_fast_path = "off"

[nat44]
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["{pool}/32"]
ports = "20000-29999"
"""

PROM_CONFIG = f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: quicknat
    static_configs:
      - targets: ["{METRICS}"]
"""

# argv: server port count payload. One socket; each datagram waits for its answer (1 s);
# prints the answers received.
ROUND_TRIP = r"""
import socket, sys
srv, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
s.connect((srv, port))
got = 0
for i in range(n):
    s.send(b"q" * size)
    try:
        got += s.recv(2048).startswith(b"peer=")
    except socket.timeout:
        pass
print(got)
"""

# argv: address port count: datagrams to a port nobody mapped.
UNSOLICITED = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[3])):
    s.sendto(b"knock", (sys.argv[1], int(sys.argv[2])))
"""

# Binds a TCP listener on argv[1]:argv[2], says "bound" and waits for stdin to close.
SQUAT = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
print("bound", flush=True)
sys.stdin.read()
"""


class Metrics(Scenario):
    def __init__(self, quicknat, backend):
        super().__init__("qmet", ("cli", "gw", "srv"))
        self.binary, self.backend = quicknat, backend
        self.tmp = tempfile.mkdtemp(prefix="qn-prometheus-")
        self.defer(lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    @once
    def gateway(self):
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
        assert self.wait_udp_bound("srv", SERVER, 5353)
        self.qn = self.quicknat(self.binary, "gw",
                                CONFIG.format(backend=self.backend, metrics=METRICS, pool=POOL),
                                f"metrics-{self.backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]
        assert f"metrics: Prometheus metrics on http://{METRICS}/metrics" in self.qn.text()

    @once
    def prometheus(self):
        """The real Prometheus server in the gateway's namespace, scraping every second;
        returns once its API says the target is up."""
        self.gateway()
        cfg = os.path.join(self.tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(PROM_CONFIG)
        self.prom_log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        self.prom = self.popen("gw", "prometheus", f"--config.file={cfg}",
                               f"--storage.tsdb.path={os.path.join(self.tmp, 'data')}",
                               f"--web.listen-address={PROMETHEUS}",
                               stdout=self.prom_log, stderr=subprocess.STDOUT)
        self.defer(self.prom_log.close)
        up = wait_for(lambda: self.query('up{job="quicknat"}') == {(): 1.0}, 60, step=0.5)
        assert up, f"target not up: {self.query('up')}\n{self.prom_text()[-3000:]}"

    def prom_text(self):
        with open(os.path.join(self.tmp, "prometheus.log")) as f:
            return f.read()

    def query(self, expr):
        """Prometheus' instant query of `expr`: {tuple of sorted (label, value) without
        __name__, job and instance: value}, or None while it cannot answer."""
        url = f"http://{PROMETHEUS}/api/v1/query?query=" + urllib.parse.quote(expr)
        r = self.nsx("gw", "curl", "-sf", "--max-time", "3", url, check=False)
        if r.returncode != 0:
            return None
        data = json.loads(r.stdout)
        if data.get("status") != "success":
            return None
        out = {}
        for res in data["data"]["result"]:
            labels = tuple(sorted((k, v) for k, v in res["metric"].items()
                                  if k not in ("__name__", "job", "instance")))
            out[labels] = float(res["value"][1])
        return out

    def value(self, expr, labels=()):
        """One series' value (0 when Prometheus has none yet)."""
        return (self.query(expr) or {}).get(tuple(sorted(labels)), 0.0)

    @once
    def traffic(self):
        self.prometheus()
        r = self.nsx("cli", "python3", "-c", ROUND_TRIP, SERVER, "5353", str(ROUND_TRIPS),
                     str(PAYLOAD), timeout=60)
        self.answered = int(r.stdout.strip())
        assert self.answered == ROUND_TRIPS, f"{self.answered} answers\n{self.qn.stats()}"
        self.nsx("srv", "python3", "-c", UNSOLICITED, POOL, "29999", str(UNMAPPED))


@pytest.fixture(scope="module")
def scene(quicknat, backend):
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus not installed (scripts/test.sh installs the Debian package)")
    s = Metrics(quicknat, backend)
    yield s
    assert not s.close()


def test_prometheus_scrapes_the_gateway(scene):
    scene.prometheus()
    # The target's own scrape metadata: Prometheus parsed every sample it was served.
    assert scene.value('scrape_samples_scraped{job="quicknat"}') > 50


def test_forwarded_packets_and_bytes_match_the_traffic(scene):
    scene.traffic()
    want = 2 * ROUND_TRIPS  # each round trip: out and back
    assert wait_for(lambda: scene.value("quicknat_forwarded_packets_total") >= want, 20, 0.5), (
        scene.query("quicknat_forwarded_packets_total"), scene.qn.stats())
    # Frames on the inside: at least the requests, each 14 + 20 + 8 + PAYLOAD bytes.
    inside = (("interface", "inside"),)
    assert scene.value("quicknat_received_packets_total", inside) >= ROUND_TRIPS
    assert scene.value("quicknat_received_bytes_total", inside) >= ROUND_TRIPS * (42 + PAYLOAD)
    # Out of the outside port: the requests, NAT44 keeping their size, less those handed
    # to the kernel while their next hop was resolved.
    outside = (("interface", "outside"),)
    sent = scene.value("quicknat_transmitted_packets_total", outside)
    assert sent >= ROUND_TRIPS - scene.value("quicknat_via_kernel_packets_total")
    assert scene.value("quicknat_transmitted_bytes_total", outside) == sent * (42 + PAYLOAD)
    assert scene.value("quicknat_sessions_created_total") >= 1
    assert scene.value("quicknat_sessions") >= 1
    assert scene.value("sum(quicknat_worker_forwarded_packets_total)") >= want


def test_a_provoked_drop_is_counted_with_its_reason(scene):
    scene.traffic()
    expr = 'quicknat_dropped_packets_total{reason="no_mapping"}'
    assert wait_for(lambda: scene.value(expr, (("reason", "no_mapping"),)) >= UNMAPPED, 20, 0.5), (
        scene.query(expr), scene.qn.stats())
    # Every reason is a series, zero or not.
    assert len(scene.query("quicknat_dropped_packets_total")) > 30


def test_build_info_table_and_reaper(scene):
    scene.prometheus()
    info = scene.query("quicknat_build_info")
    assert len(info) == 1, info
    labels = dict(next(iter(info)))
    assert (labels["mode"], labels["backend"]) == ("nat44", scene.backend), labels
    assert scene.value("quicknat_session_table_capacity") > 0
    assert scene.value("quicknat_reaper_passes_total") >= 1
    assert scene.value("time() - quicknat_process_start_time_seconds") >= 0


def test_an_address_in_use_is_a_clear_start_up_error(scene, quicknat):
    scene.prometheus()
    rc, _ = scene.qn.stop()
    assert rc == 0
    host, port = METRICS.split(":")
    squat = scene.popen("gw", "python3", "-c", SQUAT, host, port,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert squat.stdout.readline().strip() == "bound"
    q = scene.quicknat(quicknat, "gw",
                       CONFIG.format(backend=scene.backend, metrics=METRICS, pool=POOL),
                       f"metrics-busy-{scene.backend}")
    rc = q.proc.wait(timeout=15)  # refuses at once (raises if it ran on)
    text = q.text()
    assert rc != 0, text
    assert f"error: metrics listener on {METRICS} ([gateway] metrics): " in text, text
    assert "in use" in text, text


def test_a_bad_metrics_value_names_file_line_and_field(quicknat):
    text = CONFIG.format(backend="af_packet", metrics="localhost:9464", pool=POOL)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        r = sh(quicknat, "check-config", "--config", f.name, check=False)
    finally:
        os.unlink(f.name)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("metrics ="))
    assert r.returncode != 0
    assert f"{f.name}:{line}: gateway.metrics: \"localhost:9464\": not an IP address and port" in r.stderr, r.stderr
