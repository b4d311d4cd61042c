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
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdp_drop.h"
#include "sample.h"

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

/*
 * Where parsing got to. l3 and later_frag are read by the rules and bans
 * only: in the program without either clang drops them.
 */
struct hdr_cursor {
	void *pos;      /* the header of the frame's class; for IPv6, past the extension headers */
	void *l3;       /* the IP header */
	int later_frag; /* an IPv6 fragment past the first: no L4 header */
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

/*
 * A dry run counts drops as such but passes every frame. Read only by the
 * limiter: otherwise the loader leaves VERDICT_DROP out of verdicts and
 * rule_decisions.
 */
volatile const __u8 dry_run;

/*
 * Rules, compiled by the loader into one 64-bit mask per dimension value:
 * bit i is set when rule i is satisfied by that value (a rule that does not
 * use a dimension is satisfied by every value of it). The masks of a frame's
 * values are ANDed; the lowest bit left is the first rule that matches.
 * Only the programs with rules read them, and the loader loads those only
 * when there are rules (rule_count, not read by the program, records how
 * many); rule_dims prunes the lookups of dimensions no rule uses.
 */
volatile const __u32 rule_count;
volatile const __u8 rule_dims;
volatile const __u64 rule_proto[256]; /* by IP protocol */
/*
 * The decision of each rule, verdict (as in verdicts) | (rule + 1) << 8,
 * indexed by the de Bruijn index of the rule's bit (rule_index): the lowest
 * bit of a mask finds its rule's decision in one load.
 */
volatile const __u32 rule_decisions[RULE_MAX];
volatile const __u64 rule_no_src;     /* rules without a source prefix: the mask of an address no prefix holds */
volatile const __u64 rule_no_dst;     /* rules without a destination prefix: likewise */
volatile const __u64 rule_ports;      /* rules with a port condition */
volatile const __u32 prefix_hash_shift; /* 64 - log2(slots of prefix_exact's hash) */
/*
 * The secret of prefix_exact's hash, drawn by the loader at every load: a
 * rule set cannot be chosen to collide in a table it cannot predict.
 */
volatile const __u64 prefix_hash_key[PREFIX_HASH_KEY_WORDS]; /* the first odd */

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
 * the lengths of the longer ones in them, looked up by exact match in
 * prefix_exact, a hash table in an array (see prefix_find); the tries, by
 * family, serve the buckets with too many lengths. Sized by the loader; one
 * entry when unused.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct prefix_bucket);
	__uint(max_entries, 1);
} prefix_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct prefix_slot);
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

/*
 * Bans (see xdp_drop.h), shared by the programs of an instance and sized
 * by the loader; read only by the programs with bans.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ban_v4_key);
	__type(value, struct ban_value);
	__uint(max_entries, 1);
} ban_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ban_v6_key);
	__type(value, struct ban_value);
	__uint(max_entries, 1);
} ban_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ban_bucket);
	__uint(max_entries, 2 * BAN_BUCKETS);
} ban_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, BAN_CLOCK_WORD + 1);
} ban_bloom SEC(".maps");

/* The interface's frames bans decided; its own, as counters are. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct ban_block);
	__uint(max_entries, 1);
} ban_counters SEC(".maps");

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

	nh->l3 = iph;
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

	nh->l3 = ip6h;
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

static __always_inline __u32 classify(void *data, void *data_end, struct hdr_cursor *nh)
{
	__be16 proto;

	nh->pos = data + sizeof(struct ethhdr);
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

/* Multiplier of the exact-prefix hash's last step (2^64 / golden ratio); the loader hashes alike. */
#define PREFIX_HASH_MUL 0x9E3779B97F4A7C15ULL

/*
 * The slot where the search for an exact prefix starts. Its length word and
 * address words (network order; an IPv4 prefix has one), as numbers, are
 * hashed with the secret key by multiply-shift, universal for a random key:
 * an IPv4 prefix's 64 bits (length above address) times an odd key word, an
 * IPv6 prefix's five 32-bit words each times a 64-bit key word, summed (the
 * products are independent, not a chain). Two distinct prefixes collide in
 * the 64 bits with chance at most 2^-33 whatever they are (never for IPv4),
 * and in the top bits with chance about that of random slots, so no set of
 * prefixes crowds the table but by luck. The sum is folded and multiplied by
 * the golden ratio, whose top bits spread what regularity is left.
 */
