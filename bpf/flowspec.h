/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * FlowSpec rules (RFC 8955, RFC 8956), included by xdp_drop.c after the
 * bans: compiled into the bans programs, and run only when the loader sets
 * flowspec_on (else the verifier removes it all).
 *
 * Classification by bit vectors (Lakshman and Stiliadis): per family up to
 * FS_WORDS_MAX * 64 rules, rule i's bit i, i its priority (lowest first).
 * Each dimension (protocol, ports, ICMP, TCP flags, length, DSCP, fragment,
 * flow label, prefixes) maps a frame's value to an equivalence class, whose
 * row is the bitmap of the rules that value satisfies (a rule without the
 * component in every row); a frame without the field (no ports, no ICMP,
 * no TCP header) takes the dimension's absent row, of the rules without
 * the component only. The rows of the dimensions some rule uses are ANDed:
 * the cost is one lookup and fs_table.words ANDs (the set's) a dimension,
 * whatever the terms. The bits left are the rules that match, applied in
 * order: the first, and while each has Continue the next, at most FS_CHAIN.
 *
 * Every table is there twice, by generation: user space writes the one not
 * in force, flips flowspec_ctl, then waits for a grace period (every frame
 * that read the old generation is done) before writing the old one again.
 * A frame reads the generation once: it is decided wholly by one set.
 */
#ifndef XDP_DROP_FLOWSPEC_H
#define XDP_DROP_FLOWSPEC_H

enum flowspec_limits {
	FS_WORDS_MAX = 16, /* 1024 rules a family */
	FS_CHAIN = 8,      /* rules applied to one frame at most */
	FS_SCAN = 64,      /* matching candidates looked at, per frame, at most */
	FS_LABELS = 2048,  /* flow label boundaries a family */
	FS_GENS = 2,
	FS_IPV6_EXT_MAX = 8,
};

/* The dimensions; bit d of fs_table.dims when some rule uses dimension d. */
enum flowspec_dims {
	FS_DIM_PROTO = 0,
	FS_DIM_PORT,
	FS_DIM_DPORT,
	FS_DIM_SPORT,
	FS_DIM_ICMP_TYPE,
	FS_DIM_ICMP_CODE,
	FS_DIM_TCP_FLAGS,
	FS_DIM_LENGTH,
	FS_DIM_DSCP,
	FS_DIM_FRAG,
	FS_DIM_LABEL,
	FS_DIM_DST,
	FS_DIM_SRC,
	FS_DIMS,
};

enum flowspec_bits {
	FS_ACT_ACCEPT = 0,
	FS_ACT_DROP = 1,
	FS_ACT_LIMIT = 2,
	/* fs_rule.flags */
	FS_RULE_CONTINUE = 1,
	FS_RULE_SAMPLE = 2,
	FS_RULE_DST_OFFSET = 4, /* an IPv6 destination with an offset: checked against dst_mask/dst_pat */
	FS_RULE_SRC_OFFSET = 8,
	FS_RULE_BYTES = 16, /* the limit counts bytes, not frames */
	/* flowspec_verdict's result */
	FS_VERDICT_MATCH = 1,
	FS_VERDICT_DROP = 2,   /* counted a drop (would_drop in a dry run) */
	FS_VERDICT_SAMPLE = 4, /* to the sampler, past its countdown */
	/* the fragment bits (RFC 8955 4.2.2.12) */
	FS_FRAG_DF = 1,
	FS_FRAG_ISF = 2,
	FS_FRAG_FF = 4,
	FS_FRAG_LF = 8,
};

/*
 * One generation of one family's tables (flowspec_tables[gen * 2 + fam]):
 * the class of every value of each dimension, and where the rows of each
 * dimension begin in flowspec_rows.
 */
struct fs_table {
	__u32 dims;              /* bit d: dimension d is looked up; 0: no rule */
	__u32 rule_base;         /* flowspec_rules index of rule 0 */
	__u32 words;             /* words of a row the set uses: its rules / 64, rounded up, 1 to flowspec_words */
	__u32 pad0;
	__u32 base[FS_DIMS];     /* flowspec_rows index of class 0 */
	__u32 absent[FS_DIMS];   /* the row of a frame without the field; prefixes: of an address no prefix holds */
	__u32 nlabels;           /* label_bound entries */
	__u16 proto[256];
	__u16 port[65536];       /* either port, looked up with both */
	__u16 dport[65536];
	__u16 sport[65536];
	__u16 length[65536];
	__u16 icmp_type[256];
	__u16 icmp_code[256];
	__u16 tcp_flags[4096];
	__u16 dscp[64];
	__u16 frag[16];
	__u16 label_class[FS_LABELS + 1]; /* by how many bounds are <= the label */
	__u16 pad;
	__u32 label_bound[FS_LABELS];     /* ascending */
};

/* A rule, by generation, family and order (fs_table.rule_base + i). */
struct fs_rule {
	__u32 slot; /* its counters and GCRA cell: stable across sets */
	__u8 action;
	__u8 flags;
	__u16 pad;
	__u64 cost; /* FS_ACT_LIMIT: ns of the cell per frame or byte, << 16 */
	__u64 tau;  /* ns of burst */
	__u32 dst_mask[4], dst_pat[4]; /* network order words */
	__u32 src_mask[4], src_pat[4];
};

/* A rule's frames on one interface and CPU: matched, and of them dropped. */
struct fs_count {
	__u64 packets;
	__u64 bytes;
	__u64 dropped_packets;
	__u64 dropped_bytes;
};

/* A rule's GCRA cell, a cache line of its own, shared by all CPUs and interfaces. */
struct fs_cell {
	__u64 tat;
	__u64 pad[7];
};

volatile const __u8 flowspec_on SEC(".rodata.bans");
/* Words of a row: rules a family / 64, rounded up; the rows' value size is this * 8. */
volatile const __u32 flowspec_words SEC(".rodata.bans");
/*
 * The BGP sessions FlowSpec arrives on, which it never sees: a TCP frame
 * from a peer's address with the peer's port as its source or destination
 * port (the peer's when the host connects out, the host's listening port
 * when the peer connects in). Set at load: the peers are config.
 */
#define FS_EXEMPT_MAX 16
struct fs_exempt {
	__u32 addr[4]; /* network order; an IPv4 address in addr[0], the rest 0 */
	__u16 port;
	__u8 v6;
	__u8 pad;
};
volatile const __u32 flowspec_exempt_n SEC(".rodata.bans");
volatile const struct fs_exempt flowspec_exempt[FS_EXEMPT_MAX] SEC(".rodata.bans");
/* Not read: carry the enums into BTF for bpf2go -type. */
volatile const enum flowspec_limits flowspec_limit SEC(".rodata.bans") = FS_WORDS_MAX;
volatile const enum flowspec_dims flowspec_dim SEC(".rodata.bans") = FS_DIMS;
volatile const enum flowspec_bits flowspec_bit SEC(".rodata.bans") = FS_RULE_BYTES;

/* The generation in force, in bit 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} flowspec_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fs_table);
	__uint(max_entries, 2 * FS_GENS);
} flowspec_tables SEC(".maps");

/* The classes' bitmaps, flowspec_words words each (sized by the loader). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(key_size, 4);
	__uint(value_size, 8);
	__uint(max_entries, 1);
} flowspec_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fs_rule);
	__uint(max_entries, 1);
} flowspec_rules SEC(".maps");

/* Prefixes, keyed with the generation and direction (gen << 1 | dir) first; the value is a row. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_v4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} flowspec_pfx4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lpm_v6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} flowspec_pfx6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fs_cell);
	__uint(max_entries, 1);
} flowspec_cells SEC(".maps");

/*
 * A CPU's work on a frame: the accumulator of the bitmaps, the frame's
 * fields, and where the walk of the bits is. Read back from memory, they
 * are unknown to the verifier, which then checks each step once, not once
 * per value it could take.
 */
struct fs_scratch {
	__u64 acc[FS_WORDS_MAX];
	__u32 row_a[FS_DIMS + 3], row_b[FS_DIMS + 3]; /* by dimension: the rows to AND (b ORed with a: either port) */
	__u32 saddr[4], daddr[4]; /* network order */
	__u32 label;
	__u32 w, chain;
	__u16 sport, dport, length, tcp_flags;
	__u8 proto, has_ports, has_icmp, has_tcp, icmp_type, icmp_code, dscp, frag;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fs_scratch);
	__uint(max_entries, 1);
} flowspec_scratch SEC(".maps");

