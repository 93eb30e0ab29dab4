"""The packaged Prometheus alert rules and Grafana dashboard, kept true to the gateway.

    packaging/prometheus/quicknat-alerts.yml    packaging/grafana/quicknat.json

Without a network:
  * `promtool check rules` accepts the rules file;
  * every metric name in the rules (expressions, comments, annotations) and in every
    dashboard panel's expressions is one the gateway exports: a family of the generated
    metrics reference (docs/src/reference/metrics.md), with the sample suffix its type
    takes (`_total` for a counter, `_info` for an info); and every label an expression
    selects or groups by belongs to one of the families it uses (or is job/instance),
    and every drop reason an expression names is in the drop reasons reference;
  * the dashboard parses, has the datasource and instance variables, and every panel has
    a title and at least one target with an expression.

Live, the topology of test_metrics.py:

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2, UDP echo)

A NAT44 gateway with a tiny pool (one address, PORTS ports), a small session table and
a fast-path map of one session, and the real Prometheus server in the gateway's namespace
scraping it every second and evaluating a copy of the rules every second. The copy has
every `for:` set to 0s, so an alert fires at the first evaluation its condition holds:
the thresholds are the packaged ones, only the waiting is cut. Before any traffic, with
the rules evaluated on the gateway's series, no alert is pending or firing. Then, each
checked through /api/v1/alerts:
  * PORTS answered UDP flows take every port: QuicknatPoolAddressNearlyFull and
    QuicknatPoolExhaustionAhead fire for the address's UDP ports, and the fast-path map
    refuses all but one of those established sessions: QuicknatFastPathMapFull;
  * one more flow finds no port, and its datagrams are dropped as pool_exhausted:
    QuicknatDropsRising fires with reason="pool_exhausted";
  * flows from a bound port to as many remote ports as the table holds fill it:
    QuicknatSessionTableNearlyFull;
  * every dashboard panel's query, its variables filled in as Grafana would, runs in
    the real Prometheus and returns data;
  * the gateway stops: QuicknatDown.

Needs root.
    sudo python3 -m pytest tests/e2e/test_alerts.py [--quicknat PATH]
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from netns import UDP_SERVER, Scenario, once, sh, wait_for

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "packaging" / "prometheus" / "quicknat-alerts.yml"
DASHBOARD = REPO / "packaging" / "grafana" / "quicknat.json"
REFERENCE = REPO / "docs" / "src" / "reference" / "metrics.md"
DROP_REASONS = REPO / "docs" / "src" / "reference" / "drop-reasons.md"

SERVER = "198.51.100.2"
CLIENT = "10.0.0.2"
POOL = "203.0.113.1"
PORTS = 8
METRICS = "127.0.0.1:9465"
PROMETHEUS = "127.0.0.1:19091"
# Datagrams of the flow that finds no free port. The drop alert wants more than 1 drop
# per second over its 5 minute window (300 drops) and more than 1 % of the frames
# received; this is several times that.
REFUSED = 2000
# The inside source ports the client binds: the pool's flows, then the refused one.
FIRST_SOURCE_PORT = 40000

CONFIG = f"""
[gateway]
inside = "g-in"
outside = "g-out"
backend = "af_packet"
stats_interval = 1
metrics = "{METRICS}"
# The fast path's map holds two flow directions: one session; the others are refused.
xdp_fast_path = "on"
xdp_fast_path_entries = 2

[nat44]
# Room for the pool's flows and a few more: the table alert fires at 90 %.
max_sessions = 32

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["{POOL}/32"]
ports = "20000-{20000 + PORTS - 1}"
"""

PROM_CONFIG = f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {{rules}}
scrape_configs:
  - job_name: quicknat
    static_configs:
      - targets: ["{METRICS}"]
"""

# argv: server port first_source_port count. One socket per flow, bound to
# CLIENT:first_source_port+i; each exchanges two datagrams with the echo server, the
# second over 50 ms after the first: the session records last-seen times at that
# granularity, and a UDP session counts as established for the fast path once its reply
# record was seen after its original. Prints the flows whose both datagrams were
# answered.
FLOWS = r"""
import socket, sys, time
srv, port, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
answered = 0
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.0.0.2", first + i)); s.connect((srv, port))
    ok = 0
    for k in range(2):
        if k:
            time.sleep(0.1)  # past the session's 50 ms last-seen granularity
        s.send(b"ping")
        try:
            ok += s.recv(2048).startswith(b"peer=")
        except socket.timeout:
            pass
    answered += ok == 2
    s.close()
print(answered)
"""