static __always_inline __u32 prefix_home(__u32 len, const __u32 *key, const int v6)
{
	__u64 x;

	if (v6)
		x = len * prefix_hash_key[0] + bpf_ntohl(key[0]) * prefix_hash_key[1] +
		    bpf_ntohl(key[1]) * prefix_hash_key[2] + bpf_ntohl(key[2]) * prefix_hash_key[3] +
		    bpf_ntohl(key[3]) * prefix_hash_key[4];
	else
		x = ((__u64)len << 32 | bpf_ntohl(key[0])) * prefix_hash_key[0];
	/* Without folding the high half in, sums a constant apart would get homes a constant apart. */
	x ^= x >> 32;
	return (x * PREFIX_HASH_MUL) >> prefix_hash_shift;
}

/*
 * The slot of an exact prefix (len | flags, masked address), NULL when
 * absent. The loader places every prefix within PREFIX_PROBES slots of its
 * home and leaves no gap before it, so the search ends there or at a gap.
 * An array lookup, unlike a hash map's, costs no call.
 */
static __always_inline struct prefix_slot *prefix_find(__u32 len, const __u32 *key, const int v6)
{
	__u32 idx = prefix_home(len, key, v6);
	int i;

	for (i = 0; i < PREFIX_PROBES; i++, idx++) {
		struct prefix_slot *s = bpf_map_lookup_elem(&prefix_exact, &idx);

		if (!s || !s->len)
			return NULL;
		if (s->len == len && s->addr[0] == key[0] &&
		    (!v6 || (s->addr[1] == key[1] && s->addr[2] == key[2] && s->addr[3] == key[3])))
			return s;
	}
	return NULL;
}

/*
 * The mask of the longest prefix containing addr (network order words, one
 * for IPv4), miss when none does. v6 and dir are constants: each use is
 * compiled for its family and direction.
 */
static __always_inline __u64 prefix_mask(const __u32 *addr, const int v6, const int dir, __u64 miss)
{
	__u32 idx = (bpf_ntohl(addr[0]) >> 16) + (v6 ? PREFIX_BUCKETS : 0) + dir * 2 * PREFIX_BUCKETS;
	struct prefix_bucket *b = bpf_map_lookup_elem(&prefix_buckets, &idx);
	struct prefix_slot *s;
	__u32 key[4];
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
#pragma unroll
		for (w = 0; w < (v6 ? 4 : 1); w++) {
			int bits = (int)len - 32 * w;
			__u32 m = bits >= 32 ? 0xFFFFFFFF : bits <= 0 ? 0 : ~0U << (32 - bits);

			key[w] = addr[w] & bpf_htonl(m);
		}
		s = prefix_find(len | (v6 ? PREFIX_KEY_V6 : 0) | (dir ? PREFIX_KEY_DST : 0), key, v6);
		if (s)
			return s->mask;
	}
	return b->mask;
}

/*
 * Narrows m, the rules a frame's protocol satisfies, by its addresses and
 * ports: the lookups of dimensions no rule uses are pruned, and a lookup is
 * skipped when every rule left ignores it. Rules with ports are limited to
 * TCP, UDP, SCTP and UDP-Lite, which all begin with the two ports; a later
 * fragment, or a header too short for them, satisfies none of them.
 */
static __always_inline __u64 match_ip(struct hdr_cursor *nh, void *data_end, __u64 m, const int v6)
{
	/* Each constant read once: clang reads a volatile at every use. */
	__u8 dims = rule_dims;
	__u64 with_ports = rule_ports;

	if ((dims & RULE_DIM_PORTS) && (m & with_ports)) {
		__be16 *ports;
		int later;
		__u32 key;
		__u64 *v;

		if (v6) {
			ports = nh->pos;
			later = nh->later_frag;
		} else {
			struct iphdr *iph = nh->l3;

			ports = (void *)iph + ((*(__u8 *)iph & 0xF) << 2);
			later = iph->frag_off & bpf_htons(0x1FFF);
		}
		if (later || (void *)(ports + 2) > data_end) {
			m &= ~with_ports;
		} else {
			if (dims & RULE_DIM_SPORT) {
				key = bpf_ntohs(ports[0]);
				v = bpf_map_lookup_elem(&ports_map, &key);
				m &= v ? *v : 0;
			}
			if (dims & RULE_DIM_DPORT) {
				key = PORTS + bpf_ntohs(ports[1]);
				v = bpf_map_lookup_elem(&ports_map, &key);
				m &= v ? *v : 0;
			}
		}
	}
	if ((dims & RULE_DIM_SRC) && (m & ~rule_no_src)) {
		if (v6)
			m &= prefix_mask((__u32 *)&((struct ipv6hdr *)nh->l3)->saddr, 1, PREFIX_DIR_SRC, rule_no_src);
		else
			m &= prefix_mask(&((struct iphdr *)nh->l3)->saddr, 0, PREFIX_DIR_SRC, rule_no_src);
	}
	if ((dims & RULE_DIM_DST) && (m & ~rule_no_dst)) {
		if (v6)
			m &= prefix_mask((__u32 *)&((struct ipv6hdr *)nh->l3)->daddr, 1, PREFIX_DIR_DST, rule_no_dst);
		else
			m &= prefix_mask(&((struct iphdr *)nh->l3)->daddr, 0, PREFIX_DIR_DST, rule_no_dst);
	}
	return m;
}

