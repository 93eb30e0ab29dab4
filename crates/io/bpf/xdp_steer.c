// SPDX-License-Identifier: MIT OR Apache-2.0
//
// xdp_steer: the XDP half of quicknat's AF_XDP backend.
//
// Sends IPv4 and IPv6 frames (optionally behind one 802.1Q/802.1ad tag) to
// the AF_XDP socket bound to the receiving queue (`xsks_map`), and passes
// everything else to the kernel: ARP, IPv6 neighbour discovery / router
// messages (ICMPv6 133..137), LLDP, ... so neighbour resolution keeps working.
// When `config[0] & QN_CFG_PASS_LOCAL` is set, IPv4 frames addressed to one of
// the host's own addresses (`local_v4`, filled by userspace) also go to the
// kernel, so management traffic (ssh, ping to the gateway) keeps working.
// If no socket is bound to the queue, bpf_redirect_map falls back to XDP_PASS.
//
// Self-contained on purpose (no kernel or libbpf headers): building it needs
// only `clang -O2 -g -target bpf -c`.

#include "common.h"

#include "fast_path.h"
#include "fast_path_ila.h"
#include "local.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks_map SEC(".maps");

/* The interface's MAC in the low six bytes (as on the wire), 0: unknown. A unicast frame for
 * any other MAC (a bridge flooding unknown unicast to this port) never takes the fast path:
 * it goes on to the socket, where user space drops and counts it (not_for_us). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} own_mac SEC(".maps");

SEC("xdp")
int xdp_steer(struct xdp_md *ctx)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	__u16 proto;
	__u8 *l3;

	if (data + 14 > end)
		return XDP_PASS;
	proto = *(__u16 *)(data + 12);
	l3 = data + 14;
	if (proto == be16(ETH_P_8021Q) || proto == be16(ETH_P_8021AD)) {
		if (data + 18 > end)
			return XDP_PASS;
		proto = *(__u16 *)(data + 16);
		l3 = data + 18;
	}

	__u32 zero = 0;
	__u32 *cfg = bpf_map_lookup_elem(&config, &zero);
	__u32 flags = cfg ? *cfg : (QN_CFG_STEER_V4 | QN_CFG_STEER_V6);
	/* A unicast frame for another host's MAC never takes the fast path. */
	__u64 *own = bpf_map_lookup_elem(&own_mac, &zero);
	__u64 dst_mac = 0;

	__builtin_memcpy(&dst_mac, data, 6);
	int foreign = own && *own && !(data[0] & 1) && dst_mac != *own;

	if (proto == be16(ETH_P_IP)) {
		if (!(flags & QN_CFG_STEER_V4))
			return XDP_PASS;
		if (l3 + 20 > end)
			return XDP_PASS;
		if (flags & QN_CFG_PASS_LOCAL) {
			if (local_addr_v4(*(__u32 *)(l3 + 16)))
				return XDP_PASS;
		}
		if ((flags & QN_CFG_FAST_V4) && !foreign) {
			int v = fast_path_v4(ctx, data, l3, end);

			if (v >= 0)
				return v;
		}
		if ((flags & QN_CFG_FAST_46) && !foreign) {
			int v = fast_path_46(ctx, data, l3, end);

			if (v >= 0)
				return v;
		}
	} else if (proto == be16(ETH_P_IPV6)) {
		if (!(flags & QN_CFG_STEER_V6))
			return XDP_PASS;
		if (l3 + 40 > end)
			return XDP_PASS;
		/* Multicast, link-local, the host's own addresses, neighbour discovery. */
		struct dst6 d;
		read_dst6(l3, end, &d);
		if (kernel_v6(&d))
			return XDP_PASS;
		if ((flags & QN_CFG_FAST_64) && !foreign) {
			int v = fast_path_64(ctx, data, l3, end);

			if (v >= 0)
				return v;
		} else if ((flags & QN_CFG_FAST_ILA) && !foreign) {
			/* Never after fast_path_64, whose bpf_xdp_adjust_head leaves the packet
			 * pointers unusable (NAT64 and ILA never run together). */
			int v = fast_path_ila(ctx, data, l3, end);

			if (v >= 0)
				return v;
		}
	} else {
		return XDP_PASS;
	}
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
