// SPDX-License-Identifier: MIT OR Apache-2.0
//
// xdp_fwd: the lab's minimal XDP forwarder, the floor of an XDP fast path (no NAT).
//
// `xdp_fwd` redirects every IPv4 frame not addressed to the gateway itself (`cfg[2]`)
// through a one-entry devmap (`tx_port[0]`, the other interface) after what a router
// does to it: TTL decremented with an incremental checksum update (RFC 1624), the
// Ethernet header rewritten to the next hop's MAC (`cfg[0]`) from the egress interface's
// (`cfg[1]`). Everything else (ARP, IPv6, TTL <= 1) goes to the kernel.
// `tc_fwd` is the same router at the tc ingress hook (bpf_redirect to cfg[3], the egress
// interface's index), the floor of the fast path at that hook.
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
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;

/* The leading fields of struct __sk_buff (uapi/linux/bpf.h) up to data_end. */
struct __sk_buff {
	__u32 len, pkt_type, mark, queue_mapping, protocol, vlan_present, vlan_tci, vlan_proto;
	__u32 priority, ingress_ifindex, ifindex, tc_index, cb[5], hash, tc_classid;
	__u32 data, data_end;
};

enum { TC_ACT_OK = 0, TC_ACT_REDIRECT = 7 };

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
 * interface, as on the wire; cfg[3]: the egress interface's index (tc_fwd). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} cfg SEC(".maps");

/* What a router does to the frame at data..end: 1 when it is to be forwarded (TTL
 * decremented, MACs rewritten), 0 when it goes to the kernel. */
static __attribute__((always_inline)) int route(__u8 *data, __u8 *end)
{
	__u32 k0 = 0, k1 = 1, k2 = 2;
	__u64 *dst_mac, *src_mac, *local;
	__u8 *ip;
	__u32 check;

	if (data + 34 > end)
		return 0;
	if (*(__u16 *)(data + 12) != be16(ETH_P_IP))
		return 0;
	ip = data + 14;
	if ((ip[0] & 0xf0) != 0x40 || ip[8] <= 1)
		return 0;
	dst_mac = bpf_map_lookup_elem(&cfg, &k0);
	src_mac = bpf_map_lookup_elem(&cfg, &k1);
	local = bpf_map_lookup_elem(&cfg, &k2);
	if (!dst_mac || !src_mac || !local)
		return 0;
	if (*(__u32 *)(ip + 16) == (__u32)*local)
		return 0;
	/* TTL is the high byte of its 16-bit word: the sum drops by 0x0100, so the
	 * one's complement checksum grows by it, with the end-around carry. */
	ip[8]--;
	check = *(__u16 *)(ip + 10);
	check += be16(0x0100);
	check = (check & 0xffff) + (check >> 16);
	*(__u16 *)(ip + 10) = (__u16)check;
	__builtin_memcpy(data, dst_mac, 6);
	__builtin_memcpy(data + 6, src_mac, 6);
	return 1;
}

SEC("xdp")
int xdp_fwd(struct xdp_md *ctx)
{
	if (!route((__u8 *)(long)ctx->data, (__u8 *)(long)ctx->data_end))
		return XDP_PASS;
	return bpf_redirect_map(&tx_port, 0, 0);
}

/* The same router at the tc ingress hook: the skb (a GSO super-packet as it is) leaves
 * by cfg[3]'s transmit path. */
SEC("classifier")
int tc_fwd(struct __sk_buff *skb)
{
	__u32 k3 = 3;
	__u64 *out;

	if (!route((__u8 *)(long)skb->data, (__u8 *)(long)skb->data_end))
		return TC_ACT_OK;
	out = bpf_map_lookup_elem(&cfg, &k3);
	if (!out)
		return TC_ACT_OK;
	return bpf_redirect((__u32)*out, 0);
}

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