# argv: source_port server first_port count: one datagram from CLIENT:source_port to
# each of count server ports.
SPRAY = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.0.0.2", int(sys.argv[1])))
srv, first, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(n):
    s.sendto(b"x", (srv, first + i))
"""

# argv: source_port server port count: count datagrams from CLIENT:source_port.
REPEAT = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.0.0.2", int(sys.argv[1])))
for i in range(int(sys.argv[4])):
    s.sendto(b"x", (sys.argv[2], int(sys.argv[3])))
    if i % 100 == 99:
        time.sleep(0.01)  # the gateway's receive ring is not overrun (a lost frame is not counted)
"""


# -- The metric names and labels the rules and the dashboard use ---------------------

def reference_families():
    """{family: (type, {labels})} from the generated metrics reference (which lists the
    fast path's and the routing families too)."""
    fams = {}
    row = re.compile(r"^\| `(quicknat_\w+)` \| (\w+) \| ([^|]*) \|", re.M)
    for name, kind, labels in row.findall(REFERENCE.read_text()):
        fams[name] = (kind, set(re.findall(r"`(\w+)`", labels)))
    assert len(fams) > 40, f"metrics reference unreadable: {len(fams)} families"
    fast = [f for f in fams if f.startswith("quicknat_xdp_fast_path_")]
    assert len(fast) >= 8, f"the reference lists no fast path families: {fast}"
    return fams


