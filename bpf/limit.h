/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The limiter of limit rules, included by xdp_drop.c and compiled into the
 * programs with limit rules only.
 *
 * Every budget is a GCRA cell (the token bucket as one word): the
 * theoretical arrival time, tat, in ns of bpf_ktime_get_coarse_ns. A frame
 * is within budget when tat - now <= tau, (burst - 1) frame intervals, and
 * then moves tat to max(tat, now) + interval; a frame over budget changes
 * nothing, so a source sending far above its rate keeps getting its rate.
 *
 * per = "rule": one cell per rule. per = "source": a count-min sketch of
 * LIMIT_ROWS rows of LIMIT_COLS cells, shared by all limit rules; a source
 * (its address masked to limit_prefix_ipv4/6, and the rule) has one cell
 * per row, found by a hash keyed with a per-load random seed. The source is
 * over budget only when all its cells are: collisions can only add to a
 * cell, so they can only make a source look heavier, never lighter.
 *
 * The cells are shared by every CPU and updated with atomic adds: a source
 * spread over every RX queue gets its budget once. Frames that race on a
 * cell can overshoot it by one frame per CPU, never more.
 */
#ifndef XDP_DROP_LIMIT_H
#define XDP_DROP_LIMIT_H

enum limit_limits {
	LIMIT_ROWS = 4,
	LIMIT_COL_BITS = 17,
	LIMIT_COLS = 1 << LIMIT_COL_BITS,
	/*
	 * Past the sketch: a cache line per rule, whose first cell is the
	 * budget of a per = "rule" rule (rules' budgets do not share lines),
	 * then the seed, the test clock and the time of the last tick with its
	 * jiffies, all four in one cache line (a page-aligned array: see
	 * limit_state).
	 */
	LIMIT_LINE_CELLS = 8,
	LIMIT_RULE_CELLS = LIMIT_ROWS * LIMIT_COLS,
	LIMIT_SEED_CELL = LIMIT_RULE_CELLS + RULE_MAX * LIMIT_LINE_CELLS,
	LIMIT_CLOCK_CELL = LIMIT_SEED_CELL + 1,
	LIMIT_JIFFY_CELL = LIMIT_SEED_CELL + 2,
	LIMIT_TICK_CELL = LIMIT_SEED_CELL + 3,
	LIMIT_CELLS = LIMIT_SEED_CELL + 8,
	LIMIT_PER_RULE = 1, /* in limit_param.flags */
	/*
	 * In limit_param.flags: burst frames last less than a tick, so the
	 * tick's time would admit burst frames a tick at most, whatever the
	 * rate; the rule reads the precise clock instead.
	 */
	LIMIT_FINE_CLOCK = 2,
};

/* The budget of a limit rule, by rule index. */
struct limit_param {
	__u64 interval; /* ns per frame: 1e9 / rate */
	__u64 tau;      /* (burst - 1) * interval */
	__u8 flags;     /* LIMIT_PER_RULE, LIMIT_FINE_CLOCK */
	__u8 prefix4;   /* source grouping for per = "source" */
	__u8 prefix6;
	__u8 pad[5];
};

volatile const struct limit_param limit_params[RULE_MAX];

/* Tests set it to take the time from LIMIT_CLOCK_CELL instead of the kernel's clock. */
volatile const __u8 limit_fake_clock;

volatile const enum limit_limits limit_cells = LIMIT_CELLS;

/*
 * The cells. The seed lives in the map, not in a constant, so that another
 * program loaded on the same map (the multi-buffer variant) finds every
 * source's cells where they are. One entry in the programs without limit
 * rules, which never touch it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE); /* page-aligned cells */
	__uint(max_entries, 1);
} limit_state SEC(".maps");

#define LIMIT_MIX 0x9E3779B97F4A7C15ULL

static __always_inline __u64 limit_mix(__u64 h, __u32 w)
{
	h = (h ^ w) * LIMIT_MIX;
	return h ^ (h >> 31);
}

/*
 * The hash of a source: its masked address words (network order, one for
 * IPv4) and the rule, keyed with the seed.
 */
static __always_inline __u64 limit_hash(struct hdr_cursor *nh, __u64 seed, __u32 r, __u8 bits, const int v6)
{
	__u64 h = limit_mix(seed, r << 8 | bits);
	__u32 *a;
	int w;

	if (!v6) {
		a = &((struct iphdr *)nh->l3)->saddr;
		h = limit_mix(h, bits ? *a & bpf_htonl(~0U << (32 - bits)) : 0);
	} else {
		a = (__u32 *)&((struct ipv6hdr *)nh->l3)->saddr;
#pragma unroll
		for (w = 0; w < 4; w++) {
			int b = (int)bits - 32 * w;
			__u32 m = b >= 32 ? 0xFFFFFFFF : b <= 0 ? 0 : ~0U << (32 - b);

			h = limit_mix(h, a[w] & bpf_htonl(m));
		}
	}
	return h * LIMIT_MIX;
}

