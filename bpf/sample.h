/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Sampling: 1 in sample_rate of the frames whose action is in
 * sample_actions go up to user space through the samples ring buffer, with
 * a small header and their first sample_snaplen bytes. Only the programs
 * built with sampling include this code; the others have none of it.
 *
 * A frame not sampled costs one per-CPU countdown; a sampled one re-arms it
 * with a random value in [1, 2 * sample_rate), so sampling is not in step
 * with any periodic traffic, then passes a token bucket shared by the CPUs
 * (at most sample_max_per_second events, bursts of sample_burst), so a
 * flood cannot flood user space: what the bucket refuses is counted as
 * capped, what the ring has no room for as lost. The reader is woken only
 * when sample_wakeup bytes wait in the ring (it also looks on its own every
 * 100 ms): a wakeup per event would cost more than the event.
 */
#ifndef XDP_DROP_SAMPLE_H
#define XDP_DROP_SAMPLE_H

enum sample_limits {
	SAMPLE_SNAPLEN_MAX = 4096,
};

/* What a sampled frame carries up, followed by caplen bytes of it. */
struct sample_event {
	__u64 time_ns;  /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 ifindex;  /* the interface it arrived on */
	__u32 len;      /* the whole frame, all buffers */
	__u32 caplen;   /* bytes of it that follow */
	__u16 class;    /* enum class_idx */
	__u8 verdict;   /* as verdicts: action in bit 0, VERDICT_DROP */
	__u8 rule;      /* the rule that decided it + 1; 0 for none */
};

/* Per CPU: the countdown to the next sample and what became of samples. */
struct sample_state {
	__u64 countdown;
	__u64 sent;   /* submitted to the ring */
	__u64 capped; /* refused by the token bucket */
	__u64 lost;   /* no room in the ring */
};

/* The token bucket, one for all CPUs, as a theoretical arrival time (GCRA). */
struct sample_bucket {
	struct bpf_spin_lock lock;
	__u64 tat; /* when the bucket is full again, ns */
};

volatile const __u32 sample_rate;      /* 1 in N */
volatile const __u8 sample_actions;    /* bit a: sample frames of action a */
volatile const __u64 sample_interval;  /* ns between events at the cap */
volatile const __u64 sample_tolerance; /* ns of burst: (burst - 1) * interval */
volatile const __u32 sample_snaplen;   /* 1..SAMPLE_SNAPLEN_MAX */
volatile const __u64 sample_wakeup;    /* bytes waiting in the ring that wake the reader */

/* Not read by the program: they carry the event's types into BTF for bpf2go -type. */
volatile const enum sample_limits sample_snaplen_max = SAMPLE_SNAPLEN_MAX;
volatile const struct sample_event sample_event_layout;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct sample_state);
	__uint(max_entries, 1);
} sample_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sample_bucket);
	__uint(max_entries, 1);
} sample_buckets SEC(".maps");

/* Sized by the loader from the cap and the snap length. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} samples SEC(".maps");

/* Whether the bucket has a token at now, taking it if so. */
static __always_inline int sample_take(__u64 now)
{
	__u32 zero = 0;
	struct sample_bucket *b = bpf_map_lookup_elem(&sample_buckets, &zero);
	int ok = 0;
	__u64 tat;

	if (!b)
		return 0;
	bpf_spin_lock(&b->lock);
	tat = b->tat;
	if (tat < now)
		tat = now;
	if (tat - now <= sample_tolerance) {
		b->tat = tat + sample_interval;
		ok = 1;
	}
	bpf_spin_unlock(&b->lock);
	return ok;
}

/*
 * Sends a frame up: the sampled frame's slow path, a function of its own,
 * so that the frames not sampled keep their registers (nothing is spilled
 * for a call they do not make). s is this CPU's state; the rest as
 * sample_frame's.
 */
static __noinline int sample_send(struct xdp_md *ctx, struct sample_state *s, __u32 class, __u32 verdict, __u64 len)
{
	__u32 rate = sample_rate, snap = sample_snaplen;
	struct sample_event *e;
	__u64 caplen;

	s->countdown = bpf_get_prandom_u32() % (2 * rate - 1) + 1;
	if (!sample_take(bpf_ktime_get_ns())) {
		s->capped++;
		return 0;
	}
	if (snap > SAMPLE_SNAPLEN_MAX)
		snap = SAMPLE_SNAPLEN_MAX;
	/* snap is a constant to the verifier: the loader froze it. */
	e = bpf_ringbuf_reserve(&samples, sizeof(*e) + snap, 0);
	if (!e) {
		s->lost++;
		return 0;
	}
	caplen = len < snap ? len : snap;
	/* One register for the checks and the call, so the verifier sees the bounds. */
	asm volatile("" : "+r"(caplen));
	e->time_ns = bpf_ktime_get_ns();
	e->ifindex = ctx->ingress_ifindex;
	e->len = len;
	e->class = class;
	e->verdict = verdict & 0xFF;
	e->rule = verdict >> 8;
	/* The frame may be spread over buffers: the helper reads across them. */
	if (caplen < 1 || caplen > snap ||
	    bpf_xdp_load_bytes(ctx, 0, (void *)(e + 1), caplen))
		caplen = 0;
	e->caplen = caplen;
	if (bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= sample_wakeup)
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	else
		bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	s->sent++;
	return 0;
}

/*
 * Samples a frame that got verdict (as verdicts, the rule + 1 from bit 8)
 * under class; len is its whole length. Called once per frame, at its exit.
 */
static __always_inline void sample_frame(struct xdp_md *ctx, __u32 class, __u32 verdict, __u64 len)
{
	__u32 zero = 0;
	struct sample_state *s;

	if (!(sample_actions & (1 << (verdict & 1))))
		return;
	s = bpf_map_lookup_elem(&sample_states, &zero);
	if (!s)
		return;
	if (s->countdown > 1) {
		s->countdown--;
		return;
	}
	sample_send(ctx, s, class, verdict, len);
}

#endif
