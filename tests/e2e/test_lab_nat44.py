"""The NAT44 lab's short form with its floor arms: `quicknat-lab lab --topology nat44` runs
end to end and every arm reports.

    sudo python3 -m pytest tests/e2e/test_lab_nat44.py [--quicknat PATH]

It runs the lab once (one round of 2 s cells, no offloads-on TCP; a few minutes on a loaded
2-core machine): the kernel's nftables NAT, the kernel NAT with a flowtable (or the reason
this kernel cannot run it), kernel forwarding, the minimal XDP, tc, AF_XDP and AF_PACKET
forwarders (`quicknat-lab fwd`), and quicknat on both backends. It checks what is
deterministic: every arm carried TCP and 64-byte UDP and reports non-zero figures (the
forwarders with the gateway kernel's forwarding off, so what reached the server went
through them), no arm forwarded more than the generator offered, each quicknat backend has
its ratio rows to the kernel NAT, the flowtable and its own I/O floor (present whenever both
arms ran), and the lab removed its namespaces, XDP programs and temporary files. It never
asserts the lab's goals (a figure on a loaded 2-core machine is not a test):
`quicknat-lab lab --rounds 3 --seconds 3` is the full form, and README.md has its table.

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
FLOWTABLE = "kernel NAT+flowtable"
# The arms in the order they run (the flowtable where the kernel has it).
ARMS = ["kernel NAT", FLOWTABLE, "kernel forwarding", "XDP fwd", "tc fwd", "AF_XDP fwd", "AF_PACKET fwd",
        "quicknat af_xdp", "quicknat af_packet"]
FLOORS = {"quicknat af_xdp": "AF_XDP fwd", "quicknat af_packet": "AF_PACKET fwd"}


@pytest.fixture(scope="module")
def lab(quicknat):
    """(pid, exit code, report or None, stderr) of one short-form run."""
    exe = Path(quicknat).with_name("quicknat-lab")
    if not exe.exists():
        pytest.fail(f"{exe} is missing: cargo build --release -p quicknat -p lab")
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    p = subprocess.Popen(
        [str(exe), "lab", "--topology", "nat44", "--seconds", str(SECONDS), "--rounds", "1",
         "--no-offloads-on", "--json", "--quicknat", quicknat],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        p.terminate()  # the lab removes its namespaces on SIGTERM
        out, err = p.communicate(timeout=30)
    report = None
    try:
        report = json.loads(out)
    except ValueError:
        pass
    return p.pid, p.returncode, report, err


def arms_of(report):
    return {a["arm"]: a["median"] for a in report["arms"]}


def test_the_lab_runs_and_reports_json(lab):
    _, rc, report, err = lab
    assert rc == 0 and report is not None, err[-3000:]


def test_every_arm_ran_or_says_why_not(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    ran = [a["arm"] for a in report["arms"]]
    missing = dict(report["unavailable"])
    # Only the flowtable may be missing (a kernel without NF_FLOW_TABLE), with the reason.
    assert set(missing) <= {FLOWTABLE}, missing
    assert ran == [a for a in ARMS if a not in missing], (ran, missing)
    if FLOWTABLE in missing:
        assert "flowtable" in missing[FLOWTABLE], missing


def test_every_arm_reports_non_zero_figures(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for name, m in arms_of(report).items():
        assert m["tcp1_off"] > 0 and m["tcp4_off"] > 0, (name, m)
        assert m["tcp1_on"] is None, (name, m)  # --no-offloads-on
        for cell in ("unpaced", "fixed"):
            c = m[cell]
            assert c["offered_pps"] > 0 and c["forwarded_pps"] > 0, (name, cell, c)
            assert c["cpu_ns"] > 0, (name, cell, c)
            assert abs(c["cpu_ns"] - c["threads_ns"] - c["softirq_ns"]) < 1e-6 * c["cpu_ns"] + 1e-6
            # Other jobs' softirq rate is subtracted from the total only, so ksoftirqd's
            # share may exceed what is left of it.
            assert c["ksoftirqd_ns"] >= 0, (name, cell, c)
        # Kernel arms have no process of their own; every user-space arm has threads.
        if name.startswith("kernel"):
            assert m["fixed"]["threads_ns"] == 0, (name, m)
        elif name not in ("XDP fwd", "tc fwd"):  # their work is all in the kernel
            assert m["fixed"]["threads_ns"] > 0, (name, m)


def test_the_gateway_cpu_is_its_cores_busy_time_plus_the_others_softirq(lab):
    """cpu.rs / floor.rs: the gateway core's busy time (its idle time is measured under
    NO_HZ, not ticked) plus the other cores' softirq (where the generator spins, and an XDP
    program on a veth runs). Every arm but the XDP forwarder does work on the gateway core:
    RPS steers the kernel's receive work there, and the processes are pinned there. The XDP
    forwarder's program and the server's receive run on the sending core, so its gateway
    core may read 0 (the column counts in 10 ms units)."""
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for name, m in arms_of(report).items():
        for cell in ("unpaced", "fixed"):
            c = m[cell]
            assert abs(c["cpu_ns"] - c["core_ns"] - c["other_cores_ns"]) < 1e-6 * c["cpu_ns"] + 1e-6, c
            assert c["core_ns"] >= 0 and c["other_cores_ns"] >= 0, (name, cell, c)
            if name != "XDP fwd":
                assert c["core_ns"] > 0, (name, cell, c)
            # The threads are pinned to the gateway core: part of its busy time.
            assert c["threads_ns"] <= c["core_ns"] + 1e-6, (name, cell, c)


def test_no_arm_forwards_more_than_was_offered(lab):
    """The sink counts at the server: it cannot see more than the generator sent (a few
    in-flight frames and other traffic of the run aside)."""
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for name, m in arms_of(report).items():
        for cell in ("unpaced", "fixed"):
            c = m[cell]
            assert c["forwarded_pps"] <= c["offered_pps"] * 1.05 + 1000, (name, cell, c)


def test_quicknat_has_its_ratios(lab):
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    arms = arms_of(report)
    missing = dict(report["unavailable"])
    rows = {(r["quicknat"], r["versus_arm"]): r for r in report["ratios"]}
    for q, floor in FLOORS.items():
        for versus in ("kernel NAT", FLOWTABLE, floor):
            r = rows[(q, versus)]
            keys = ("tcp1_off", "capacity", "cpu_per_packet")
            if versus in missing:
                assert all(r[k] is None for k in keys), r
                continue
            for k in keys:
                assert r[k] is not None and r[k] > 0, (q, versus, k, r)
            want = arms[q]["fixed"]["cpu_ns"] / arms[versus]["fixed"]["cpu_ns"]
            assert abs(r["cpu_per_packet"] - want) < 1e-9 * want, r
            assert r["tcp1_on"] is None, r


def test_namespaces_forwarders_and_temporary_files_removed(lab, quicknat):
    pid, _, _, _ = lab
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"-{pid}" not in left, left
    files = glob.glob(f"/tmp/quicknat-lab-{pid}-*")
    assert not files, files
    # No forwarder of this binary outlived the lab (each holds its XDP programs' links).
    exe = str(Path(quicknat).with_name("quicknat-lab"))
    alive = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            argv = Path(cmdline).read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fwd" in argv and any(a.decode(errors="replace").endswith(exe) for a in argv):
            alive.append(cmdline)
    assert not alive, alive
