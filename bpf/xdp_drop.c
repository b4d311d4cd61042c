//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * xdp_drop: classify every frame (Ethernet, up to two VLAN tags, IPv4 or IPv6
 * past its extension headers, then the IP protocol), count packets and bytes
 * per class in a per-CPU block, and drop or pass it by a load-time policy:
 * the first rule that matches it, else the verdict of its class. Frames a rule
 * decided are counted by rule too, and those it gave the other action than
 * their class's in a second block, which a program without rules never touches.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdp_drop.h"

#define IPV6_EXT_MAX 8

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

/* IPv6 extension headers skipped on the way to the protocol. */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60

struct hdr_cursor {
	void *pos;
	int later_frag; /* an IPv6 fragment past the first: no L4 header (rules only) */
};

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

/* Common head of hop-by-hop, routing, destination options and AH. */
struct ipv6_ext_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 identification;
};

/*
 * Per-class verdict, written by the loader before load: the action a frame
 * is counted under (enum action) in bit 0, VERDICT_DROP when it is dropped
 * (not in a dry run). The map is frozen read-only, so the policy costs one
 * byte load and no helper call.
 */
volatile const __u8 verdicts[CLASS_COUNT];

/* A dry run counts drops as such but passes every frame (read by rules). */
volatile const __u8 dry_run;

/*
 * Rules, compiled by the loader into one 64-bit mask per dimension value:
 * bit i is set when rule i is satisfied by that value (a rule that does not
 * use a dimension is satisfied by every value of it). The masks of a frame's
 * values are ANDed; the lowest bit left is the first rule that matches.
 * rule_count 0 (the default) lets the verifier prune all of it; rule_dims
 * prunes the lookups of dimensions no rule uses.
 */
volatile const __u32 rule_count;
volatile const __u8 rule_dims;
volatile const __u64 rule_proto[256]; /* by IP protocol */
volatile const __u64 rule_drop;       /* rules whose action is drop */
volatile const __u64 rule_no_src;     /* rules without a source prefix: a trie miss */
volatile const __u64 rule_no_dst;     /* rules without a destination prefix */
volatile const __u64 rule_ports;      /* rules with a port condition */

/*
 * Per-RX-queue counting: the number of counter blocks, one per queue, the
 * last shared by all higher queues. 0 (the default) keeps one block; the
 * verifier then prunes the queue code, so it costs nothing when off.
 */
volatile const __u32 queue_slots;

/* Not read by the program: they carry the shared enums into BTF for bpf2go -type. */
volatile const enum class_idx class_count = CLASS_COUNT;
volatile const enum action action_drop = ACTION_DROP;
volatile const enum verdict verdict_drop = VERDICT_DROP;
volatile const enum rule_limits rule_max = RULE_MAX;
volatile const enum rule_dims rule_dim_ports = RULE_DIM_PORTS;
volatile const enum prefix_limits prefix_limit = PREFIX_BUCKETS;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counter_block);
	__uint(max_entries, 1);
} counters SEC(".maps");

/*
 * Counters of the frames rules decided, keyed as counters. Only the rules'
 * path touches it: for a program without rules the loader makes it one
 * 8-byte entry, and closes it after load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct rule_block);
	__uint(max_entries, 1);
} rule_counters SEC(".maps");

/*
 * Prefixes, of both directions. The value of a prefix is the mask of the
 * rules it satisfies, including every rule with a shorter prefix
 * containing it: a lookup finds only the longest match. Buckets (by
 * direction, family and first 16 bits) hold the masks of short prefixes and
 * the lengths of the longer ones in them, looked up by exact match; the
 * tries, by family, serve the buckets with too many lengths. Sized by the
 * loader; one entry when unused.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct prefix_bucket);
	__uint(max_entries, 1);
} prefix_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct prefix_key);
	__type(value, __u64);
	__uint(max_entries, 1);
} prefix_exact SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_v4_key);
	__type(value, __u64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} prefix_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_v6_key);
	__type(value, __u64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} prefix_v6 SEC(".maps");

/* Masks by port, source ports then destination ports; one entry when unused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} ports_map SEC(".maps");

/*
 * How to step over an IPv6 extension header, by its next header value; the
 * walk stops at EXT_NONE, an upper-layer protocol. One table load per header
 * instead of a chain of compares keeps the walk cheap to run and to verify.
 */
enum ext_kind {
	EXT_NONE = 0,
	EXT_OPTS,     /* hop-by-hop, routing, destination options: (hdrlen + 1) * 8 bytes */
	EXT_AUTH,     /* AH: (hdrlen + 2) * 4 bytes */
	EXT_FRAGMENT, /* 8 bytes */
};

