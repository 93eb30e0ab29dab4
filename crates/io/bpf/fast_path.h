// SPDX-License-Identifier: MIT OR Apache-2.0
//
// fast_path.h: the XDP fast path for established IPv4 TCP/UDP flows, included by
// xdp_steer.c. User space (the engine, through the runtime) installs one
// entry per direction of an established session in `fast_v4`: the packet's tuple as it
// arrives on this interface -> the rewrite (new addresses and ports, checksum deltas
// precomputed, egress devmap slot, MACs). A hit is rewritten here and redirected out of
// the other interface; anything the engine must see goes on to the AF_XDP socket: a
// miss, TCP SYN/FIN/RST, fragments, IP options, a TTL that would expire, a
// packet longer than the egress MTU, a tagged frame, a transport checksum that is only
// the pseudo-header sum (a veth peer's tx checksum offload: user space completes it).
//
// Checksums: every sum is done on the 16-bit words as loaded (network order): a
// ones'-complement sum commutes with the byte swap, so deltas are stored as wire bytes.
// The update is RFC 1624 eqn 3, `~(~HC + delta)`, exactly what xlat::nat44 computes, so
// the bytes leaving are the engine's. The TTL decrement adds the constant 0xFEFF
// (`~w + (w - 0x0100)` for any w >= 0x0100), already folded into `ip_delta`.
//
// NAT64 (fast_path_64, fast_path_46, below): the same for a stateful NAT64 session, whose
// packets change family on the way: IPv6 arriving inside leaves as IPv4, IPv4 arriving
// outside as IPv6.
//
// Layouts: keep in sync with crates/io/src/afxdp/fast_path.rs.

/* FAST_MAP_FLAGS: the flow maps are not preallocated. A preallocated hash map puts a
 * deleted element straight back on its free list, so an update that follows a delete (a
 * session reinstalled, an ILA mapping changed) may rewrite the very element an XDP run on
 * another CPU has just looked up and is still reading: one packet could leave with half
 * the old rewrite and half the new. Without preallocation, elements are freed after an
 * RCU grace period, and a program holding one reads it whole. */
#define BPF_F_NO_PREALLOC 1u

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
	__u64 last_seen; /* CLOCK_MONOTONIC of a recent hit (refreshed every 50 ms; coarse) */
};

