"""Captures as operators have them: `quicknat translate` reads pcapng written by
Wireshark's own tools as well as pcap, and gives the same packets for both.

- Every golden input (tests/golden/*.in.pcap) and the README's demo
  (examples/traffic.pcap) is converted to pcapng by `editcap -F pcapng` (wireshark-common);
  `translate` must print the same summary for both and write the same frames (bytes and
  timestamps), the pcapng output as pcapng. The frames are read back with scapy (an
  independent reader) and the pcapng output is also read by `tshark`, which must count
  the same frames.
- A live capture written by `dumpcap` on a namespace's loopback (Section Header,
  Interface Description with if_tsresol and if_name, Enhanced Packet Blocks with
  options, and an Interface Statistics Block at the end that the reader must skip) is
  replayed: every frame is read (the count equals tshark's).
"""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from scapy.utils import RawPcapNgReader, RawPcapReader

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"

needs_wireshark = pytest.mark.skipif(
    shutil.which("editcap") is None or shutil.which("tshark") is None,
    reason="editcap/tshark missing (scripts/test.sh installs wireshark-common and tshark)",
)


def cases():
    """(name, input pcap, configuration or None for the built-in one)."""
    out = [("demo", REPO / "examples" / "traffic.pcap", None)]
    for pcap in sorted(GOLDEN.glob("*.in.pcap")):
        name = pcap.name[: -len(".in.pcap")]
        toml = GOLDEN / f"{name}.toml"
        out.append((name, pcap, toml if toml.exists() else GOLDEN / "nat44.toml"))
    return out


def translate(quicknat, cfg, src, dst):
    args = [quicknat, "translate"]
    if cfg is not None:
        args += ["--config", str(cfg)]
    r = subprocess.run(args + [str(src), str(dst)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"translate {src}: {r.stderr}"
    return r.stdout


def frames(path):
    """(format, [(timestamp in ns, bytes)]) read by scapy."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"\x0a\x0d\x0d\x0a":
        out = []
        for data, meta in RawPcapNgReader(str(path)):
            ts = (meta.tshigh << 32) | meta.tslow
            # quicknat writes if_tsresol = 9 (nanoseconds); scapy gives the raw units.
            assert meta.tsresol == 1_000_000_000, meta
            out.append((ts, bytes(data)))
        return "pcapng", out
    out = []
    reader = RawPcapReader(str(path))
    nano = reader.nano
    for data, meta in reader:
        frac = meta.usec if nano else meta.usec * 1000
        out.append((meta.sec * 1_000_000_000 + frac, bytes(data)))
    return "pcap", out


def tshark_count(path):
    r = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return len(r.stdout.split())


@needs_wireshark
@pytest.mark.parametrize("name,pcap,cfg", cases(), ids=[c[0] for c in cases()])
def test_pcapng_from_editcap_gives_the_same_packets(quicknat, tmp_path, name, pcap, cfg):
    ng = tmp_path / f"{name}.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(pcap), str(ng)], check=True, timeout=60)
    with open(ng, "rb") as f:
        assert f.read(4) == b"\x0a\x0d\x0d\x0a", "editcap did not write pcapng"
    out_pcap, out_ng = tmp_path / "out.pcap", tmp_path / "out.pcapng"
    a = translate(quicknat, cfg, pcap, out_pcap)
    b = translate(quicknat, cfg, ng, out_ng)
    assert a == b, f"summaries differ:\n{a}\n---\n{b}"
    fa, pa = frames(out_pcap)
    fb, pb = frames(out_ng)
    assert (fa, fb) == ("pcap", "pcapng")
    assert len(pa) > 0, "nothing written: the comparison would be vacuous"
    assert pa == pb
    assert tshark_count(out_ng) == len(pb)


@needs_wireshark
@pytest.mark.needs_root
def test_a_dumpcap_capture_is_read_whole(quicknat, tmp_path):
    if shutil.which("dumpcap") is None or shutil.which("ping") is None:
        pytest.skip("dumpcap or ping missing")
    ns = f"qn-cap-{uuid.uuid4().hex[:6]}"
    cap = tmp_path / "lo.pcapng"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        # dumpcap stops by itself after 6 packets (echo requests and replies). "Capturing
        # on" comes a little before the capture really starts, so the pings go on until
        # dumpcap has its 6 packets and exits (its exit is the event waited for).
        dump = subprocess.Popen(
            ["ip", "netns", "exec", ns, "dumpcap", "-q", "-i", "lo", "-c", "6", "-w", str(cap)],
            stderr=subprocess.PIPE, text=True)
        ping = None
        try:
            for line in dump.stderr:
                if "Capturing on" in line:
                    break
            else:
                pytest.fail(f"dumpcap did not start (exit {dump.wait()})")
            ping = subprocess.Popen(["ip", "netns", "exec", ns, "ping", "-i", "0.2", "127.0.0.1"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert dump.wait(timeout=30) == 0
        finally:
            for p in (ping, dump):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    with open(cap, "rb") as f:
        assert f.read(4) == b"\x0a\x0d\x0d\x0a"
    n = tshark_count(cap)
    assert n == 6
    out = translate(quicknat, None, cap, tmp_path / "out.pcapng")
    assert f"frames read       {n}\n" in out, out
