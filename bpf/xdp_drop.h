/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Types shared by the XDP program and its Go loader (reached through bpf2go -type). */
#ifndef XDP_DROP_H
#define XDP_DROP_H

/*
 * Counter classes. An IP frame's class is its family's base plus the IP protocol;
 * the classes after the two IP ranges carry no protocol number.
 */
enum class_idx {
	CLASS_IPV4 = 0,            /* + IP protocol 0..255 */
	CLASS_IPV6 = 256,          /* + IP protocol 0..255, after extension headers */
	CLASS_IPV4_TRUNCATED = 512,
	CLASS_IPV6_TRUNCATED,
	CLASS_L2_ARP,
	CLASS_L2_VLAN_OVERFLOW,
	CLASS_L2_OTHER,
	CLASS_L2_TRUNCATED,
	CLASS_COUNT,
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

/* What the program did with a frame (in a dry run: what it would have done). */
enum action {
	ACTION_PASS = 0,
	ACTION_DROP = 1,
	ACTION_COUNT,
};

/* Verdict table bits besides the action in bit 0. */
enum verdict {
	VERDICT_DROP = 2, /* dropped, not only counted as such (dry run) */
	VERDICT_LIMIT = 4, /* in rule_decisions: a limit rule, whose budget decides */
	VERDICT_LIMITED = 8, /* a limit rule found the frame over budget */
};

/* Rules: at most 64, one bit each in the per-dimension masks. */
enum rule_limits {
	RULE_MAX = 64,
};

/* Which rule dimensions some rule uses; the others cost nothing. */
enum rule_dims {
	RULE_DIM_SRC = 1,
	RULE_DIM_DST = 2,
	RULE_DIM_PORTS = 4,  /* either port */
	RULE_DIM_SPORT = 8,  /* the source port */
	RULE_DIM_DPORT = 16, /* the destination port */
};

/*
 * The per-CPU block of the counters map, under one key (or one per RX
 * queue), so a gather is one lookup: every frame under its class, when it
 * got its class's own action (bit 0 of its verdict). Without rules that is
 * every frame, and the address of its counter is known from its class alone.
 */
struct counter_block {
	struct counter class[CLASS_COUNT];
};

/*
 * The per-CPU block of rule_counters, touched by frames a rule decided
 * only: under other[class], those a rule gave the other action than their
 * class's; under rule[], every frame each rule decided; under limited[],
 * those of them a limit rule found over budget.
 */
struct rule_block {
	struct counter other[CLASS_COUNT];
	struct counter rule[RULE_MAX];
	struct counter limited[RULE_MAX];
};

/*
 * Keys of the address prefix tries: the direction (PREFIX_DIR_*) comes
 * first, so prefixlen counts its 8 bits too.
 */
struct lpm_v4_key {
	__u32 prefixlen;
	__u8 dir;
	__u8 addr[4];
};

struct lpm_v6_key {
	__u32 prefixlen;
	__u8 dir;
	__u8 addr[16];
};

/*
 * Prefix buckets: one per direction, family and first 16 address bits (in
 * that order: source IPv4, source IPv6, destination IPv4, IPv6). A bucket holds
 * the mask of the longest prefix of at most 16 bits that contains it, and
 * the lengths (longest first) of the longer prefixes inside it, which are
 * looked up by exact match; a bucket with more lengths than fit uses the
 * trie instead.
 */
enum prefix_limits {
	PREFIX_BUCKETS = 65536,   /* per family */
	PREFIX_BUCKET_LENS = 6,
	PREFIX_KEY_V6 = 0x100,    /* in prefix_key.len */
	PREFIX_KEY_DST = 0x200,   /* in prefix_key.len */
	PREFIX_DIR_SRC = 0,
	PREFIX_DIR_DST = 1,
	PORTS = 65536,            /* per direction, source first */
	PREFIX_PROBES = 16,       /* slots an exact prefix may sit past its home */
	PREFIX_HASH_KEY_WORDS = 5, /* words of prefix_exact's secret hash key */
};

struct prefix_bucket {
	__u64 mask;
	__u8 n;
	__u8 trie;
	__u8 lens[PREFIX_BUCKET_LENS];
};

/*
 * A slot of the exact-prefix hash table: the prefix's length (|
 * PREFIX_KEY_V6 | PREFIX_KEY_DST; 0 in an empty slot), its masked address
 * in network order (IPv4 in the first word, the others 0) and its mask.
 */
struct prefix_slot {
	__u32 len;
	__u32 addr[4];
	__u32 pad;
	__u64 mask;
};

/*
 * Timed bans of sources: per family, a hash of entries keyed by length and
 * masked address (ban_v4_key, ban_v6_key), and an array of buckets (IPv4:
 * the first 16 bits; IPv6: the first 48 folded to 16; IPv4's first) whose
 * bitmap has bit len - 1 set for each length present in the bucket, the
 * lengths shorter than the bucket's width in every bucket of the family.
 * A bit array (ban_bloom) filters the entries before the hash: a length is
 * looked up only when the bit of its masked address is set.
 */
enum ban_limits {
	BAN_BUCKETS = 65536, /* per family */
	BAN_ORIGINS = 4,
	BAN_KIND_BAN = 0,
	BAN_KIND_ALLOW = 1,
	BAN_ACTION_DROP = 0,
	BAN_ACTION_WOULD_DROP = 1,
	BAN_ACTIONS = 2,
	BAN_BLOOM_BITS = 23, /* log2 of the bits of ban_bloom, both families */
	BAN_KEY_V6 = 0x100,  /* in the length hashed into ban_bloom */
	/* ban_bloom's word past the filter: the test clock (ban_fake_clock). */
	BAN_CLOCK_WORD = 1 << (BAN_BLOOM_BITS - 6),
};

struct ban_v4_key {
	__u32 len;
	__u32 addr; /* network order, masked */
};

struct ban_v6_key {
	__u32 len;
	__u32 addr[4]; /* network order, masked */
};

/*
 * An entry: a ban until end (bpf_ktime_get_ns), or an allowed prefix (end
 * unused). A ban holds each origin's claim on the prefix, its end or 0
 * (claims), and whether it drops the frames or limits their rate (pps, 0
 * for a drop): end is the latest claim's, drop_end the latest drop
 * claim's. Until drop_end the frames are dropped, counted under origin;
 * from then until end, only limit claims hold: the frames over the rate
 * of the one lasting longest (interval, tau, as limit.h's) are dropped,
 * counted under limit_origin, but for an established TCP socket's
 * (ban_exempt), and those within it go on as unbanned.
 * The rate's GCRA cell, tat, is shared by all CPUs. Programs read all but
 * claims and pps, user space's, kept in the entry so that a successor that
 * takes the maps over rebuilds every origin's claim.
 */
struct ban_value {
	__u64 end;
	__u8 origin;
	__u8 kind;
	__u8 limit_origin;
	__u8 pad[5];
	__u64 claims[BAN_ORIGINS];
	__u64 drop_end;
	__u64 interval; /* ns a frame: 1e9 / pps; 0 without a limit claim */
	__u64 tau;      /* (burst - 1) * interval */
	__u64 tat;
	__u32 pps[BAN_ORIGINS];
};

/*
 * The lengths present in a bucket, as a bitmap only: user space rewrites a
 * bucket in place while programs read it, and a word read whole holds each
 * bit set both before and after, whatever order the bytes were written in.
 */
struct ban_bucket {
	__u64 bits[2]; /* bit len - 1: lengths 1..64 in bits[0], 65..128 in bits[1] */
};

/* The per-CPU block of ban_counters: frames bans decided, by origin and action. */
struct ban_block {
	struct counter c[BAN_ORIGINS][BAN_ACTIONS];
};

#endif