struct bpf_devmap_val {
	__u32 ifindex;
	__u32 prog_fd;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* set by the loader: [gateway] xdp_fast_path_entries */
	__uint(map_flags, BPF_F_NO_PREALLOC); /* see FAST_MAP_FLAGS */
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

/* Per CPU: FAST_PACKETS, FAST_BYTES, FAST_NO_PORT, FAST_MISS, FAST_LOST. */
#define FAST_PACKETS 0
#define FAST_BYTES 1
#define FAST_NO_PORT 2
#define FAST_MISS 3 /* an IPv4 TCP/UDP packet with no entry: to user space */
#define FAST_LOST 4 /* tc_fast.c: claimed at the socket, not forwarded by tc */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 5);
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

/* The coarse clock: a hit's time to within a tick (4 ms at 250 Hz) is plenty for a stamp
 * refreshed every 50 ms against timeouts of seconds, and it reads a cached value instead
 * of the clock source (on a VM's kvm-clock, a TSC read and scaling per packet). */
static __attribute__((always_inline)) void fast_touch(__u64 *last_seen)
{
	__u64 now = bpf_ktime_get_coarse_ns();

	if (now - *last_seen > FAST_TOUCH_NS)
		*last_seen = now;
}

/* The transport header at `l4` (`proto` 6 or 17), `len` bytes to the frame's end (the
 * header's bytes are below `end`, which bounds the reads): the offset of its checksum, or
 * -1 when the packet is not the fast path's (not TCP/UDP, truncated, a TCP SYN, FIN or
 * RST: state changes are the engine's). */
static __attribute__((always_inline)) int l4_csum_off_len(__u8 proto, __u8 *l4, __u8 *end,
							   __u32 len)
{
	if (proto == 6) {
		if (l4 + 20 > end || len < 20 || (l4[13] & 0x07))
			return -1;
		/* A data offset the engine's parser refuses (under 5 words, past the end). */
		__u8 doff = l4[12] >> 4;
		if (doff < 5 || (__u32)doff * 4 > len)
			return -1;
		return 16;
	}
	if (proto == 17) {
		/* The datagram is the whole payload (user space sums, and the engine reads, the
		 * UDP length; a shorter one is theirs). */
		if (l4 + 8 > end || be16(*(__u16 *)(l4 + 4)) != len)
			return -1;
		return 6;
	}
	return -1;
}

/* l4_csum_off_len for a frame that ends at `end` (XDP). */
static __attribute__((always_inline)) int l4_csum_off(__u8 proto, __u8 *l4, __u8 *end)
{
	return l4_csum_off_len(proto, l4, end, (__u32)(end - l4));
}

/* The IPv4 pseudo-header sum of `k`'s segment of `len` bytes (words as loaded). */
static __attribute__((always_inline)) __u32 pseudo_v4(struct fast_key *k, __u16 len)
{
	return (k->saddr & 0xffff) + (k->saddr >> 16) + (k->daddr & 0xffff) + (k->daddr >> 16) +
	       be16((__u16)k->proto) + be16(len);
}

/* Segments longer than this many 4-byte words are never completed here (user space does). */
#define FAST_SUM_WORDS 372

/* A partial transport checksum (the field holds only the pseudo-header sum `ps`: a veth
 * peer's tx checksum offload, which XDP_REDIRECT cannot carry) is completed here exactly
 * as user space completes it (io::csum::complete_if_partial): the sum over the segment as
 * it lies, complemented; a UDP zero sent as ones. Called through `csum_finish`, which
 * has recognised the field as partial. The segment starts `l4_off` bytes into
 * the frame and runs to its end, its checksum `coff` bytes in. 0: the checksum is
 * complete (now or already); -1: it is partial and not completed here (too long, or a
 * UDP datagram shorter than its packet): user space's.
 *
 * A global function: the verifier checks it once, not once per path of its callers (the
 * loop would take every caller past the 1M-instruction limit). */
__attribute__((noinline)) int qn_csum_finish(struct xdp_md *ctx, __u32 l4_off, __u32 coff, __u32 ps,
					     __u32 udp)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;

	/* Bounds the verifier can see (the callers' offsets are below them). */
	__u8 *l4 = data + (l4_off & 0x7f);
	coff &= 0x1f;
	__u16 *csum = (__u16 *)(l4 + coff);

	if (l4 + 8 > end || (__u8 *)(csum + 1) > end)
		return -1;
	__u64 sum = 0;
	__u8 *p = l4;

	for (int i = 0; i < FAST_SUM_WORDS; i++) {
		if (p + 4 > end)
			break;
		sum += *(__u32 *)p;
		p += 4;
	}
	if (p + 4 <= end)
		return -1;
	if (p + 2 <= end) {
		sum += *(__u16 *)p;
		p += 2;
	}
	if (p + 1 <= end)
		sum += *p;
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	__u16 over = fold32((__u32)(sum & 0xffff) + (__u32)((sum >> 16) & 0xffff));
	/* A complete checksum that happens to equal the pseudo-header sum verifies: left. */
	if (fold32(ps + over) == 0xffff)
		return 0;
	__u16 c = (__u16)~over;
	*csum = (udp && c == 0) ? 0xffff : c;
	return 0;
}

/* Whether checksum field `c` holds only the pseudo-header sum `ps` (folded, either zero):
 * what a veth peer's tx checksum offload leaves. */
static __attribute__((always_inline)) int looks_partial(__u16 c, __u32 ps)
{
	__u16 f = fold32(ps);

	return c == f || (c == 0 && f == 0xffff);
}

/* Completes `csum`'s segment if partial (qn_csum_finish); -1: leave the packet to user space. */
static __attribute__((always_inline)) int csum_finish(struct xdp_md *ctx, __u8 *data, __u8 *l4,
						      __u16 *csum, __u32 ps, int udp)
{
	/* The cheap test inline: a complete checksum almost never equals this. */
	if (!looks_partial(*csum, ps))
		return 0;
	return qn_csum_finish(ctx, (__u32)(l4 - data), (__u32)((__u8 *)csum - l4), ps, udp);
}

