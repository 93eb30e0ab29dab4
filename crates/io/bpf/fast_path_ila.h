// SPDX-License-Identifier: MIT OR Apache-2.0
//
// fast_path_ila.h: the XDP fast path for ILA, for the mappings whose rewrite fits in XDP,
// included by xdp_steer.c after fast_path.h, whose counters, devmap, checksum helpers and
// send tail it uses.
//
// ILA is stateless: one mapping (identifier -> locator) gives two entries, one per
// interface, keyed by the whole IPv6 destination as it arrives: inside, the SIR address
// (SIR prefix | identifier) -> the ILA address (locator | identifier, the identifier as
// the engine's checksum-neutral modes rewrite it); outside, that ILA address -> the SIR
// address. User space computes both addresses with the engine's own translation
// (xlat::ila), so every checksum mode comes down to "replace the destination, then
// update the transport checksum by this delta or leave it": adj-transport carries the
// delta of the upper 64 bits (RFC 1624, TCP/UDP/ICMPv6, a UDP zero left alone and a
// computed zero sent as ones, as xlat::ila's transport_fix); no-action and the neutral
// modes leave the transport checksum as it is (the neutral modes keep the address's
// ones'-complement sum, so it stays right).
//
// The hop limit is decremented as the engine's ILA stage does. Everything else goes to
// the AF_XDP socket, for the engine: a miss, extension headers and next headers other than
// TCP/UDP/ICMPv6 (the engine walks the chain), TCP SYN/FIN/RST, a hop limit of 1 or less
// (Time Exceeded is owed), a packet longer than the egress MTU (Packet Too Big), padded
// or truncated frames, and a partial TCP/UDP checksum the program cannot complete.
//
// Layout: keep in sync with crates/io/src/afxdp/fast_path.rs (ValIla).

struct fast_val_ila {
	__u32 daddr[4]; /* the destination it leaves with */
	__u16 l4_delta; /* for the transport checksum, when `adjust` */
	__u8 adjust;	/* 1: adj-transport (update TCP/UDP/ICMPv6 checksums) */
	__u8 pad0;
	__u32 egress; /* slot in tx_port */
	__u8 dmac[6];
	__u8 smac[6];
	__u16 mtu; /* egress MTU (host order): longer packets go to user space */
	__u16 pad1;
};

struct fast_key_ila {
	__u32 daddr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* set by the loader */
	__uint(map_flags, BPF_F_NO_PREALLOC); /* see FAST_MAP_FLAGS */
	__type(key, struct fast_key_ila);
	__type(value, struct fast_val_ila);
} fast_ila SEC(".maps");

/* The transport checksum's offset in an IPv6 packet's payload of `plen` bytes (`l4`: its
 * start, `end`: the end of what can be read) for the fast path: TCP and UDP as
 * l4_csum_off_len takes them, ICMPv6 but neighbour discovery and router messages (the
 * kernel's); -1: the engine's. */
static __attribute__((always_inline)) int ila_l4_off_len(__u8 proto, __u8 *l4, __u8 *end,
							  __u32 plen)
{
	if (proto == 6 || proto == 17)
		return l4_csum_off_len(proto, l4, end, plen);
	if (proto != IPPROTO_ICMPV6 || l4 + 4 > end || plen < 4)
		return -1;
	return l4[0] >= 133 && l4[0] <= 137 ? -1 : 2;
}

/* An IPv6 packet arriving on an ILA gateway. -1: not ours (the caller steers it). */
static __attribute__((always_inline)) int fast_path_ila(struct xdp_md *ctx, __u8 *data, __u8 *l3,
						   __u8 *end)
{
	struct fast_key_ila key;
	struct fast_val_ila *v;
	__u8 *l4;
	int coff;
	__u16 plen;

	if (!parse_v6(data, l3, end, &plen))
		return -1;
	l4 = l3 + 40;
	__u8 proto = l3[6];
	coff = ila_l4_off_len(proto, l4, end, plen);
	if (coff < 0)
		return -1;
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	v = bpf_map_lookup_elem(&fast_ila, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return -1;
	}
	/* Time Exceeded and Packet Too Big are the engine's to send. */
	if (l3[7] <= 1)
		return -1;
	if ((__u32)plen + 40 > v->mtu)
		return -1;
	__u16 *csum = (__u16 *)(l4 + coff);
	/* A partial TCP/UDP checksum is completed first, as user space would on receive
	 * (io::csum::complete_if_partial: TCP and UDP only; a UDP zero is no checksum). */
	if ((proto == 6 || (proto == 17 && *csum != 0)) &&
	    csum_finish(ctx, data, l4, csum, pseudo_v6(l3, proto, plen), proto == 17))
		return -1;
	if (!bpf_map_lookup_elem(&tx_port, &v->egress)) {
		count(FAST_NO_PORT, 1);
		return -1;
	}
	__builtin_memcpy(l3 + 24, v->daddr, 16);
	l3[7] -= 1;
	if (v->adjust) {
		__u16 c = *csum;

		if (proto != 17 || c != 0) {
			c = csum_apply(c, v->l4_delta);
			*csum = (proto == 17 && c == 0) ? 0xffff : c;
		}
	}
	return fast_send(data, v->dmac, ETH_P_IPV6, (__u64)(end - data), v->egress);
}
