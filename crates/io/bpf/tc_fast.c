// SPDX-License-Identifier: MIT OR Apache-2.0
//
// tc_fast: the fast path for established flows on the AF_PACKET backend, at the tc
// ingress hook. The same maps and entries as the XDP fast path
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
// AF_PACKET: with the fast path on, quicknat's receive sockets are bound to the IP version
// the mode translates on each interface (ETH_P_IP or ETH_P_IPV6), not ETH_P_ALL, so the
// kernel hands them a frame *after* the tc hook (__netif_receive_skb_core: ptype_all taps,
// tcx ingress, netfilter ingress, then the protocol's handlers: ip_rcv and the socket). So
// this one program decides every frame, with one parse and one lookup:
//
// - an offloaded flow's packet is rewritten and redirected out of the other interface: the
//   socket never sees it;
// - anything else goes on (TC_ACT_OK) to the socket, for the engine. The kernel bypass
//   (QN_CFG_BYPASS, `kernel_bypass` in the configuration) is here too, in place of the
//   nftables ingress table that would drop the frame before a protocol-bound socket saw
//   it: a transit frame of the translated family is marked PACKET_OTHERHOST, which
//   ip_rcv / ipv6_rcv drop first thing (before they would clone the shared skb), while
//   the socket still gets it. User space reads such a frame as its own when its
//   destination MAC is the interface's (io::afpacket::PacketPort). The frames the host
//   keeps are those the nftables table kept: its own addresses (local.h), broadcast,
//   multicast and link-local destinations, neighbour discovery; other protocols (ARP)
//   never reach a protocol-bound socket at all.
//
// A frame is checked and read in full before the first byte changes, so a refusal leaves
// it as it came, for the engine. A helper failing after that (it never has: the skb was
// made writable before the program runs) drops the frame and counts it (FAST_LOST).
//
// NAT64: the same for `fast_64` (IPv6 arriving inside)
// and `fast_46` (IPv4 arriving outside), the family changed by bpf_skb_change_proto (which
// moves the 20 bytes the header shrinks or grows by, after the Ethernet header). The
// transport checksum takes the engine's steps in the engine's order through
// bpf_l4_csum_replace: SIIT's pseudo-header delta (flagged pseudo: the only part a partial
// checksum gets) and the port patch (which a partial one does not), a UDP zero left and a
// computed zero sent as ones at each step, as fast_path.h's XDP twins do. A TCP GSO
// super-packet (offloads on at the ends) is translated whole when each of its segments
// fits and, IPv6 -> IPv4, gets DF (DF-clear segments would each need an Identification of
// the flow's counter): bpf_skb_change_proto switches its GSO type and, IPv4 -> IPv6, cuts
// gso_size by 20, as the engine's GSO path does; its partial checksum gets SIIT's
// pseudo-header delta, which turns the IPv6 pseudo-header sum into the IPv4 one. A
// DF-clear IPv6 -> IPv4 packet takes the next Identification of its flow's counter
// (`next_ident`).
//
// SIIT and CLAT use the NAT64 path as it is (their flows' entries, ports unchanged). ILA:
// the program looks an IPv6 TCP/UDP/ICMPv6 destination up in `fast_ila` (fast_path_ila.h's
// checks), replaces it, decrements the hop limit and, under adj-transport,
// gives the transport checksum the mapping's delta by bpf_l4_csum_replace (pseudo: a
// partial checksum gets it too). ILA keeps sizes: a TCP super-packet goes through whole.


#include "common.h"

#include "fast_path.h"
#include "fast_path_ila.h"
#include "local.h"

static long (*bpf_skb_load_bytes)(const void *skb, __u32 off, void *to, __u32 len) = (void *)26;
static long (*bpf_l4_csum_replace)(struct __sk_buff *skb, __u32 off, __u64 from, __u64 to,
				   __u64 flags) = (void *)11;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static long (*bpf_skb_pull_data)(struct __sk_buff *skb, __u32 len) = (void *)39;
