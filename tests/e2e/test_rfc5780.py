"""NAT behaviour discovery (RFC 5780) against quicknat's NAT44, by a real STUN server.

coturn's `turnserver` (STUN only, two addresses, so it can answer from another address
and port as RFC 5780's CHANGE-REQUEST asks) runs on the outside; coturn's
`turnutils_natdiscovery` on the inside classifies the NAT in front of it:

    cli (10.0.0.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2, .3)

quicknat maps endpoint-independently (RFC 4787 REQ-1) in every filtering mode, and
filters the way `[nat44] filtering` says. The classifier must see exactly that, for each
of the three filtering modes, on both backends. Its hairpinning probe (RFC 5780 §4.5) is
sent from a second socket to the first socket's public endpoint: under endpoint-independent
filtering it comes back through the hairpin (RFC 4787 REQ-9); under the dependent modes the
first mapping has only talked to the STUN server, so the probe is filtered like any
packet from an endpoint it never sent to — a hairpin must not bypass filtering (two hosts
that both send first do get through: tests/e2e/test_nat44.py's hole punch).

The three filtering modes' topologies are classified side by side (one fixture per
backend). Needs root and coturn (scripts/test.sh installs it).
    sudo python3 -m pytest tests/e2e/test_rfc5780.py [--quicknat PATH]
"""

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from netns import Scenario, wait_for

pytestmark = pytest.mark.needs_root

STUN = ("198.51.100.2", "198.51.100.3")

CONFIG = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat44]
filtering = "{filtering}"
[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

# What turnutils_natdiscovery prints for each `filtering` value.
FILTERING = {
    "endpoint-independent": "NAT with Endpoint Independent Filtering!",
    "address-dependent": "NAT with Address Dependent Filtering!",
    "address-and-port-dependent": "NAT with Address and Port Dependent Filtering!",
}


class Stun(Scenario):
    """quicknat as NAT44 in `gw`, coturn's STUN server on two addresses in `srv`."""

    def __init__(self):
        super().__init__("q5780", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend, filtering):
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        for a in STUN:
            self.nsx("srv", "ip", "addr", "add", f"{a}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        config = CONFIG.format(backend=backend, filtering=filtering)
        self.qn = self.quicknat(quicknat, "gw", config, f"rfc5780-{backend}-{filtering}")
        # -n: no configuration file; -S: STUN only; RFC 5780 is on with two listeners.
        listen = [a for ip in STUN for a in ("-L", ip)]
        self.popen("srv", "turnserver", "-n", "-S", *listen, "--no-cli", "--no-tls", "--no-dtls",
                   "--no-tcp", "--log-file", "stdout", "--simple-log", "--pidfile", "/dev/null",
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for ip in STUN:
            assert self.wait_udp_bound("srv", ip, 3478, timeout=10), f"turnserver not on {ip}:3478"
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def discover(self):
        """turnutils_natdiscovery's report: mapping (-m), filtering (-f), hairpinning (-H)."""
        r = self.nsx("cli", "turnutils_natdiscovery", "-m", "-f", "-H", STUN[0], timeout=60, check=False)
        return r.stdout + r.stderr


@pytest.fixture(scope="module")
def reports(quicknat, backend):
    """{filtering: (the classifier's report, its Stun)}: one topology per filtering mode,
    classified at once. The three are separate namespaces, gateways and STUN servers, and
    the classifier spends most of its time waiting out the probes a filter refuses, so
    they run side by side."""
    if not (shutil.which("turnserver") and shutil.which("turnutils_natdiscovery")):
        pytest.fail("coturn is not installed (scripts/test.sh installs it)")
    scenes = {}
    try:
        for filtering in FILTERING:
            scenes[filtering] = Stun()
            scenes[filtering].setup(quicknat, backend, filtering)
        with ThreadPoolExecutor(max_workers=len(scenes)) as pool:
            outs = {f: pool.submit(s.discover) for f, s in scenes.items()}
        yield {f: (outs[f].result(), s) for f, s in scenes.items()}
    finally:
        for s in scenes.values():
            s.close()


# Each test once per filtering mode, a plain parameter (not a module fixture's), so that
# pytest keeps every test of one backend together and `reports` is made once per backend.
each_mode = pytest.mark.parametrize("filtering", list(FILTERING))


@each_mode
def test_mapping_is_endpoint_independent(reports, filtering):
    out, s = reports[filtering]
    assert "NAT with Endpoint Independent Mapping!" in out, out + s.qn.stats()


@each_mode
def test_filtering_is_classified_as_configured(reports, filtering):
    out, s = reports[filtering]
    assert FILTERING[filtering] in out, out + s.qn.stats()
    others = [v for k, v in FILTERING.items() if k != filtering]
    assert not any(o in out for o in others), out


@each_mode
def test_hairpin_comes_back_unless_the_filter_refuses_it(reports, filtering):
    out, s = reports[filtering]
    if filtering == "endpoint-independent":
        assert "successful hairpinning" in out, out + s.qn.stats()
    else:
        assert "successful hairpinning" not in out, out + s.qn.stats()
        # The refused probe is a counted drop (the stats line lists drops as drops[filtered=N]).
        assert wait_for(lambda: re.search(r"\bfiltered=[1-9]", s.qn.stats()), 5), s.qn.stats()
