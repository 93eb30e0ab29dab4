// SPDX-License-Identifier: MIT OR Apache-2.0
//
// local.h: what belongs to the host's own kernel, for the programs that decide which
// frames the kernel keeps (xdp_steer.c on AF_XDP, tc_fast.c's kernel bypass on AF_PACKET):
// the host's own addresses (filled by user space, io::afxdp::loader::fill_local) and the
// destinations that are never transit (multicast, broadcast, link-local, neighbour
// discovery). Both backends keep the same frames for the kernel.

struct in6 {
	__u32 a[4];
};

/* IPv4 address (network byte order, as on the wire) -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} local_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct in6);
	__type(value, __u8);
} local_v6 SEC(".maps");

/* Whether IPv4 destination `dst` (as on the wire) is one of the host's own addresses. */
static __attribute__((always_inline)) int local_addr_v4(__u32 dst)
{
	return bpf_map_lookup_elem(&local_v4, &dst) != 0;
}

/* What kernel_v6 reads of an IPv6 packet, read before anything may move the packet. */
struct dst6 {
	struct in6 addr; /* the destination */
	__u8 nh;	 /* the next header */
	__u8 type;	 /* the first byte after the header (an ICMPv6 type), 0: none */
};

/* The IPv6 packet at `l3` (its 40-byte header below `end`) as kernel_v6 reads it. */
static __attribute__((always_inline)) void read_dst6(__u8 *l3, __u8 *end, struct dst6 *d)
{
	__builtin_memcpy(&d->addr, l3 + 24, sizeof(d->addr));
	d->nh = l3[6];
	d->type = l3 + 41 <= end ? l3[40] : 0;
}

/* Whether an IPv6 packet is the kernel's: a multicast (ff00::/8) or link-local
 * (fe80::/10) destination, one of the host's own addresses, or neighbour discovery and
 * router messages (ICMPv6 133..137). */
static __attribute__((always_inline)) int kernel_v6(struct dst6 *d)
{
	__u8 *a = (__u8 *)&d->addr;

	if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
		return 1;
	if (bpf_map_lookup_elem(&local_v6, &d->addr))
		return 1;
	return d->nh == IPPROTO_ICMPV6 && d->type >= 133 && d->type <= 137;
}