static long (*bpf_skb_change_proto)(struct __sk_buff *skb, __u16 proto, __u64 flags) = (void *)31;
static long (*bpf_skb_change_type)(struct __sk_buff *skb, __u32 type) = (void *)32;

static long (*bpf_csum_diff)(void *from, __u32 from_size, void *to, __u32 to_size,
			     __u32 seed) = (void *)28;
static long (*bpf_csum_update)(struct __sk_buff *skb, __u32 csum) = (void *)40;

#define BPF_F_PSEUDO_HDR (1ull << 4)
#define BPF_F_IPV6 (1ull << 7) /* Linux >= 6.16: see tc_ila */
#define EINVAL 22
#define BPF_F_MARK_MANGLED_0 (1ull << 5)
#define PACKET_HOST 0
#define PACKET_OTHERHOST 3
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
/* bpf_redirect returns TC_ACT_REDIRECT itself. */

/* What the program reads before deciding: Ethernet, IPv6 or IPv4 without options, TCP
 * (the longer transport header). */
#define HDR6 (14 + 40 + 20)
#define HDR4 (14 + 20 + 20)

/* A fast path's answer: a TC action (>= 0: forwarded), or one of these. */
#define NOT_OURS (-1) /* the frame is as it came: the engine's */
#define LOST (-2)     /* changed and then not forwarded: dropped (FAST_LOST) */

/* Whether an IPv4 packet of `tot` bytes with `hdr` bytes of IPv4 and transport headers
 * leaves within `mtu` (`gso_size`: a super-packet's segment payload, 0 for one packet): a
 * super-packet is judged by its segments. */
static __attribute__((always_inline)) int fits(__u32 tot, __u32 gso_size, __u32 hdr, __u16 mtu)
{
	return gso_size ? gso_size + hdr <= mtu : tot <= mtu;
}

/* The TCP header's length from its data offset (the parse checked it is within the
 * frame; checked again beside the read, which is where the verifier looks); an
 * impossible length when it is not. */
static __attribute__((always_inline)) __u32 tcp_hdr_len(__u8 *l4, __u8 *end)
{
	if (l4 + 13 > end)
		return 0xffff;
	return (__u32)(l4[12] >> 4) * 4;
}