/*
 * Written and read by user space only: the set in force, as records by
 * slot and chunk (handed over with the maps), and the receiver's peers'
 * states, a record each. A program references them (flowspec_view) only
 * so that they are among its maps, where a view of the running instance
 * finds them by the program's map ids. Sized by the loader.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(key_size, 4);
	__uint(value_size, 8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
} flowspec_saved SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(key_size, 4);
	__uint(value_size, 8);
	__uint(max_entries, 1);
} flowspec_peers SEC(".maps");

/* Never set: the branch on it, which the verifier removes, references the maps above. */
volatile const __u8 flowspec_view SEC(".rodata.bans");

/* The interface's counters, by slot; its own, as counters are. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fs_count);
	__uint(max_entries, 1);
} flowspec_counters SEC(".maps");

/*
 * ANDs the rows sc->row_a[d] | sc->row_b[d] of the dimensions d in mask
 * into the accumulator, words words of each (copied, not ANDed, for the
 * first when copy); whether a bit is left. Inlined: no call a dimension.
 */
static __always_inline int fs_and(struct fs_scratch *sc, __u32 mask, __u32 words, int copy)
{
	__u32 fsw = flowspec_words, d, w, a, b;
	__u64 *ra, *rb, nz, v;

#pragma clang loop unroll(disable)
	for (d = 0; d < FS_DIMS; d++) {
		if (!(mask & (1 << d)))
			continue;
		a = sc->row_a[d];
		b = sc->row_b[d];
		ra = bpf_map_lookup_elem(&flowspec_rows, &a);
		rb = bpf_map_lookup_elem(&flowspec_rows, &b);
		if (!ra || !rb)
			return 0;
		nz = 0;
#pragma clang loop unroll(disable)
		for (w = 0; w < FS_WORDS_MAX; w++) {
			if (w >= fsw || w >= words)
				break;
			v = ra[w] | rb[w];
			if (!copy)
				v &= sc->acc[w];
			sc->acc[w] = v;
			nz |= v;
		}
		if (!nz)
			return 0;
		copy = 0;
	}
	return 1;
}

