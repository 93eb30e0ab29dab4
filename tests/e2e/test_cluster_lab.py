"""The cluster lab's short form: `quicknat-lab lab --topology cluster --short` runs end to end,
once per backend.

    sudo python3 -m pytest tests/e2e/test_cluster_lab.py [--quicknat PATH]

Two quicknat gateways with deterministic NAT (RFC 7422) between two BIRD routers (BGP, BFD;
the inside router sends each slice of subscribers to its gateway by policy routing), 1 kHz
UDP flows and long-lived TCP connections from subscribers of both slices, then the first
gateway's quicknat is killed with SIGKILL (cell `det-kill`). Checked: the lab exits 0; the
routers end up routing as planned (every slice and public block to the survivor); the
dead gateway's subscribers' traffic resumes; 1,000 subscribers were all counted, on the
gateways the plan names, before and after; every UDP flow kept one public endpoint, the one
`quicknat det forward --port` computes from the configuration alone, and every TCP
connection's public address is its subscriber's; and no namespace, BIRD, quicknat or
temporary file is left. It never asserts the lab's timing goals (a figure on a loaded
2-core machine is not a test): README.md has the full form's table.

`quicknat-lab` is found next to the quicknat binary (`cargo build --release -p quicknat -p lab`).
"""

import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_root

BACKENDS = ["af_packet", "af_xdp"]
SUBSCRIBERS = 1000


def run_lab(quicknat, backend, cell):
    """(backend, pid, exit code, report or None, stderr) of one short-form run of `cell`."""
    exe = Path(quicknat).with_name("quicknat-lab")
    if not exe.exists():
        pytest.fail(f"{exe} is missing: cargo build --release -p quicknat -p lab")
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    p = subprocess.Popen(
        [str(exe), "lab", "--topology", "cluster", "--short", "--cells", cell,
         "--backends", backend, "--json", "--quicknat", quicknat],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.terminate()  # the lab removes its namespaces on SIGTERM
        out, err = p.communicate(timeout=30)
    report = None
    try:
        report = json.loads(out)
    except ValueError:
        pass
    return backend, p.pid, p.returncode, report, err


@pytest.fixture(scope="module", params=BACKENDS)
def lab(request, quicknat):
    """The short form's SIGKILL cell."""
    return run_lab(quicknat, request.param, "det-kill")


@pytest.fixture(scope="module", params=BACKENDS)
def drain_lab(request, quicknat):
    """The short form's drain cell: `quicknat drain --stop` on the first gateway."""
    return run_lab(quicknat, request.param, "det-drain")


def cell_of(lab):
    _, _, rc, report, err = lab
    assert rc == 0 and report is not None, err[-3000:]
    (cell,) = report["cells"]
    return report, cell


def test_the_lab_runs_and_reports_json(lab):
    backend, _, rc, report, err = lab
    assert rc == 0 and report is not None, err[-3000:]
    assert report["gateways"] == 2 and report["backend"] == backend
    assert report["slices"] == 2 and report["blocks"] == 256


def test_the_routers_move_the_dead_gateways_slices_to_the_survivor(lab):
    _, cell = cell_of(lab)
    assert cell["mode"] == "deterministic" and cell["event"] == "sigkill"
    assert cell["victim"] == "gw1"
    assert cell["reconverged"], "the routers did not route every slice and block to gw2"


def test_every_subscriber_is_counted_where_the_plan_puts_it(lab):
    _, cell = cell_of(lab)
    assert sum(cell["planned_before"]) == SUBSCRIBERS
    assert cell["spread_before"] == cell["planned_before"], cell
    assert cell["planned_after"] == [0, SUBSCRIBERS]
    assert cell["spread_after"] == cell["planned_after"], cell
    # Both gateways served someone before: the slices are spread by the hash.
    assert min(cell["spread_before"]) > 0
    # The goal: max/min <= 1.2x (bounded-load ownership, slices.rs).
    planned = cell["planned_before"]
    assert max(planned) <= 1.2 * min(planned), planned


def test_traffic_resumes_for_the_dead_gateways_subscribers(lab):
    _, cell = cell_of(lab)
    victims = [r for r in cell["udp"] if r["gateway_before"] == "gw1"]
    others = [r for r in cell["udp"] if r["gateway_before"] == "gw2"]
    assert victims and others, cell["udp"]
    for r in victims:
        assert r["gateway_after"] == "gw2", r
        assert r["resumed"], r
        assert r["last_ms"] > cell["event_ms"] + 1000, r
    for r in cell["udp"]:
        assert r["sent"] > 0 and 0 < r["received"] <= r["sent"], r
    victims_tcp = [t for t in cell["tcp"] if t["gateway_before"] == "gw1"]
    assert victims_tcp, cell["tcp"]


def test_a_drain_moves_the_traffic_with_no_loss_before_the_gateway_stops(drain_lab):
    """`quicknat drain --stop`: the routes withdrawn, the routers move gw1's subscribers to
    gw2 while gw1 still forwards, then gw1 stops: no datagram lost, no gap, every TCP
    connection and every UDP flow's public endpoint kept (deterministic NAT)."""
    _, cell = cell_of(drain_lab)
    assert (cell["event"], cell["victim"], cell["reconverged"]) == ("drain", "gw1", True), cell
    assert cell["spread_after"] == [0, SUBSCRIBERS], cell
    victims = [r for r in cell["udp"] if r["gateway_before"] == "gw1"]
    assert victims and all(r["gateway_after"] == "gw2" for r in victims), cell["udp"]
    assert cell["victim_lost"] == 0 and cell["survivor_lost"] == 0, cell
    assert cell["udp_kept"] == len(cell["udp"]), cell["udp"]
    assert cell["tcp_victim"] > 0 and cell["tcp_victim_survived"] == cell["tcp_victim"], cell["tcp"]
    # gw1's log says why its routes went.
    assert "draining (quicknat drain)" in cell["quicknat_logs"][0], cell["quicknat_logs"][0][-2000:]


def det_forward(quicknat, config, inside, port):
    out = subprocess.run([quicknat, "det", "forward", "--config", config, inside,
                          "--port", str(port), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_deterministic_mappings_are_unchanged_and_computable_from_the_config(lab, quicknat):
    report, cell = cell_of(lab)
    det = report["deterministic"]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write(f'[nat44]\n[nat44.deterministic]\ninside = "{det["inside"]}"\n'
                f'outside = "{det["outside"]}"\n')
        f.flush()
        for r in cell["udp"]:
            want = det_forward(quicknat, f.name, r["src"], report["client_port"])
            # One endpoint before and after the failover, the one the config gives.
            assert r["endpoints"] == [f'{want["public"]}:{want["port"]}'], r
        for t in cell["tcp"]:
            want = det_forward(quicknat, f.name, t["src"], 1024)
            assert len(t["endpoints"]) == 1, t
            addr, port = t["endpoints"][0].rsplit(":", 1)
            assert addr == want["public"], t
            assert want["first_port"] <= int(port) <= want["last_port"], (t, want)


def test_nothing_is_left_behind(lab):
    _, pid, _, _, _ = lab
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"-{pid}" not in left, left
    procs = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    mine = [line for line in procs.splitlines()
            if f"quicknat-lab-{pid}-" in line and not line.startswith("Z")]
    assert not mine, mine
    files = glob.glob(f"/tmp/quicknat-lab-{pid}-*")
    assert not files, files
