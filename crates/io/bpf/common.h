// SPDX-License-Identifier: MIT OR Apache-2.0
//
// common.h: what quicknat's BPF programs (xdp_steer.c, tc_fast.c) share: the kernel's
// types and constants they use, the map declaration macros and the helpers by number.
// Self-contained on purpose (no kernel or libbpf headers): building needs only
// `clang -O2 -g -target bpf -c`.

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

/* struct __sk_buff (uapi/linux/bpf.h) up to gso_size: what tc_fast.c reads. */
struct __sk_buff {
	__u32 len, pkt_type, mark, queue_mapping, protocol, vlan_present, vlan_tci, vlan_proto;
	__u32 priority, ingress_ifindex, ifindex, tc_index, cb[5], hash, tc_classid;
	__u32 data, data_end, napi_id;
	__u32 family, remote_ip4, local_ip4, remote_ip6[4], local_ip6[4], remote_port, local_port;
	__u32 data_meta;
	__u64 flow_keys;
	__u64 tstamp;
	__u32 wire_len, gso_segs;
	__u64 sk;
	__u32 gso_size;
};

enum { XDP_ABORTED = 0, XDP_DROP = 1, XDP_PASS = 2, XDP_TX = 3, XDP_REDIRECT = 4 };
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_DEVMAP = 14,
	BPF_MAP_TYPE_XSKMAP = 17,
};

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;
/* CLOCK_MONOTONIC as of the last tick (Linux 5.11): the same clock, no clock read. */
static __u64 (*bpf_ktime_get_coarse_ns)(void) = (void *)160;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define be16(x) ((__u16)__builtin_bswap16(x))
#else
#define be16(x) ((__u16)(x))
#endif

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPPROTO_ICMPV6 58

/* config[0] bits. Keep in sync with crates/io/src/afxdp/loader.rs. */
#define QN_CFG_PASS_LOCAL 1u
/* Steer IPv4 / IPv6 to the socket; a family without its bit goes to the kernel. */
#define QN_CFG_STEER_V4 2u
#define QN_CFG_STEER_V6 4u
/* Look established IPv4 TCP/UDP flows up in `fast_v4` (the fast path, fast_path.h). */
#define QN_CFG_FAST_V4 8u
/* NAT64: look IPv6 TCP/UDP up in `fast_64`, IPv4 TCP/UDP in `fast_46`. */
#define QN_CFG_FAST_64 16u
#define QN_CFG_FAST_46 32u
/* ILA: look IPv6 destinations up in `fast_ila` (fast_path_ila.h). */
#define QN_CFG_FAST_ILA 64u
/* tc_fast.c: mark transit frames of a STEER_* family PACKET_OTHERHOST (the kernel bypass). */
#define QN_CFG_BYPASS 128u

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");