/* Whether the address words a match a pattern: (a ^ pat) & mask is 0 in every word. */
static __always_inline int fs_pattern(const __u32 *a, const __u32 *mask, const __u32 *pat)
{
	return !(((a[0] ^ pat[0]) & mask[0]) | ((a[1] ^ pat[1]) & mask[1]) | ((a[2] ^ pat[2]) & mask[2]) |
		 ((a[3] ^ pat[3]) & mask[3]));
}

/* The row of an address in the prefix tries of generation gen and direction dir, miss when no prefix holds it. */
static __always_inline __u32 fs_prefix(const __u32 *addr, const int v6, __u32 gen, __u32 dir, __u32 miss)
{
	__u32 *v;

	if (v6) {
		struct lpm_v6_key k = { .prefixlen = 8 + 128, .dir = gen << 1 | dir };

		__builtin_memcpy(k.addr, addr, 16);
		v = bpf_map_lookup_elem(&flowspec_pfx6, &k);
	} else {
		struct lpm_v4_key k = { .prefixlen = 8 + 32, .dir = gen << 1 | dir };

		__builtin_memcpy(k.addr, addr, 4);
		v = bpf_map_lookup_elem(&flowspec_pfx4, &k);
	}
	return v ? *v : miss;
}

/*
 * The class of label in table key: how many bounds are <= it (the bounds
 * past nlabels are 0xFFFFFFFF), by a binary search without a branch. A
 * function of its own, checked once.
 */
__noinline int fs_label(__u32 key, __u32 label)
{
	struct fs_table *t = bpf_map_lookup_elem(&flowspec_tables, &key);
	__u32 pos = 0, step;
	__u64 neg;

	if (!t)
		return 0;
#pragma clang loop unroll(disable)
	for (step = FS_LABELS / 2; step; step >>= 1) {
		neg = (__u64)((__s64)label - (__s64)t->label_bound[(pos + step - 1) & (FS_LABELS - 1)]) >> 63;
		pos += step * (1 - neg);
		pos &= FS_LABELS - 1;
	}
	return t->label_class[pos];
}

