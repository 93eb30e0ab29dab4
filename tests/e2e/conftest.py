"""pytest configuration of quicknat's live end-to-end tests (tests/e2e).

    sudo python3 -m pytest tests/e2e [--quicknat PATH] [-k EXPR]

Options: --quicknat PATH (default: target/release/quicknat under the repository root);
--tayga-vs-tayga (test_tayga_diff compares TAYGA with itself: a test of the comparison).

Fixtures: `quicknat` (the binary's absolute path) and `backend`, a module-scoped
parametrisation over af_packet and af_xdp: a suite that takes it runs once per backend,
all of its tests for one backend (in file order) before the other.

Markers (registered in pytest.ini):
  needs_root      the test builds network namespaces; without root it is skipped with
                  that reason (scripts/test.sh and CI run as root).
  only(**params)  the test applies to these parameter values only, e.g.
                  only(backend="af_xdp"); it is deselected for the others (a check that
                  means nothing there neither passes nor skips).

SIGTERM and SIGHUP interrupt the run like Ctrl-C, so every fixture's teardown runs
(quicknat processes killed, namespaces deleted); any namespace of this run still present
at the end is deleted too. A failing test's report carries the log tails of the quicknat
processes of the topology it used. The measurements tests record (record_property: iperf3
throughput, the ILA move's longest stall, frames counted) are listed after the run and
kept in the junit XML.
"""

import os
import signal
from pathlib import Path

import pytest

import netns

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ("af_packet", "af_xdp")


def pytest_addoption(parser):
    group = parser.getgroup("quicknat")
    group.addoption("--quicknat", default=str(REPO / "target" / "release" / "quicknat"),
                    help="the quicknat binary under test (default: target/release/quicknat "
                         "under the repository root)")
    group.addoption("--tayga-vs-tayga", action="store_true",
                    help="test_tayga_diff: compare TAYGA with a second TAYGA run instead of quicknat "
                         "(tests the comparison itself)")


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _interrupt)


def _applies(item):
    mark = item.get_closest_marker("only")
    if mark is None:
        return True
    params = item.callspec.params if hasattr(item, "callspec") else {}
    for key, allowed in mark.kwargs.items():
        allowed = allowed if isinstance(allowed, (tuple, list, set)) else (allowed,)
        if key in params and params[key] not in allowed:
            return False
    return True


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if _applies(i)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root (network namespaces); scripts/test.sh and CI run as root")
        for item in items:
            if item.get_closest_marker("needs_root"):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def quicknat(pytestconfig):
    """The quicknat binary under test (absolute path)."""
    return os.path.abspath(pytestconfig.getoption("quicknat"))


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    """The I/O backend of the quicknat processes: every suite that takes it runs twice."""
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        tails = getattr(value, "log_tails", None)
        if callable(tails):
            for label, text in tails():
                report.sections.append((f"quicknat {label} log (tail)", text))


def pytest_terminal_summary(terminalreporter):
    rows = []
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "when", None) == "call" and getattr(rep, "user_properties", None):
                rows += [f"{rep.nodeid}: {k} = {v}" for k, v in rep.user_properties]
    if rows:
        terminalreporter.section("e2e measurements")
        for row in sorted(rows):
            terminalreporter.write_line(row)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    left = netns.remove_leftovers()
    if left:
        print(f"\ne2e: deleted namespaces the fixtures left behind: {left}")
