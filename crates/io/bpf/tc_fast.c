// SPDX-License-Identifier: MIT OR Apache-2.0
//
// tc_fast: the fast path for established flows on the AF_PACKET backend, at the tc
// ingress hook (issue 15 items 2 and 6). The same maps and entries as the XDP fast path
// (fast_path.h: user space installs them the same way, crates/io/src/afxdp/fast_path.rs);
// what differs is where it runs:
//
// - An skb, not an XDP buffer: a GSO super-packet (a veth peer's TSO, 64 KB of TCP) is
//   rewritten once and leaves as it is, segmented (or not) by whoever transmits it. With
//   XDP on a veth the peer's TSO is off [fixed] and every segment pays the whole path.
// - Checksums keep the skb's state: a partial transport checksum (CHECKSUM_PARTIAL, the
//   pseudo-header sum a veth peer's tx offload leaves) stays partial, with the addresses'
//   part updated and the ports' left, exactly what the kernel and quicknat's own AF_PACKET
//   path (virtio-net header, NEEDS_CSUM) do. bpf_l4_csum_replace knows which case it is
//   in; the program does not need to.
//
// AF_PACKET sockets are taps: the kernel hands them every frame *before* the tc hook
// (__netif_receive_skb_core: ptype_all, then tcx ingress). So the decision is taken at
// the tap, by `tc_fast_claim`, a socket filter on each of quicknat's receive sockets: a
// frame of an offloaded flow is kept from the socket (return 0) and its entry handed to
// the tc program through a per-CPU slot. `tc_fast` then runs on the same CPU for the same
// skb (the tap and tc run back to back in one softirq), checks the slot is for this
// packet, rewrites it and redirects it out of the other interface. A frame the filter
// did not claim goes on as before: to the socket, and through tc untouched to the
// kernel-bypass ingress table that drops it. One lookup per packet, and no window in
// which an entry removed or added between the two programs could lose or double a packet.
//
// NAT64 (issue 15, "the tc hook for NAT64"): the same for `fast_64` (IPv6 arriving inside)
// and `fast_46` (IPv4 arriving outside), the family changed by bpf_skb_change_proto (which
// moves the 20 bytes the header shrinks or grows by, after the Ethernet header). The
// transport checksum takes the engine's steps in the engine's order through
// bpf_l4_csum_replace: SIIT's pseudo-header delta (flagged pseudo: the only part a partial
// checksum gets) and the port patch (which a partial one does not), a UDP zero left and a
// computed zero sent as ones at each step, as fast_path.h's XDP twins do. A TCP GSO
// super-packet (offloads on at the ends) is translated whole when each of its segments
// fits and, IPv6 -> IPv4, gets DF (a DF-clear segment's Identification comes from its own
// bytes): bpf_skb_change_proto switches its GSO type and, IPv4 -> IPv6, cuts gso_size by
// 20, as the engine's GSO path does; its partial checksum gets SIIT's pseudo-header delta,
// which turns the IPv6 pseudo-header sum into the IPv4 one. A DF-clear IPv6 -> IPv4
// packet whose checksum is only the pseudo-header sum (a local sender's tx offload) is
// the engine's: its Identification is derived from the completed checksum.
//
// SIIT and CLAT use the NAT64 path as it is (their flows' entries, ports unchanged). ILA:
// the filter looks an IPv6 TCP/UDP/ICMPv6 destination up in `fast_ila` (fast_path_ila.h's
// checks); the tc program replaces it, decrements the hop limit and, under adj-transport,
// gives the transport checksum the mapping's delta by bpf_l4_csum_replace (pseudo: a
// partial checksum gets it too). ILA keeps sizes: a TCP super-packet goes through whole.

#include "common.h"

#include "fast_path.h"
#include "fast_path_ila.h"

static long (*bpf_skb_load_bytes)(const void *skb, __u32 off, void *to, __u32 len) = (void *)26;
static long (*bpf_l4_csum_replace)(struct __sk_buff *skb, __u32 off, __u64 from, __u64 to,
				   __u64 flags) = (void *)11;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static long (*bpf_skb_pull_data)(struct __sk_buff *skb, __u32 len) = (void *)39;