/*
 * The fragment bits of an IPv6 packet at l3 (an offset from data): those
 * of its fragment header, when one is on the way to the upper layer. A
 * function of its own, checked once.
 */
__noinline int fs_frag6(struct xdp_md *ctx, __u32 l3)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6h = data + (l3 & 0x7FFF);
	__u32 next, off, i;

	if ((void *)(ip6h + 1) > data_end)
		return 0;
	next = ip6h->nexthdr;
	off = (l3 & 0x7FFF) + sizeof(*ip6h);
#pragma clang loop unroll(disable)
	for (i = 0; i < FS_IPV6_EXT_MAX; i++) {
		__u8 kind = ext_kinds[next & 0xFF];
		struct ipv6_ext_hdr *eh = data + (off & 0x7FFF);
		struct ipv6_frag_hdr *fh = data + (off & 0x7FFF);
		__u16 fo;

		if (kind == EXT_NONE || (void *)(fh + 1) > data_end)
			return 0;
		next = eh->nexthdr;
		if (kind == EXT_FRAGMENT) {
			fo = bpf_ntohs(fh->frag_off);
			if (fo & 0xFFF8)
				return fo & 1 ? FS_FRAG_ISF : FS_FRAG_ISF | FS_FRAG_LF;
			return fo & 1 ? FS_FRAG_FF : 0;
		}
		if (kind == EXT_OPTS)
			off += ((__u32)eh->hdrlen + 1) << 3;
		else
			off += ((__u32)eh->hdrlen + 2) << 2;
	}
	return 0;
}

/* In fs_apply's result: the rule has Continue. */
#define FS_APPLY_CONTINUE 0x100

/*
 * Applies rule key of flowspec_rules to a frame (l3 and len as
 * flowspec_verdict's, fam its family) the bitmaps matched: -1 when its
 * prefix with an offset does not match after all, else FS_VERDICT_* |
 * FS_APPLY_CONTINUE as it has it; counts the frame under the rule, and
 * takes it from the rule's limit. A function of its own, checked once.
 */
__noinline int fs_apply(struct xdp_md *ctx, __u32 key, __u32 l3, __u32 len, __u32 fam)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6h = data + (l3 & 0x7FFF);
	struct fs_rule *r = bpf_map_lookup_elem(&flowspec_rules, &key);
	struct fs_count *c;
	__u32 slot, a[4];
	int ret = FS_VERDICT_MATCH;

	if (!r)
		return -1;
	if (r->flags & (FS_RULE_DST_OFFSET | FS_RULE_SRC_OFFSET)) {
		/* IPv6 only. */
		if (!fam || (void *)(ip6h + 1) > data_end)
			return -1;
		__builtin_memcpy(a, &ip6h->daddr, 16);
		if ((r->flags & FS_RULE_DST_OFFSET) && !fs_pattern(a, r->dst_mask, r->dst_pat))
			return -1;
		__builtin_memcpy(a, &ip6h->saddr, 16);
		if ((r->flags & FS_RULE_SRC_OFFSET) && !fs_pattern(a, r->src_mask, r->src_pat))
			return -1;
	}
	if (r->flags & FS_RULE_SAMPLE)
		ret |= FS_VERDICT_SAMPLE;
	if (r->flags & FS_RULE_CONTINUE)
		ret |= FS_APPLY_CONTINUE;
	slot = r->slot;
	c = bpf_map_lookup_elem(&flowspec_counters, &slot);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
	if (r->action == FS_ACT_LIMIT) {
		struct fs_cell *cell = bpf_map_lookup_elem(&flowspec_cells, &slot);
		__u64 cost = ((r->flags & FS_RULE_BYTES) ? (__u64)len : 1) * r->cost >> 16, tat, now;

		if (cell) {
			now = ban_now();
			tat = *(volatile __u64 *)&cell->tat;
			if (tat > now + r->tau)
				ret |= FS_VERDICT_DROP;
			else
				limit_take(&cell->tat, tat, now, cost);
		}
	} else if (r->action == FS_ACT_DROP) {
		ret |= FS_VERDICT_DROP;
	}
	if ((ret & FS_VERDICT_DROP) && c) {
		c->dropped_packets++;
		c->dropped_bytes += len;
	}
	return ret;
}