/* An IPv4 TCP/UDP packet the fast path may take: version 4 without options, not a
 * fragment (MF clear, offset 0; DF may be set), the frame exactly the packet (no padding,
 * nothing truncated). `frame` is the frame's length from `data`; `end` bounds the reads
 * (the frame's end in XDP; the headers' in a copy or an skb's linear part). Fills `key`,
 * `*l4` and `*tot`; returns the transport checksum's offset, or -1: not ours. */
static __attribute__((always_inline)) int parse_v4_len(__u8 *data, __u8 *l3, __u8 *end,
						       __u32 frame, struct fast_key *key,
						       __u8 **l4, __u16 *tot)
{
	if (l3 != data + 14 || l3 + 20 > end)
		return -1;
	if (l3[0] != 0x45 || (*(__u16 *)(l3 + 6) & be16(0x3fff)))
		return -1;
	*tot = be16(*(__u16 *)(l3 + 2));
	if (14 + (__u32)*tot != frame)
		return -1;
	*l4 = l3 + 20;
	key->proto = l3[9];
	int coff = l4_csum_off_len(key->proto, *l4, end, (__u32)*tot - 20);
	if (coff < 0)
		return -1;
	key->saddr = *(__u32 *)(l3 + 12);
	key->daddr = *(__u32 *)(l3 + 16);
	key->sport = *(__u16 *)*l4;
	key->dport = *(__u16 *)(*l4 + 2);
	return coff;
}

/* parse_v4_len for a frame that ends at `end` (XDP). */
static __attribute__((always_inline)) int parse_v4(__u8 *data, __u8 *l3, __u8 *end,
						   struct fast_key *key, __u8 **l4, __u16 *tot)
{
	return parse_v4_len(data, l3, end, (__u32)(end - data), key, l4, tot);
}

/* The folded sum of a 20-byte IPv4 header's words (0xffff: its checksum verifies). */
static __attribute__((always_inline)) __u16 ip4_hdr_sum(const __u8 *h)
{
	__u32 s = 0;

#pragma unroll
	for (int i = 0; i < 20; i += 2)
		s += *(__u16 *)(h + i);
	return fold32(s);
}

/* Sends the rewritten frame: its Ethernet header (`mac`: destination then source, 12
 * bytes), counted, redirected out of `egress`'s slot. */
static __attribute__((always_inline)) int fast_send(__u8 *data, const __u8 *mac, __u16 ethertype,
						    __u64 bytes, __u32 egress)
{
	__builtin_memcpy(data, mac, 12);
	*(__u16 *)(data + 12) = be16(ethertype);
	count(FAST_PACKETS, 1);
	count(FAST_BYTES, bytes);
	return bpf_redirect_map(&tx_port, egress, 0);
}

/* Returns an XDP action for a fast-path hit, or -1: not ours (the caller steers it). */
static __attribute__((always_inline)) int fast_path_v4(struct xdp_md *ctx, __u8 *data, __u8 *l3,
						  __u8 *end)
{
	struct fast_key key = {};
	struct fast_val *v;
	__u8 *l4;
	__u16 tot;
	int coff = parse_v4(data, l3, end, &key, &l4, &tot);

	if (coff < 0)
		return -1;
	__u16 *csum = (__u16 *)(l4 + coff);
	v = bpf_map_lookup_elem(&fast_v4, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return -1;
	}
	if (v->decrement_ttl && l3[8] <= 1)
		return -1;
	if (tot > v->mtu)
		return -1;
	/* A partial checksum (the pseudo-header sum, a veth peer's tx offload) is completed
	 * first; an incremental update cannot. A UDP zero (no checksum) stays as it is. */
	if ((key.proto == 6 || *csum != 0) &&
	    csum_finish(ctx, data, l4, csum, pseudo_v4(&key, tot - 20), key.proto == 17))
		return -1;
	__u16 c = *csum;
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
	fast_touch(&v->last_seen);
	return fast_send(data, v->dmac, ETH_P_IP, (__u64)(end - data), v->egress);
}

/* --- NAT64: the header changes family, so it shrinks or grows by 20
 * bytes (bpf_xdp_adjust_head). Each per-packet field follows the engine's established
 * NAT64 path (engine::nat64, outbound_fast / inbound_fast, and xlat::siit) step by step, so
 * the bytes leaving are its bytes: the transport checksum is updated in the engine's
 * order (SIIT's pseudo-header delta, then the port patch, or the other way round
 * inbound), with the RFC 768 / RFC 8200 rule for a computed UDP zero at each step. */