static long (*bpf_skb_change_proto)(struct __sk_buff *skb, __u16 proto, __u64 flags) = (void *)31;

static long (*bpf_csum_diff)(void *from, __u32 from_size, void *to, __u32 to_size,
			     __u32 seed) = (void *)28;
static long (*bpf_csum_update)(struct __sk_buff *skb, __u32 csum) = (void *)40;

#define BPF_F_PSEUDO_HDR (1ull << 4)
#define BPF_F_IPV6 (1ull << 7) /* Linux >= 6.16: see tc_ila */
#define EINVAL 22
#define BPF_F_MARK_MANGLED_0 (1ull << 5)
#define PACKET_OTHERHOST 3
#define TC_ACT_OK 0 /* bpf_redirect returns TC_ACT_REDIRECT itself */

/* A frame's headers as the filter reads them: Ethernet, IPv6 or IPv4 without options,
 * TCP (the longer transport header). IPv4 frames load only theirs: 20 bytes fewer to copy
 * per packet on the NAT44 path. */
#define CLAIM_HDR (14 + 40 + 20)
#define CLAIM_HDR4 (14 + 20 + 20)

/* What the filter kept: `claim.armed`. */
#define CLAIM_V4 1
#define CLAIM_64 2
#define CLAIM_46 3
#define CLAIM_ILA 4