/* Multiplier of rule_index: a de Bruijn sequence for 64 bits; the loader indexes alike. */
#define RULE_DEBRUIJN 0x022FDD63CC95386DULL

/* The index of a single bit, a power of two: a distinct 0..63 for each. */
static __always_inline __u32 rule_index(__u64 bit)
{
	return (bit * RULE_DEBRUIJN) >> 58;
}

/*
 * The decision of the rules on an IP frame of class class whose headers
 * are whole: 0 when no rule matches, else the decision of the first rule
 * that matches, the lowest bit left.
 */
static __always_inline __u32 rule_verdict(struct hdr_cursor *nh, void *data_end, __u32 class)
{
	__u64 m = rule_proto[class & 0xFF];

	if (!m)
		return 0;
	if (class >= CLASS_IPV6)
		m = match_ip(nh, data_end, m, 1);
	else
		m = match_ip(nh, data_end, m, 0);
	if (!m)
		return 0;
	return rule_decisions[rule_index(m & -m)];
}

/*
 * Counts a frame a rule decided (ruled as rule_verdict returns it) and
 * returns its action: under its class in c when the rule gave it its
 * class's action, else under other[class] of the rule block; and under the
 * rule, always; with limits, under limited[] too when over budget.
 */
static __always_inline int count_ruled(struct counter_block *c, __u32 *key, __u32 class, __u32 ruled, __u64 len,
				       const int limits)
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
	if (limits && (ruled & VERDICT_LIMITED)) {
		rc->limited[r].packets++;
		rc->limited[r].bytes += len;
	}
	if (ruled & VERDICT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

#include "limit.h"

/*
 * Bans in dry run: a banned frame is counted would_drop and goes on as if
 * unbanned. In a section of its own: the programs without bans keep their
 * offsets in .rodata, and so their instructions.
 */
volatile const __u8 ban_dry_run SEC(".rodata.bans");
/* Tests set it to take the bans' time from ban_bloom's BAN_CLOCK_WORD instead of the kernel's clock. */
volatile const __u8 ban_fake_clock SEC(".rodata.bans");
/* Not read: carries enum ban_limits into BTF for bpf2go -type. */
volatile const enum ban_limits ban_limit SEC(".rodata.bans") = BAN_BUCKETS;

/*
 * ban_top's table: the bit whose de Bruijn index (rule_index's) is i. In
 * the bans' section, as ban_dry_run.
 */
static const __u8 ban_debruijn[64] SEC(".rodata.bans") = {
#define B(i) [((1ULL << (i)) * RULE_DEBRUIJN) >> 58] = (i)
	B(0),  B(1),  B(2),  B(3),  B(4),  B(5),  B(6),  B(7),  B(8),  B(9),  B(10), B(11), B(12),
	B(13), B(14), B(15), B(16), B(17), B(18), B(19), B(20), B(21), B(22), B(23), B(24), B(25),
	B(26), B(27), B(28), B(29), B(30), B(31), B(32), B(33), B(34), B(35), B(36), B(37), B(38),
	B(39), B(40), B(41), B(42), B(43), B(44), B(45), B(46), B(47), B(48), B(49), B(50), B(51),
	B(52), B(53), B(54), B(55), B(56), B(57), B(58), B(59), B(60), B(61), B(62), B(63),
#undef B
};

/* The index of the highest bit of x, not 0, without a branch: the verifier sees one path. */
static __always_inline __u32 ban_top(__u64 x)
{
	x |= x >> 1;
	x |= x >> 2;
	x |= x >> 4;
	x |= x >> 8;
	x |= x >> 16;
	x |= x >> 32;
	x ^= x >> 1;
	return ban_debruijn[(x * RULE_DEBRUIJN) >> 58];
}

/* Multipliers of ban_bloom's hash, odd; the loader hashes alike. */
#define BAN_HASH_K0 0x9E3779B97F4A7C15ULL
#define BAN_HASH_K1 0xC2B2AE3D27D4EB4FULL
#define BAN_HASH_K2 0x165667B19E3779F9ULL
#define BAN_HASH_K3 0xD6E8FEB86659FD93ULL
#define BAN_HASH_K4 0xFF51AFD7ED558CCDULL

/*
 * Whether ban_bloom has the bit of an entry of length len (| BAN_KEY_V6)
 * and masked address key (as in the hash's keys): when not, no entry is.
 * The hash is fixed: a set of bans built to collide costs lookups, never
 * a wrong verdict.
 */
static __always_inline int ban_maybe(__u32 len, const __u32 *key, int v6)
{
	__u64 x;
	__u32 idx;
	__u64 *w;

	/* IPv4: one multiply of length and address; IPv6: the words' products summed and folded. */
	if (v6) {
		x = len * BAN_HASH_K0 + key[0] * BAN_HASH_K1 + key[1] * BAN_HASH_K2 + key[2] * BAN_HASH_K3 +
		    key[3] * BAN_HASH_K4;
		x ^= x >> 32;
		x *= BAN_HASH_K0;
	} else {
		x = ((__u64)len << 32 | key[0]) * BAN_HASH_K0;
	}
	x >>= 64 - BAN_BLOOM_BITS;
	idx = x >> 6;
	w = bpf_map_lookup_elem(&ban_bloom, &idx);
	return w && (*w >> (x & 63)) & 1;
}

/* What probing one length found. */
enum ban_probe_result {
	BAN_NONE = 0,
	BAN_ALLOWED,
	BAN_FOUND,
};

/*
 * In a ban found, besides its origin + 1: it is a limit claim the frame is
 * over, from which an established TCP socket's frame is exempt (ban_exempt).
 */
#define BAN_OVER_LIMIT 0x8
/* ban_lookup's flags: the family, and that the frame is exempt from limit claims. */
#define BAN_LOOKUP_V6 0x1
#define BAN_LOOKUP_EXEMPT 0x2
/* What ban_lookup gives for an allowed source: no ban, and FlowSpec skips it too. */
#define BAN_IS_ALLOWED 0x10

/* The time bans' ends and rates are read against. */
static __always_inline __u64 ban_now(void)
{
	__u32 k = BAN_CLOCK_WORD;
	__u64 *t;

	if (ban_fake_clock) {
		t = bpf_map_lookup_elem(&ban_bloom, &k);
		return t ? *t : 0;
	}
	/* The coarse clock, CLOCK_MONOTONIC_COARSE: a ban may last a tick longer, not a call's cost more. */
	return bpf_ktime_get_coarse_ns();
}

/*
 * Whether a frame is within the rate of ban v's limit claim, taking one
 * frame from it when it is (limit.h's GCRA). A limit's burst lasts a tenth
 * of a second at least, or its interval is as long: the coarse clock's
 * tick is fine enough.
 */
static __always_inline int ban_within(struct ban_value *v, __u64 now)
{
	__u64 interval = v->interval, tat = *(volatile __u64 *)&v->tat;

	if (!interval || tat > now + v->tau)
		return 0;
	limit_take(&v->tat, tat, now, interval);
	return 1;
}

/*
 * Probes length len for an entry containing addr: an allowed prefix, a ban
 * in force that drops the frame (its origin + 1 in *found, with
 * BAN_OVER_LIMIT for a limit claim), or nothing (an expired ban,
 * or a limit the frame is within or exempt from, counts as nothing). The
 * clock is read once, at the first ban found.
 */
static __always_inline int ban_probe_len(__u32 len, const __u32 *addr, int v6, __u64 *now, int *found,
					 int exempt)
{
	struct ban_value *v;

	if (v6) {
		struct ban_v6_key k = { .len = len };
		int j;

#pragma unroll
		for (j = 0; j < 4; j++) {
			int bits = (int)len - 32 * j;
			__u32 m = bits >= 32 ? 0xFFFFFFFF : bits <= 0 ? 0 : ~0U << (32 - bits);

			k.addr[j] = addr[j] & bpf_htonl(m);
		}
		if (!ban_maybe(len | BAN_KEY_V6, k.addr, 1))
			return BAN_NONE;
		v = bpf_map_lookup_elem(&ban_v6, &k);
	} else {
		__u32 m = len >= 32 ? 0xFFFFFFFF : ~0U << (32 - len);
		struct ban_v4_key k = { .len = len, .addr = addr[0] & bpf_htonl(m) };

		if (!ban_maybe(len, &k.addr, 0))
			return BAN_NONE;
		v = bpf_map_lookup_elem(&ban_v4, &k);
	}
	if (!v)
		return BAN_NONE;
	if (v->kind == BAN_KIND_ALLOW)
		return BAN_ALLOWED;
	if (!*now)
		*now = ban_now();
	if (v->end <= *now)
		return BAN_NONE;
	if (v->drop_end > *now) {
		*found = (v->origin & (BAN_ORIGINS - 1)) + 1;
		return BAN_FOUND;
	}
	/* Limit claims only: a frame within the rate goes on to shorter bans, then the rules. */
	if (exempt || ban_within(v, *now))
		return BAN_NONE;
	*found = ((v->limit_origin & (BAN_ORIGINS - 1)) + 1) | BAN_OVER_LIMIT;
	return BAN_FOUND;
}

/*
 * Probes the lengths of the bitmap w (bit i: length base + i + 1) longest
 * first: the first allowed prefix or ban in force decides.
 */
static __always_inline int ban_probe_bits(__u64 w, __u32 base, const __u32 *addr, int v6, __u64 *now,
					  int *found, int exempt)
{
	int i, r;

#pragma clang loop unroll(disable)
	for (i = 0; i < 64; i++) {
		__u32 bit;

		if (!w)
			break;
		bit = ban_top(w);
		w &= ~(1ULL << bit);
		r = ban_probe_len(base + bit + 1, addr, v6, now, found, exempt);
		if (r != BAN_NONE)
			return r;
	}
	return BAN_NONE;
}

/*
 * The ban in force on a source address (network order words, a0 alone for
 * IPv4) that drops the frame: as ban_probe_len's *found; 0 when none
 * does (none is in force, the frame is within a limit, or exempt from
 * limits, or the address is allowed).
 */
static __always_inline int ban_lookup_inline(__u32 a0, __u32 a1, __u32 a2, __u32 a3, const int v6, int exempt)
{
	__u32 addr[4] = { a0, a1, a2, a3 };
	struct ban_bucket *b;
	int ban = 0;
	__u64 now = 0;
	__u32 idx, h = bpf_ntohl(a0);
	int r;

	if (v6)
		idx = BAN_BUCKETS + ((h ^ (h >> 16) ^ (bpf_ntohl(a1) >> 16)) & 0xFFFF);
	else
		idx = h >> 16;
	b = bpf_map_lookup_elem(&ban_buckets, &idx);
	if (!b)
		return 0;
	/* Each word loaded once (volatile): a length in the bucket before and after a rewrite is in what is probed. */
	if (v6) {
		r = ban_probe_bits(*(volatile __u64 *)&b->bits[1], 64, addr, 1, &now, &ban, exempt);
		if (r == BAN_NONE)
			r = ban_probe_bits(*(volatile __u64 *)&b->bits[0], 0, addr, 1, &now, &ban, exempt);
	} else {
		r = ban_probe_bits(*(volatile __u64 *)&b->bits[0], 0, addr, 0, &now, &ban, exempt);
	}
	if (r == BAN_ALLOWED)
		return BAN_IS_ALLOWED;
	return r == BAN_FOUND ? ban : 0;
}

/*
 * ban_lookup_inline as a function of its own, which the verifier checks
 * once, not once for every path of the rules around it (inlined there it
 * makes too many); its arguments are scalars, as it needs.
 */
__noinline int ban_lookup(__u32 a0, __u32 a1, __u32 a2, __u32 a3, __u32 flags)
{
	int exempt = !!(flags & BAN_LOOKUP_EXEMPT);

	if (flags & BAN_LOOKUP_V6)
		return ban_lookup_inline(a0, a1, a2, a3, 1, exempt);
	return ban_lookup_inline(a0, 0, 0, 0, 0, exempt);
}

/*
 * The ban in force on the source of an IP frame of class class whose
 * headers are whole, as ban_lookup gives it: for IPv4 inlined, which saves
 * a call, in the programs without rules, whose IPv4 paths are few enough to
 * verify (IPv6's extension headers make too many).
 */
static __always_inline int ban_find(struct hdr_cursor *nh, __u32 class, const int rules)
{
	if (class >= CLASS_IPV6) {
		struct ipv6hdr *ip6h = nh->l3;
		__u32 *a = (__u32 *)&ip6h->saddr;

		return ban_lookup(a[0], a[1], a[2], a[3], BAN_LOOKUP_V6);
	}
	if (!rules)
		return ban_lookup_inline(((struct iphdr *)nh->l3)->saddr, 0, 0, 0, 0, 0);
	return ban_lookup(((struct iphdr *)nh->l3)->saddr, 0, 0, 0, 0);
}

/*
 * Whether a TCP frame of class class, whose IP header is at l3 and the
 * header of its class at pos (offsets from data; pos | 1 << 16 for a later
 * IPv6 fragment), belongs to an established TCP socket of the host (its
 * netns's). A later fragment, or a TCP header cut short, is not looked up.
 */
static __always_inline int tcp_established(struct xdp_md *ctx, __u32 class, __u32 l3, __u32 pos)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	/* Offsets into an XDP buffer, a page at most: the masks change nothing, and give the verifier its bounds. */
	struct ipv6hdr *ip6h = data + (l3 & 0x7FFF);
	struct iphdr *iph = data + (l3 & 0x7FFF);
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	struct tcphdr *th;
	__u32 size;
	int est;

	if (class == CLASS_IPV6 + IPPROTO_TCP) {
		th = data + (pos & 0x7FFF);
		if ((pos >> 16) || (void *)(ip6h + 1) > data_end || (void *)(th + 1) > data_end)
			return 0;
		__builtin_memcpy(t.ipv6.saddr, &ip6h->saddr, 16);
		__builtin_memcpy(t.ipv6.daddr, &ip6h->daddr, 16);
		t.ipv6.sport = th->source;
		t.ipv6.dport = th->dest;
		size = sizeof(t.ipv6);
	} else if (class == CLASS_IPV4 + IPPROTO_TCP) {
		if ((void *)(iph + 1) > data_end || (iph->frag_off & bpf_htons(0x1FFF)))
			return 0;
		th = (void *)iph + ((*(__u8 *)iph & 0xF) << 2);
		if ((void *)(th + 1) > data_end)
			return 0;
		t.ipv4.saddr = iph->saddr;
		t.ipv4.daddr = iph->daddr;
		t.ipv4.sport = th->source;
		t.ipv4.dport = th->dest;
		size = sizeof(t.ipv4);
	} else {
		return 0;
	}
	sk = bpf_skc_lookup_tcp(ctx, &t, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	est = sk->state == BPF_TCP_ESTABLISHED;
	bpf_sk_release(sk);
	return est;
}

/*
 * The ban of a frame a limit claim would drop (ban, as ban_find gives
 * it; l3 and pos as tcp_established's): when the frame is an established
 * TCP socket's, it is exempt from every limit claim, and the bans are
 * probed again for a drop claim or an allowed prefix, as for a frame
 * within the claim (the limits it is within keep their rate: it takes
 * none); else ban. A limit never starves the host's own connections,
 * whatever a forger of their source sends. A function of its own, which
 * the verifier checks once.
 */
__noinline int ban_exempt(struct xdp_md *ctx, __u32 class, __u32 l3, __u32 pos, int ban)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6h = data + (l3 & 0x7FFF);
	struct iphdr *iph = data + (l3 & 0x7FFF);
	__u32 *a;

	if (!tcp_established(ctx, class, l3, pos))
		return ban;
	if (class >= CLASS_IPV6) {
		if ((void *)(ip6h + 1) > data_end)
			return ban;
		a = (__u32 *)&ip6h->saddr;
		return ban_lookup(a[0], a[1], a[2], a[3], BAN_LOOKUP_V6 | BAN_LOOKUP_EXEMPT);
	}
	if ((void *)(iph + 1) > data_end)
		return ban;
	return ban_lookup(iph->saddr, 0, 0, 0, BAN_LOOKUP_EXEMPT);
}

