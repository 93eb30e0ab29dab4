"""Running `quicknat-lab lab` from the lab suites (test_lab_nat44.py, test_lab_xdpfast.py):
the short form CI runs, or the full form with QUICKNAT_LAB_FULL=1.

Short form (the default): one round of 1 s cells, enough to show that every arm runs and
reports (the fast path's shares of a 1 s cell read 97-100% on a loaded 2-core machine, the
checks ask 75% of TCP and 95-99% of UDP). Full form (QUICKNAT_LAB_FULL=1): three rounds of
3 s cells, the form README.md's and the reports' tables come from; the suites check the
same structure on it.

The NAT44 lab runs once per pytest session for both suites (`nat44`): every NAT44 arm, the
floors, quicknat on both backends and both fast-path arms (xdpfast, tcfast), with TCP
offloads on, in one run. Each arm is started and stopped on its own within the run; the
namespaces are built, and the kernel NAT and the floor arms measured, once for all four
quicknat arms.

`quicknat-lab` is found next to the quicknat binary (cargo builds both into the same
target directory: `cargo build --release -p quicknat -p lab`).
"""

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

FULL = os.environ.get("QUICKNAT_LAB_FULL") == "1"
# (seconds per cell, rounds) of every lab the suites run.
CELLS = (3, 3) if FULL else (1, 1)
# The NAT44 lab's quicknat arms, in the order they run (after the kernel arms and floors).
NAT44_BACKENDS = ("af_xdp", "af_packet", "xdpfast", "tcfast")


def exe(quicknat):
    """The quicknat-lab binary beside `quicknat` (fails the test when missing)."""
    path = Path(quicknat).with_name("quicknat-lab")
    if not path.exists():
        pytest.fail(f"{path} is missing: cargo build --release -p quicknat -p lab")
    return path


def run(quicknat, args, timeout=900):
    """One `quicknat-lab lab ARGS --json` run: (pid, exit code, report or None, stderr)."""
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    p = subprocess.Popen(
        [str(exe(quicknat)), "lab", *args, "--json", "--quicknat", quicknat],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout * (4 if FULL else 1))
    except subprocess.TimeoutExpired:
        p.terminate()  # the lab removes its namespaces on SIGTERM
        out, err = p.communicate(timeout=30)
    try:
        report = json.loads(out)
    except ValueError:
        report = None
    return p.pid, p.returncode, report, err


def cells():
    """The lab's --seconds and --rounds, short or full form."""
    return ["--seconds", str(CELLS[0]), "--rounds", str(CELLS[1])]


@functools.cache
def nat44(quicknat):
    """The session's one NAT44 lab run (see the module doc): (pid, exit code, report or
    None, stderr)."""
    return run(quicknat, ["--topology", "nat44", *cells(),
                          "--backends", ",".join(NAT44_BACKENDS)])