/* An IPv6 flow as it arrives (inside). */
struct fast_key6 {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* IPv6 -> IPv4: what the packet leaves as. */
struct fast_val64 {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;	  /* the pool port (the destination port stays) */
	__u16 siit_delta; /* IPv6 addresses -> IPv4 ones, for the transport checksum */
	__u32 egress;
	__u8 dmac[6];
	__u8 smac[6];
	__u8 decrement_ttl;
	__u8 tos_copy; /* 1: TOS = the traffic class; 0: TOS = `tos` */
	__u8 tos;
	__u8 df;  /* FAST_DF_* */
	__u16 mtu; /* the IPv4 next hop's (host order): longer packets go to user space */
	__u16 pad0;
	__u32 ident; /* the flow's next IPv4 Identification (RFC 6864), advanced here */
	__u64 last_seen;
};

/* IPv4 -> IPv6. */
struct fast_val46 {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 dport;	  /* the host's port (the source port stays) */
	__u16 siit_delta; /* IPv4 addresses -> IPv6 ones */
	__u32 egress;
	__u8 dmac[6];
	__u8 smac[6];
	__u8 decrement_ttl;
	__u8 tc_copy; /* 1: traffic class = the TOS; 0: = `tc` */
	__u8 tc;
	__u8 pad0;
	__u16 mtu_df;	/* with DF: the IPv6 next hop's MTU (host order) */
	__u16 mtu_nodf; /* without: the lowest IPv6 MTU (longer ones are fragmented) */
	__u32 pad1;
	__u64 last_seen;
};

#define FAST_DF_RFC 0	/* RFC 7915 §5.1: set above 1260 bytes */
#define FAST_DF_CLEAR 1
#define FAST_DF_SET 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* set by the loader */
	__uint(map_flags, BPF_F_NO_PREALLOC); /* see FAST_MAP_FLAGS */
	__type(key, struct fast_key6);
	__type(value, struct fast_val64);
} fast_64 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* set by the loader */
	__uint(map_flags, BPF_F_NO_PREALLOC); /* see FAST_MAP_FLAGS */
	__type(key, struct fast_key);
	__type(value, struct fast_val46);
} fast_46 SEC(".maps");

static long (*bpf_xdp_adjust_head)(struct xdp_md *ctx, int delta) = (void *)44;

/* update16 of wire::checksum, for a port patch: ~(~c + ~old + new). */
static __attribute__((always_inline)) __u16 csum_port(__u16 c, __u16 old, __u16 new, int udp)
{
	if (old == new)
		return c;
	if (udp && c == 0)
		return 0;
	c = (__u16)~fold32((__u32)(__u16)~c + (__u16)~old + new);
	return (udp && c == 0) ? 0xffff : c;
}

/* Delta::apply, or apply_udp4 for UDP (a zero stays, a computed zero is sent as ones). */
static __attribute__((always_inline)) __u16 csum_siit(__u16 c, __u16 delta, int udp)
{
	if (udp && c == 0)
		return 0;
	c = csum_apply(c, delta);
	return (udp && c == 0) ? 0xffff : c;
}

/* The sum of an IPv6 address's words as loaded (no carry lost in 32 bits). */
static __attribute__((always_inline)) __u32 sum_v6(const __u8 *a)
{
	__u32 s = 0;

#pragma unroll
	for (int i = 0; i < 16; i += 2)
		s += *(__u16 *)(a + i);
	return s;
}

/* The IPv4 Identification of a translated DF-clear packet of the flow `v` (RFC 6864:
 * unique per source, destination and protocol within a datagram's lifetime). Each flow
 * counts from a keyed random start the loader sets (kept when the entry is replaced), so
 * its IDs cannot be guessed from outside. A flow is on one CPU (RSS), so a plain increment
 * serves; two CPUs racing at worst repeat one ID. */
static __attribute__((always_inline)) __u16 next_ident(struct fast_val64 *v)
{
	__u32 id = v->ident;
	v->ident = id + 1;
	return (__u16)id;
}

/* The IPv6 pseudo-header sum of the header at `l3` for `proto` and `plen` bytes (words as
 * loaded). */