/*
 * Reads the fields of an IP frame (as flowspec_verdict's arguments) into
 * the scratch; 0 when its header is cut short. A function of its own.
 */
__noinline int fs_parse(struct xdp_md *ctx, __u32 class, __u32 l3, __u32 pos)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6h = data + (l3 & 0x7FFF);
	struct iphdr *iph = data + (l3 & 0x7FFF);
	__u32 zero = 0, proto = class & 0xFF, later, w0, length;
	struct fs_scratch *sc = bpf_map_lookup_elem(&flowspec_scratch, &zero);
	__u8 *l4;
	__u16 fo;

	if (!sc)
		return 0;
	sc->frag = 0;
	sc->label = 0;
	if (class >= CLASS_IPV6) {
		if ((void *)(ip6h + 1) > data_end)
			return 0;
		__builtin_memcpy(sc->saddr, &ip6h->saddr, 16);
		__builtin_memcpy(sc->daddr, &ip6h->daddr, 16);
		w0 = bpf_ntohl(*(__u32 *)ip6h);
		sc->dscp = (w0 >> 22) & 0x3F;
		sc->label = w0 & 0xFFFFF;
		length = bpf_ntohs(ip6h->payload_len) + 40;
		sc->length = length > 0xFFFF ? 0xFFFF : length;
		later = pos >> 16;
		l4 = data + (pos & 0x7FFF);
		sc->frag = fs_frag6(ctx, l3);
	} else {
		if ((void *)(iph + 1) > data_end)
			return 0;
		sc->saddr[0] = iph->saddr;
		sc->daddr[0] = iph->daddr;
		sc->saddr[1] = sc->saddr[2] = sc->saddr[3] = 0;
		sc->daddr[1] = sc->daddr[2] = sc->daddr[3] = 0;
		sc->dscp = iph->tos >> 2;
		sc->length = bpf_ntohs(iph->tot_len);
		fo = bpf_ntohs(iph->frag_off);
		later = fo & 0x1FFF;
		if (fo & 0x4000)
			sc->frag |= FS_FRAG_DF;
		if (later)
			sc->frag |= fo & 0x2000 ? FS_FRAG_ISF : FS_FRAG_ISF | FS_FRAG_LF;
		else if (fo & 0x2000)
			sc->frag |= FS_FRAG_FF;
		l4 = (void *)iph + ((*(__u8 *)iph & 0xF) << 2);
	}
	sc->proto = proto;
	sc->has_ports = sc->has_icmp = sc->has_tcp = 0;
	if (later)
		return 1;
	if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && (void *)(l4 + 4) <= data_end) {
		sc->has_ports = 1;
		sc->sport = (__u16)l4[0] << 8 | l4[1];
		sc->dport = (__u16)l4[2] << 8 | l4[3];
	}
	if (proto == (class >= CLASS_IPV6 ? 58 : IPPROTO_ICMP) && (void *)(l4 + 2) <= data_end) {
		sc->has_icmp = 1;
		sc->icmp_type = l4[0];
		sc->icmp_code = l4[1];
	}
	if (proto == IPPROTO_TCP && (void *)(l4 + 14) <= data_end) {
		sc->has_tcp = 1;
		sc->tcp_flags = ((__u16)l4[12] << 8 | l4[13]) & 0xFFF;
	}
	return 1;
}

/* Whether the frame in the scratch (of family v6) is a BGP session's. */
static __always_inline int fs_exempt(struct fs_scratch *sc, __u32 v6)
{
	__u32 n = flowspec_exempt_n, i;

	if (!n || sc->proto != IPPROTO_TCP || !sc->has_ports)
		return 0;
	for (i = 0; i < FS_EXEMPT_MAX; i++) {
		if (i >= n)
			break;
		if (flowspec_exempt[i].v6 != v6 || (flowspec_exempt[i].port != sc->sport && flowspec_exempt[i].port != sc->dport))
			continue;
		if (flowspec_exempt[i].addr[0] == sc->saddr[0] && flowspec_exempt[i].addr[1] == sc->saddr[1] &&
		    flowspec_exempt[i].addr[2] == sc->saddr[2] && flowspec_exempt[i].addr[3] == sc->saddr[3])
			return 1;
	}
	return 0;
}

