"""Reloading a running NAT44 gateway on SIGHUP, under load.

    cli (10.0.0.2, 10.0.1.2) == gw (g-in 10.0.0.1 | g-out 198.51.100.1) == srv (198.51.100.2,
                                                                     HTTP server)

The gateway starts with one rule (10.0.0.0/24 -> 203.0.113.1, port preservation off, so
a session recreated after a reload would get another public port and break the
connection). A rate-limited download of 12 MB (about 6 s) runs from 10.0.0.2; midway the
configuration file is rewritten to add a rule 10.0.1.0/24 -> the new pool
203.0.113.8/30 and change tcp_established, and the gateway gets SIGHUP:
  * the log reports the change ("nat44 rules 1 → 2; pool + 203.0.113.8/30;
    tcp_established 7440 s → 3600 s");
  * the download completes with every byte (one TCP connection through one mapping);
  * 10.0.1.2, refused before the reload (no_rule), reaches the server from the new pool;
  * a broken file (bad pool) and a restart-only change (max_sessions) are each refused on
    SIGHUP with the reason (file, line, field; the setting named) and the configuration
    in force keeps serving both inside hosts.

NAT64 (below): a download from an IPv4 server to an IPv6 client survives a reload that
adds to pool4 and changes the UDP timeout; a pref64 change is refused.

SIIT: a reload moves an EAM entry to another IPv4 address; pings follow it at once, in
the same process. CLAT (last): a reload moves the provider's NAT64 prefix (plat); the
app's pings go into the new prefix, not the old one, in the same process.

Runs once per backend (af_packet, af_xdp); needs root.
    sudo python3 -m pytest tests/e2e/test_reload.py [--quicknat PATH]
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest

from netns import HTTP_SERVER, Scenario, sh, wait_for

pytestmark = pytest.mark.needs_root

SERVER = "198.51.100.2"
SIZE = 12_000_000
RATE = "2M"  # bytes per second: about 6 s

BASE = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1
control_socket = "{sock}"

[nat44]
port_preservation = false
max_sessions = 65536
[nat44.timeouts]
tcp_established = {tcp_established}

[[nat44.rule]]
inside = "10.0.0.0/24"
pool = ["203.0.113.1/32"]
"""

NEW_RULE = """
[[nat44.rule]]
inside = "10.0.1.0/24"
pool = ["{pool}"]
"""


def moved(stats):
    """Packets the gateway has moved by its last stats line: the engine's (`forwarded`) and
    the fast path's (`xdp_fast`)."""
    lines = [l for l in stats.splitlines() if "forwarded=" in l]
    if not lines:
        return 0
    return sum(int(v) for v in re.findall(r"\b(?:forwarded|xdp_fast)=(\d+)", lines[-1]))


def nat44_sock(backend):
    return os.path.join(tempfile.gettempdir(), f"qn-reload-nat44-{backend}.sock")


def config(backend, tcp_established=7440, new_pool=None, max_sessions=65536):
    text = BASE.format(backend=backend, tcp_established=tcp_established,
                       sock=nat44_sock(backend))
    text = text.replace("max_sessions = 65536", f"max_sessions = {max_sessions}")
    if new_pool:
        text += NEW_RULE.format(pool=new_pool)
    return text


