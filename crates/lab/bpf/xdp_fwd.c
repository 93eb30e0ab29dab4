// SPDX-License-Identifier: MIT OR Apache-2.0
//
// xdp_fwd: the lab's minimal XDP forwarder, the floor of an XDP fast path (no NAT).
//
// `xdp_fwd` redirects every IPv4 frame not addressed to the gateway itself (`cfg[2]`)
// through a one-entry devmap (`tx_port[0]`, the other interface) after what a router
// does to it: TTL decremented with an incremental checksum update (RFC 1624), the
// Ethernet header rewritten to the next hop's MAC (`cfg[0]`) from the egress interface's
// (`cfg[1]`). Everything else (ARP, IPv6, TTL <= 1) goes to the kernel.
// `xdp_pass` is attached to the veth peers that receive redirected frames: a veth takes
// XDP frames only when its peer runs an XDP program (its NAPI is on).
//
// Self-contained like crates/io/bpf/xdp_steer.c: `clang -O2 -g -target bpf -c`.
// The cfg words and map names are read by crates/lab/src/fwd/xdp.rs.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

enum { XDP_ABORTED = 0, XDP_DROP = 1, XDP_PASS = 2, XDP_TX = 3, XDP_REDIRECT = 4 };
enum { BPF_MAP_TYPE_ARRAY = 2, BPF_MAP_TYPE_DEVMAP = 14 };

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be16(x) ((__u16)__builtin_bswap16(x))
#else
#define be16(x) ((__u16)(x))
#endif

#define ETH_P_IP 0x0800

/* struct bpf_devmap_val: egress ifindex, and a program fd/id (unused, 0). */
struct devmap_val {
	__u32 ifindex;
	__u32 prog;
};

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct devmap_val);
} tx_port SEC(".maps");

/* cfg[0]: next hop's MAC, cfg[1]: egress interface's MAC (the first six bytes of the
 * word in memory order); cfg[2]: the gateway's own IPv4 address on the ingress
 * interface, as on the wire. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} cfg SEC(".maps");

SEC("xdp")
int xdp_fwd(struct xdp_md *ctx)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	__u32 k0 = 0, k1 = 1, k2 = 2;
	__u64 *dst_mac, *src_mac, *local;
	__u8 *ip;
	__u32 check;

	if (data + 34 > end)
		return XDP_PASS;
	if (*(__u16 *)(data + 12) != be16(ETH_P_IP))
		return XDP_PASS;
	ip = data + 14;
	if ((ip[0] & 0xf0) != 0x40 || ip[8] <= 1)
		return XDP_PASS;
	dst_mac = bpf_map_lookup_elem(&cfg, &k0);
	src_mac = bpf_map_lookup_elem(&cfg, &k1);
	local = bpf_map_lookup_elem(&cfg, &k2);
	if (!dst_mac || !src_mac || !local)
		return XDP_PASS;
	if (*(__u32 *)(ip + 16) == (__u32)*local)
		return XDP_PASS;
	/* TTL is the high byte of its 16-bit word: the sum drops by 0x0100, so the
	 * one's complement checksum grows by it, with the end-around carry. */
	ip[8]--;
	check = *(__u16 *)(ip + 10);
	check += be16(0x0100);
	check = (check & 0xffff) + (check >> 16);
	*(__u16 *)(ip + 10) = (__u16)check;
	__builtin_memcpy(data, dst_mac, 6);
	__builtin_memcpy(data + 6, src_mac, 6);
	return bpf_redirect_map(&tx_port, 0, 0);
}

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