/* The egress ifindex of `egress`'s tx_port slot; 0 (counted): none. */
static __attribute__((always_inline)) __u32 egress_ifindex(__u32 *egress)
{
	struct bpf_devmap_val *port = bpf_map_lookup_elem(&tx_port, egress);

	if (!port) {
		count(FAST_NO_PORT, 1);
		return 0;
	}
	return port->ifindex;
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

/* NAT44: an IPv4 frame at `data` (`k`, `l4`, `tot`: as parse_v4_len read them; `end`: the
 * end of the linear part), rewritten in place. */
static __attribute__((always_inline)) int tc_v4(struct __sk_buff *skb, __u8 *data, __u8 *end,
						struct fast_key *k, __u8 *l4, __u16 tot)
{
	struct fast_val *v = bpf_map_lookup_elem(&fast_v4, k);
	if (!v) {
		count(FAST_MISS, 1);
		return NOT_OURS;
	}
	__u8 *l3 = data + 14;
	if (v->decrement_ttl && l3[8] <= 1)
		return NOT_OURS;
	__u32 hdr = 20 + (k->proto == 6 ? tcp_hdr_len(l4, end) : 8);
	if (!fits(tot, skb->gso_size, hdr, v->mtu))
		return NOT_OURS;
	__u32 ifindex = egress_ifindex(&v->egress);
	if (!ifindex)
		return NOT_OURS;
	fast_touch(&v->last_seen);
	__u32 off = 14 + 20 + (k->proto == 6 ? 16 : 6);
	__u64 mm = k->proto == 17 ? BPF_F_MARK_MANGLED_0 : 0;
	__u32 saddr = v->saddr, daddr = v->daddr;
	__u16 sport = v->sport, dport = v->dport;

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
	if (k->saddr != saddr)
		bpf_l4_csum_replace(skb, off, k->saddr, saddr, BPF_F_PSEUDO_HDR | mm | 4);
	if (k->daddr != daddr)
		bpf_l4_csum_replace(skb, off, k->daddr, daddr, BPF_F_PSEUDO_HDR | mm | 4);
	if (k->sport != sport)
		bpf_l4_csum_replace(skb, off, k->sport, sport, mm | 2);
	if (k->dport != dport)
		bpf_l4_csum_replace(skb, off, k->dport, dport, mm | 2);
	return tc_send(skb, ifindex);
}

/* NAT64, IPv4 -> IPv6: an IPv4 frame arriving outside (fast_path_46's checks and
 * translation, step for step; the arguments as tc_v4's, `end`: the end of the linear
 * part). */
static __attribute__((always_inline)) int tc_46(struct __sk_buff *skb, __u8 *data, __u8 *end,
						struct fast_key *k, __u8 *l4, __u16 tot)
{
	__u32 gso = skb->gso_size;
	int udp = k->proto == 17;

	/* A super-packet: TCP only (bpf_skb_change_proto takes no other GSO). */
	if (gso && !(k->proto == 6))
		return NOT_OURS;
	struct fast_val46 *v = bpf_map_lookup_elem(&fast_46, k);
	if (!v) {
		count(FAST_MISS, 1);
		return NOT_OURS;
	}
	__u8 *l3 = data + 14;
	/* A router verifies the header checksum (SIIT drops a bad one: the engine's). */
	if (ip4_hdr_sum(l3) != 0xffff || l3[8] <= 1)
		return NOT_OURS;
	int df = (l3[6] & 0x40) != 0;
	/* The IPv6 packet's length; a super-packet's by its segments: bpf_skb_change_proto cuts
	 * gso_size by the 20 bytes the header grows, so each IPv6 segment is the size its IPv4
	 * one was (the engine's GSO path does the same); one that would not fit is the
	 * engine's (it cuts finer). */
	__u32 out = gso ? gso + 20 + tcp_hdr_len(l4, end) : (__u32)tot + 20;
	if (out > (df ? v->mtu_df : v->mtu_nodf))
		return NOT_OURS;
	__u8 *cs = l4 + (udp ? 6 : 16);
	if (cs + 2 > end)
		return NOT_OURS;
	if (udp && *(__u16 *)cs == 0)
		return NOT_OURS;
	__u32 ifindex = egress_ifindex(&v->egress);
	if (!ifindex)
		return NOT_OURS;
	fast_touch(&v->last_seen);
	__u32 off = 14 + 20 + (udp ? 6 : 16);
	__u8 ttl = l3[8];
	if (v->decrement_ttl)
		ttl -= 1;
	__u8 tclass = v->tc_copy ? l3[1] : v->tc;
	__u64 mm = udp ? BPF_F_MARK_MANGLED_0 : 0;
	__u16 old_dport = k->dport, dport = v->dport;
	__u8 proto = k->proto;
	__u32 addrs[8];
	__u8 mac[12];
	__builtin_memcpy(addrs, v->saddr, 32);
	__builtin_memcpy(mac, v->dmac, 12);

	/* The port patch (NAT44's part), then SIIT's pseudo-header change. */
	if (old_dport != dport &&
	    bpf_l4_csum_replace(skb, off, old_dport, dport, mm | 2) < 0)
		return LOST;
	if (bpf_l4_csum_replace(skb, off, 0, v->siit_delta, BPF_F_PSEUDO_HDR | mm) < 0)
		return LOST;
	if (bpf_skb_change_proto(skb, be16(ETH_P_IPV6), 0) < 0)
		return LOST;
	data = (__u8 *)(long)skb->data;
	end = (__u8 *)(long)skb->data_end;
	if (data + 14 + 40 + 4 > end)
		return LOST;
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

/* NAT64, IPv6 -> IPv4: an IPv6 frame arriving inside (`l3`: its header, `end`: the end of
 * the linear part, `len`: the frame's length; fast_path_64's checks and translation). */
static __attribute__((always_inline)) int tc_64(struct __sk_buff *skb, __u8 *data, __u8 *end,
						__u32 len)
{
	struct fast_key6 key = {};
	__u8 *l3 = data + 14;
	__u32 gso = skb->gso_size;
	__u16 plen;

	if (!parse_v6_len(data, l3, end, len, &plen))
		return NOT_OURS;
	__u8 *l4 = l3 + 40;
	key.proto = l3[6];
	int coff = l4_csum_off_len(key.proto, l4, end, plen);
	if (coff < 0)
		return NOT_OURS;
	__builtin_memcpy(key.saddr, l3 + 8, 16);
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	key.sport = *(__u16 *)l4;
	key.dport = *(__u16 *)(l4 + 2);
	struct fast_val64 *v = bpf_map_lookup_elem(&fast_64, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return NOT_OURS;
	}
	/* A hop limit of 1 or less: the engine's (an ICMP error may be owed). */
	if (l3[7] <= 1)
		return NOT_OURS;
	/* A super-packet (TCP only: bpf_skb_change_proto takes no other GSO) is judged by its
	 * segments, as the engine's GSO path judges it: each must fit the IPv4 MTU and get
	 * DF, since DF-clear segments would each need an Identification of the flow's counter
	 * and the program takes one per packet. */
	if (gso && key.proto != 6)
		return NOT_OURS;
	__u32 total = gso ? gso + tcp_hdr_len(l4, end) + 20 : (__u32)plen + 20;
	if (total > v->mtu)
		return NOT_OURS;
	int udp = key.proto == 17;
	__u8 *cs = l4 + (udp ? 6 : 16);
	if (cs + 2 > end)
		return NOT_OURS;
	__u16 c16 = *(__u16 *)cs;
	if (udp && c16 == 0)
		return NOT_OURS;
	int df = v->df == FAST_DF_SET || (v->df == FAST_DF_RFC && total > 1260);
	if (gso && !df)
		return NOT_OURS;
	__u32 ifindex = egress_ifindex(&v->egress);
	if (!ifindex)
		return NOT_OURS;
	fast_touch(&v->last_seen);
	__u32 coff32 = udp ? 6 : 16;
	__u32 off = 14 + 40 + coff32;
	__u8 hop = l3[7];
	if (v->decrement_ttl)
		hop -= 1;
	__u16 total16 = (__u16)(plen + 20);
	__u8 tclass = (__u8)((l3[0] << 4) | (l3[1] >> 4));
	__u8 tos = v->tos_copy ? tclass : v->tos;
	__u64 mm = udp ? BPF_F_MARK_MANGLED_0 : 0;
	__u16 old_sport = key.sport, sport = v->sport;
	__u8 proto = key.proto;
	__u32 addrs[2] = {v->saddr, v->daddr};
	__u8 mac[12];
	__builtin_memcpy(mac, v->dmac, 12);

	/* SIIT's pseudo-header change (all a partial checksum gets), the port. */
	if (bpf_l4_csum_replace(skb, off, 0, v->siit_delta, BPF_F_PSEUDO_HDR | mm) < 0)
		return LOST;
	__u16 id = df ? 0 : be16(next_ident(v));
	if (old_sport != sport &&
	    bpf_l4_csum_replace(skb, off, old_sport, sport, mm | 2) < 0)
		return LOST;
	if (bpf_skb_change_proto(skb, be16(ETH_P_IP), 0) < 0)
		return LOST;
	data = (__u8 *)(long)skb->data;
	end = (__u8 *)(long)skb->data_end;
	if (data + 14 + 20 + 4 > end)
		return LOST;
	__u8 *h = data + 14;
	*(__u16 *)(h + 20) = sport;
	/* The IPv4 header over the last 20 bytes of the IPv6 one. */
	*(__u16 *)h = be16((__u16)(0x45u << 8 | tos));
	*(__u16 *)(h + 2) = be16(total16);
	*(__u16 *)(h + 4) = id;
	*(__u16 *)(h + 6) = df ? be16(0x4000) : 0;
	h[8] = hop;
	h[9] = proto;
	*(__u16 *)(h + 10) = 0;
	__builtin_memcpy(h + 12, addrs, 8);
	*(__u16 *)(h + 10) = (__u16)~ip4_hdr_sum(h);
	return tc_send_as(skb, data, mac, ETH_P_IP, ifindex);
}

/* ILA: an IPv6 frame whose destination is an offloaded mapping's address (fast_path_ila's
 * checks: TCP, UDP or ICMPv6 right after the IPv6 header, never SYN/FIN/RST, hop limit
 * over 1, within the egress MTU; a TCP super-packet by its segments: ILA keeps sizes). The
 * destination replaced, the hop limit decremented, the transport checksum updated by the
 * mapping's delta (adj-transport; a UDP zero left, a computed zero sent as ones; a partial
 * checksum gets it as its pseudo-header part) or left (the other modes). */
static __attribute__((always_inline)) int tc_ila(struct __sk_buff *skb, __u8 *data, __u8 *end,
						 __u32 len)
{
	struct fast_key_ila key;
	__u8 *l3 = data + 14;
	__u32 gso = skb->gso_size;
	__u16 plen;

	if (!parse_v6_len(data, l3, end, len, &plen))
		return NOT_OURS;
	__u8 *l4 = l3 + 40;
	__u8 proto = l3[6];
	int coff = ila_l4_off_len(proto, l4, end, plen);
	if (coff < 0)
		return NOT_OURS;
	__builtin_memcpy(key.daddr, l3 + 24, 16);
	struct fast_val_ila *v = bpf_map_lookup_elem(&fast_ila, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return NOT_OURS;
	}
	/* Time Exceeded and Packet Too Big are the engine's to send. */
	if (l3[7] <= 1)
		return NOT_OURS;
	if (gso && proto != 6)
		return NOT_OURS;
	__u32 hdr = 40 + (proto == 6 ? tcp_hdr_len(l4, end) : 8);
	if (!fits((__u32)plen + 40, gso, hdr, v->mtu))
		return NOT_OURS;
	__u32 ifindex = egress_ifindex(&v->egress);
	if (!ifindex)
		return NOT_OURS;
	/* A mapping has no last-seen stamp: it lives as long as the mapping. */
	__u32 c32 = proto == 6 ? 16 : proto == 17 ? 6 : 2;
	__u8 *cs = l4 + c32;
	if (cs + 2 > end)
		return NOT_OURS;
	__u16 delta = v->l4_delta;
	/* A UDP zero (no checksum) takes no adjustment. */
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
		long r = bpf_l4_csum_replace(skb, 14 + 40 + c32, 0, delta, f | BPF_F_IPV6);
		if (r == -EINVAL) {
			r = bpf_l4_csum_replace(skb, 14 + 40 + c32, 0, delta, f);
			moved = delta;
		}
		if (r < 0)
			return LOST;
	}
	long d = adjust ? bpf_csum_diff(before, 4, after, 4, moved)
			: bpf_csum_diff(before, 20, after, 20, 0);
	/* Only a CHECKSUM_COMPLETE skb takes it (the helper refuses the others). */
	if (d >= 0)
		bpf_csum_update(skb, (__u32)d);
	return tc_send(skb, ifindex);
}

/* The skb's first `want` bytes (all of a shorter frame) in its linear part, its data and
 * the end of that part at `*data`, `*end`; 0: they cannot be pulled in. */
static __attribute__((always_inline)) int linear(struct __sk_buff *skb, __u32 want, __u8 **data,
						 __u8 **end)
{
	__u32 n = skb->len < want ? skb->len : want;

	if ((__u8 *)(long)skb->data + n > (__u8 *)(long)skb->data_end &&
	    bpf_skb_pull_data(skb, n) != 0)
		return 0;
	*data = (__u8 *)(long)skb->data;
	*end = (__u8 *)(long)skb->data_end;
	return 1;
}

/* The engine's frame (TC_ACT_OK: on to the socket); with the kernel bypass on and the
 * family the engine's here (`steer`), a transit one is kept from the kernel (see the
 * header). */
static __attribute__((always_inline)) int to_engine(struct __sk_buff *skb, __u32 cfg,
						    __u32 steer, int for_kernel)
{
	if ((cfg & QN_CFG_BYPASS) && (cfg & steer) && !for_kernel)
		bpf_skb_change_type(skb, PACKET_OTHERHOST);
	return TC_ACT_OK;
}

/* A fast path's answer as a TC action. */
static __attribute__((always_inline)) int answer(int r)
{
	if (r >= 0)
		return r;
	count(FAST_LOST, 1);
	return TC_ACT_SHOT;
}

SEC("classifier")
int tc_fast(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u32 *cfgp = bpf_map_lookup_elem(&config, &zero);
	__u8 *data, *end;

	if (!cfgp)
		return TC_ACT_OK;
	__u32 cfg = *cfgp;
	/* Another host's frame (the socket's, which counts it: not_for_us), broadcast and
	 * multicast (the kernel's), a tag (the kernel marks it another host's unless a VLAN
	 * device takes it): as they are. */
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return TC_ACT_OK;
	__u32 len = skb->len;
	if (skb->protocol == be16(ETH_P_IP)) {
		if (!(cfg & (QN_CFG_STEER_V4 | QN_CFG_FAST_V4 | QN_CFG_FAST_46)))
			return TC_ACT_OK;
		if (!linear(skb, HDR4, &data, &end) || data + 14 + 20 > end)
			return TC_ACT_OK;
		/* What the bypass reads, read now: a rewrite that gives up moves no byte, but the
		 * verifier takes the packet pointers away after any helper that could. */
		__u32 dst = *(__u32 *)(data + 14 + 16);
		__u8 dst0 = data[14 + 16];
		if (cfg & (QN_CFG_FAST_V4 | QN_CFG_FAST_46)) {
			struct fast_key key = {};
			__u8 *l4;
			__u16 tot;

			if (parse_v4_len(data, data + 14, end, len, &key, &l4, &tot) >= 0) {
				int r = cfg & QN_CFG_FAST_V4 ? tc_v4(skb, data, end, &key, l4, tot)
							     : tc_46(skb, data, end, &key, l4, tot);
				if (r != NOT_OURS)
					return answer(r);
			}
		}
		/* Broadcast and multicast destinations are the kernel's, and so are its own. */
		int kernel = dst == 0xffffffff || (dst0 & 0xf0) == 0xe0 ||
			     local_addr_v4(dst);
		return to_engine(skb, cfg, QN_CFG_STEER_V4, kernel);
	}
	if (skb->protocol == be16(ETH_P_IPV6)) {
		if (!(cfg & (QN_CFG_STEER_V6 | QN_CFG_FAST_64 | QN_CFG_FAST_ILA)))
			return TC_ACT_OK;
		if (!linear(skb, HDR6, &data, &end) || data + 14 + 40 > end)
			return TC_ACT_OK;
		struct dst6 d;
		read_dst6(data + 14, end, &d);
		int r = NOT_OURS;
		if (cfg & QN_CFG_FAST_64)
			r = tc_64(skb, data, end, len);
		else if (cfg & QN_CFG_FAST_ILA)
			r = tc_ila(skb, data, end, len);
		if (r != NOT_OURS)
			return answer(r);
		return to_engine(skb, cfg, QN_CFG_STEER_V6, kernel_v6(&d));
	}
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
