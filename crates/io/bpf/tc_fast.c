// SPDX-License-Identifier: MIT OR Apache-2.0
//
// tc_fast: the fast path for established NAT44 flows on the AF_PACKET backend, at the tc
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

#include "common.h"

#include "fast_path.h"
#include "fast_path_ila.h"

static long (*bpf_skb_load_bytes)(const void *skb, __u32 off, void *to, __u32 len) = (void *)26;
static long (*bpf_l4_csum_replace)(struct __sk_buff *skb, __u32 off, __u64 from, __u64 to,
				   __u64 flags) = (void *)11;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static long (*bpf_skb_pull_data)(struct __sk_buff *skb, __u32 len) = (void *)39;

#define BPF_F_PSEUDO_HDR (1ull << 4)
#define BPF_F_MARK_MANGLED_0 (1ull << 5)
#define PACKET_OTHERHOST 3
#define TC_ACT_OK 0 /* bpf_redirect returns TC_ACT_REDIRECT itself */

/* A frame's headers as the filter reads them: Ethernet, IPv4 without options, TCP. */
#define CLAIM_HDR 54

/* What the filter hands to tc_fast for the skb it has just kept from the socket. */
struct claim {
	__u32 armed;
	__u32 ifindex; /* the egress interface (tx_port's slot, resolved) */
	struct fast_key key;
	struct fast_val val;
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

SEC("socket")
int tc_fast_claim(struct __sk_buff *skb)
{
	__u32 len = skb->len;
	__u32 zero = 0;
	__u32 *cfg = bpf_map_lookup_elem(&config, &zero);
	/* The frame lands 2 bytes in, so the IPv4 header's words are aligned (the verifier
	 * refuses misaligned stack reads). */
	__u64 raw[(CLAIM_HDR + 2 + 7) / 8] = {};
	__u8 *buf = (__u8 *)raw + 2;
	struct fast_key key = {};
	__u8 *l4;
	__u16 tot;

	if (!cfg || !(*cfg & QN_CFG_FAST_V4))
		return len;
	/* Another host's frame (user space counts it, not_for_us), a tag outside the frame:
	 * the socket's. */
	if (skb->pkt_type == PACKET_OTHERHOST || skb->vlan_present)
		return len;
	if (len < 14 + 20 + 8)
		return len;
	__u32 n = len < CLAIM_HDR ? len : CLAIM_HDR;
	if (bpf_skb_load_bytes(skb, 0, buf, n) < 0)
		return len;
	if (*(__u16 *)(buf + 12) != be16(ETH_P_IP))
		return len;
	int coff = parse_v4_len(buf, buf + 14, buf + n, len, &key, &l4, &tot);
	if (coff < 0)
		return len;
	struct fast_val *v = bpf_map_lookup_elem(&fast_v4, &key);
	if (!v) {
		count(FAST_MISS, 1);
		return len;
	}
	if (v->decrement_ttl && buf[14 + 8] <= 1)
		return len;
	__u32 hdr = 20 + (key.proto == 6 ? (__u32)(buf[14 + 20 + 12] >> 4) * 4 : 8);
	if (!fits(tot, skb->gso_size, hdr, v->mtu))
		return len;
	struct bpf_devmap_val *port = bpf_map_lookup_elem(&tx_port, &v->egress);
	if (!port) {
		count(FAST_NO_PORT, 1);
		return len;
	}
	struct claim *c = bpf_map_lookup_elem(&tc_claim, &zero);
	if (!c)
		return len;
	c->key = key;
	__builtin_memcpy(&c->val, v, sizeof(c->val));
	c->ifindex = port->ifindex;
	c->armed = 1;
	fast_touch(&v->last_seen);
	return 0;
}

SEC("classifier")
int tc_fast(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct claim *c = bpf_map_lookup_elem(&tc_claim, &zero);

	if (!c || !c->armed)
		return TC_ACT_OK;
	c->armed = 0;
	__u32 hl = c->key.proto == 6 ? 14 + 20 + 20 : 14 + 20 + 8;
	__u8 *data = (__u8 *)(long)skb->data;
	__u8 *end = (__u8 *)(long)skb->data_end;

	if (data + hl > end) {
		if (bpf_skb_pull_data(skb, hl) < 0)
			goto lost;
		data = (__u8 *)(long)skb->data;
		end = (__u8 *)(long)skb->data_end;
		if (data + hl > end)
			goto lost;
	}
	__u8 *l3 = data + 14;
	__u8 *l4 = l3 + 20;

	/* The slot is this skb's: the filter ran on it just now, on this CPU. */
	if (*(__u32 *)(l3 + 12) != c->key.saddr || *(__u32 *)(l3 + 16) != c->key.daddr ||
	    *(__u16 *)l4 != c->key.sport || *(__u16 *)(l4 + 2) != c->key.dport ||
	    l3[9] != c->key.proto)
		goto lost;
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
	count(FAST_PACKETS, 1);
	count(FAST_BYTES, skb->len);
	return bpf_redirect(ifindex, 0);
lost:
	/* Kept from the socket and not forwarded here: the kernel path (the kernel-bypass
	 * table drops it). Counted; never seen in tests. */
	count(FAST_LOST, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