#include "flowspec.h"

/*
 * Counts a frame FlowSpec dropped (would_drop in a dry run) as a drop of
 * its class: in c when that is its class's action, else under other[class]
 * of the rule block, as count_ban does.
 */
static __always_inline void count_flowspec_drop(struct counter_block *c, __u32 *key, __u32 class, __u64 len)
{
	struct rule_block *rc;
	struct counter *cc;

	if (verdicts[class] & ACTION_DROP) {
		cc = &c->class[class];
	} else {
		rc = bpf_map_lookup_elem(&rule_counters, key);
		if (!rc)
			return;
		cc = &rc->other[class];
	}
	cc->packets++;
	cc->bytes += len;
}

/*
 * Counts a frame of class class the ban of origin + 1 ban (BAN_OVER_LIMIT aside) decided, under its origin and
 * action, and under its class as a drop (in c when that is its class's
 * action, else under other[class] of the rule block); returns whether to
 * drop it. In a bans dry run it is counted would_drop only, and goes on.
 */
static __always_inline int count_ban(struct counter_block *c, __u32 *key, __u32 class, int ban, __u64 len)
{
	__u32 zero = 0;
	struct ban_block *bc = bpf_map_lookup_elem(&ban_counters, &zero);
	struct rule_block *rc;
	struct counter *cc;
	__u32 act = (ban_dry_run || dry_run) ? BAN_ACTION_WOULD_DROP : BAN_ACTION_DROP;

	if (bc) {
		cc = &bc->c[(ban - 1) & (BAN_ORIGINS - 1)][act];
		cc->packets++;
		cc->bytes += len;
	}
	if (ban_dry_run)
		return 0;
	if (verdicts[class] & ACTION_DROP) {
		cc = &c->class[class];
	} else {
		rc = bpf_map_lookup_elem(&rule_counters, key);
		if (!rc)
			return 1;
		cc = &rc->other[class];
	}
	cc->packets++;
	cc->bytes += len;
	return 1;
}

