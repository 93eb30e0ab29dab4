"""The labs' fast-path arms: `quicknat-lab lab --backends xdpfast` runs quicknat on AF_XDP
with `xdp_fast_path = "on"` beside the kernel NAT and the XDP forwarder (its floor),
alternating, and reports its figures and ratios, and `tcfast` its tc-hook twin (AF_PACKET)
beside the tc forwarder; `--topology nat64 --backends xdpfast,tcfast` runs both with
`[nat64]` beside TAYGA (`--topology siit`: the same with `[siit]`, TAYGA's own mapping), and
`--topology ila --backends xdpfast,tcfast` the ILA routers with their mappings in the fast
path beside the kernel forwarding directly.

    sudo python3 -m pytest tests/e2e/test_lab_xdpfast.py [--quicknat PATH]
    sudo QUICKNAT_LAB_FULL=1 python3 -m pytest tests/e2e/test_lab_xdpfast.py   # the full form

NAT44: the arms run in the session's one NAT44 lab (labrun.py, shared with
test_lab_nat44.py: every arm, the floors and both fast-path arms, TCP with offloads on
too), one round of 1 s cells in the short form. Checked, because each could fail:
  * the arm ran and carried TCP and 64-byte UDP with non-zero figures;
  * the flows really went through the fast path: the lab warms the UDP flows up until the
    fast path installed them, and reports, from the fast path's and the sockets' counters,
    the share of each cell the program forwarded: >= 99% for the warmed-up UDP, >= 75% for
    TCP (new connections: their first packets go through the engine until installed);
  * the CPU method's sanity: the XDP fast path's packets are handled in softirq/XDP on the
    sending core, not in quicknat's process, so its CPU must be mostly softirq (every
    core's, as cpu.rs reads it) — a method that read only the process would report its
    threads (the idle workers and the reaper) as the cost;
  * its ratio rows to the kernel NAT and to its I/O floor ("XDP fwd", "tc fwd") are there;
  * the tc arm carries TCP with offloads on (super-packets) through its program.
NAT64 and SIIT (the `lab64` tests) and ILA: one round of 1 s cells, the reference and the
two fast-path arms only (about 15 s each): the arms ran and carried TCP and IPv6 UDP (ILA:
the request/response load), most of their packets went through the fast path, and their
ratio rows to the reference are there.
QUICKNAT_LAB_FULL=1 runs every lab in its full form (three rounds of 3 s cells) with the
same checks. The labs' goals are not asserted (a figure on a loaded 2-core machine is not
a test).
"""

import os
import shutil

import pytest

import labrun

pytestmark = [pytest.mark.needs_root, pytest.mark.only(backend="af_xdp")]

ARM = "quicknat xdpfast"


def run_lab(quicknat, args):
    """One `quicknat-lab lab ARGS --json` run: its report (fails with its stderr)."""
    _, rc, report, err = labrun.run(quicknat, args, timeout=600)
    assert rc == 0 and report is not None, err[-3000:]
    return report


@pytest.fixture(scope="module")
def lab(quicknat, backend):
    """The session's NAT44 lab (labrun.nat44): the xdpfast and tcfast arms among all."""
    if backend != "af_xdp":
        pytest.skip("the XDP fast path is an AF_XDP feature")
    _, rc, report, err = labrun.nat44(quicknat)
    assert rc == 0 and report is not None, err[-3000:]
    return report