/* What the filter hands to tc_fast for the skb it has just kept from the socket. */
struct claim {
	__u32 armed;   /* 0, or the CLAIM_* kind of that skb */
	__u32 ifindex; /* the egress interface (tx_port's slot, resolved) */
	struct fast_key key; /* V4 and 46 */
	struct fast_val val; /* V4 */
	struct fast_key6 key6;
	struct fast_val64 val64;
	struct fast_val46 val46;
	struct fast_key_ila key_ila;
	struct fast_val_ila val_ila;
	__u8 ila_proto; /* the claimed packet's next header (TCP, UDP or ICMPv6) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct claim);
} tc_claim SEC(".maps");

/* Whether an IPv4 packet of `tot` bytes with `hdr` bytes of IPv4 and transport headers
 * leaves within `mtu` (`gso_size`: a super-packet's segment payload, 0 for one packet): a
 * super-packet is judged by its segments. */
static __attribute__((always_inline)) int fits(__u32 tot, __u32 gso_size, __u32 hdr, __u16 mtu)
{
	return gso_size ? gso_size + hdr <= mtu : tot <= mtu;
}

/* The slot for the skb being claimed (on this CPU), and the egress ifindex of `egress`'s
 * tx_port slot; NULL: not claimed (counted when the port is missing). */
static __attribute__((always_inline)) struct claim *claim_slot(__u32 *egress, __u32 *ifindex)
{
	__u32 zero = 0;
	struct bpf_devmap_val *port = bpf_map_lookup_elem(&tx_port, egress);

	if (!port) {
		count(FAST_NO_PORT, 1);
		return 0;
	}
	*ifindex = port->ifindex;
	return bpf_map_lookup_elem(&tc_claim, &zero);
}

/* The slot's last words for a claimed skb (its key and value are in): kept from the
 * socket (0), the entry's last-seen stamped. */
static __attribute__((always_inline)) int claimed(struct claim *c, __u32 kind, __u32 ifindex,
						  __u64 *last_seen)
{
	c->ifindex = ifindex;
	c->armed = kind;
	fast_touch(last_seen);
	return 0;
}

/* Whether the IPv4 packet at `l3` (transport header at `l4`) is the one of `k`. */
static __attribute__((always_inline)) int same_v4(__u8 *l3, __u8 *l4, struct fast_key *k)
{
	return *(__u32 *)(l3 + 12) == k->saddr && *(__u32 *)(l3 + 16) == k->daddr &&
	       *(__u16 *)l4 == k->sport && *(__u16 *)(l4 + 2) == k->dport && l3[9] == k->proto;
}

/* NAT44: an IPv4 frame (`buf`: its headers; `k`, `tot`: as parse_v4_len read them;
 * `len`: the frame's length). */
static __attribute__((always_inline)) int claim_v4(struct __sk_buff *skb, __u8 *buf,
						   struct fast_key *k, __u16 tot, __u32 len)
{
	__u32 ifindex;
	struct fast_val *v = bpf_map_lookup_elem(&fast_v4, k);
	if (!v) {
		count(FAST_MISS, 1);
		return len;
	}
	if (v->decrement_ttl && buf[14 + 8] <= 1)
		return len;
	__u32 hdr = 20 + (k->proto == 6 ? (__u32)(buf[14 + 20 + 12] >> 4) * 4 : 8);
	if (!fits(tot, skb->gso_size, hdr, v->mtu))
		return len;
	struct claim *c = claim_slot(&v->egress, &ifindex);
	if (!c)
		return len;
	c->key = *k;
	__builtin_memcpy(&c->val, v, sizeof(c->val));
	return claimed(c, CLAIM_V4, ifindex, &v->last_seen);
}

/* NAT64, IPv4 -> IPv6: an IPv4 frame arriving outside (fast_path_46's checks; the
 * arguments as claim_v4's, and the transport header at `l4`, its checksum `coff` in). */
static __attribute__((always_inline)) int claim_46(struct __sk_buff *skb, __u8 *buf,
						   struct fast_key *k, __u8 *l4, int coff, __u16 tot,
						   __u32 len)
{
	__u32 ifindex;
	__u32 gso = skb->gso_size;

	/* A super-packet: TCP only (bpf_skb_change_proto takes no other GSO). */
	if (gso && k->proto != 6)
		return len;
	struct fast_val46 *v = bpf_map_lookup_elem(&fast_46, k);
	if (!v) {
		count(FAST_MISS, 1);
		return len;
	}
	__u8 *l3 = buf + 14;
	/* A router verifies the header checksum (SIIT drops a bad one: the engine's). */
	if (ip4_hdr_sum(l3) != 0xffff || l3[8] <= 1)
		return len;
	int df = (l3[6] & 0x40) != 0;
	/* The IPv6 packet's length; a super-packet's by its segments: bpf_skb_change_proto cuts
	 * gso_size by the 20 bytes the header grows, so each IPv6 segment is the size its IPv4
	 * one was (the engine's GSO path does the same); one that would not fit is the
	 * engine's (it cuts finer). */
	__u32 out = gso ? gso + 20 + (__u32)(l4[12] >> 4) * 4 : (__u32)tot + 20;
	if (out > (df ? v->mtu_df : v->mtu_nodf))
		return len;
	if (k->proto == 17 && *(__u16 *)(l4 + (coff & 0x1f)) == 0)
		return len;
	struct claim *c = claim_slot(&v->egress, &ifindex);
	if (!c)
		return len;
	c->key = *k;
	__builtin_memcpy(&c->val46, v, sizeof(c->val46));
	return claimed(c, CLAIM_46, ifindex, &v->last_seen);
}

/* NAT64, IPv6 -> IPv4: an IPv6 frame arriving inside (fast_path_64's checks). */
static __attribute__((always_inline)) int claim_64(struct __sk_buff *skb, __u8 *buf, __u32 n,
						   __u32 len)
{
	struct fast_key6 key = {};
	__u8 *l3 = buf + 14;
	__u8 *end = buf + n;
	__u32 ifindex;
	__u32 gso = skb->gso_size;
	__u16 plen;

	if (!parse_v6_len(buf, l3, end, len, &plen))
		return len;
	__u8 *l4 = l3 + 40;
	key.proto = l3[6];
	int coff = l4_csum_off_len(key.proto, l4, end, plen);
	if (coff < 0)
		return len;
	__builtin_memcpy(key.saddr, l3 + 8, 16);
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	key.sport = *(__u16 *)l4;
	key.dport = *(__u16 *)(l4 + 2);
	struct fast_val64 *v = bpf_map_lookup_elem(&fast_64, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return len;
	}
	/* A hop limit of 1 or less: the engine's (an ICMP error may be owed). */
	if (l3[7] <= 1)
		return len;
	/* A super-packet (TCP only: bpf_skb_change_proto takes no other GSO) is judged by its
	 * segments, as the engine's GSO path judges it: each must fit the IPv4 MTU and get
	 * DF, since a DF-clear segment's Identification comes from its own bytes. */
	if (gso && key.proto != 6)
		return len;
	__u32 total = gso ? gso + (__u32)(l4[12] >> 4) * 4 + 20 : (__u32)plen + 20;
	if (total > v->mtu)
		return len;
	__u16 c16 = *(__u16 *)(l4 + (coff & 0x1f));
	if (key.proto == 17 && c16 == 0)
		return len;
	int df = v->df == FAST_DF_SET || (v->df == FAST_DF_RFC && total > 1260);
	if (gso && !df)
		return len;
	if (!df && looks_partial(c16, pseudo_v6(l3, key.proto, plen)))
		return len;
	struct claim *c = claim_slot(&v->egress, &ifindex);
	if (!c)
		return len;
	c->key6 = key;
	__builtin_memcpy(&c->val64, v, sizeof(c->val64));
	return claimed(c, CLAIM_64, ifindex, &v->last_seen);
}

/* ILA: an IPv6 frame whose destination is an offloaded mapping's address (fast_path_ila's
 * checks: TCP, UDP or ICMPv6 right after the IPv6 header, never SYN/FIN/RST, hop limit
 * over 1, within the egress MTU; a TCP super-packet by its segments: ILA keeps sizes). A
 * partial checksum stays partial: the tc program updates it as it is. */
static __attribute__((always_inline)) int claim_ila(struct __sk_buff *skb, __u8 *buf, __u32 n,
						    __u32 len)
{
	struct fast_key_ila key;
	__u8 *l3 = buf + 14;
	__u8 *end = buf + n;
	__u32 ifindex;
	__u32 gso = skb->gso_size;
	__u16 plen;
	int coff;

	if (!parse_v6_len(buf, l3, end, len, &plen))
		return len;
	__u8 *l4 = l3 + 40;
	__u8 proto = l3[6];
	coff = ila_l4_off_len(proto, l4, end, plen);
	if (coff < 0)
		return len;
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	struct fast_val_ila *v = bpf_map_lookup_elem(&fast_ila, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return len;
	}
	/* Time Exceeded and Packet Too Big are the engine's to send. */
	if (l3[7] <= 1)
		return len;
	if (gso && proto != 6)
		return len;
	__u32 hdr = 40 + (proto == 6 ? (__u32)(l4[12] >> 4) * 4 : 8);
	if (!fits((__u32)plen + 40, gso, hdr, v->mtu))
		return len;
	struct claim *c = claim_slot(&v->egress, &ifindex);
	if (!c)
		return len;
	c->key_ila = key;
	c->ila_proto = proto;
	__builtin_memcpy(&c->val_ila, v, sizeof(c->val_ila));
	/* A mapping has no last-seen stamp: it lives as long as the mapping. */
	c->ifindex = ifindex;
	c->armed = CLAIM_ILA;
	return 0;
}

SEC("socket")
int tc_fast_claim(struct __sk_buff *skb)
{
	__u32 len = skb->len;
	__u32 zero = 0;
	__u32 *cfg = bpf_map_lookup_elem(&config, &zero);
	/* The frame lands 2 bytes in, so the IP header's words are aligned (the verifier
	 * refuses misaligned stack reads). */
	__u64 raw[(CLAIM_HDR + 2 + 7) / 8] = {};
	__u8 *buf = (__u8 *)raw + 2;

	if (!cfg || !(*cfg & (QN_CFG_FAST_V4 | QN_CFG_FAST_64 | QN_CFG_FAST_46 | QN_CFG_FAST_ILA)))
		return len;
	/* Another host's frame (user space counts it, not_for_us), a tag outside the frame:
	 * the socket's. */
	if (skb->pkt_type == PACKET_OTHERHOST || skb->vlan_present)
		return len;
	if (len < 14 + 20 + 8)
		return len;
	__u32 want = skb->protocol == be16(ETH_P_IPV6) ? CLAIM_HDR : CLAIM_HDR4;
	__u32 n = len < want ? len : want;
	if (n > CLAIM_HDR || bpf_skb_load_bytes(skb, 0, buf, n) < 0)
		return len;
	__u16 eth = *(__u16 *)(buf + 12);
	if (eth == be16(ETH_P_IP) && (*cfg & (QN_CFG_FAST_V4 | QN_CFG_FAST_46))) {
		struct fast_key key = {};
		__u8 *l4;
		__u16 tot;
		int coff = parse_v4_len(buf, buf + 14, buf + n, len, &key, &l4, &tot);

		if (coff < 0)
			return len;
		if (*cfg & QN_CFG_FAST_V4)
			return claim_v4(skb, buf, &key, tot, len);
		return claim_46(skb, buf, &key, l4, coff, tot, len);
	} else if (eth == be16(ETH_P_IPV6) && (*cfg & QN_CFG_FAST_64)) {
		return claim_64(skb, buf, n, len);
	} else if (eth == be16(ETH_P_IPV6) && (*cfg & QN_CFG_FAST_ILA)) {
		return claim_ila(skb, buf, n, len);
	}
	return len;
}

/* The claimed skb's data, its first `hl` bytes pulled into the linear part and at least
 * `min` of them (a constant: the bound the verifier sees) below `*end`; NULL: they cannot
 * be. */
static __attribute__((always_inline)) __u8 *headers(struct __sk_buff *skb, __u32 hl, __u32 min,
						    __u8 **end)
{
	if ((__u8 *)(long)skb->data + hl > (__u8 *)(long)skb->data_end &&
	    bpf_skb_pull_data(skb, hl) != 0)
		return 0;
	__u8 *data = (__u8 *)(long)skb->data;
	*end = (__u8 *)(long)skb->data_end;
	if (data + hl > *end || data + min > *end)
		return 0;
	return data;
}

/* Counted and redirected out of `ifindex`. */
static __attribute__((always_inline)) int tc_send(struct __sk_buff *skb, __u32 ifindex)
{
	count(FAST_PACKETS, 1);
	count(FAST_BYTES, skb->len);
	return bpf_redirect(ifindex, 0);
}

/* A translated frame (NAT64): its Ethernet header (`mac`: destination then source, the
 * new `ethertype`) at `data`, then tc_send. */
static __attribute__((always_inline)) int tc_send_as(struct __sk_buff *skb, __u8 *data,
						     const __u8 *mac, __u16 ethertype, __u32 ifindex)
{
	__builtin_memcpy(data, mac, 12);
	*(__u16 *)(data + 12) = be16(ethertype);
	return tc_send(skb, ifindex);
}

/* NAT44: the rewrite in place. */
static __attribute__((always_inline)) int tc_v4(struct __sk_buff *skb, struct claim *c)
{
	__u32 hl = c->key.proto == 6 ? 14 + 20 + 20 : 14 + 20 + 8;

	__u8 *end;
	__u8 *data = headers(skb, hl, 14 + 20 + 8, &end);
	if (!data)
		return -1;
	__u8 *l3 = data + 14;
	__u8 *l4 = l3 + 20;

	/* The slot is this skb's: the filter ran on it just now, on this CPU. */
	if (!same_v4(l3, l4, &c->key))
		return -1;
	struct fast_val *v = &c->val;
	__u32 off = 14 + 20 + (c->key.proto == 6 ? 16 : 6);
	__u64 mm = c->key.proto == 17 ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 saddr = v->saddr, daddr = v->daddr, ifindex = c->ifindex;
	__u16 sport = v->sport, dport = v->dport;
	struct fast_key k = c->key;

	/* The headers, in place (the IPv4 header's checksum is always complete). */
	*(__u32 *)(l3 + 12) = saddr;
	*(__u32 *)(l3 + 16) = daddr;
	if (v->decrement_ttl)
		l3[8] -= 1;
	*(__u16 *)(l3 + 10) = csum_apply(*(__u16 *)(l3 + 10), v->ip_delta);
	*(__u16 *)l4 = sport;
	*(__u16 *)(l4 + 2) = dport;
	__builtin_memcpy(data, v->dmac, 6);
	__builtin_memcpy(data + 6, v->smac, 6);
	/* The transport checksum, field by field (RFC 1624 eqn 3 each; a UDP zero stays, a
	 * computed zero is sent as ones), or only the addresses' part when it is partial. */
	if (k.saddr != saddr)
		bpf_l4_csum_replace(skb, off, k.saddr, saddr, BPF_F_PSEUDO_HDR | mm | 4);
	if (k.daddr != daddr)
		bpf_l4_csum_replace(skb, off, k.daddr, daddr, BPF_F_PSEUDO_HDR | mm | 4);
	if (k.sport != sport)
		bpf_l4_csum_replace(skb, off, k.sport, sport, mm | 2);
	if (k.dport != dport)
		bpf_l4_csum_replace(skb, off, k.dport, dport, mm | 2);
	return tc_send(skb, ifindex);
}

/* NAT64, IPv6 -> IPv4 (fast_path_64's translation, step for step). */
static __attribute__((always_inline)) int tc_64(struct __sk_buff *skb, struct claim *c)
{
	int udp = c->key6.proto == 17;
	__u32 coff = udp ? 6 : 16;
	__u32 off = 14 + 40 + coff;

	/* The transport header whole (a UDP one is 8 bytes: the frame may end after it). */
	__u8 *end;
	__u8 *data = headers(skb, 14 + 40 + (udp ? 8 : 20), 14 + 40 + 8, &end);
	if (!data)
		return -1;
	__u8 *l3 = data + 14;
	__u8 *l4 = l3 + 40;
	/* The slot is this skb's. */
	__u32 diff = l3[6] ^ c->key6.proto;
#pragma unroll
	for (int i = 0; i < 4; i++)
		diff |= (*(__u32 *)(l3 + 8 + 4 * i) ^ c->key6.saddr[i]) |
			(*(__u32 *)(l3 + 24 + 4 * i) ^ c->key6.daddr[i]);
	diff |= (*(__u16 *)l4 ^ c->key6.sport) | (*(__u16 *)(l4 + 2) ^ c->key6.dport);
	if (diff)
		return -1;
	struct fast_val64 *v = &c->val64;
	__u8 hop = l3[7];
	if (v->decrement_ttl)
		hop -= 1;
	__u16 total = be16(*(__u16 *)(l3 + 4)) + 20;
	__u8 tclass = (__u8)((l3[0] << 4) | (l3[1] >> 4));
	__u8 tos = v->tos_copy ? tclass : v->tos;
	int df = v->df == FAST_DF_SET || (v->df == FAST_DF_RFC && total > 1260);
	__u64 mm = udp ? BPF_F_MARK_MANGLED_0 : 0;
	__u16 old_sport = c->key6.sport, sport = v->sport;
	__u8 proto = c->key6.proto;
	__u32 ifindex = c->ifindex;
	__u32 addrs[2] = {v->saddr, v->daddr};
	__u8 mac[12];
	__builtin_memcpy(mac, v->dmac, 12);

	/* SIIT's pseudo-header change (all a partial checksum gets), the ID from the segment
	 * as it is then, the port. */
	if (bpf_l4_csum_replace(skb, off, 0, v->siit_delta, BPF_F_PSEUDO_HDR | mm) < 0)
		return -1;
	__u16 id = 0;
	if (!df) {
		__u8 seg[32] = {};
		__u32 l4len = (__u32)total - 20;
		/* Masked: a bound the verifier sees (the helper takes no negative length). */
		__u32 m = (l4len < 32 ? l4len : 32) & 0x3f;
		if (m < 8 || m > 32 || bpf_skb_load_bytes(skb, 14 + 40, seg, m) < 0)
			return -1;
		__u16 now;
		__builtin_memcpy(&now, seg + coff, 2);
		id = be16(derived_ident(seg, seg + m, coff, now));
	}
	if (old_sport != sport &&
	    bpf_l4_csum_replace(skb, off, old_sport, sport, mm | 2) < 0)
		return -1;
	if (bpf_skb_change_proto(skb, be16(ETH_P_IP), 0) < 0)
		return -1;
	data = (__u8 *)(long)skb->data;
	end = (__u8 *)(long)skb->data_end;
	if (data + 14 + 20 + 4 > end)
		return -1;
	__u8 *h = data + 14;
	*(__u16 *)(h + 20) = sport;
	/* The IPv4 header over the last 20 bytes of the IPv6 one. */
	*(__u16 *)h = be16((__u16)(0x45u << 8 | tos));
	*(__u16 *)(h + 2) = be16(total);
	*(__u16 *)(h + 4) = id;
	*(__u16 *)(h + 6) = df ? be16(0x4000) : 0;
	h[8] = hop;
	h[9] = proto;
	*(__u16 *)(h + 10) = 0;
	__builtin_memcpy(h + 12, addrs, 8);
	*(__u16 *)(h + 10) = (__u16)~ip4_hdr_sum(h);
	return tc_send_as(skb, data, mac, ETH_P_IP, ifindex);
}

/* NAT64, IPv4 -> IPv6 (fast_path_46's translation, step for step). */
static __attribute__((always_inline)) int tc_46(struct __sk_buff *skb, struct claim *c)
{
	int udp = c->key.proto == 17;
	__u32 off = 14 + 20 + (udp ? 6 : 16);

	__u8 *end;
	__u8 *data = headers(skb, 14 + 20 + (udp ? 8 : 20), 14 + 20 + 8, &end);
	if (!data)
		return -1;
	__u8 *l3 = data + 14;
	__u8 *l4 = l3 + 20;
	if (!same_v4(l3, l4, &c->key))
		return -1;
	struct fast_val46 *v = &c->val46;
	__u8 ttl = l3[8];
	if (v->decrement_ttl)
		ttl -= 1;
	__u16 tot = be16(*(__u16 *)(l3 + 2));
	__u8 tclass = v->tc_copy ? l3[1] : v->tc;
	__u64 mm = udp ? BPF_F_MARK_MANGLED_0 : 0;
	__u16 old_dport = c->key.dport, dport = v->dport;
	__u8 proto = c->key.proto;
	__u32 ifindex = c->ifindex;
	__u32 addrs[8];
	__u8 mac[12];
	__builtin_memcpy(addrs, v->saddr, 32);
	__builtin_memcpy(mac, v->dmac, 12);

	/* The port patch (NAT44's part), then SIIT's pseudo-header change. */
	if (old_dport != dport &&
	    bpf_l4_csum_replace(skb, off, old_dport, dport, mm | 2) < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, off, 0, v->siit_delta, BPF_F_PSEUDO_HDR | mm) < 0)
		return -1;
	if (bpf_skb_change_proto(skb, be16(ETH_P_IPV6), 0) < 0)
		return -1;
	data = (__u8 *)(long)skb->data;
	end = (__u8 *)(long)skb->data_end;
	if (data + 14 + 40 + 4 > end)
		return -1;
	__u8 *h = data + 14;
	*(__u16 *)(h + 40 + 2) = dport;
	/* Version 6, the traffic class, flow label 0. */
	h[0] = 0x60 | (tclass >> 4);
	h[1] = (__u8)(tclass << 4);
	h[2] = 0;
	h[3] = 0;
	*(__u16 *)(h + 4) = be16((__u16)(tot - 20));
	h[6] = proto;
	h[7] = ttl;
	__builtin_memcpy(h + 8, addrs, 32);
	return tc_send_as(skb, data, mac, ETH_P_IPV6, ifindex);
}