# The sample-name suffix each type takes in Prometheus.
SUFFIXES = {"counter": ("_total",), "info": ("_info",), "gauge": ("",),
            "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


def family_of(sample, fams):
    """The family a sample name belongs to, or None."""
    for fam, (kind, _) in fams.items():
        for suffix in SUFFIXES.get(kind, ("",)):
            if sample == fam + suffix:
                return fam
    return None


METRIC = re.compile(r"\bquicknat_[a-z0-9_]+")
# Label names in matchers (name="...", name=~"...", name!=..., name!~...) and in
# by/without/on/ignoring/group_left/group_right (...) clauses.
MATCHER = re.compile(r"[{,]\s*(\w+)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def rule_expressions(text):
    """The `expr:` values of a rules file (inline or block scalars), without a YAML
    library: a block is every following line indented deeper than its key."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        indent, rest = len(m.group(1)), m.group(2).strip()
        if rest and rest[0] not in "|>":
            out.append(rest)
            continue
        block = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            block.append(lines[i].strip())
            i += 1
        out.append("\n".join(block))
    return out


def dashboard_expressions(dash):
    """(panel title, expression) of every panel target, rows' nested panels included."""
    out = []
    for p in dash["panels"]:
        for q in (p, *p.get("panels", [])):
            out += [(q.get("title"), t["expr"]) for t in q.get("targets", []) if "expr" in t]
    return out


def problems_of(expr, fams, where):
    """Unknown metric names, and labels no family of the expression carries."""
    found = []
    used = set()
    for name in METRIC.findall(expr):
        fam = family_of(name, fams)
        if fam is None:
            found.append(f"{where}: {name} is no exported metric (metrics reference, fast path)")
        else:
            used.add(fam)
    labels = set(MATCHER.findall(expr))
    for group in GROUPING.findall(expr):
        labels |= {l.strip() for l in group.split(",") if l.strip()}
    known = {"job", "instance", "__name__"}.union(*(fams[f][1] for f in used))
    for label in sorted(labels - known):
        found.append(f"{where}: label {label} belongs to none of {sorted(used)}")
    reasons = set(re.findall(r"(?m)^\| `(\w+)` \|", DROP_REASONS.read_text()))
    for values in re.findall(r'\breason\s*(?:=~|!~|!=|=)\s*"([^"]*)"', expr):
        for reason in values.split("|"):
            if reason not in reasons:
                found.append(f"{where}: {reason} is no drop reason (drop reasons reference)")
    return found


def test_promtool_accepts_the_rules():
    if shutil.which("promtool") is None:
        pytest.fail("promtool not installed (scripts/test.sh installs the Debian package prometheus)")
    r = sh("promtool", "check", "rules", str(RULES), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    rules = len(re.findall(r"(?m)^\s*- alert: ", RULES.read_text()))
    assert f"SUCCESS: {rules} rules found" in r.stdout, r.stdout


def test_the_rules_use_exported_metrics_and_labels():
    fams = reference_families()
    text = RULES.read_text()
    exprs = rule_expressions(text)
    assert len(exprs) == len(re.findall(r"(?m)^\s*- alert: ", text)), exprs
    found = []
    for i, e in enumerate(exprs):
        found += problems_of(e, fams, f"rule {i + 1}")
    # Comments and annotations name metrics too.
    for name in sorted(set(METRIC.findall(text))):
        if family_of(name, fams) is None:
            found.append(f"{RULES.name}: {name} is no exported metric")
    assert not found, "\n".join(found)


def test_the_dashboard_uses_exported_metrics_and_labels():
    fams = reference_families()
    dash = json.loads(DASHBOARD.read_text())
    exprs = dashboard_expressions(dash)
    variables = [v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
                 for v in dash["templating"]["list"]]
    found = []
    for title, e in exprs + [("variables", v) for v in variables]:
        found += problems_of(e, fams, title)
    assert not found, "\n".join(found)


def test_the_dashboard_is_complete():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 36, dash["schemaVersion"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource", variables
    assert variables["datasource"]["query"] == "prometheus", variables
    assert variables["instance"]["type"] == "query", variables
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert len(panels) >= 10, len(panels)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), ids
    for p in panels:
        assert p.get("title"), p
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        targets = [t for t in p.get("targets", []) if t.get("expr")]
        assert targets, f"panel {p['title']!r} has no target with an expression"
        for t in targets:
            assert "$instance" in t["expr"] or t["expr"].startswith("up{"), (p["title"], t["expr"])
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, (p["title"], g)


# -- Live -----------------------------------------------------------------------------

class Alerts(Scenario):
    def __init__(self, quicknat):
        super().__init__("qalr", ("cli", "gw", "srv"))
        self.binary = quicknat
        self.tmp = tempfile.mkdtemp(prefix="qn-alerts-")
        self.defer(lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    @once
    def gateway(self):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", f"{CLIENT}/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", "python3", "-c", UDP_SERVER, SERVER, "5353")
        assert self.wait_udp_bound("srv", SERVER, 5353)
        self.qn = self.quicknat(self.binary, "gw", CONFIG, "alerts")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    @once
    def prometheus(self):
        """The real Prometheus server in the gateway's namespace, scraping and evaluating
        every second a copy of the rules whose `for:` durations are all 0s (each alert
        fires at the first evaluation its condition holds; thresholds unchanged).
        Returns once the target is up and every rule evaluates without error."""
        self.gateway()
        text = RULES.read_text()
        rules = len(re.findall(r"(?m)^\s*- alert: ", text))
        fast, n = re.subn(r"(?m)^(\s+for:\s*)\S+\s*$", r"\g<1>0s", text)
        assert n == rules, f"{n} for: lines, {rules} rules"
        rules_copy = os.path.join(self.tmp, "quicknat-alerts.yml")
        with open(rules_copy, "w") as f:
            f.write(fast)
        cfg = os.path.join(self.tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write(PROM_CONFIG.format(rules=rules_copy))
        self.prom_log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        self.defer(self.prom_log.close)
        self.prom = self.popen("gw", "prometheus", f"--config.file={cfg}",
                               f"--storage.tsdb.path={os.path.join(self.tmp, 'data')}",
                               f"--web.listen-address={PROMETHEUS}",
                               stdout=self.prom_log, stderr=subprocess.STDOUT)
        up = wait_for(lambda: self.query('up{job="quicknat"}') == {(): 1.0}, 60, step=0.5)
        assert up, f"target not up: {self.query('up')}\n{self.prom_text()[-3000:]}"
        healthy = wait_for(lambda: (r := self.rules()) and len(r) == rules
                           and all(x["health"] == "ok" for x in r), 30, step=0.5)
        assert healthy, json.dumps(self.rules(), indent=1)

    def prom_text(self):
        with open(os.path.join(self.tmp, "prometheus.log")) as f:
            return f.read()

    def api(self, path):
        r = self.nsx("gw", "curl", "-sf", "--max-time", "3", f"http://{PROMETHEUS}{path}", check=False)
        if r.returncode != 0:
            return None
        data = json.loads(r.stdout)
        return data["data"] if data.get("status") == "success" else None

    def query(self, expr):
        """Instant query: {tuple of sorted (label, value) without __name__, job and
        instance: value}, or None while Prometheus cannot answer."""
        data = self.api("/api/v1/query?query=" + urllib.parse.quote(expr))
        if data is None:
            return None
        out = {}
        for res in data["result"]:
            labels = tuple(sorted((k, v) for k, v in res["metric"].items()
                                  if k not in ("__name__", "job", "instance")))
            out[labels] = float(res["value"][1])
        return out

    def value(self, expr, labels=()):
        return (self.query(expr) or {}).get(tuple(sorted(labels)), 0.0)

    def rules(self):
        """The rules of the group as Prometheus evaluates them (health, lastEvaluation)."""
        data = self.api("/api/v1/rules?type=alert")
        return [r for g in data["groups"] for r in g["rules"]] if data else None

    def evaluations(self):
        return {r["name"]: r.get("lastEvaluation") for r in self.rules() or []}

    def alerts(self):
        """[(alertname, labels, state)] of every pending or firing alert."""
        data = self.api("/api/v1/alerts")
        if data is None:
            return []
        return [(a["labels"]["alertname"], a["labels"], a["state"]) for a in data["alerts"]]

    def firing(self, name, **labels):
        """The firing instances of alert `name` whose labels include `labels`."""
        return [l for n, l, s in self.alerts()
                if n == name and s == "firing" and all(l.get(k) == v for k, v in labels.items())]

    def wait_firing(self, name, timeout=60, **labels):
        got = wait_for(lambda: self.firing(name, **labels), timeout, step=0.5)
        assert got, (f"{name} {labels} not firing: {self.alerts()}\n"
                     f"{json.dumps([r for r in self.rules() or [] if r['name'] == name], indent=1)}\n"
                     f"{self.qn.stats()}")
        return got

    @once
    def baseline(self):
        """The alerts pending or firing before any traffic, once the rules were
        evaluated twice on the gateway's series (the pool, the table, the drops)."""
        self.prometheus()
        have = wait_for(lambda: self.query(f'quicknat_pool_ports{{address="{POOL}"}}')
                        and self.query("quicknat_session_table_capacity")
                        and self.query('quicknat_dropped_packets_total{reason="pool_exhausted"}'),
                        30, step=0.5)
        assert have, self.query('{__name__=~"quicknat_pool.*|quicknat_session_table.*"}')
        for _ in range(2):
            before = self.evaluations()
            assert wait_for(lambda: (now := self.evaluations())
                            and all(now.get(k) != v for k, v in before.items()), 30, step=0.2), before
        return self.alerts()

    @once
    def pool_flows(self):
        """As many answered UDP flows as the address has ports."""
        self.baseline()
        self.ports = int(self.value(f'quicknat_pool_ports{{address="{POOL}"}}', (("address", POOL),)))
        assert self.ports == PORTS, self.query("quicknat_pool_ports")
        r = self.nsx("cli", "python3", "-c", FLOWS, SERVER, "5353", str(FIRST_SOURCE_PORT),
                     str(self.ports), timeout=60)
        assert int(r.stdout) == self.ports, f"{r.stdout} flows answered\n{self.qn.stats()}"

    @once
    def refused_flow(self):
        """One more flow: no port left, each datagram dropped as pool_exhausted."""
        self.pool_flows()
        self.nsx("cli", "python3", "-c", REPEAT, str(FIRST_SOURCE_PORT + PORTS), SERVER, "5353",
                 str(REFUSED), timeout=60)

    @once
    def table_filled(self):
        """Sessions from one bound port (its binding exists) to as many server ports as
        the table has free slots, and two more."""
        self.refused_flow()
        capacity = self.value("quicknat_session_table_capacity")
        taken = self.value("sum(quicknat_session_table_slots)")
        assert 0 < taken < capacity, (taken, capacity)
        self.nsx("cli", "python3", "-c", SPRAY, str(FIRST_SOURCE_PORT), SERVER, "6000",
                 str(int(capacity - taken) + 2), timeout=30)


@pytest.fixture(scope="module")
def scene(quicknat):
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus not installed (scripts/test.sh installs the Debian package)")
    s = Alerts(quicknat)
    yield s
    assert not s.close()


def test_no_alert_before_the_traffic(scene):
    # None at all: an idle, healthy gateway fires nothing, even with every `for:` at 0s.
    seen = scene.baseline()
    assert not seen, seen
    # The conditions were evaluated on real series, far from their thresholds.
    use = scene.query('quicknat_pool_ports_taken{protocol="udp"}'
                      " / ignoring (protocol) group_left quicknat_pool_ports")
    assert use == {(("address", POOL), ("protocol", "udp")): 0.0}, use


def test_a_full_pool_address_fires_the_pool_alerts(scene):
    scene.pool_flows()
    for name in ("QuicknatPoolAddressNearlyFull", "QuicknatPoolExhaustionAhead"):
        got = scene.wait_firing(name, address=POOL, protocol="udp")
        assert len(got) == 1, got
    # TCP ports were not used: no alert for them.
    assert not scene.firing("QuicknatPoolAddressNearlyFull", protocol="tcp")


def test_a_full_fast_path_map_fires_its_alert(scene):
    scene.pool_flows()
    assert wait_for(lambda: scene.value("quicknat_xdp_fast_path_map_full_total") > 0, 30, 0.5), (
        scene.query('{__name__=~"quicknat_xdp_fast_path.*"}'), scene.qn.stats())
    scene.wait_firing("QuicknatFastPathMapFull")


def test_drops_for_an_exhausted_pool_fire_the_drop_alert(scene):
    scene.refused_flow()
    expr = 'quicknat_dropped_packets_total{reason="pool_exhausted"}'
    # Most of the refused flow's datagrams were counted (the alert's rate rests on it).
    assert wait_for(lambda: scene.value(expr, (("reason", "pool_exhausted"),)) >= REFUSED / 2, 30, 0.5), (
        scene.query(expr), scene.qn.stats())
    scene.wait_firing("QuicknatDropsRising", reason="pool_exhausted")
    # Benign reasons stay out even when counted.
    assert not scene.firing("QuicknatDropsRising", reason="no_mapping")


def test_a_full_session_table_fires_its_alert(scene):
    scene.table_filled()
    scene.wait_firing("QuicknatSessionTableNearlyFull")
    fill = scene.value("sum(quicknat_session_table_slots) / sum(quicknat_session_table_capacity)")
    assert fill > 0.9, fill


def test_every_dashboard_expression_runs_on_the_live_gateway(scene):
    """Each panel's query, its variables set as Grafana would (every instance of the job,
    a 1 m rate interval), runs without error in the real Prometheus and has data (rates
    once two scrapes have seen the traffic)."""
    scene.table_filled()
    dash = json.loads(DASHBOARD.read_text())

    def run():
        empty, failed = [], []
        for title, expr in dashboard_expressions(dash):
            q = (expr.replace("$__rate_interval", "1m").replace('"$instance"', '".+"')
                 .replace('"$job"', '"quicknat"'))
            r = scene.nsx("gw", "curl", "-s", "--max-time", "3", "--data-urlencode", f"query={q}",
                          f"http://{PROMETHEUS}/api/v1/query", check=False)
            data = json.loads(r.stdout) if r.returncode == 0 and r.stdout else {}
            if data.get("status") != "success":
                failed.append(f"{title}: {q}: {r.stdout or r.stderr}")
            elif not data["data"]["result"]:
                empty.append(f"{title}: {q}")
        return empty, failed

    empty, failed = run()
    assert not failed, "\n".join(failed)
    if empty:
        wait_for(lambda: not run()[0], 30, step=1)
        empty, failed = run()
    assert not failed, "\n".join(failed)
    assert not empty, "\n".join(empty)


def test_a_stopped_gateway_fires_quicknat_down(scene):
    scene.prometheus()
    assert not scene.firing("QuicknatDown")
    rc, _ = scene.qn.stop()
    assert rc == 0, scene.qn.text()[-2000:]
    scene.wait_firing("QuicknatDown", job="quicknat")