@pytest.fixture(scope="module", params=["nat64", "siit"])
def lab64(quicknat, backend, request):
    """The NAT64 topology with quicknat as stateful NAT64, then as the stateless translator
    (`--topology siit`: its flows hinted by the engine and offloaded)."""
    if backend != "af_xdp":
        pytest.skip("the XDP fast path is an AF_XDP feature")
    if not shutil.which("tayga", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        pytest.skip("the NAT64 lab compares with TAYGA: apt-get install tayga")
    report = run_lab(quicknat, ["--topology", request.param, *labrun.cells(),
                                "--backends", "xdpfast,tcfast"])
    assert report["xlat"] == request.param, report["xlat"]
    return report


def arm(report, name):
    return next(a["median"] for a in report["arms"] if a["arm"] == name)


def test_the_arm_runs_beside_the_kernel_nat_and_its_floor(lab):
    names = [a["arm"] for a in lab["arms"]]
    # The kernel NAT first, the floors before the quicknat arms, each arm once.
    assert names[0] == "kernel NAT" and len(set(names)) == len(names), names
    assert names.index("XDP fwd") < names.index(ARM) and names.index("tc fwd") < names.index(TC_ARM), names
    m = arm(lab, ARM)
    assert m["tcp1_off"] > 0 and m["tcp4_off"] > 0, m
    for cell in ("unpaced", "fixed"):
        c = m[cell]
        assert c["offered_pps"] > 0 and c["forwarded_pps"] > 0 and c["cpu_ns"] > 0, (cell, c)
        assert c["forwarded_pps"] <= c["offered_pps"] * 1.05 + 1000, (cell, c)


def test_the_packets_went_through_xdp(lab):
    share = arm(lab, ARM)["fast_share"]
    assert share is not None, arm(lab, ARM)
    # UDP: warmed up, every packet. TCP: each iperf3 connection is new, its first segments
    # go through the engine until the reaper's walk (200 ms) installs it, a tenth of a 2 s
    # cell on a loaded machine (one run read just under 90%).
    for cell in ("unpaced", "fixed"):
        assert share[cell] >= 0.99, (cell, share)
    for cell in ("tcp1_off", "tcp4_off"):
        assert share[cell] >= 0.75, (cell, share)
    # The other arms have no fast path to report.
    assert arm(lab, "kernel NAT")["fast_share"] is None


def test_its_cpu_is_charged_where_xdp_runs(lab):
    """cpu.rs's sanity: the XDP work is counted, not just quicknat's threads. It runs in
    softirq on the sending core (the generator's, whose softirq column GatewaySample adds to
    the gateway core's busy time). With >= 90% of the packets in XDP, the kernel's share is
    most of the cost of the unpaced cell. Not asserted for the fixed-load cell: a loaded
    machine's generator once reached 9 of 200 kpps, and so short a cell holds about one
    4 ms tick of XDP work: there only the columns' sum is checked."""
    c = arm(lab, ARM)["unpaced"]
    assert c["softirq_ns"] > 0 and c["softirq_ns"] > c["threads_ns"], c
    # Each round's columns add up (the medians are each column's own).
    for r in next(a["rounds"] for a in lab["arms"] if a["arm"] == ARM):
        f = r["fixed"]
        assert abs(f["cpu_ns"] - f["threads_ns"] - f["softirq_ns"]) < 1e-6 * f["cpu_ns"] + 1e-6, f


def test_its_ratios_to_the_kernel_nat_and_its_floor(lab):
    rows = {r["versus"]: r for r in lab["ratios"] if r["quicknat"] == ARM}
    assert "kernel NAT" in rows and "I/O floor (XDP fwd)" in rows, rows
    for why in ("kernel NAT", "I/O floor (XDP fwd)"):
        r = rows[why]
        assert r["cpu_per_packet"] and r["cpu_per_packet"] > 0, r
        assert r["capacity"] and r["capacity"] > 0, r


# ------------------------------------------------------------------------- NAT64 (vs TAYGA)

def arm64(report, name="xdpfast"):
    return dict(report["quicknat"])[name]


# Both fast-path arms: the XDP hook (AF_XDP) and the tc hook (AF_PACKET).
ARMS64 = ("xdpfast", "tcfast")


@pytest.mark.parametrize("name", ARMS64)
def test_nat64_the_arm_runs_beside_tayga(lab64, name):
    assert [b for b, _ in lab64["quicknat"]] == list(ARMS64), lab64["quicknat"]
    m = arm64(lab64, name)
    assert m["tcp1_off"] > 0, m
    assert m["udp_offered_pps"] > 0 and m["udp_capacity_pps"] > 0, m
    assert m["udp_capacity_pps"] <= m["udp_offered_pps"] * 1.05 + 1000, m
    # TAYGA ran in the same round (the reference; its UDP rate may collapse under overload).
    assert lab64["tayga"]["tcp1_off"] > 0, lab64["tayga"]
    assert lab64["tayga"]["fast_share"] is None


@pytest.mark.parametrize("name", ARMS64)
def test_nat64_the_packets_went_through_the_fast_path(lab64, name):
    share = arm64(lab64, name)["fast_share"]
    assert share is not None, arm64(lab64, name)
    # UDP: warmed up on the cell's own source ports, so (nearly) every packet. TCP: a new
    # connection, its first ~200 ms (until the reaper's walk) through the engine. TCP with
    # offloads on is not asserted: partial checksums stay on the slow path by design.
    assert share["udp"] >= 0.95, share
    assert share["tcp1_off"] >= 0.75, share


@pytest.mark.parametrize("name", ARMS64)
def test_nat64_its_ratio_to_tayga(lab64, name):
    rows = {r["quicknat"]: r for r in lab64["ratios"]}
    assert f"quicknat {name}" in rows, rows
    r = rows[f"quicknat {name}"]
    assert r["tcp1_off"] and r["tcp1_off"] > 0, r


# --------------------------------------------------------------------------- ILA (mappings)

@pytest.fixture(scope="module")
def lab_ila(quicknat, backend):
    if backend != "af_xdp":
        pytest.skip("the XDP fast path is an AF_XDP feature")
    return run_lab(quicknat, ["--topology", "ila", *labrun.cells(),
                              "--backends", "xdpfast,tcfast"])


@pytest.mark.parametrize("name", ARMS64)
def test_ila_the_arm_carries_the_request_response_load_beside_the_kernel(lab_ila, name):
    """The ILA lab's fast-path arms (the XDP hook, the tc hook): both routers translate
    with the fast path on; the request/response load ran through them with no failed
    connection, beside the direct kernel path in the same round; no forward-only arm."""
    m = dict(lab_ila["ila"])[name]
    assert m["tps"] > 0 and m["errors"] == 0, m
    assert lab_ila["direct"]["tps"] > 0, lab_ila["direct"]
    assert name not in dict(lab_ila["forward"]), lab_ila["forward"]


@pytest.mark.parametrize("name", ARMS64)
def test_ila_the_packets_went_through_the_fast_path(lab_ila, name):
    """Each connection's SYN and FIN go through the engines; everything between them, both
    ways, through the programs: at least 90% of both routers' packets (one run read
    99.6%)."""
    share = dict(lab_ila["ila"])[name]["fast_share"]
    assert share is not None and share >= 0.9, share
    assert lab_ila["direct"]["fast_share"] is None


# -- the fast path at the tc hook (quicknat on AF_PACKET, `--backends tcfast`) --

TC_ARM = "quicknat tcfast"


def test_the_tc_arm_runs_beside_its_floor_and_carries_super_packets(lab):
    labtc = lab  # the same NAT44 lab: the tcfast arm is among its arms
    m = arm(labtc, TC_ARM)
    assert m["tcp1_off"] > 0 and m["tcp1_on"] and m["tcp1_on"] > 0, m
    share = m["fast_share"]
    assert share is not None, m
    for cell in ("unpaced", "fixed"):
        assert share[cell] >= 0.99, (cell, share)
    # Offloads on: the client's TSO stays on (no XDP program on any veth), and the
    # super-packets go through the tc program like any segment.
    for cell in ("tcp1_off", "tcp1_on"):
        assert share[cell] >= 0.75, (cell, share)
    rows = {r["versus"]: r for r in labtc["ratios"] if r["quicknat"] == TC_ARM}
    assert "I/O floor (tc fwd)" in rows, rows
    assert rows["I/O floor (tc fwd)"]["cpu_per_packet"] > 0, rows