static __attribute__((always_inline)) __u32 pseudo_v6(const __u8 *l3, __u8 proto, __u16 plen)
{
	return sum_v6(l3 + 8) + sum_v6(l3 + 24) + be16((__u16)proto) + be16(plen);
}

/* An IPv6 packet the fast path may take: untagged, version 6, the frame exactly the packet
 * (no padding, nothing truncated). `frame` is the frame's length from `data`; `end` bounds
 * the reads (as parse_v4_len's). Sets `*plen` (the payload length); 0: not ours. */
static __attribute__((always_inline)) int parse_v6_len(__u8 *data, __u8 *l3, __u8 *end,
						       __u32 frame, __u16 *plen)
{
	if (l3 != data + 14 || l3 + 40 > end)
		return 0;
	if ((l3[0] >> 4) != 6)
		return 0;
	*plen = be16(*(__u16 *)(l3 + 4));
	return 14 + 40 + (__u32)*plen == frame;
}

/* parse_v6_len for a frame that ends at `end` (XDP). */
static __attribute__((always_inline)) int parse_v6(__u8 *data, __u8 *l3, __u8 *end, __u16 *plen)
{
	return parse_v6_len(data, l3, end, (__u32)(end - data), plen);
}

/* IPv6 arriving inside -> IPv4 out of the other interface. -1: not ours. */
static __attribute__((always_inline)) int fast_path_64(struct xdp_md *ctx, __u8 *data, __u8 *l3,
						  __u8 *end)
{
	struct fast_key6 key = {};
	struct fast_val64 *v;
	__u8 *l4;
	int coff;
	__u16 plen;

	if (!parse_v6(data, l3, end, &plen))
		return -1;
	l4 = l3 + 40;
	key.proto = l3[6];
	coff = l4_csum_off(key.proto, l4, end);
	if (coff < 0)
		return -1;
	__builtin_memcpy(key.saddr, l3 + 8, 16);
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	key.sport = *(__u16 *)l4;
	key.dport = *(__u16 *)(l4 + 2);
	v = bpf_map_lookup_elem(&fast_64, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return -1;
	}
	/* A hop limit of 1 or less: the engine's (an ICMP error may be owed). */
	__u8 hop = l3[7];
	if (hop <= 1)
		return -1;
	if (v->decrement_ttl)
		hop -= 1;
	__u16 total = plen + 20;
	if (total > v->mtu)
		return -1;
	__u16 *csum = (__u16 *)(l4 + coff);
	/* UDP without a checksum (illegal in IPv6: the engine drops or computes it): user
	 * space. A partial one is completed first. */
	if (key.proto == 17 && *csum == 0)
		return -1;
	if (csum_finish(ctx, data, l4, csum, pseudo_v6(l3, key.proto, plen), key.proto == 17))
		return -1;
	__u16 c = *csum;
	if (!bpf_map_lookup_elem(&tx_port, &v->egress)) {
		count(FAST_NO_PORT, 1);
		return -1;
	}
	int udp = key.proto == 17;
	__u8 tc = (__u8)((l3[0] << 4) | (l3[1] >> 4));
	__u8 tos = v->tos_copy ? tc : v->tos;
	int df = v->df == FAST_DF_SET || (v->df == FAST_DF_RFC && total > 1260);

	fast_touch(&v->last_seen);
	__u16 ident = df ? 0 : next_ident(v);
	__u32 egress = v->egress;
	__u8 mac[12];
	__builtin_memcpy(mac, v->dmac, 12);
	__u64 bytes = (__u64)(end - data) - 20;
	__u16 sport = v->sport;
	__u16 delta = v->siit_delta;
	__u32 addrs[2] = {v->saddr, v->daddr};

	/* Everything is read: move the start (20 bytes shorter) before writing anything, so
	 * that a refusal leaves the packet as it came, for user space. */
	if (bpf_xdp_adjust_head(ctx, 20))
		return -1;
	data = (__u8 *)(long)ctx->data;
	end = (__u8 *)(long)ctx->data_end;
	__u8 *h = data + 14;
	l4 = h + 20;
	csum = (__u16 *)(l4 + coff);
	if ((__u8 *)(csum + 1) > end)
		return XDP_ABORTED; /* cannot be: the same bytes were checked above */

	/* SIIT's pseudo-header change, the port. */
	c = csum_siit(c, delta, udp);
	__u16 id = be16(ident);
	*csum = csum_port(c, key.sport, sport, udp);
	*(__u16 *)l4 = sport;

	/* The IPv4 header over the last 20 bytes of the IPv6 one. */
	__u32 w0 = (0x45u << 8 | tos);
	__u16 frag = df ? be16(0x4000) : 0;
	*(__u16 *)h = be16((__u16)w0);
	*(__u16 *)(h + 2) = be16(total);
	*(__u16 *)(h + 4) = id;
	*(__u16 *)(h + 6) = frag;
	h[8] = hop;
	h[9] = key.proto;
	*(__u16 *)(h + 10) = 0;
	__builtin_memcpy(h + 12, addrs, 8);
	*(__u16 *)(h + 10) = (__u16)~ip4_hdr_sum(h);
	return fast_send(data, mac, ETH_P_IP, bytes, egress);
}

