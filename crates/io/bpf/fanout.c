// SPDX-License-Identifier: MIT OR Apache-2.0
//
// fanout.c: the AF_PACKET fanout program (PACKET_FANOUT_EBPF) that places flows on
// workers. The kernel runs it for every frame an interface's fanout group receives and
// delivers the frame to the socket its return value names (modulo the group's size; a
// worker's socket is the one it joined in worker order).
//
// A per-packet hash (the kernel's PACKET_FANOUT_HASH, a NIC's RSS) spreads many flows
// evenly but few flows only by luck: 32 flows thrown at 2 workers land 16/16 or 17/15
// only 40% of the time. This program places flows instead: flows' first packets go to
// the workers in turn, and each flow is remembered (`placed`, an LRU map sized by the
// gateway to its session capacity) so its later packets follow. Turns give each worker
// the same number of flows placed, as a least-flows choice would (placed flows are never
// counted down: the LRU map forgets them silently), without a loop over the workers.
// IPv4 and IPv6 are keyed alike, by addresses, protocol and ports (ICMP echo: its
// identifier), so IPv6 flows spread exactly as IPv4 ones do. Fragments are keyed by
// addresses and protocol only, as the kernel's own hash keys them, so every fragment of
// a datagram goes to the same worker. Anything else (ARP, a VLAN frame the NIC left
// tagged) goes to worker 0.
//
// Each IP version takes its own turns, so each is spread evenly on its own (counted together, IPv4 and IPv6 flows arriving alternately would
// put every IPv4 flow on one worker and every IPv6 flow on the other).
//
// Two CPUs placing the same new flow at once both try to insert it; the second insert
// fails (BPF_NOEXIST) and that CPU takes the first one's worker, so a flow never has two
// (its turn is lost: one worker gets one flow fewer in that round).
// Only the winner counts the flow in `flows`, which user space reads for `status`.

#include "common.h"

#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_NOEXIST 1
#define BPF_HDR_START_NET 1
#define MAX_WORKERS 256

static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   __u64 flags) = (void *)2;
static long (*bpf_skb_load_bytes_relative)(const void *skb, __u32 offset, void *to, __u32 len,
					   __u32 start_header) = (void *)68;

struct flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow);
	__type(value, __u32);
} placed SEC(".maps");

/* Flows placed on each worker since the program was loaded: IPv4 at [worker], IPv6 at
 * [MAX_WORKERS + worker]. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u64);
} flows SEC(".maps");

/* The next turn of each IP version: IPv4 at [0], IPv6 at [1]. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} turns SEC(".maps");

#define IPPROTO_ICMP 1
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_DCCP 33
#define IPPROTO_SCTP 132
#define IPPROTO_UDPLITE 136

/* Reads the ports (or an echo's identifier) at `off` into `f`; leaves them 0 otherwise. */
static __attribute__((always_inline)) void ports(struct __sk_buff *skb, __u32 off,
						 struct flow *f)
{
	__u16 p[2];
	switch (f->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_DCCP:
	case IPPROTO_SCTP:
	case IPPROTO_UDPLITE:
		if (bpf_skb_load_bytes_relative(skb, off, p, 4, BPF_HDR_START_NET) == 0) {
			f->sport = p[0];
			f->dport = p[1];
		}
		return;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 icmp[6];
		if (bpf_skb_load_bytes_relative(skb, off, icmp, 6, BPF_HDR_START_NET) != 0)
			return;
		/* Echo request/reply (ICMP 8/0, ICMPv6 128/129): the identifier is the flow's. */
		if (icmp[0] == 8 || icmp[0] == 0 || icmp[0] == 128 || icmp[0] == 129)
			f->sport = (__u16)icmp[4] | ((__u16)icmp[5] << 8);
		return;
	}
	}
}

static __attribute__((always_inline)) int key_v4(struct __sk_buff *skb, struct flow *f)
{
	__u8 h[20];
	if (bpf_skb_load_bytes_relative(skb, 0, h, 20, BPF_HDR_START_NET) != 0)
		return -1;
	if ((h[0] >> 4) != 4)
		return -1;
	__builtin_memcpy(&f->src[0], &h[12], 4);
	__builtin_memcpy(&f->dst[0], &h[16], 4);
	f->proto = h[9];
	/* A fragment (MF set or a non-zero offset): addresses and protocol only. */
	if (((h[6] & 0x3f) | h[7]) != 0)
		return 0;
	ports(skb, (__u32)(h[0] & 0x0f) * 4, f);
	return 0;
}

static __attribute__((always_inline)) int key_v6(struct __sk_buff *skb, struct flow *f)
{
	__u8 h[40];
	if (bpf_skb_load_bytes_relative(skb, 0, h, 40, BPF_HDR_START_NET) != 0)
		return -1;
	if ((h[0] >> 4) != 6)
		return -1;
	__builtin_memcpy(f->src, &h[8], 16);
	__builtin_memcpy(f->dst, &h[24], 16);
	__u8 nh = h[6];
	__u32 off = 40;
	/* Hop-by-hop, routing and destination options before the transport header. */
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (nh != 0 && nh != 43 && nh != 60)
			break;
		__u8 ext[2];
		if (bpf_skb_load_bytes_relative(skb, off, ext, 2, BPF_HDR_START_NET) != 0)
			return 0;
		nh = ext[0];
		off += ((__u32)ext[1] + 1) * 8;
	}
	if (nh == 44) {
		/* A fragment: addresses and the protocol after the fragment header. */
		__u8 frag[1];
		if (bpf_skb_load_bytes_relative(skb, off, frag, 1, BPF_HDR_START_NET) == 0)
			f->proto = frag[0];
		return 0;
	}
	f->proto = nh;
	ports(skb, off, f);
	return 0;
}

SEC("socket")
int fanout_place(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u32 *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return 0;
	__u32 workers = *cfg;
	if (workers < 2 || workers > MAX_WORKERS)
		return 0;

	struct flow f = {};
	int r;
	__u32 base;
	if (skb->protocol == be16(ETH_P_IP)) {
		r = key_v4(skb, &f);
		base = 0;
	} else if (skb->protocol == be16(ETH_P_IPV6)) {
		r = key_v6(skb, &f);
		base = MAX_WORKERS;
	} else {
		return 0;
	}
	if (r != 0)
		return 0;

	__u32 *w = bpf_map_lookup_elem(&placed, &f);
	if (w)
		return *w;

	/* A new flow: the next worker in turn for its IP version (each version's turns
	 * are its own, so each worker gets every n-th flow of each version). */
	__u32 nk = base ? 1 : 0;
	__u64 *turn = bpf_map_lookup_elem(&turns, &nk);
	if (!turn)
		return 0;
	__u32 best = (__u32)(__sync_fetch_and_add(turn, 1) % workers);
	if (bpf_map_update_elem(&placed, &f, &best, BPF_NOEXIST) == 0) {
		__u32 k = base + best;
		__u64 *n = bpf_map_lookup_elem(&flows, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
		return best;
	}
	/* Another CPU placed it first (or the map refused): follow what is there. */
	w = bpf_map_lookup_elem(&placed, &f);
	return w ? *w : best;
}

char _license[] SEC("license") = "Dual MIT/GPL";