/*
 * The body of the programs. frags, rules, sample and limits are constants:
 * each program is compiled with its own branches only, so the program
 * without rules runs no rule code and keeps nothing for it, the program
 * without sampling has no sampling code, nor the one without limit rules
 * any limiter code.
 */
static __always_inline int frame_path(struct xdp_md *ctx, const int frags, const int rules, const int sample,
				      const int limits, const int bans)
{
	int ban = 0, allowed = 0, fs = 0;
	__u32 l3, pos;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor cur = {};
	struct counter_block *c;
	__u32 key = 0;
	__u32 class, ruled = 0;
	__u64 len;

	/* With fragments, data..data_end is the first buffer: headers are read there. */
	class = classify(data, data_end, &cur);
	if (class >= CLASS_COUNT)
		return XDP_PASS;
	/* Bans, then rules, see IP frames whose headers are whole. */
	if (bans && class < CLASS_IPV4_TRUNCATED) {
		/*
		 * The headers' offsets, as numbers from here on (the barrier
		 * keeps clang from reading them off pointers later): a pointer
		 * live across the lookup would multiply the states it verifies.
		 */
		l3 = cur.l3 - data;
		pos = (cur.pos - data) | cur.later_frag << 16;
		asm volatile("" : "+r"(l3), "+r"(pos));
		ban = ban_find(&cur, class, rules);
		/* Only frames a limit claim would drop get there, and only TCP ones pay for the socket lookup. */
		if (ban & BAN_OVER_LIMIT)
			ban = ban_exempt(ctx, class, l3, pos, ban);
		if (ban == BAN_IS_ALLOWED) {
			allowed = 1;
			ban = 0;
		}
		/* FlowSpec after the bans: not for an allowed source, nor a frame a ban drops. */
		if (flowspec_on && !allowed && !(ban && !ban_dry_run))
			fs = flowspec_verdict(ctx, class, l3, pos,
					      frags ? bpf_xdp_get_buff_len(ctx) : (__u64)(data_end - data));
	}
	if (rules && class < CLASS_IPV4_TRUNCATED && !(ban && !ban_dry_run) && !(fs & FS_VERDICT_DROP))
		ruled = rule_verdict(&cur, data_end, class);
	if (frags)
		len = bpf_xdp_get_buff_len(ctx);
	else
		len = data_end - data;

	if (queue_slots) {
		key = ctx->rx_queue_index;
		if (key >= queue_slots)
			key = queue_slots - 1;
	}
	c = bpf_map_lookup_elem(&counters, &key);
	if (!c)
		return XDP_PASS;
	if (bans && ban && count_ban(c, &key, class, ban, len)) {
		if (sample)
			sample_frame(ctx, class, dry_run ? ACTION_DROP : ACTION_DROP | VERDICT_DROP, len);
		return dry_run ? XDP_PASS : XDP_DROP;
	}
	if (bans && (fs & FS_VERDICT_DROP)) {
		count_flowspec_drop(c, &key, class, len);
		if (sample)
			fs_sample(ctx, class, dry_run ? ACTION_DROP : ACTION_DROP | VERDICT_DROP, len,
				  fs & FS_VERDICT_SAMPLE);
		return dry_run ? XDP_PASS : XDP_DROP;
	}
	if (limits && (ruled & VERDICT_LIMIT))
		ruled = limit_decide(&cur, class, ruled);
	if (ruled) {
		int act = count_ruled(c, &key, class, ruled, len, limits);

		if (sample)
			fs_sample(ctx, class, limits ? ruled & ~(VERDICT_LIMIT | VERDICT_LIMITED) : ruled, len,
				  fs & FS_VERDICT_SAMPLE);
		return act;
	}
	/* Its class's action: the counter's address needs no verdict. */
	c->class[class].packets++;
	c->class[class].bytes += len;
	if (sample)
		fs_sample(ctx, class, verdicts[class], len, fs & FS_VERDICT_SAMPLE);
	if (verdicts[class] & VERDICT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

/*
 * Twelve programs, of which the loader loads one: without rules, with
 * rules, with limit rules among them; single- or multi-buffer; with or
 * without sampling. Each gets the kernel name xdp_drop.
 */

/* Single-buffer XDP: every frame is in data..data_end. */
SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 0, 0, 0, 0);
}