class Reload(Scenario):
    def __init__(self):
        super().__init__("qrl", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.backend = backend
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "addr", "add", "10.0.0.2/24", "dev", "c0")
        self.nsx("cli", "ip", "addr", "add", "10.0.1.2/24", "dev", "c0")
        self.nsx("gw", "ip", "addr", "add", "10.0.0.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "10.0.1.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("cli", "ip", "route", "add", "default", "via", "10.0.0.1")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        self.wait_listening("srv", SERVER, 80)
        self.qn = self.quicknat(quicknat, "gw", config(backend), f"reload-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def rewrite(self, text):
        with open(self.qn.cfg.name, "w") as f:
            f.write(text)

    def hup(self, expect):
        """SIGHUP; waits (bounded) for the next reload line and returns it."""
        before = len(re.findall(r"reload \(SIGHUP\)", self.qn.text()))
        self.qn.proc.send_signal(signal.SIGHUP)
        lines = lambda: [l for l in self.qn.text().splitlines() if "reload (SIGHUP)" in l]
        assert wait_for(lambda: len(lines()) > before, 10), self.qn.text()[-2000:]
        line = lines()[before]
        print(line)  # the operator's view, shown with -s
        assert expect in line, line
        return line

    def get(self, source):
        """GET / from `source`: the peer the server saw, or "" if refused/timed out."""
        r = self.nsx("cli", "curl", "-s", "--max-time", "3", "--interface", source,
                     f"http://{SERVER}/", check=False, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    def drops(self, reason):
        m = re.findall(rf"\b{reason}=(\d+)", self.qn.stats())
        return int(m[-1]) if m else 0


def running(cls, quicknat, backend):
    """A module fixture's body: `cls`'s scenario set up, yielded, then torn down (its
    close must report nothing left behind)."""
    g = cls()
    try:
        g.setup(quicknat, backend)
        yield g
    finally:
        assert not g.close()


@pytest.fixture(scope="module")
def gw(quicknat, backend):
    yield from running(Reload, quicknat, backend)


def test_a_dry_run_says_what_a_reload_would_do_and_changes_nothing(gw, quicknat):
    """`quicknat reload --dry-run` answers what the reload would change, or its refusal,
    and leaves the gateway as it is; `quicknat reload` (the systemd unit's ExecReload)
    exits non-zero on a refused file."""
    def reload(*flags):
        return sh(quicknat, "reload", *flags, "--socket", nat44_sock(gw.backend), check=False)

    def status_hash():
        r = sh(quicknat, "status", "--json", "--socket", nat44_sock(gw.backend))
        return json.loads(r.stdout)["status"]["config"]["sha256"]

    start = config(gw.backend)
    in_force = status_hash()
    assert in_force == hashlib.sha256(start.encode()).hexdigest()
    good = config(gw.backend, tcp_established=3600, new_pool="203.0.113.8/30")
    gw.rewrite(good)
    r = reload("--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("dry run, nothing applied: would reload nat44: "), r.stdout
    assert "pool + 203.0.113.8/30" in r.stdout and "tcp_established 7440 s → 3600 s" in r.stdout
    # Nothing applied: the new rule's host is still refused, the hash is the old file's.
    assert gw.get("10.0.1.2") == ""
    assert status_hash() == in_force
    # A broken file: the dry run shows the error (file, line, field) and fails.
    gw.rewrite(good.replace("203.0.113.8/30", "203.0.113.300/30"))
    r = reload("--dry-run")
    assert r.returncode != 0, r.stdout + r.stderr
    assert re.search(re.escape(gw.qn.cfg.name) + r":\d+: nat44\.rule\[2\]\.pool: ", r.stderr), r.stderr
    # The unit's reload command fails on it too; the configuration in force keeps serving.
    r = reload()
    assert r.returncode != 0 and "nat44.rule[2].pool" in r.stderr, r.stdout + r.stderr
    assert gw.get("10.0.0.2") == "peer=203.0.113.1"
    assert status_hash() == in_force
    assert gw.qn.proc.poll() is None
    # Back to the file in force for the tests below.
    gw.rewrite(start)
    r = reload("--dry-run")
    assert r.returncode == 0 and r.stdout.strip().endswith("nat44: no change"), r.stdout


def test_a_download_survives_a_reload_that_adds_a_pool_and_changes_timeouts(gw):
    assert gw.get("10.0.1.2") == "", "no rule covers 10.0.1.2 before the reload"
    assert wait_for(lambda: gw.drops("no_rule") >= 1, 5), gw.qn.stats()
    dl = gw.popen("cli", "curl", "-s", "-o", "/dev/null", "--interface", "10.0.0.2",
                  "--limit-rate", RATE, "-w", "%{size_download} %{num_connects}",
                  f"http://{SERVER}/big?n={SIZE}", stdout=subprocess.PIPE, text=True)
    # Midway: the download's session is up (the gateway counts it) and still running.
    assert gw.qn.wait_counter("sessions", 1, timeout=5), gw.qn.stats()
    assert wait_for(lambda: moved(gw.qn.stats()) > 1000, 5), gw.qn.stats()
    assert dl.poll() is None, "the download ended before the reload"
    gw.rewrite(config(gw.backend, tcp_established=3600, new_pool="203.0.113.8/30"))
    line = gw.hup("nat44: ")
    assert "nat44 rules 1 → 2" in line and "pool + 203.0.113.8/30" in line, line
    assert "tcp_established 7440 s → 3600 s" in line, line
    assert dl.poll() is None, "the reload must land while the download runs"
    out, _ = dl.communicate(timeout=30)
    assert dl.returncode == 0, gw.qn.text()[-2000:]
    assert out.split() == [str(SIZE), "1"], out
    # New flows from the new rule's hosts use the new pool.
    peer = gw.get("10.0.1.2")
    assert re.fullmatch(r"peer=203\.0\.113\.(8|9|10|11)", peer), peer
    assert gw.get("10.0.0.2") == "peer=203.0.113.1"


def test_a_broken_file_is_refused_and_the_config_in_force_keeps_serving(gw):
    good = config(gw.backend, tcp_established=3600, new_pool="203.0.113.8/30")
    gw.rewrite(good.replace("203.0.113.8/30", "203.0.113.300/30"))
    line = gw.hup("refused")
    assert re.search(re.escape(gw.qn.cfg.name) + r":\d+: nat44\.rule\[2\]\.pool: ", line), line
    assert gw.get("10.0.0.2") == "peer=203.0.113.1"
    assert re.fullmatch(r"peer=203\.0\.113\.(8|9|10|11)", gw.get("10.0.1.2"))


def test_a_restart_only_change_is_refused_naming_it(gw):
    gw.rewrite(config(gw.backend, tcp_established=3600, new_pool="203.0.113.8/30",
                      max_sessions=4096))
    line = gw.hup("refused")
    assert "max_sessions" in line and "restart" in line, line
    assert gw.get("10.0.0.2") == "peer=203.0.113.1"
    # The same file as in force: applied, nothing changed.
    gw.rewrite(config(gw.backend, tcp_established=3600, new_pool="203.0.113.8/30"))
    gw.hup("nat44: no change")


# --- NAT64: the same across a pool4 + timeout reload ---
#
#     cli (2001:db8:1::2) == gw (g-in 2001:db8:1::1 | g-out 198.51.100.1) == srv (198.51.100.2)
#
# A rate-limited download from the IPv4 server at [2001:db8:64::c633:6402] (about 4 s);
# midway pool4 gains 203.0.113.8/30 and udp goes 300 -> 120 s: the download completes
# with every byte and the log reports the change; a pref64 change is refused.

NAT64 = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1

[nat64]
pref64 = "{pref64}"
pool4 = [{pool4}]
port_preservation = false
[nat64.timeouts]
udp = {udp}
"""

SERVER6 = "2001:db8:64::c633:6402"
# About 8 s at RATE: the sessions counter reaches the log once a second, and under load
# the download must still be running when the test has seen it and sent SIGHUP.
SIZE64 = 16_000_000


def nat64_config(backend, pool4=("203.0.113.1/32",), udp=300, pref64="2001:db8:64::/96"):
    return NAT64.format(backend=backend, pref64=pref64, udp=udp,
                        pool4=", ".join(f'"{p}"' for p in pool4))


class Reload64(Reload):
    def __init__(self):
        Scenario.__init__(self, "qr6", ("cli", "gw", "srv"))

    def setup(self, quicknat, backend):
        self.backend = backend
        self.make_namespaces()
        self.link("cli", "c0", "gw", "g-in")
        self.link("srv", "s0", "gw", "g-out")
        self.nsx("cli", "ip", "-6", "addr", "add", "2001:db8:1::2/64", "dev", "c0", "nodad")
        self.nsx("cli", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:1::1")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "g-in", "nodad")
        self.nsx("gw", "ip", "addr", "add", "198.51.100.1/24", "dev", "g-out")
        self.nsx("srv", "ip", "addr", "add", f"{SERVER}/24", "dev", "s0")
        self.nsx("srv", "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.1")
        self.popen("srv", sys.executable, "-c", HTTP_SERVER, SERVER, "80")
        self.wait_listening("srv", SERVER, 80)
        self.qn = self.quicknat(quicknat, "gw", nat64_config(backend), f"reload64-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]


@pytest.fixture(scope="module")
def gw64(quicknat, backend):
    yield from running(Reload64, quicknat, backend)


def test_nat64_a_download_survives_a_pool4_and_timeout_reload(gw64):
    dl = gw64.popen("cli", "curl", "-s", "-o", "/dev/null", "--limit-rate", RATE,
                    "-w", "%{size_download} %{num_connects}",
                    f"http://[{SERVER6}]/big?n={SIZE64}", stdout=subprocess.PIPE, text=True)
    assert gw64.qn.wait_counter("sessions", 1, timeout=5), gw64.qn.stats()
    assert dl.poll() is None, "the download ended before the reload"
    gw64.rewrite(nat64_config(gw64.backend, pool4=("203.0.113.1/32", "203.0.113.8/30"), udp=120))
    line = gw64.hup("nat64: ")
    assert "pool4 + 203.0.113.8/30" in line and "udp 300 s → 120 s" in line, line
    assert dl.poll() is None, "the reload must land while the download runs"
    out, _ = dl.communicate(timeout=30)
    assert dl.returncode == 0, gw64.qn.text()[-2000:]
    assert out.split() == [str(SIZE64), "1"], out
    # A translator setting needs a restart: refused, and the gateway still translates.
    gw64.rewrite(nat64_config(gw64.backend, pool4=("203.0.113.1/32", "203.0.113.8/30"),
                              udp=120, pref64="64:ff9b::/96"))
    line = gw64.hup("refused")
    assert "pref64" in line and "restart" in line, line
    r = gw64.nsx("cli", "curl", "-s", "--max-time", "3", f"http://[{SERVER6}]/",
                 check=False, timeout=10)
    # A new flow: from the pool4 in force (the new addresses included).
    peer = r.stdout.strip()
    assert re.fullmatch(r"peer=203\.0\.113\.(1|8|9|10|11)", peer), peer + r.stderr


# -- SIIT (stateless): the whole translator configuration reloads live --

SIIT = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1
control_socket = "{sock}"

[siit]
pref64 = "2001:db8:64::/96"
eam = [ {{ ipv4 = "{eam4}/32", ipv6 = "2001:db8:6::2/128" }} ]
"""


def siit_sock(backend):
    return os.path.join(tempfile.gettempdir(), f"qn-reload-siit-{backend}.sock")


def siit_config(backend, eam4):
    return SIIT.format(backend=backend, eam4=eam4, sock=siit_sock(backend))


class ReloadSiit(Reload):
    """h4 (192.0.2.2) == gw (g-in 192.0.2.1 | g-out 2001:db8:6::1) == h6 (2001:db8:6::2).
    The IPv4 side sees h6 as its EAM address; h4 is embedded in the Pref64."""

    def __init__(self):
        Scenario.__init__(self, "qrs", ("h4", "gw", "h6"))

    def setup(self, quicknat, backend):
        self.backend = backend
        self.make_namespaces()
        self.link("h4", "a0", "gw", "g-in")
        self.link("h6", "b0", "gw", "g-out")
        self.nsx("h4", "ip", "addr", "add", "192.0.2.2/24", "dev", "a0")
        self.nsx("h4", "ip", "route", "add", "198.51.100.0/24", "via", "192.0.2.1")
        self.nsx("gw", "ip", "addr", "add", "192.0.2.1/24", "dev", "g-in")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:6::1/64", "dev", "g-out", "nodad")
        self.nsx("h6", "ip", "-6", "addr", "add", "2001:db8:6::2/64", "dev", "b0", "nodad")
        self.nsx("h6", "ip", "-6", "route", "add", "2001:db8:64::/96", "via", "2001:db8:6::1")
        self.qn = self.quicknat(quicknat, "gw", siit_config(backend, "198.51.100.10"),
                                f"reload-siit-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def ping(self, dst):
        """Whether h4 gets an echo reply from `dst` (h6 behind its EAM address)."""
        r = self.nsx("h4", "ping", "-c", "1", "-W", "1", dst, check=False, timeout=5)
        return r.returncode == 0


@pytest.fixture(scope="module")
def gw_siit(quicknat, backend):
    yield from running(ReloadSiit, quicknat, backend)


def test_siit_a_reload_moves_an_eam_entry(gw_siit):
    # Before: h6 answers at 198.51.100.10 (its EAM entry); .20 is only a Pref64 address.
    assert wait_for(lambda: gw_siit.ping("198.51.100.10"), 5), gw_siit.qn.text()[-2000:]
    assert not gw_siit.ping("198.51.100.20")
    gw_siit.rewrite(siit_config(gw_siit.backend, "198.51.100.20"))
    line = gw_siit.hup("siit: ")
    assert "eam: 1 → 1 entries" in line, line
    # After: the entry moved, live, without a restart (the same process answers).
    assert wait_for(lambda: gw_siit.ping("198.51.100.20"), 5), gw_siit.qn.text()[-2000:]
    assert not gw_siit.ping("198.51.100.10")
    assert gw_siit.qn.proc.poll() is None


# The control API of a stateless mode: every mode has one.
def test_siit_the_control_api_answers_status_stats_and_reload(gw_siit, quicknat):
    sock = siit_sock(gw_siit.backend)

    def api(*args):
        r = sh(quicknat, *args, "--json", "--socket", sock, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        return [json.loads(l) for l in r.stdout.splitlines()]

    # h6 answers at its EAM address, .20 after the move above (.10 if run alone).
    assert wait_for(lambda: gw_siit.ping("198.51.100.20") or gw_siit.ping("198.51.100.10"), 5)
    status = api("status")[-1]["status"]
    assert status["mode"] == "siit" and status["reload"] is True, status
    assert status["backend"].startswith("AF_XDP" if gw_siit.backend == "af_xdp" else "AF_PACKET"), status
    assert status["config"]["path"] == gw_siit.qn.cfg.name, status
    # The hash is the file in force: the one the reload above (the EAM move) applied.
    with open(gw_siit.qn.cfg.name, "rb") as f:
        assert status["config"]["sha256"] == hashlib.sha256(f.read()).hexdigest(), status
    # The pings above crossed it both ways: the counters say so.
    st = api("stats")[-1]["stats"]
    assert st["total"]["engine"]["forwarded"] >= 2, st["total"]
    assert set(st["drop_reasons"]) == set(st["total"]["engine"]["drops"])
    # Stateless: no sessions to list; `quicknat reload` runs SIGHUP's reload.
    assert api("sessions") == [{"v": 1, "ok": True, "end": "sessions", "count": 0}]
    r = sh(quicknat, "reload", "--socket", sock, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "siit: no change", r.stdout + r.stderr


# -- CLAT (stateless, 464XLAT's customer side): the provider's NAT64 prefix reloads live --

CLAT = """
[gateway]
inside = "g-in"
outside = "g-out"
backend = "{backend}"
stats_interval = 1
control_socket = "{sock}"

[clat]
ipv4 = "192.0.0.2/32"
ipv6 = "2001:db8:aaaa::2/128"
plat = "{plat}"
"""

# Network-specific prefixes: RFC 6052 §3.1 keeps the well-known 64:ff9b::/96 for global
# IPv4 addresses, and 198.51.100.10 is a documentation one (the CLAT refuses it there).
OLD_PLAT, NEW_PLAT = "2001:db8:64::/96", "2001:db8:46::/96"
# 198.51.100.10 embedded in each /96 (RFC 6052): where the CLAT sends a ping to it.
OLD_DST6, NEW_DST6 = "2001:db8:64::c633:640a", "2001:db8:46::c633:640a"


def clat_config(backend, plat):
    sock = os.path.join(tempfile.gettempdir(), f"qn-reload-clat-{backend}.sock")
    return CLAT.format(backend=backend, plat=plat, sock=sock)


class ReloadClat(Reload):
    """app (192.0.0.2) == gw, the CLAT (g-in 192.0.0.1 | g-out 2001:db8:2::2) == plat.
    `plat` stands for the provider's NAT64: it answers at 198.51.100.10's address in one
    prefix at a time, so whether a ping is answered says which prefix the CLAT used."""

    def __init__(self):
        Scenario.__init__(self, "qrc", ("app", "gw", "plat"))

    def setup(self, quicknat, backend):
        self.backend = backend
        self.make_namespaces()
        self.link("app", "a0", "gw", "g-in")
        self.link("plat", "p0", "gw", "g-out")
        self.nsx("app", "ip", "addr", "add", "192.0.0.2/29", "dev", "a0")
        self.nsx("app", "ip", "route", "add", "default", "via", "192.0.0.1")
        self.nsx("gw", "ip", "addr", "add", "192.0.0.1/29", "dev", "g-in")
        self.nsx("gw", "ip", "-6", "addr", "add", "2001:db8:2::2/64", "dev", "g-out", "nodad")
        self.nsx("gw", "ip", "-6", "route", "add", "default", "via", "2001:db8:2::1")
        self.nsx("plat", "ip", "-6", "addr", "add", "2001:db8:2::1/64", "dev", "p0", "nodad")
        self.holds(OLD_DST6)
        self.nsx("plat", "ip", "-6", "route", "add", "2001:db8:aaaa::2/128", "via", "2001:db8:2::2")
        self.qn = self.quicknat(quicknat, "gw", clat_config(backend, OLD_PLAT),
                                f"reload-clat-{backend}")
        assert self.qn.wait_started(), self.qn.text()[-2000:]

    def holds(self, dst6, drop=None):
        """`plat` answers at `dst6` (and no longer at `drop`)."""
        self.nsx("plat", "ip", "-6", "addr", "add", f"{dst6}/128", "dev", "p0", "nodad")
        if drop:
            self.nsx("plat", "ip", "-6", "addr", "del", f"{drop}/128", "dev", "p0")

    def ping(self):
        r = self.nsx("app", "ping", "-c", "1", "-W", "1", "198.51.100.10", check=False, timeout=5)
        return r.returncode == 0


@pytest.fixture(scope="module")
def gw_clat(quicknat, backend):
    yield from running(ReloadClat, quicknat, backend)


def test_clat_a_reload_moves_the_plat_prefix(gw_clat):
    # Before: the app's ping to 198.51.100.10 reaches 2001:db8:64::c633:640a (old prefix).
    g = gw_clat
    assert wait_for(g.ping, 5), g.qn.text()[-2000:]
    g.rewrite(clat_config(g.backend, NEW_PLAT))
    line = g.hup("clat: ")
    assert OLD_PLAT in line and NEW_PLAT in line, line
    # After: the same process sends it into the new prefix: answered when only the new
    # address exists, unanswered when only the old one does.
    g.holds(NEW_DST6, drop=OLD_DST6)
    assert wait_for(g.ping, 5), g.qn.text()[-2000:]
    g.holds(OLD_DST6, drop=NEW_DST6)
    assert not g.ping()
    g.holds(NEW_DST6, drop=OLD_DST6)
    assert wait_for(g.ping, 5), g.qn.text()[-2000:]
    assert g.qn.proc.poll() is None