/* ILA: the destination replaced, the hop limit decremented, the transport checksum
 * updated by the mapping's delta (adj-transport; a UDP zero left, a computed zero sent as
 * ones; a partial checksum gets it as its pseudo-header part) or left (the other modes). */
static __attribute__((always_inline)) int tc_ila(struct __sk_buff *skb, struct claim *c)
{
	__u8 proto = c->ila_proto;
	__u32 coff = proto == 6 ? 16 : proto == 17 ? 6 : 2;

	__u8 *end;
	__u8 *data = headers(skb, 14 + 40 + (proto == 6 ? 20 : proto == 17 ? 8 : 4), 14 + 40 + 4,
			     &end);
	if (!data)
		return -1;
	__u8 *l3 = data + 14;
	/* The slot is this skb's. */
	__u32 diff = l3[6] ^ proto;
#pragma unroll
	for (int i = 0; i < 4; i++)
		diff |= *(__u32 *)(l3 + 24 + 4 * i) ^ c->key_ila.daddr[i];
	if (diff)
		return -1;
	struct fast_val_ila *v = &c->val_ila;
	__u32 ifindex = c->ifindex;
	__u16 delta = v->l4_delta;
	/* A UDP zero (no checksum) takes no adjustment. */
	__u8 *cs = l3 + 40 + coff;
	if (cs + 2 > end)
		return -1;
	int adjust = v->adjust && !(proto == 17 && *(__u16 *)cs == 0);
	/* The words of the IPv6 header that change: length, next header and hop limit; the
	 * destination. */
	__u32 before[5], after[5];
	__builtin_memcpy(before, l3 + 4, 4);
	__builtin_memcpy(&before[1], l3 + 24, 16);

	__builtin_memcpy(l3 + 24, v->daddr, 16);
	l3[7] -= 1;
	__builtin_memcpy(data, v->dmac, 6);
	__builtin_memcpy(data + 6, v->smac, 6);
	__builtin_memcpy(after, l3 + 4, 4);
	__builtin_memcpy(&after[1], l3 + 24, 16);
	/* A receive checksum (CHECKSUM_COMPLETE, a NIC's) covers the IPv6 header and payload,
	 * and a veth or tunnel on the way out hands it on to be checked: it takes the header's
	 * change, which the transport checksum's opposite change cancels for the destination
	 * when it is adjusted (then only the hop limit's word is left). BPF_F_IPV6 keeps the
	 * helper from also moving it by the pseudo-header delta, which is right for IPv4 only;
	 * a kernel before 6.16 refuses the flag and moves it, and the delta is put back. */
	__u32 moved = 0;
	if (adjust) {
		__u64 f = BPF_F_PSEUDO_HDR | (proto == 17 ? BPF_F_MARK_MANGLED_0 : 0);
		long r = bpf_l4_csum_replace(skb, 14 + 40 + coff, 0, delta, f | BPF_F_IPV6);
		if (r == -EINVAL) {
			r = bpf_l4_csum_replace(skb, 14 + 40 + coff, 0, delta, f);
			moved = delta;
		}
		if (r < 0)
			return -1;
	}
	long d = adjust ? bpf_csum_diff(before, 4, after, 4, moved)
			: bpf_csum_diff(before, 20, after, 20, 0);
	/* Only a CHECKSUM_COMPLETE skb takes it (the helper refuses the others). */
	if (d >= 0)
		bpf_csum_update(skb, (__u32)d);
	return tc_send(skb, ifindex);
}

SEC("classifier")
int tc_fast(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct claim *c = bpf_map_lookup_elem(&tc_claim, &zero);

	if (!c || !c->armed)
		return TC_ACT_OK;
	__u32 kind = c->armed;
	c->armed = 0;
	int r = kind == CLAIM_64    ? tc_64(skb, c)
		: kind == CLAIM_46  ? tc_46(skb, c)
		: kind == CLAIM_ILA ? tc_ila(skb, c)
				    : tc_v4(skb, c);
	if (r >= 0)
		return r;
	/* Kept from the socket and not forwarded here: the kernel path (the kernel-bypass
	 * table drops it). Counted; never seen in tests. */
	count(FAST_LOST, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
