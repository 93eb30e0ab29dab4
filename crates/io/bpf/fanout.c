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
// the workers in turn, and each flow is remembered (`placed`) so its later packets
// follow. Turns give each worker the same number of new flows, as a least-flows choice
// would, without a loop over the workers.
//
// Turns are kept per interface and IP version (`turns`, keyed by both): a NAT's
// outbound first packet and its reply's first packet are two new flows, one on each
// interface; with one shared turn they would alternate, putting every outbound flow on
// the even workers and every reply on the odd ones. Likewise IPv4 and IPv6 take their
// own turns, so each is spread evenly on its own.
//
// `placed` is a plain hash map of a fixed size, never an LRU: a flow is never forgotten
// while it sends (an LRU under pressure would forget live flows and place them again,
// maybe on another worker, reordering them). User space ages it: each flow's entry
// holds the epoch it was last seen in (`epoch[0]`, which user space advances every
// sweep), and entries not seen for a whole epoch are deleted (`FlowPlacement`'s
// sweeper). When the map is full, a new flow is placed by a hash of its key instead:
// stable too (a flow never moves), only not balanced; `overflow` counts their packets.
//
// IPv4 and IPv6 are keyed alike, by addresses, protocol and ports (ICMP echo: its
// identifier). Fragments are keyed by addresses and protocol only, as the kernel's own
// hash keys them, so every fragment of a datagram goes to the same worker. Anything
// else (ARP, a frame the program cannot read) goes to worker 0.
//
// Two CPUs placing the same new flow at once both try to insert it; the second insert
// fails (BPF_NOEXIST) and that CPU takes the first one's worker, so a flow never has two
// (its turn is lost: one worker gets one flow fewer in that round).

#include "common.h"

#define BPF_NOEXIST 1
#define EEXIST 17
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

struct place {
	__u32 worker;
	/* The epoch the flow was last seen in. */
	__u32 seen;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow);
	__type(value, struct place);
} placed SEC(".maps");

/* The current epoch (user space advances it every sweep). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} epoch SEC(".maps");

/* Packets of new flows placed by hash because `placed` was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} overflow SEC(".maps");

/* Flows placed on each worker since the program was loaded: IPv4 at [worker], IPv6 at
 * [MAX_WORKERS + worker]. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u64);
} flows SEC(".maps");

/* The next turn of each interface and IP version: keyed ifindex * 2 + (0 IPv4, 1 IPv6). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
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
		if (f->proto == IPPROTO_ICMP ? (icmp[0] == 8 || icmp[0] == 0)
					     : (icmp[0] == 128 || icmp[0] == 129))
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
	/* Hop-by-hop, routing, destination options and AH before the transport header. */
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (nh != 0 && nh != 43 && nh != 60 && nh != 51)
			break;
		__u8 ext[2];
		if (bpf_skb_load_bytes_relative(skb, off, ext, 2, BPF_HDR_START_NET) != 0)
			return 0;
		/* AH counts its length in 4-byte units, less 2 (RFC 4302); the others in
		 * 8-byte units, less 1 (RFC 8200). */
		off += nh == 51 ? ((__u32)ext[1] + 2) * 4 : ((__u32)ext[1] + 1) * 8;
		nh = ext[0];
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

/* A hash of the key's ten words (multiply-xorshift), for flows the map cannot hold. */
static __attribute__((always_inline)) __u32 hash_of(const struct flow *f)
{
	const __u32 *w = (const __u32 *)f;
	__u64 h = 0x9e3779b97f4a7c15ULL;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*f) / 4); i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdULL;
		h ^= h >> 33;
	}
	return (__u32)(h ^ (h >> 32));
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

	__u32 *ep = bpf_map_lookup_elem(&epoch, &zero);
	__u32 now = ep ? *ep : 0;
	struct place *p = bpf_map_lookup_elem(&placed, &f);
	if (p) {
		if (p->seen != now)
			p->seen = now;
		return p->worker;
	}

	/* A new flow: the next worker in turn for its interface and IP version. */
	__u32 tk = skb->ifindex * 2 + (base ? 1 : 0);
	__u64 *turn = bpf_map_lookup_elem(&turns, &tk);
	if (!turn) {
		__u64 first = 0;
		bpf_map_update_elem(&turns, &tk, &first, BPF_NOEXIST);
		turn = bpf_map_lookup_elem(&turns, &tk);
		if (!turn)
			return hash_of(&f) % workers;
	}
	struct place np = {.worker = (__u32)(__sync_fetch_and_add(turn, 1) % workers), .seen = now};
	long err = bpf_map_update_elem(&placed, &f, &np, BPF_NOEXIST);
	if (err == 0) {
		__u32 k = base + np.worker;
		__u64 *n = bpf_map_lookup_elem(&flows, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
		return np.worker;
	}
	if (err == -EEXIST) {
		/* Another CPU placed it first: follow it. */
		p = bpf_map_lookup_elem(&placed, &f);
		if (p)
			return p->worker;
	}
	/* The map is full: a hash of the key, the same for every packet of the flow. */
	__u64 *o = bpf_map_lookup_elem(&overflow, &zero);
	if (o)
		__sync_fetch_and_add(o, 1);
	return hash_of(&f) % workers;
}

char _license[] SEC("license") = "Dual MIT/GPL";
