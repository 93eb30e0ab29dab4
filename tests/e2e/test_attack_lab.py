"""The attack lab's short form: `quicknat-lab lab --topology attack --short` runs end to end.

    sudo python3 -m pytest tests/e2e/test_attack_lab.py [--quicknat PATH]

It runs the lab once (about 40 s: one round, the kernel's NAT and quicknat on AF_PACKET,
a 2 s SYN flood paced at `--flood-pps`, short cells) and checks what is deterministic: it
exits 0, reports every row with a cell for each arm, the generators and probes ran (packets
offered, the 50 inside hosts tried, the 1 kHz probe stream sent what it should), the flood
was paced at the rate asked (never above it), the rows that apply to one arm only are
marked so for the other, the session tables were sized alike, and the lab removed its
namespaces and temporary files. It never asserts the lab's goals (a figure on a loaded
2-core machine is not a test): `quicknat-lab lab --topology attack --seconds 60` is the
full form, and README.md has its table.

`quicknat-lab` is found next to the quicknat binary (cargo builds both into the same
target directory: `cargo build --release -p quicknat -p lab`).
"""

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_root

SECONDS = 2
# The SYN flood's fixed rate: below both arms' capacity, so the run is lighter than unpaced.
FLOOD_PPS = 50_000
# Must match ROWS in crates/lab/src/topology/attack/report.rs.
ROWS = [
    "SYN flood: legitimate connections succeeded (%)",
    "SYN flood: legitimate connections tried",
    "SYN flood: established TCP, second before (Gbit/s)",
    "SYN flood: established TCP during flood (Gbit/s)",
    "SYN flood: offered (kpps)",
    "SYN flood: reaching the inside server (kpps)",
    "greedy host: other hosts served (of 50)",
    "greedy host: ... kernel with ct count per host",
    "greedy host: flows offered (kpps)",
    "collisions: CPU/packet, random tuples (ns)",
    "collisions: CPU/packet, crafted tuples (ns)",
    "collisions: crafted / random cost (x)",
    "collisions: forwarded, random (kpps)",
    "collisions: forwarded, crafted (kpps)",
    "link flap: traffic again after link up (ms)",
    "link flap: probes lost (1 kHz)",
    "SIGKILL+restart: traffic again after kill (ms)",
    "SIGKILL+restart: probes lost (1 kHz)",
]


@pytest.fixture(scope="module")
def lab(quicknat):
    """(pid, exit code, report or None, stderr) of one short-form run."""
    exe = Path(quicknat).with_name("quicknat-lab")
    if not exe.exists():
        pytest.fail(f"{exe} is missing: cargo build --release -p quicknat -p lab")
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    p = subprocess.Popen(
        [str(exe), "lab", "--topology", "attack", "--seconds", str(SECONDS), "--rounds", "1",
         "--short", "--collisions", "256", "--flood-pps", str(FLOOD_PPS), "--json",
         "--quicknat", quicknat],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        p.terminate()  # the lab removes its namespaces on SIGTERM
        out, err = p.communicate(timeout=30)
    report = None
    try:
        report = json.loads(out)
    except ValueError:
        pass
    return p.pid, p.returncode, report, err


def test_the_lab_runs_and_reports_json(lab):
    _, rc, report, err = lab
    assert rc == 0 and report is not None, err[-3000:]


def test_every_row_is_reported_for_every_arm(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    assert report["arms"] == ["quicknat af_packet", "kernel NAT"]
    assert [r["measure"] for r in report["rows"]] == ROWS
    for row in report["rows"]:
        assert len(row["cells"]) == 2 and all(c for c in row["cells"]), row


def test_rows_of_one_arm_only_are_marked_for_the_other(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    cells = {r["measure"]: r["cells"] for r in report["rows"]}
    # The short form skips the kernel's ct count run; restart is quicknat's only.
    assert cells["greedy host: ... kernel with ct count per host"] == ["-", "-"]
    assert cells["SIGKILL+restart: traffic again after kill (ms)"][1] == "-"
    assert cells["SIGKILL+restart: probes lost (1 kHz)"][1] == "-"


def test_generators_and_probes_ran(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for arm, rounds in report["raw"]:
        (r,) = rounds
        assert r["flood"]["sent"] > 0 and r["greedy"]["sent"] > 0, (arm, r)
        assert r["legit"]["attempts"] >= 1, (arm, r)
        assert r["greedy_others"]["attempts"] == 50 and 0 <= r["greedy_others"]["ok"] <= 50, (arm, r)
        # Short form: 0.5 s before the event and a 2 s window after it, at 1 kHz.
        assert r["flap"]["sent"] == 2500, (arm, r["flap"])
        assert r["flap"]["received"] + r["flap"]["lost"] == 2500, (arm, r["flap"])
        if arm.startswith("quicknat"):
            assert r["restart"]["sent"] == 2500, (arm, r["restart"])
            assert "after SIGKILL: nft tables [" in r["restart_note"], r["restart_note"]
        else:
            assert r["restart"] is None, r


def test_the_flood_is_paced_at_the_rate_asked(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    assert report["flood_pps"] == FLOOD_PPS, report["flood_pps"]
    for arm, rounds in report["raw"]:
        (r,) = rounds
        # The schedule is never ahead: achieved <= asked, whatever the machine's load.
        assert 0 < r["flood"]["pps"] <= FLOOD_PPS, (arm, r["flood"])
    offered = next(r for r in report["rows"] if r["measure"] == "SYN flood: offered (kpps)")
    assert all(0 < v <= FLOOD_PPS / 1e3 for v in offered["values"]), offered


def test_tables_are_sized_alike(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    kernel_max = int(Path("/proc/sys/net/netfilter/nf_conntrack_max").read_text())
    assert report["max_sessions"] == kernel_max, report["kernel_conntrack_max"]


def test_namespaces_and_temporary_files_removed(lab):
    pid, _, _, _ = lab
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"-{pid}" not in left, left
    files = glob.glob(f"/tmp/quicknat-lab-{pid}-*")
    assert not files, files


def test_gateway_cpu_is_measured_for_every_arm(lab):
    """The collision cell's CPU per packet comes from the gateway's own CPU time (its core's
    busy time, measured rather than tick-sampled, + the other cores' softirq: cpu.rs's
    GatewaySample), so it is never 0 where packets went through, whatever else the machine
    runs (a SCHED_IDLE soaker reads 0 under load, and a tick-sampled column can read 0 for
    the kernel's arm); the flood cell says where the gateway's CPU went."""
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for arm, rounds in report["raw"]:
        (r,) = rounds
        for kind in ("random", "crafted"):
            assert r[f"{kind}_fwd_pps"] > 0, (arm, r)
            assert r[f"{kind}_ns"] > 0, (arm, kind, r[f"{kind}_ns"])
        c = r["flood_cpu"]
        assert c["outside_rx_pps"] > 0 and c["threads_pct"] >= 0 and c["softirq_pct"] >= 0, c
        if arm.startswith("quicknat"):
            assert c["threads_pct"] > 0, (arm, c)
        else:
            assert c["threads_pct"] == 0, (arm, c)
    # The lab's own stats lines name each cell (and carry the early-drop count).
    for arm, rounds in report["raw"]:
        (r,) = rounds
        if arm.startswith("quicknat"):
            assert r["quicknat_stats_cells"] == ["flood", "greedy", "collisions"], r
            assert all("early_dropped=" in s for s in r["quicknat_stats"]), r