/* Takes a frame from the budget of cell, whose tat was read as tat. */
static __always_inline void limit_take(__u64 *cell, __u64 tat, __u64 now, __u64 interval)
{
	/* An idle cell starts from now: a source gets no credit for its silence beyond burst. */
	if (tat < now && __sync_val_compare_and_swap(cell, tat, now + interval) == tat)
		return;
	__sync_fetch_and_add(cell, interval);
}

/*
 * The time, in ns of bpf_ktime_get_coarse_ns, which moves at every tick
 * only: it is read once per tick and kept with the tick's jiffies, which
 * cost a fraction of it to read. A CPU that sees a new tick's jiffies
 * before its time reads the time of the tick before: one tick late, never
 * more.
 */
static __always_inline __u64 limit_now(void)
{
	__u32 k = LIMIT_CLOCK_CELL;
	__u64 *t, *j, now, jiffies;

	if (limit_fake_clock) {
		t = bpf_map_lookup_elem(&limit_state, &k);
		return t ? *t : 0;
	}
	k = LIMIT_JIFFY_CELL;
	j = bpf_map_lookup_elem(&limit_state, &k);
	k = LIMIT_TICK_CELL;
	t = bpf_map_lookup_elem(&limit_state, &k);
	if (!j || !t)
		return bpf_ktime_get_coarse_ns();
	jiffies = bpf_jiffies64();
	if (*j == jiffies)
		return *t;
	now = bpf_ktime_get_coarse_ns();
	*t = now;
	*j = jiffies;
	return now;
}

/* Whether the source of the frame is over the budget of limit rule r, taking one frame when not. */
static __always_inline int limit_over(struct hdr_cursor *nh, __u32 class, __u32 r)
{
	__u64 interval = limit_params[r].interval, tau = limit_params[r].tau;
	__u64 now = (limit_params[r].flags & LIMIT_FINE_CLOCK) && !limit_fake_clock ? bpf_ktime_get_ns() : limit_now();
	__u64 *cells[LIMIT_ROWS];
	__u64 tats[LIMIT_ROWS];
	__u64 h, *seed;
	__u32 k, h1, h2;
	int i, over = 1;

	if (limit_params[r].flags & LIMIT_PER_RULE) {
		k = LIMIT_RULE_CELLS + r * LIMIT_LINE_CELLS;
		cells[0] = bpf_map_lookup_elem(&limit_state, &k);
		if (!cells[0])
			return 0;
		tats[0] = *cells[0];
		if (tats[0] > now + tau)
			return 1;
		limit_take(cells[0], tats[0], now, interval);
		return 0;
	}
	k = LIMIT_SEED_CELL;
	seed = bpf_map_lookup_elem(&limit_state, &k);
	if (!seed)
		return 0;
	if (class >= CLASS_IPV6)
		h = limit_hash(nh, *seed, r, limit_params[r].prefix6, 1);
	else
		h = limit_hash(nh, *seed, r, limit_params[r].prefix4, 0);
	/* Row i's cell: h1 + i * h2, the rows' hashes derived from two (Kirsch and Mitzenmacher). */
	h1 = h;
	h2 = (h >> 32) | 1;
#pragma unroll
	for (i = 0; i < LIMIT_ROWS; i++) {
		k = i * LIMIT_COLS + ((h1 + i * h2) & (LIMIT_COLS - 1));
		cells[i] = bpf_map_lookup_elem(&limit_state, &k);
		if (!cells[i])
			return 0;
		tats[i] = *cells[i];
		if (tats[i] <= now + tau)
			over = 0;
	}
	if (over)
		return 1;
#pragma unroll
	for (i = 0; i < LIMIT_ROWS; i++)
		limit_take(cells[i], tats[i], now, interval);
	return 0;
}

/*
 * The decision of a limit rule on a frame (ruled as rule_verdict returns
 * it): its own, pass, within budget; over it, drop (would_drop in a dry
 * run) and VERDICT_LIMITED, for count_ruled to count it under limited[].
 */
static __always_inline __u32 limit_decide(struct hdr_cursor *nh, __u32 class, __u32 ruled)
{
	__u32 r = (ruled >> 8) - 1;

	asm volatile("" : "+r"(r));
	r &= RULE_MAX - 1;
	if (!limit_over(nh, class, r))
		return ruled;
	ruled |= ACTION_DROP | VERDICT_LIMITED;
	if (!dry_run)
		ruled |= VERDICT_DROP;
	return ruled;
}

#endif