/* The prefix dimensions, looked up in the tries after the others left a rule. */
#define FS_PREFIX_DIMS (1 << FS_DIM_DST | 1 << FS_DIM_SRC)

/*
 * The bitmaps of the frame in the scratch, ANDed into its accumulator by
 * table key of generation gen: whether a rule is left. The row of every
 * dimension some rule uses is found first, then they are ANDed in one
 * loop, words words each (the set's); the prefix tries are looked up only
 * when the other dimensions left a rule. A function of its own.
 */
__noinline int fs_classify(__u32 key, __u32 gen)
{
	__u32 zero = 0, dims, v6 = key & 1, words;
	struct fs_table *t = bpf_map_lookup_elem(&flowspec_tables, &key);
	struct fs_scratch *sc = bpf_map_lookup_elem(&flowspec_scratch, &zero);
	__u32 sp, dp, r;

	if (!t || !sc)
		return 0;
	dims = t->dims | 1 << FS_DIM_PROTO;
	words = t->words;
	if (!t->dims)
		return 0;
	sp = sc->sport & 0xFFFF;
	dp = sc->dport & 0xFFFF;
	/* Each dimension's row; row_b is row_a but for either port's. */
#define FS_ROW(d, idx) do { r = (idx); sc->row_a[d] = r; sc->row_b[d] = r; } while (0)
	FS_ROW(FS_DIM_PROTO, t->base[FS_DIM_PROTO] + t->proto[sc->proto]);
	if (dims & (1 << FS_DIM_PORT)) {
		if (sc->has_ports) {
			sc->row_a[FS_DIM_PORT] = t->base[FS_DIM_PORT] + t->port[sp];
			sc->row_b[FS_DIM_PORT] = t->base[FS_DIM_PORT] + t->port[dp];
		} else {
			FS_ROW(FS_DIM_PORT, t->absent[FS_DIM_PORT]);
		}
	}
	if (dims & (1 << FS_DIM_DPORT))
		FS_ROW(FS_DIM_DPORT, sc->has_ports ? t->base[FS_DIM_DPORT] + t->dport[dp] : t->absent[FS_DIM_DPORT]);
	if (dims & (1 << FS_DIM_SPORT))
		FS_ROW(FS_DIM_SPORT, sc->has_ports ? t->base[FS_DIM_SPORT] + t->sport[sp] : t->absent[FS_DIM_SPORT]);
	if (dims & (1 << FS_DIM_ICMP_TYPE))
		FS_ROW(FS_DIM_ICMP_TYPE, sc->has_icmp ? t->base[FS_DIM_ICMP_TYPE] + t->icmp_type[sc->icmp_type] : t->absent[FS_DIM_ICMP_TYPE]);
	if (dims & (1 << FS_DIM_ICMP_CODE))
		FS_ROW(FS_DIM_ICMP_CODE, sc->has_icmp ? t->base[FS_DIM_ICMP_CODE] + t->icmp_code[sc->icmp_code] : t->absent[FS_DIM_ICMP_CODE]);
	if (dims & (1 << FS_DIM_TCP_FLAGS))
		FS_ROW(FS_DIM_TCP_FLAGS, sc->has_tcp ? t->base[FS_DIM_TCP_FLAGS] + t->tcp_flags[sc->tcp_flags & 0xFFF] : t->absent[FS_DIM_TCP_FLAGS]);
	if (dims & (1 << FS_DIM_LENGTH))
		FS_ROW(FS_DIM_LENGTH, t->base[FS_DIM_LENGTH] + t->length[sc->length & 0xFFFF]);
	if (dims & (1 << FS_DIM_DSCP))
		FS_ROW(FS_DIM_DSCP, t->base[FS_DIM_DSCP] + t->dscp[sc->dscp & 0x3F]);
	if (dims & (1 << FS_DIM_FRAG))
		FS_ROW(FS_DIM_FRAG, t->base[FS_DIM_FRAG] + t->frag[sc->frag & 0xF]);
	if (dims & (1 << FS_DIM_LABEL))
		FS_ROW(FS_DIM_LABEL, t->base[FS_DIM_LABEL] + fs_label(key, sc->label));
	if (!fs_and(sc, dims & ~FS_PREFIX_DIMS, words, 1))
		return 0;
	if (!(dims & FS_PREFIX_DIMS))
		return 1;
	if (dims & (1 << FS_DIM_DST))
		FS_ROW(FS_DIM_DST, fs_prefix(sc->daddr, v6, gen, PREFIX_DIR_DST, t->absent[FS_DIM_DST]));
	if (dims & (1 << FS_DIM_SRC))
		FS_ROW(FS_DIM_SRC, fs_prefix(sc->saddr, v6, gen, PREFIX_DIR_SRC, t->absent[FS_DIM_SRC]));
#undef FS_ROW
	return fs_and(sc, dims & FS_PREFIX_DIMS, words, 0);
}

