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

/* The whole per-CPU block lives under one key, so a gather is one lookup. */
struct counter_block {
	struct counter class[CLASS_COUNT];
};

/* Verdict table values. */
enum verdict {
	VERDICT_PASS = 0,
	VERDICT_DROP = 1,
};

#endif