/* IPv4 arriving outside -> IPv6 out of the other interface. -1: not ours. */
static __attribute__((always_inline)) int fast_path_46(struct xdp_md *ctx, __u8 *data, __u8 *l3,
						  __u8 *end)
{
	struct fast_key key = {};
	struct fast_val46 *v;
	__u8 *l4;
	__u16 tot;
	int coff = parse_v4(data, l3, end, &key, &l4, &tot);

	if (coff < 0)
		return -1;
	v = bpf_map_lookup_elem(&fast_46, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return -1;
	}
	/* A router verifies the header checksum (SIIT drops a bad one: the engine's). */
	if (ip4_hdr_sum(l3) != 0xffff)
		return -1;
	__u8 ttl = l3[8];
	if (ttl <= 1)
		return -1;
	if (v->decrement_ttl)
		ttl -= 1;
	int df = (l3[6] & 0x40) != 0;
	__u32 len6 = (__u32)tot + 20;
	if (len6 > (df ? v->mtu_df : v->mtu_nodf))
		return -1;
	__u16 *csum = (__u16 *)(l4 + coff);
	if (key.proto == 17 && *csum == 0)
		return -1;
	if (csum_finish(ctx, data, l4, csum, pseudo_v4(&key, tot - 20), key.proto == 17))
		return -1;
	__u16 c = *csum;
	if (!bpf_map_lookup_elem(&tx_port, &v->egress)) {
		count(FAST_NO_PORT, 1);
		return -1;
	}
	int udp = key.proto == 17;
	__u8 tc = v->tc_copy ? l3[1] : v->tc;

	fast_touch(&v->last_seen);
	__u32 egress = v->egress;
	__u16 dport = v->dport;
	__u16 delta = v->siit_delta;
	__u8 mac[12];
	__u32 addrs[8];
	__builtin_memcpy(mac, v->dmac, 12);
	__builtin_memcpy(addrs, v->saddr, 32);
	__u64 bytes = (__u64)(end - data) + 20;

	/* Everything is read: grow the start by 20 bytes before writing anything, so that a
	 * refusal (no headroom) leaves the packet as it came, for user space. */
	if (bpf_xdp_adjust_head(ctx, -20))
		return -1;
	data = (__u8 *)(long)ctx->data;
	end = (__u8 *)(long)ctx->data_end;
	if (data + 54 > end)
		return XDP_ABORTED; /* cannot be: the packet only grew */
	l4 = data + 54;
	csum = (__u16 *)(l4 + coff);
	if ((__u8 *)(csum + 1) > end)
		return XDP_ABORTED;

	/* The port patch (NAT44's part), then SIIT's pseudo-header change. */
	c = csum_port(c, key.dport, dport, udp);
	*csum = csum_siit(c, delta, udp);
	*(__u16 *)(l4 + 2) = dport;

	__u8 *h = data + 14;
	/* Version 6, the traffic class, flow label 0. */
	h[0] = 0x60 | (tc >> 4);
	h[1] = (__u8)(tc << 4);
	h[2] = 0;
	h[3] = 0;
	*(__u16 *)(h + 4) = be16((__u16)(tot - 20));
	h[6] = key.proto;
	h[7] = ttl;
	__builtin_memcpy(h + 8, addrs, 32);
	return fast_send(data, mac, ETH_P_IPV6, bytes, egress);
}