/*
 * Multi-buffer XDP (5.18+), for devices whose MTU needs more than one buffer
 * per frame: the loader uses it only there, as the helper call costs every frame.
 */
SEC("xdp.frags")
int xdp_drop_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 0, 0, 0, 0);
}

SEC("xdp")
int xdp_drop_rules(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 1, 0, 0, 0);
}

SEC("xdp.frags")
int xdp_drop_rules_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 1, 0, 0, 0);
}

/*
 * The same four with sampling (sample.h), loaded only when sample_rate is
 * set.
 */
SEC("xdp")
int xdp_drop_sample(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 0, 1, 0, 0);
}

SEC("xdp.frags")
int xdp_drop_sample_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 0, 1, 0, 0);
}

SEC("xdp")
int xdp_drop_rules_sample(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 1, 1, 0, 0);
}

SEC("xdp.frags")
int xdp_drop_rules_sample_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 1, 1, 0, 0);
}

/*
 * With limit rules: the limiter's code is in these four only, with and
 * without sampling.
 */
SEC("xdp")
int xdp_drop_limits(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 1, 0, 1, 0);
}

SEC("xdp.frags")
int xdp_drop_limits_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 1, 0, 1, 0);
}

SEC("xdp")
int xdp_drop_limits_sample(struct xdp_md *ctx)
{
	return frame_path(ctx, 0, 1, 1, 1, 0);
}