static const __u8 ext_kinds[256] = {
	[NEXTHDR_HOP] = EXT_OPTS,
	[NEXTHDR_ROUTING] = EXT_OPTS,
	[NEXTHDR_DEST] = EXT_OPTS,
	[NEXTHDR_AUTH] = EXT_AUTH,
	[NEXTHDR_FRAGMENT] = EXT_FRAGMENT,
};

static __always_inline int is_vlan(__be16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

/* Reads an ethertype as one u16: through the packed struct ethhdr clang reads bytes. */
static __always_inline __be16 ethertype_at(void *p)
{
	return *(__be16 *)p;
}

static __always_inline __u32 classify_ipv4(struct hdr_cursor *nh, void *data_end)
{
	struct iphdr *iph = nh->pos;

	if ((void *)(iph + 1) > data_end)
		return CLASS_IPV4_TRUNCATED;
	/* Version 4 without options, nearly every packet, needs no length check. */
	if (*(__u8 *)iph != 0x45 && (iph->ihl < 5 || nh->pos + iph->ihl * 4 > data_end))
		return CLASS_IPV4_TRUNCATED;
	return CLASS_IPV4 + iph->protocol;
}

static __always_inline __u32 classify_ipv6(struct hdr_cursor *nh, void *data_end)
{
	struct ipv6hdr *ip6h = nh->pos;
	__u8 next;
	int i;

	if ((void *)(ip6h + 1) > data_end)
		return CLASS_IPV6_TRUNCATED;
	next = ip6h->nexthdr;
	nh->pos = ip6h + 1;

#pragma unroll
	for (i = 0; i < IPV6_EXT_MAX; i++) {
		struct ipv6_ext_hdr *eh = nh->pos;
		struct ipv6_frag_hdr *fh = nh->pos;
		__u8 kind = ext_kinds[next];
		__u32 len;

		if (kind == EXT_NONE)
			return CLASS_IPV6 + next;
		/* Every extension header is at least 8 bytes long. */
		if (nh->pos + 8 > data_end)
			return CLASS_IPV6_TRUNCATED;
		next = eh->nexthdr;
		if (kind == EXT_OPTS) {
			len = ((__u32)eh->hdrlen + 1) << 3;
		} else if (kind == EXT_AUTH) {
			len = ((__u32)eh->hdrlen + 2) << 2;
		} else {
			/* A later fragment carries payload, not headers: class it by the name. */
			if (fh->frag_off & bpf_htons(0xFFF8)) {
				nh->later_frag = 1;
				return CLASS_IPV6 + next;
			}
			len = 8;
		}
		if (nh->pos + len > data_end)
			return CLASS_IPV6_TRUNCATED;
		nh->pos += len;
	}
	/* Chain longer than the bound: class it by the header where parsing stopped. */
	return CLASS_IPV6 + next;
}

/* Skips a VLAN tag: its encapsulated ethertype becomes the frame's. */
static __always_inline int skip_vlan(struct hdr_cursor *nh, void *data_end, __be16 *proto)
{
	struct vlan_hdr *vh = nh->pos;

	if ((void *)(vh + 1) > data_end)
		return -1;
	*proto = ethertype_at(&vh->h_vlan_encapsulated_proto);
	nh->pos = vh + 1;
	return 0;
}

static __always_inline __u32 classify(void *data, void *data_end)
{
	struct hdr_cursor cur = { .pos = data + sizeof(struct ethhdr) };
	struct hdr_cursor *nh = &cur;
	__be16 proto;

	if (nh->pos > data_end)
		return CLASS_L2_TRUNCATED;
	proto = ethertype_at(data + __builtin_offsetof(struct ethhdr, h_proto));
	/* Untagged IPv4, the common case, first. */
	if (proto == bpf_htons(ETH_P_IP))
		return classify_ipv4(nh, data_end);

	/* Up to two VLAN tags, 802.1Q or QinQ; a third is vlan_overflow. */
	if (is_vlan(proto)) {
		if (skip_vlan(nh, data_end, &proto))
			return CLASS_L2_TRUNCATED;
		if (is_vlan(proto) && skip_vlan(nh, data_end, &proto))
			return CLASS_L2_TRUNCATED;
		if (proto == bpf_htons(ETH_P_IP))
			return classify_ipv4(nh, data_end);
	}
	if (proto == bpf_htons(ETH_P_IPV6))
		return classify_ipv6(nh, data_end);
	if (proto == bpf_htons(ETH_P_ARP))
		return CLASS_L2_ARP;
	if (is_vlan(proto))
		return CLASS_L2_VLAN_OVERFLOW;
	return CLASS_L2_OTHER;
}

/*
 * The IP header of a frame classified as IP: found again behind up to two
 * VLAN tags, so that frames without rules carry nothing out of classify.
 */
static __always_inline void *ip_header(void *data, void *data_end)
{
	void *pos = data + sizeof(struct ethhdr);
	__be16 proto;
	int i;

	if (pos > data_end)
		return NULL;
	proto = ethertype_at(data + __builtin_offsetof(struct ethhdr, h_proto));
#pragma unroll
	for (i = 0; i < 2; i++) {
		struct vlan_hdr *vh = pos;

		if (!is_vlan(proto))
			break;
		if ((void *)(vh + 1) > data_end)
			return NULL;
		proto = ethertype_at(&vh->h_vlan_encapsulated_proto);
		pos = vh + 1;
	}
	return pos;
}

/*
 * The mask of the longest prefix containing addr (4 words, network order;
 * IPv4 in the first), miss when none does.
 */
static __always_inline __u64 prefix_mask(const __u32 *addr, int v6, const int dir, __u64 miss)
{
	__u32 idx = (bpf_ntohl(addr[0]) >> 16) + (v6 ? PREFIX_BUCKETS : 0) + dir * 2 * PREFIX_BUCKETS;
	struct prefix_bucket *b = bpf_map_lookup_elem(&prefix_buckets, &idx);
	struct prefix_key key;
	__u64 *v;
	int i, w;

	if (!b)
		return miss;
	if (b->trie) {
		if (v6) {
			struct lpm_v6_key k = { .prefixlen = 8 + 128, .dir = dir };

			__builtin_memcpy(k.addr, addr, 16);
			v = bpf_map_lookup_elem(&prefix_v6, &k);
		} else {
			struct lpm_v4_key k = { .prefixlen = 8 + 32, .dir = dir };

			__builtin_memcpy(k.addr, addr, 4);
			v = bpf_map_lookup_elem(&prefix_v4, &k);
		}
		return v ? *v : b->mask;
	}
#pragma unroll
	for (i = 0; i < PREFIX_BUCKET_LENS; i++) {
		__u32 len;

		if (i >= b->n)
			break;
		len = b->lens[i];
		key.len = len | (v6 ? PREFIX_KEY_V6 : 0) | (dir ? PREFIX_KEY_DST : 0);
#pragma unroll
		for (w = 0; w < 4; w++) {
			int bits = (int)len - 32 * w;
			__u32 m = bits >= 32 ? 0xFFFFFFFF : bits <= 0 ? 0 : ~0U << (32 - bits);

			key.addr[w] = addr[w] & bpf_htonl(m);
		}
		v = bpf_map_lookup_elem(&prefix_exact, &key);
		if (v)
			return *v;
	}
	return b->mask;
}

/* Masks of the rules a frame's addresses satisfy. */
static __always_inline __u64 prefix_masks(const __u32 *src, const __u32 *dst, int v6)
{
	__u64 m = ~0ULL;

	if (rule_dims & RULE_DIM_SRC)
		m &= prefix_mask(src, v6, PREFIX_DIR_SRC, rule_no_src);
	if (rule_dims & RULE_DIM_DST)
		m &= prefix_mask(dst, v6, PREFIX_DIR_DST, rule_no_dst);
	return m;
}

/*
 * Masks of the rules a frame's ports satisfy. Rules with ports are limited
 * to TCP, UDP, SCTP and UDP-Lite, which all begin with the two ports; a
 * later fragment, or a header too short for them, matches none of them.
 */
static __always_inline __u64 port_masks(void *l3, void *data_end, int v6)
{
	__be16 *ports;
	__u32 key;
	__u64 m;
	__u64 *v;

	if (v6) {
		/* Walk the extension headers again, to the upper layer. */
		struct hdr_cursor nh = { .pos = l3 };

		classify_ipv6(&nh, data_end);
		if (nh.later_frag)
			return ~rule_ports;
		ports = nh.pos;
	} else {
		struct iphdr *iph = l3;

		if ((void *)(iph + 1) > data_end || (iph->frag_off & bpf_htons(0x1FFF)))
			return ~rule_ports;
		ports = (void *)iph + (iph->ihl & 0xF) * 4;
	}
	if ((void *)(ports + 2) > data_end)
		return ~rule_ports;
	key = bpf_ntohs(ports[0]);
	v = bpf_map_lookup_elem(&ports_map, &key);
	m = v ? *v : 0;
	key = PORTS + bpf_ntohs(ports[1]);
	v = bpf_map_lookup_elem(&ports_map, &key);
	return v ? m & *v : 0;
}

/* The first rule that matches an IP frame of class class, or -1. */
static __always_inline int match_rule(void *data, void *data_end, __u32 class)
{
	int v6 = class >= CLASS_IPV6;
	__u64 m = rule_proto[class & 0xFF];
	void *l3;

	if (!m)
		return -1;
	l3 = ip_header(data, data_end);
	if (!l3)
		return -1;
	if (rule_dims & (RULE_DIM_SRC | RULE_DIM_DST)) {
		__u32 src[4] = {}, dst[4] = {};

		if (v6) {
			struct ipv6hdr *ip6h = l3;

			if ((void *)(ip6h + 1) > data_end)
				return -1;
			__builtin_memcpy(src, &ip6h->saddr, 16);
			__builtin_memcpy(dst, &ip6h->daddr, 16);
		} else {
			struct iphdr *iph = l3;

			if ((void *)(iph + 1) > data_end)
				return -1;
			src[0] = iph->saddr;
			dst[0] = iph->daddr;
		}
		m &= prefix_masks(src, dst, v6);
	}
	if ((rule_dims & RULE_DIM_PORTS) && (m & rule_ports))
		m &= port_masks(l3, data_end, v6);
	if (!m)
		return -1;
	return __builtin_ctzll(m);
}

/*
 * The decision of the rules on an IP frame: 0 when no rule matches, else
 * the verdict (as in verdicts) | (rule + 1) << 8. Not inlined: the frame's
 * path keeps its registers when there are no rules, and only a frame of a
 * program with rules pays the call.
 */
static __noinline __u32 rule_verdict(void *data, void *data_end, __u32 class)
{
	int rule = match_rule(data, data_end, class);
	__u32 verdict;

	if (rule < 0)
		return 0;
	verdict = (rule_drop >> rule) & 1;
	if (verdict && !dry_run)
		verdict |= VERDICT_DROP;
	return verdict | (rule + 1) << 8;
}

/*
 * Counts a frame a rule decided (ruled as rule_verdict returns it) and
 * returns its action: under its class in c when the rule gave it its
 * class's action, else under other[class] of the rule block; and under the
 * rule, always.
 */
static __always_inline int count_ruled(struct counter_block *c, __u32 *key, __u32 class, __u32 ruled, __u64 len)
{
	struct rule_block *rc = bpf_map_lookup_elem(&rule_counters, key);
	struct counter *cc;
	__u32 r = (ruled >> 8) - 1;

	if (!rc)
		return XDP_PASS;
	if ((ruled ^ verdicts[class]) & 1)
		cc = &rc->other[class];
	else
		cc = &c->class[class];
	cc->packets++;
	cc->bytes += len;
	/* Hide what clang knows of r, so the bound the verifier needs stays. */
	asm volatile("" : "+r"(r));
	r &= RULE_MAX - 1;
	rc->rule[r].packets++;
	rc->rule[r].bytes += len;
	if (ruled & VERDICT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

/*
 * The body of both programs. frags is a constant: each program is compiled
 * with its own branch only.
 */
static __always_inline int xdp_drop_frame(struct xdp_md *ctx, const int frags)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct counter_block *c;
	__u32 key = 0;
	__u32 class, ruled = 0;
	__u64 len;

	/* With fragments, data..data_end is the first buffer: headers are read there. */
	class = classify(data, data_end);
	if (class >= CLASS_COUNT)
		return XDP_PASS;
	/* Before the rules: data and data_end need not outlive their call. */
	if (frags)
		len = bpf_xdp_get_buff_len(ctx);
	else
		len = data_end - data;
	/* Rules see IP frames whose headers are whole. */
	if (rule_count && class < CLASS_IPV4_TRUNCATED)
		ruled = rule_verdict(data, data_end, class);

	if (queue_slots) {
		key = ctx->rx_queue_index;
		if (key >= queue_slots)
			key = queue_slots - 1;
	}
	c = bpf_map_lookup_elem(&counters, &key);
	if (!c)
		return XDP_PASS;
	if (ruled)
		return count_ruled(c, &key, class, ruled, len);
	/* Its class's action: the counter's address needs no verdict. */
	c->class[class].packets++;
	c->class[class].bytes += len;
	if (verdicts[class] & VERDICT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

/* Single-buffer XDP: every frame is in data..data_end. */
SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return xdp_drop_frame(ctx, 0);
}

/*
 * Multi-buffer XDP (5.18+), for devices whose MTU needs more than one buffer
 * per frame: the loader uses it only there, as the helper call costs every frame.
 */
SEC("xdp.frags")
int xdp_drop_frags(struct xdp_md *ctx)
{
	return xdp_drop_frame(ctx, 1);
}

char __license[] SEC("license") = "Dual BSD/GPL";
