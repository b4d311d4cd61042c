//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * For the limit rows of the benchmark only: a front program that gives
 * every frame a source of its own and tail-calls the program measured, and
 * a per-source limiter of the usual design (an LRU hash entry per source, a
 * fixed 1-second window, as XDP-Firewall keeps) as the baseline.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct bench_cfg {
	__u64 sources; /* distinct IPv4 sources the frames cycle through; 0 keeps the frame's */
	__u32 target;  /* the bench_targets slot to run */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct bench_cfg);
	__uint(max_entries, 1);
} bench_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bench_seq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 4);
} bench_targets SEC(".maps");

/*
 * Frame i (counted per CPU) gets source (i mod sources) times an odd
 * number: distinct sources, spread over the whole address space.
 */
SEC("xdp")
int bench_sources(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + sizeof(struct ethhdr);
	struct bench_cfg *c;
	__u32 key = 0;
	__u64 *seq;

	if ((void *)(iph + 1) > data_end)
		return XDP_ABORTED;
	c = bpf_map_lookup_elem(&bench_config, &key);
	seq = bpf_map_lookup_elem(&bench_seq, &key);
	if (!c || !seq)
		return XDP_ABORTED;
	if (c->sources) {
		iph->saddr = bpf_htonl((__u32)((*seq % c->sources) * 0x9E3779B1ULL));
		(*seq)++;
	}
	bpf_tail_call(ctx, &bench_targets, c->target);
	return XDP_ABORTED;
}

/* The baseline limiter's state: a window start and a count per source. */
struct lru_window {
	__u64 start;
	__u64 count;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct lru_window);
	__uint(max_entries, 1 << 20);
} lru_sources SEC(".maps");

volatile const __u64 lru_rate = 1000;

/* The source of an IPv4/UDP frame to port 53, 0 for any other frame. */
static __always_inline __u32 dns_source(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct udphdr *udp = (void *)(iph + 1);

	if ((void *)(udp + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || iph->ihl != 5 ||
	    iph->protocol != IPPROTO_UDP || udp->dest != bpf_htons(53))
		return 0;
	return iph->saddr;
}

/* The baseline without its limiter: the same parsing, every frame dropped. */
SEC("xdp")
int lru_none(struct xdp_md *ctx)
{
	if (!dns_source(ctx))
		return XDP_PASS;
	return XDP_DROP;
}

/* The baseline: a source's first frame inserts its entry; a window of 1 s admits lru_rate. */
SEC("xdp")
int lru_limit(struct xdp_md *ctx)
{
	__u32 src = dns_source(ctx);
	struct lru_window *w, fresh;
	__u64 now;

	if (!src)
		return XDP_PASS;
	now = bpf_ktime_get_ns();
	w = bpf_map_lookup_elem(&lru_sources, &src);
	if (!w) {
		fresh.start = now;
		fresh.count = 1;
		bpf_map_update_elem(&lru_sources, &src, &fresh, BPF_ANY);
		return XDP_PASS;
	}
	if (now - w->start > 1000000000ULL) {
		w->start = now;
		w->count = 0;
	}
	w->count++;
	if (w->count > lru_rate)
		return XDP_DROP;
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
