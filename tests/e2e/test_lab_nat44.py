"""The NAT44 lab's short form with its floor arms: `quicknat-lab lab --topology nat44` runs
end to end and every arm reports.

    sudo python3 -m pytest tests/e2e/test_lab_nat44.py [--quicknat PATH]
    sudo QUICKNAT_LAB_FULL=1 python3 -m pytest tests/e2e/test_lab_nat44.py   # the full form

It runs the lab once (labrun.py; shared with test_lab_xdpfast.py, whose fast-path arms run
in the same lab): the kernel's nftables NAT, the kernel NAT with a flowtable (or the reason
this kernel cannot run it), kernel forwarding, the minimal XDP, tc, AF_XDP and AF_PACKET
forwarders (`quicknat-lab fwd`), and quicknat on both backends and with the fast path at
both hooks (xdpfast, tcfast). The short form (CI, about 90 s) is one round of 1 s
cells; QUICKNAT_LAB_FULL=1 runs the full form, three rounds of 3 s cells
(`quicknat-lab lab --rounds 3 --seconds 3`, README.md's table), with the same checks.

It checks what is deterministic: every arm carried TCP (offloads off, and with offloads on
wherever that applies) and 64-byte UDP (the forwarders with the gateway kernel's forwarding
off, so what reached the server went through them), no arm forwarded more than the
generator offered, the CPU columns add up (total = threads + softirq = gateway core + other
cores; kernel arms charge no process, the user-space arms' processes are charged), each
quicknat arm has its ratio rows to the kernel NAT, the flowtable and its own I/O floor, and
the lab removed its namespaces, XDP programs and temporary files. It never asserts the
lab's goals, nor a CPU figure that a loaded machine can read as 0 (CPU time is counted in
ticks; a figure on a loaded 2-core machine is not a test).
"""

import glob
import subprocess
from pathlib import Path

import pytest

import labrun

pytestmark = pytest.mark.needs_root

FLOWTABLE = "kernel NAT+flowtable"
# The arms in the order they run (the flowtable where the kernel has it).
ARMS = ["kernel NAT", FLOWTABLE, "kernel forwarding", "XDP fwd", "tc fwd", "AF_XDP fwd", "AF_PACKET fwd",
        *(f"quicknat {b}" for b in labrun.NAT44_BACKENDS)]
FLOORS = {"quicknat af_xdp": "AF_XDP fwd", "quicknat af_packet": "AF_PACKET fwd",
          "quicknat xdpfast": "XDP fwd", "quicknat tcfast": "tc fwd"}
# TCP with offloads on is not measured through the XDP forwarder (it would forward a veth
# peer's partial checksums as they are: LAB-NOTES).
NO_OFFLOADS_ON = {"XDP fwd"}


@pytest.fixture(scope="module")
def lab(quicknat):
    """(pid, exit code, report or None, stderr) of the session's NAT44 lab run."""
    return labrun.nat44(quicknat)


def arms_of(report):
    return {a["arm"]: a["median"] for a in report["arms"]}


def cells_of(report):
    """(arm, cell name, cell) of every round: the CPU columns add up within a round (the
    reported medians are each column's own, so in the full form's three rounds a sum of
    medians need not be the median of the sums)."""
    return [(a["arm"], cell, r[cell]) for a in report["arms"] for r in a["rounds"]
            for cell in ("unpaced", "fixed")]


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
    charged = 0
    for name, m in arms_of(report).items():
        assert m["tcp1_off"] > 0 and m["tcp4_off"] > 0, (name, m)
        # With offloads on: measured wherever it applies (a failed iperf3 reads 0: a figure,
        # not asserted here; test_lab_xdpfast asserts the tc fast path's).
        if name in NO_OFFLOADS_ON:
            assert m["tcp1_on"] is None, (name, m)
        else:
            assert m["tcp1_on"] is not None and m["tcp1_on"] >= 0, (name, m)
        for cell in ("unpaced", "fixed"):
            c = m[cell]
            assert c["offered_pps"] > 0 and c["forwarded_pps"] > 0, (name, cell, c)
    for name, cell, c in cells_of(report):
        # CPU time is counted in ticks: a loaded machine can read any one figure as 0.
        assert c["cpu_ns"] >= 0 and c["threads_ns"] >= 0 and c["softirq_ns"] >= 0, (name, cell, c)
        assert abs(c["cpu_ns"] - c["threads_ns"] - c["softirq_ns"]) < 1e-6 * c["cpu_ns"] + 1e-6, (name, cell, c)
        # Other jobs' softirq rate is subtracted from the total only, so ksoftirqd's
        # share may exceed what is left of it.
        assert c["ksoftirqd_ns"] >= 0, (name, cell, c)
    for name, m in arms_of(report).items():
        # Kernel arms have no process of their own: nothing may be charged to one.
        if name.startswith("kernel"):
            assert m["unpaced"]["threads_ns"] == 0 and m["fixed"]["threads_ns"] == 0, (name, m)
        elif name not in ("XDP fwd", "tc fwd"):  # their work is all in the kernel
            charged += m["unpaced"]["threads_ns"] + m["fixed"]["threads_ns"]
    # The user-space arms' processes (six of them, each forwarding as fast as it can in
    # the unpaced cell) are charged: a method that lost their pids would read 0 for all.
    assert charged > 0, arms_of(report)


def test_the_gateway_cpu_is_its_cores_busy_time_plus_the_others_softirq(lab):
    """cpu.rs / floor.rs: the gateway core's busy time (its idle time is measured under
    NO_HZ, not ticked) plus the other cores' softirq (where the generator spins, and an XDP
    program on a veth runs). The processes are pinned to the gateway core, so their threads'
    time is part of its busy time. No column is asserted non-zero: the softirq columns count
    in 10 ms units, and the XDP forwarder's program runs on the sending core."""
    _, _, report, err = lab
    assert report is not None, err[-3000:]
    for name, cell, c in cells_of(report):
        assert abs(c["cpu_ns"] - c["core_ns"] - c["other_cores_ns"]) < 1e-6 * c["cpu_ns"] + 1e-6, (name, cell, c)
        assert c["core_ns"] >= 0 and c["other_cores_ns"] >= 0, (name, cell, c)
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
            for k in ("tcp1_off", "capacity"):
                assert r[k] is not None and r[k] > 0, (q, versus, k, r)
            # CPU per packet: quicknat's over the other's, none when the other read 0 (ticks).
            mine, theirs = arms[q]["fixed"]["cpu_ns"], arms[versus]["fixed"]["cpu_ns"]
            if theirs > 0:
                want = mine / theirs
                assert r["cpu_per_packet"] is not None and abs(r["cpu_per_packet"] - want) <= 1e-9 * want, r
            else:
                assert r["cpu_per_packet"] is None, r
            # With offloads on: a ratio only where both arms measured it.
            assert (r["tcp1_on"] is None) == (versus in NO_OFFLOADS_ON or not arms[versus]["tcp1_on"]
                                              or arms[q]["tcp1_on"] is None), r


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