SEC("xdp.frags")
int xdp_drop_limits_sample_frags(struct xdp_md *ctx)
{
	return frame_path(ctx, 1, 1, 1, 1, 0);
}

/*
 * The twelve again with bans (Policy.Bans), loaded only when bans are on:
 * without them no program has any ban code.
 */
#define BANS_PROGRAM(name, sec, frags, rules, sample, limits) \
	SEC(sec)                                              \
	int name(struct xdp_md *ctx)                          \
	{                                                     \
		return frame_path(ctx, frags, rules, sample, limits, 1); \
	}

BANS_PROGRAM(xdp_drop_bans, "xdp", 0, 0, 0, 0)
BANS_PROGRAM(xdp_drop_bans_frags, "xdp.frags", 1, 0, 0, 0)
BANS_PROGRAM(xdp_drop_rules_bans, "xdp", 0, 1, 0, 0)
BANS_PROGRAM(xdp_drop_rules_bans_frags, "xdp.frags", 1, 1, 0, 0)
BANS_PROGRAM(xdp_drop_sample_bans, "xdp", 0, 0, 1, 0)
BANS_PROGRAM(xdp_drop_sample_bans_frags, "xdp.frags", 1, 0, 1, 0)
BANS_PROGRAM(xdp_drop_rules_sample_bans, "xdp", 0, 1, 1, 0)
BANS_PROGRAM(xdp_drop_rules_sample_bans_frags, "xdp.frags", 1, 1, 1, 0)
BANS_PROGRAM(xdp_drop_limits_bans, "xdp", 0, 1, 0, 1)
BANS_PROGRAM(xdp_drop_limits_bans_frags, "xdp.frags", 1, 1, 0, 1)
BANS_PROGRAM(xdp_drop_limits_sample_bans, "xdp", 0, 1, 1, 1)
BANS_PROGRAM(xdp_drop_limits_sample_bans_frags, "xdp.frags", 1, 1, 1, 1)

char __license[] SEC("license") = "Dual BSD/GPL";