/*
 * The FlowSpec rules' decision on an IP frame of class class whose headers
 * are whole: its IP header at offset l3 of data, the header of its class
 * at pos (| 1 << 16 for a later IPv6 fragment), len its whole length. The
 * rules that apply are counted; returns FS_VERDICT_* bits, 0 when no rule
 * matches. A function of its own, which the verifier checks once.
 */
__noinline int flowspec_verdict(struct xdp_md *ctx, __u32 class, __u32 l3, __u32 pos, __u32 len)
{
	__u32 fsw = flowspec_words, words, zero = 0, key, gen, fam = class >= CLASS_IPV6, i, n, w;
	struct fs_scratch *sc;
	struct fs_table *t;
	__u64 x, bit;
	__u32 *ctl;
	int ret = 0, a;

	if (!flowspec_on || fsw < 1 || fsw > FS_WORDS_MAX)
		return 0;
	if (flowspec_view && (bpf_map_lookup_elem(&flowspec_saved, &zero) || bpf_map_lookup_elem(&flowspec_peers, &zero)))
		return 0;
	ctl = bpf_map_lookup_elem(&flowspec_ctl, &zero);
	if (!ctl)
		return 0;
	gen = *(volatile __u32 *)ctl & 1;
	key = gen * 2 + fam;
	t = bpf_map_lookup_elem(&flowspec_tables, &key);
	if (!t || !t->dims)
		return 0;
	words = t->words;
	if (!fs_parse(ctx, class, l3, pos))
		return 0;
	sc = bpf_map_lookup_elem(&flowspec_scratch, &zero);
	if (!sc || fs_exempt(sc, fam) || !fs_classify(key, gen))
		return 0;
	/* The rules left, in order: a step takes a bit, or moves to the next word. */
	sc->w = 0;
	sc->chain = 0;
	x = sc->acc[0];
#pragma clang loop unroll(disable)
	for (n = 0; n < FS_SCAN + FS_WORDS_MAX; n++) {
		w = *(volatile __u32 *)&sc->w;
		if (!x) {
			w++;
			if (w >= words || w >= fsw)
				break;
			*(volatile __u32 *)&sc->w = w;
			x = sc->acc[w & (FS_WORDS_MAX - 1)];
			continue;
		}
		bit = x & -x;
		x ^= bit;
		/* Keeps clang from making it a count of trailing zeros, with a table in .rodata of its own. */
		asm volatile("" : "+r"(bit));
		i = (w & (FS_WORDS_MAX - 1)) * 64 + ban_debruijn[(bit * RULE_DEBRUIJN) >> 58];
		a = fs_apply(ctx, t->rule_base + i, l3, len, fam);
		if (a < 0)
			continue;
		ret |= a & (FS_VERDICT_MATCH | FS_VERDICT_DROP | FS_VERDICT_SAMPLE);
		if ((a & FS_VERDICT_DROP) || !(a & FS_APPLY_CONTINUE))
			break;
		a = *(volatile __u32 *)&sc->chain + 1;
		if (a >= FS_CHAIN)
			break;
		*(volatile __u32 *)&sc->chain = a;
	}
	return ret;
}

/* Sends a frame FlowSpec chose to the sampler, past its countdown (the cap still holds). */
static __always_inline void fs_sample(struct xdp_md *ctx, __u32 class, __u32 verdict, __u64 len, int forced)
{
	__u32 zero = 0;
	struct sample_state *s;

	if (!forced) {
		sample_frame(ctx, class, verdict, len);
		return;
	}
	s = bpf_map_lookup_elem(&sample_states, &zero);
	if (s)
		sample_send(ctx, s, class, verdict, len);
}

#endif
