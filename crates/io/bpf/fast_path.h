// SPDX-License-Identifier: MIT OR Apache-2.0
//
// fast_path.h: the XDP fast path for established IPv4 TCP/UDP flows (issue 15 item 2),
// included by xdp_steer.c. User space (the engine, through the runtime) installs one
// entry per direction of an established session in `fast_v4`: the packet's tuple as it
// arrives on this interface -> the rewrite (new addresses and ports, checksum deltas
// precomputed, egress devmap slot, MACs). A hit is rewritten here and redirected out of
// the other interface; anything the engine must see goes to the AF_XDP socket as
// before: a miss, TCP SYN/FIN/RST, fragments, IP options, a TTL that would expire, a
// packet longer than the egress MTU, a tagged frame, a transport checksum that is only
// the pseudo-header sum (a veth peer's tx checksum offload: user space completes it).
//
// Checksums: every sum is done on the 16-bit words as loaded (network order): a
// ones'-complement sum commutes with the byte swap, so deltas are stored as wire bytes.
// The update is RFC 1624 eqn 3, `~(~HC + delta)`, exactly what xlat::nat44 computes, so
// the bytes leaving are the engine's. The TTL decrement adds the constant 0xFEFF
// (`~w + (w - 0x0100)` for any w >= 0x0100), already folded into `ip_delta`.
//
// Layouts: keep in sync with crates/io/src/afxdp/fast_path.rs.

/* One direction of a flow as it arrives (wire byte order). */
struct fast_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* What the packet leaves as. */
struct fast_val {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u16 ip_delta; /* addresses (+ TTL): for the IPv4 header checksum */
	__u16 l4_delta; /* addresses and ports: for the TCP/UDP checksum */
	__u32 egress;	/* slot in tx_port */
	__u8 dmac[6];
	__u8 smac[6];
	__u8 decrement_ttl;
	__u8 pad0;
	__u16 mtu; /* egress MTU (host order): longer packets go to user space */
	__u32 pad1;
	__u64 last_seen; /* bpf_ktime_get_ns() of a recent hit (refreshed every 50 ms) */
};

struct bpf_devmap_val {
	__u32 ifindex;
	__u32 prog_fd;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* set by the loader: [gateway] xdp_fast_path_entries */
	__type(key, struct fast_key);
	__type(value, struct fast_val);
} fast_v4 SEC(".maps");

/* Egress interfaces: slot 0 inside, 1 outside. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_port SEC(".maps");

/* Per CPU: FAST_PACKETS, FAST_BYTES, FAST_NO_PORT, FAST_MISS. */
#define FAST_PACKETS 0
#define FAST_BYTES 1
#define FAST_NO_PORT 2
#define FAST_MISS 3 /* an IPv4 TCP/UDP packet with no entry: to user space */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} fast_stats SEC(".maps");

#define FAST_TOUCH_NS 50000000ull

static __attribute__((always_inline)) __u16 fold32(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* RFC 1624 eqn 3: ~(~HC + delta). */
static __attribute__((always_inline)) __u16 csum_apply(__u16 c, __u16 delta)
{
	return (__u16)~fold32((__u32)(__u16)~c + delta);
}

static __attribute__((always_inline)) void count(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&fast_stats, &idx);

	if (c)
		*c += n;
}

/* Returns an XDP action for a fast-path hit, or -1: not ours (the caller steers it). */
static __attribute__((always_inline)) int fast_path_v4(struct xdp_md *ctx, __u8 *data, __u8 *l3,
						  __u8 *end)
{
	struct fast_key key = {};
	struct fast_val *v;
	__u8 *l4;
	__u16 *csum;
	__u16 tot;

	if (l3 != data + 14 || l3 + 20 > end)
		return -1;
	/* Version 4, no options; not a fragment (MF clear, offset 0). */
	if (l3[0] != 0x45 || (*(__u16 *)(l3 + 6) & be16(0x3fff)))
		return -1;
	tot = be16(*(__u16 *)(l3 + 2));
	/* The frame is exactly the packet (no padding, nothing truncated). */
	if (l3 + tot != end)
		return -1;
	l4 = l3 + 20;
	key.proto = l3[9];
	if (key.proto == 6) {
		if (l4 + 20 > end)
			return -1;
		/* FIN, SYN, RST: state changes are the engine's. */
		if (l4[13] & 0x07)
			return -1;
		csum = (__u16 *)(l4 + 16);
	} else if (key.proto == 17) {
		if (l4 + 8 > end)
			return -1;
		csum = (__u16 *)(l4 + 6);
	} else {
		return -1;
	}
	key.saddr = *(__u32 *)(l3 + 12);
	key.daddr = *(__u32 *)(l3 + 16);
	key.sport = *(__u16 *)l4;
	key.dport = *(__u16 *)(l4 + 2);
	v = bpf_map_lookup_elem(&fast_v4, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return -1;
	}
	if (v->decrement_ttl && l3[8] <= 1)
		return -1;
	if (tot > v->mtu)
		return -1;
	/* A partial checksum (the pseudo-header sum, a veth peer's tx offload): user space
	 * completes it; an incremental update cannot. */
	__u16 c = *csum;
	if (c != 0) {
		__u32 ps = (key.saddr & 0xffff) + (key.saddr >> 16) + (key.daddr & 0xffff) +
			   (key.daddr >> 16) + be16((__u16)key.proto) + be16((__u16)(tot - 20));
		if (c == fold32(ps))
			return -1;
	}
	if (!bpf_map_lookup_elem(&tx_port, &v->egress)) {
		count(FAST_NO_PORT, 1);
		return -1;
	}
	/* Rewrite: addresses, TTL, IPv4 header checksum; ports, transport checksum. */
	*(__u32 *)(l3 + 12) = v->saddr;
	*(__u32 *)(l3 + 16) = v->daddr;
	if (v->decrement_ttl)
		l3[8] -= 1;
	*(__u16 *)(l3 + 10) = csum_apply(*(__u16 *)(l3 + 10), v->ip_delta);
	*(__u16 *)l4 = v->sport;
	*(__u16 *)(l4 + 2) = v->dport;
	if (key.proto == 17) {
		/* RFC 768: no checksum stays none; a computed zero is sent as all ones. */
		if (c != 0) {
			c = csum_apply(c, v->l4_delta);
			*csum = c ? c : 0xffff;
		}
	} else {
		*csum = csum_apply(c, v->l4_delta);
	}
	__builtin_memcpy(data, v->dmac, 6);
	__builtin_memcpy(data + 6, v->smac, 6);
	__u64 now = bpf_ktime_get_ns();
	if (now - v->last_seen > FAST_TOUCH_NS)
		v->last_seen = now;
	count(FAST_PACKETS, 1);
	count(FAST_BYTES, (__u64)(end - data));
	return bpf_redirect_map(&tx_port, v->egress, 0);
}
