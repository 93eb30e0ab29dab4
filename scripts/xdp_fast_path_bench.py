#!/usr/bin/env python3
"""XDP fast path against the AF_XDP slow path and the kernel's NAT, on
the topology of tests/e2e/test_nat44.py (cli == gw == srv, veth), arms alternating in
each round:

  * off:    quicknat AF_XDP, xdp_fast_path = "off" (every packet through the socket)
  * on:     quicknat AF_XDP, xdp_fast_path = "on"
  * kernel: the gateway namespace's kernel, ip_forward=1 and nftables SNAT to 203.0.113.1

Per arm and round: one TCP stream (iperf3, 3 s, offloads off on the gateway, GRO on the
far peers for every arm: a veth takes redirected frames only with NAPI), a UDP flood of
64-byte payloads (iperf3 -u, unlimited rate: generator-bound on 2 cores) and the CPU
seconds the quicknat process used per million packets forwarded in both. XDP work runs
in the softirq of the sending core, which no process is charged for: the quicknat CPU
figure shows what leaves user space, not the whole cost. Prints medians and ratios.

    sudo python3 scripts/xdp_fast_path_bench.py QUICKNAT [ROUNDS]
"""

import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))
import test_nat44  # noqa: E402
from netns import wait_for  # noqa: E402

SERVER = test_nat44.SERVER


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def iperf(g, *args):
    r = g.nsx("cli", "iperf3", "-c", SERVER, "-J", *args, check=False, timeout=60)
    out = json.loads(r.stdout)
    if "error" in out:
        raise RuntimeError(f"iperf3 {args}: {out['error']}; quicknat: {g.quicknats[-1].text()[-1500:]}")
    return out


def measure(g, pid):
    c0 = cpu_seconds(pid) if pid else 0
    t = iperf(g, "-t", "3")
    gbps = t["end"]["sum_received"]["bits_per_second"] / 1e9
    tcp_pkts = t["end"]["sum_received"]["bytes"] / 1448
    u = iperf(g, "-u", "-l", "64", "-b", "0", "-t", "3")
    s = u["end"]["sum"]
    kpps = (s["packets"] - s["lost_packets"]) / s["seconds"] / 1e3
    c1 = cpu_seconds(pid) if pid else 0
    pkts = tcp_pkts + s["packets"]
    return gbps, kpps, (c1 - c0) / pkts * 1e6 if pid else 0.0


def main():
    quicknat, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    g = test_nat44.Gateway()
    results = {a: [] for a in ("off", "on", "kernel")}
    try:
        g.setup(quicknat, "af_xdp", "on")
        assert g.qn.wait_started(), g.qn.text()[-2000:]
        g.qn.stop()
        for p in g.procs:  # the suite's one-off iperf3 server: each run here starts its own
            if "iperf3" in " ".join(map(str, p.args)):
                p.kill()
                p.wait()
        g.popen("srv", "iperf3", "-s", "-B", SERVER, stdout=subprocess.DEVNULL)
        g.wait_listening("srv", SERVER, 5201)
        for n, dev in (("cli", "c0"), ("srv", "s0")):
            g.nsx(n, "ethtool", "-K", dev, "gro", "on", check=False)
        for rnd in range(rounds):
            for arm in ("off", "on", "kernel"):
                if arm == "kernel":
                    g.nsx("gw", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
                    g.nsx("gw", "nft", "add table ip qnb; add chain ip qnb post { type nat hook postrouting priority 100; }; "
                          "add rule ip qnb post oifname g-out ip saddr 10.0.0.0/24 snat to 203.0.113.1")
                    res = measure(g, None)
                    g.nsx("gw", "nft", "delete table ip qnb")
                    g.nsx("gw", "sysctl", "-q", "-w", "net.ipv4.ip_forward=0")
                else:
                    cfg = (test_nat44.CONFIG.replace("{backend}", "af_xdp").replace("{workers}", "1")
                           .replace("{fast}", arm))
                    qn = g.quicknat(quicknat, "gw", cfg, f"bench-{arm}-{rnd}")
                    assert qn.wait_started(), qn.text()[-2000:]
                    # Warm-up: neighbours resolved, the flows' first packets through.
                    assert wait_for(lambda: g.nsx("cli", "ping", "-c", "1", "-W", "1", SERVER,
                                                  check=False).returncode == 0, 10)
                    res = measure(g, qn.proc.pid)
                    qn.stop()
                results[arm].append(res)
                print(f"round {rnd} {arm}: tcp {res[0]:.2f} Gbit/s, udp64 {res[1]:.0f} kpps, "
                      f"quicknat cpu {res[2]:.2f} s/Mpkt", flush=True)
    finally:
        g.close()
    med = {a: [statistics.median(x[i] for x in v) for i in range(3)] for a, v in results.items()}
    for a, (t, u, c) in med.items():
        print(f"median {a}: tcp {t:.2f} Gbit/s, udp64 {u:.0f} kpps, quicknat cpu {c:.2f} s/Mpkt")
    k = med["kernel"]
    for a in ("off", "on"):
        print(f"ratio {a}/kernel: tcp {med[a][0] / k[0]:.2f}x, udp64 {med[a][1] / k[1]:.2f}x")
    print(f"ratio on/off: tcp {med['on'][0] / med['off'][0]:.2f}x, udp64 {med['on'][1] / med['off'][1]:.2f}x, "
          f"quicknat cpu {med['on'][2] / max(med['off'][2], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
