# shellcheck shell=bash
# Downstream checks of the end-to-end run, sourced by test/e2e/run.sh (they
# use its helpers and variables): the shipped queries' totals against the
# frames counted, across restarts and a crash of the plugin under known
# traffic; the alerts against an interface error that appears, changes its
# message and clears, with prometheus_client at its defaults; and the
# recommended prometheus_client settings of the execd snippet.

PROM_RECOMMENDED=127.0.0.1:9274 # a second prometheus_client, with the snippet's settings
COUNTED=()                      # sendmix reports of every frame counted, in order

# recommended_output: the [[outputs.prometheus_client]] settings the execd
# snippet recommends (its commented block), on a port of their own.
recommended_output() {
	local settings
	settings=$(sed -n '/^# Recommended settings for the Prometheus output/,$p' "$EXECD_SNIPPET" | sed -n 's/^#   //p')
	grep -q '^fieldexclude = \["error"\]$' <<<"$settings" && grep -q '^\[outputs.prometheus_client.metric_types\]$' <<<"$settings" ||
		fail "$EXECD_SNIPPET has no recommended prometheus_client block (fieldexclude, metric_types)"
	cat <<EOF

# prometheus_client with the settings $(basename "$EXECD_SNIPPET") recommends.
[[outputs.prometheus_client]]
  listen = "$PROM_RECOMMENDED"
  metric_version = 2
  collectors_exclude = ["gocollector", "process"]
$(sed 's/^/  /' <<<"$settings")
EOF
}

# check_counter_types: through execd the counters are untyped at the
# defaults, and counters with the recommended metric_types.
check_counter_types() {
	local def rec
	def=$(nsx curl -sS --fail http://127.0.0.1:9273/metrics | grep -E '^# TYPE xdp_drop_(packets|bytes) ' | cut -d' ' -f3- | sort | paste -sd,)
	rec=$(nsx curl -sS --fail "http://$PROM_RECOMMENDED/metrics" | grep -E '^# TYPE xdp_drop_(packets|bytes) ' | cut -d' ' -f3- | sort | paste -sd,)
	[ "$rec" = "xdp_drop_bytes counter,xdp_drop_packets counter" ] ||
		fail "prometheus_client with the recommended metric_types: want both counters typed counter, got '$rec'"
	note "prometheus_client types: defaults '$def'; with the snippet's metric_types '$rec'"
}

# prom_caught_up WHAT: Prometheus has scraped what prometheus_client holds
# now (the last gather, already in InfluxDB). Called after the first round,
# whose counters are each series' first sample, the start of every total;
# and before Telegraf is stopped, since what Telegraf received but
# Prometheus never scraped before the stop is not in Prometheus at all.
prom_caught_up() {
	local t
	t=$(now_ms)
	wait_until 20 prom_scraped_since "$t" || fail "Prometheus did not scrape prometheus_client after $1"
}

# ---------------------------------------------------------------- first burst

FIRST_BURST_OK=1 # cleared by a failed first-burst check; check_first_burst fails the run

# standing_before_burst: before any traffic, the standing series of the
# dropped protocols (docs/metrics.md "Series at zero") are at zero in InfluxDB, and
# Prometheus has scraped them at zero: the first sample of every dropped
# series is 0, so PromQL counts the first burst.
standing_before_burst() {
	local want got n
	# The drop list's protocols, and sctp, which the limit rule drops over budget.
	want=$(for p in ${DROP//,/ } sctp; do printf 'ipv4/%s/drop\nipv6/%s/drop\n' "$p" "$p"; done | sort)
	n=$(wc -l <<<"$want")
	got=$(zero_series "$t_run1" | grep '/drop$' || true)
	if [ "$got" != "$want" ]; then
		note "FIRST BURST: before any traffic, InfluxDB's dropped series at zero are '$(paste -sd' ' <<<"$got")', want '$(paste -sd' ' <<<"$want")'"
		FIRST_BURST_OK=0
	fi
	prom_zeros() {
		[ "$(prom_get /api/v1/query --data-urlencode "query=count(xdp_drop_packets{job=\"telegraf\",interface=\"$DEV\",action=\"drop\"} == 0)" |
			jq -r '.data.result[0].value[1] // 0')" = "$n" ]
	}
	if ! wait_until 20 prom_zeros; then
		note "FIRST BURST: Prometheus has not scraped the $n dropped series at zero before the burst"
		FIRST_BURST_OK=0
	fi
	((FIRST_BURST_OK)) || return 0
	note "before the first burst: $(zero_series "$t_run1" | wc -l) series at zero in InfluxDB (the standing ones), the $n dropped ones scraped at zero by Prometheus: $(paste -sd' ' <<<"$want")"
}

# check_first_burst: after the first round of the mix, sent between two
# gathers, every shipped total and rate of dropped frames counts all of it,
# each protocol's first burst included: InfluxQL (queries.md), the Grafana
# panels, PromQL.
check_first_burst() {
	log "the first burst in every shipped total"
	local want want_bytes got q title range
	want=$(jq -r '.series[] | select(.action == "drop") | "\(.protocol) \(.packets)"' "$WORK/sent1.json" |
		awk '{s[$1] += $2} END {for (p in s) print p "=" s[p]}' | LC_ALL=C sort | paste -sd' ')
	want_bytes=$(jq -r '.series[] | select(.action == "drop") | "\(.protocol) \(.bytes)"' "$WORK/sent1.json" |
		awk '{s[$1] += $2} END {for (p in s) print p "=" s[p]}' | LC_ALL=C sort | paste -sd' ')
	burst() { # WHAT GOT [WANT]
		if [ "$(nonzero "$2")" = "$(nonzero "${3:-$want}")" ]; then
			note "first burst: $1: $2 = sent"
		else
			note "FIRST BURST: $1: ${2:-nothing} != sent ${3:-$want}"
			FIRST_BURST_OK=0
		fi
	}
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Dropped packets per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | [.tags.protocol, .values[0][1]]')
	burst "InfluxQL 'Dropped packets per protocol'" "$got"
	got=$(doc_query "Top dropped protocols" | jq -r '[.results[0].series[0].values[]? | "\(.[2])=\(.[1])"] | sort | join(" ")')
	burst "InfluxQL 'Top dropped protocols'" "$got"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Drop rate per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | [.tags.protocol, ([.values[][1]] | add * 5)]')
	burst "InfluxQL 'Drop rate per protocol' (sum of rate x 5s)" "$got"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Drop and pass rate per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'" and .tags.action == "drop") | [.tags.protocol, ([.values[][1]] | add * 5)]')
	burst "InfluxQL 'Drop and pass rate per protocol', drop (sum of rate x 5s)" "$got"
	while IFS=$'\t' read -r title q; do
		case $title in
		"Dropped packets per protocol (time range)")
			burst "Grafana panel '$title'" "$(influx_totals "$q" '[.tags.protocol, .values[0][1]]')" ;;
		"Dropped packets/s per protocol")
			burst "Grafana panel '$title' (sum of rate x 5s)" "$(influx_totals "$q" '[.tags.protocol, ([.values[][1]] | add * 5)]')" ;;
		"Dropped bits/s per protocol")
			burst "Grafana panel '$title' (sum of rate x 5s / 8, bytes)" "$(influx_totals "$q" '[.tags.protocol, ([.values[][1]] | add * 5 / 8)]')" "$want_bytes" ;;
		esac
	done < <(dashboard_queries)
	range=$(($(since_ms "$t_run1") / 1000 + 5))
	q=$(doc_promql "Dropped packets per protocol (PromQL)" | sed "s/\[1h:/[${range}s:/")
	burst "PromQL 'Dropped packets per protocol' over ${range}s" "$(prom_totals "$q")"
	note "  (estimate, not asserted) PromQL increase(): $(prom_totals "sum by (protocol) (increase(xdp_drop_packets{job=\"telegraf\",interface=\"$DEV\",action=\"drop\"}[${range}s]))")"
	((FIRST_BURST_OK)) || fail "a shipped total or rate lost frames of the first burst (FIRST BURST lines above)"
}

# ---------------------------------------------------------------- restarts

# link_point_since MS: an xdp_drop_link point for $DEV at or after MS, attached.
link_point_since() {
	[ "$(influx_query "SELECT last(\"attached\") FROM \"xdp_drop_link\" WHERE \"interface\" = '$DEV' AND time >= ${1}ms" |
		jq -r '.results[0].series[0].values[0][1] // empty')" = true ]
}
# prom_scraped_since MS: Prometheus has scraped the default prometheus_client since MS.
prom_scraped_since() {
	local ts
	ts=$(prom_get /api/v1/query --data-urlencode "query=max(timestamp(xdp_drop_link_attached{job=\"telegraf\",interface=\"$DEV\"}))" |
		jq -r '.data.result[0].value[1] // 0')
	awk -v ts="$ts" -v t="$1" 'BEGIN { exit !(ts * 1000 > t) }'
}

# settle WHAT: a gather that began a second after now (every frame sent so
# far processed) is in InfluxDB, and Prometheus has scraped it.
settle() {
	local t
	t=$(($(now_ms) + 1000))
	wait_until 20 link_point_since "$t" || fail "$1: no attached xdp_drop_link point of $DEV in InfluxDB after $t"
	t=$(now_ms)
	wait_until 20 prom_scraped_since "$t" || fail "$1: Prometheus did not scrape prometheus_client after $t"
	LANDED_MS=$(now_ms)
}

# send_counted NAME ROUNDS: ROUNDS rounds of the mix, counted in the totals.
send_counted() {
	nsx "$WORK/bin/sendmix" -netns "$NS" -iface "$PEER" -drop "$DROP" -rounds "$2" >"$WORK/$1.json" ||
		fail "sendmix failed"
	COUNTED+=("$WORK/$1.json")
}

# segment NAME: known traffic between two stops. One round first, gathered
# on its own, then two more: the first point after a restart (one round)
# is below the last before it (three), so the restart shows as a decrease,
# as it does in production unless a restarted counter overtakes the old one
# within one interval.
segment() {
	send_counted "$1-a" 1
	settle "$1"
	send_counted "$1-b" 2
	settle "$1"
}

# restart_plugin SIGNAL: signal the plugin under Telegraf, wait for the
# process to end, for Telegraf to start another and for it to have
# attached and reported.
restart_plugin() {
	local old t
	old=$(plugin_pid)
	[ -n "$old" ] || fail "no telegraf-xdp-drop under Telegraf to send $1"
	t=$(now_ms)
	kill "-$1" "$old"
	wait_until 10 exited "$old" || fail "telegraf-xdp-drop ($old) still running 10s after SIG$1"
	new_plugin() { local p; p=$(plugin_pid); [ -n "$p" ] && [ "$p" != "$old" ]; }
	wait_until $((RESTART_DELAY + 20)) new_plugin || fail "Telegraf did not start telegraf-xdp-drop again after SIG$1"
	local t_new
	t_new=$(now_ms)
	wait_until 20 link_point_since "$t_new" || fail "no attached xdp_drop_link point after the restart that followed SIG$1"
	note "SIG$1 to the plugin ($old): Telegraf started $(plugin_pid), attached and reporting $(since_ms "$t") ms later"
}

# restarts_under_traffic: known traffic around two graceful stops and a
# SIGKILL of the plugin. Each stop comes after the last frames were
# gathered, so every frame counted reached InfluxDB and Prometheus.
restarts_under_traffic() {
	log "restarts of the plugin under known traffic"
	# Everything sent while attached: phase 1's round, phase 2's steady
	# traffic, phase 4's round after the restart.
	COUNTED=("$WORK/sent1.json" "$WORK/steady.json" "$WORK/sent2.json")
	T_RESTARTS=$(now_ms)
	segment before-term1
	restart_plugin TERM
	segment after-term1
	restart_plugin KILL
	segment after-kill
	restart_plugin TERM
	segment after-term2
	local n
	n=$(prom_get /api/v1/query --data-urlencode "query=count_over_time(ALERTS{alertname=\"XDPDropNotAttached\"}[$(($(since_ms "$T_RESTARTS") / 1000 + 2))s])" |
		jq '.data.result | length')
	[ "$n" = 0 ] || fail "XDPDropNotAttached pending or firing during the restarts"
	note "restarts: XDPDropNotAttached never pending nor firing"
}

# ---------------------------------------------------------------- totals

# counted_totals: "protocol packets" dropped, one a line, from every report,
# the UDP frames of the reloads phase included (all dropped, as udp).
counted_totals() {
	{
		jq -r '.series[] | select(.action == "drop") | "\(.protocol) \(.packets)"' "${COUNTED[@]}"
		[ ! -s "$WORK/reloads.json" ] || jq -r '"udp \(.delivered)"' "$WORK/reloads.json"
	} | awk '{s[$1] += $2} END {for (p in s) print p, s[p]}' | LC_ALL=C sort
}

# minus FIRST: "protocol=packets ..." of the counted totals less FIRST
# ("protocol packets" lines: each series' first point, the start of a total).
minus() {
	awk 'NR == FNR {first[$1] += $2; next} {printf "%s%s=%d", sep, $1, $2 - first[$1]; sep = " "}' \
		<(printf '%s\n' "$1") <(counted_totals)
}

# rule_counted: "rule/action packets" the e2e rules decided in every report:
# the drop rule every UDP frame (the mix's and the reloads' come from source
# port 40000), the other rules none (the limit rule gets its frames after).
rule_counted() {
	printf '%s/drop %s\n%s/pass 0\n%s/pass 0\n%s/drop 0\n' "$RULE_DROP" "$(counted_totals | awk '$1 == "udp" {print $2}')" "$RULE_NEVER" \
		"$RULE_LIMIT" "$RULE_LIMIT" | LC_ALL=C sort
}

# rule_minus FIRST: "rule/action=packets ..." of rule_counted less FIRST
# ("rule/action packets" lines: each rule series' first point).
rule_minus() {
	awk 'NR == FNR {first[$1] += $2; next} {printf "%s%s=%d", sep, $1, $2 - first[$1]; sep = " "}' \
		<(printf '%s\n' "$1") <(rule_counted)
}

# influx_rule_first, prom_rule_first: the first point (InfluxDB) or sample
# (Prometheus) of each xdp_drop_rule series on $DEV in the run.
influx_rule_first() {
	influx_query "SELECT first(\"packets\") FROM \"xdp_drop_rule\" WHERE \"interface\" = '$DEV' AND time >= ${t_run1}ms GROUP BY *" |
		jq -r '.results[0].series[] | "\(.tags.rule)/\(.tags.action) \(.values[0][1])"'
}
prom_rule_first() {
	prom_get /api/v1/query --data-urlencode "query=xdp_drop_rule_packets{job=\"telegraf\",interface=\"$DEV\"}[$1s]" |
		jq -r '.data.result[] | "\(.metric.rule)/\(.metric.action) \(.values[0][1])"'
}

# influx_first, prom_first: the first point (InfluxDB) or sample
# (Prometheus) of each dropped series in the run, summed per protocol. The
# first gather may have come in the middle of the first round, so this is
# not always one round.
influx_first() {
	influx_query "SELECT first(\"packets\") FROM \"xdp_drop\" WHERE \"action\" = 'drop' AND \"interface\" = '$DEV' AND time >= ${t_run1}ms GROUP BY *" |
		jq -r '.results[0].series[] | "\(.tags.protocol) \(.values[0][1])"'
}
prom_first() {
	prom_get /api/v1/query --data-urlencode "query=xdp_drop_packets{job=\"telegraf\",interface=\"$DEV\",action=\"drop\"}[$1s]" |
		jq -r '.data.result[] | "\(.metric.protocol) \(.values[0][1])"'
}

# nonzero TOTALS: "key=total ..." less the keys at 0 (a standing series no
# frame reached has a total of 0: a protocol nothing dropped), on either
# side of a comparison.
nonzero() { tr ' ' '\n' <<<"$1" | grep -v '=0$' | paste -sd' '; }

# influx_totals QUERY JQ_ROW: "protocol=total ..." from a query's rows; JQ_ROW
# maps a series to [protocol, number].
influx_totals() {
	influx_query "$1" | jq -r "[.results[0].series[]? | $2] | group_by(.[0])
		| map(\"\(.[0][0])=\(map(.[1]) | add | round)\") | join(\" \")"
}

# doc_promql HEADING: the PromQL block under "### HEADING" in queries.md,
# on one line, its step made half this run's scrape interval.
doc_promql() {
	awk -v h="$1" '/^### / {in_h = (substr($0, 5) == h)}
		in_h && /^```promql$/ {inq = 1; next}
		inq && /^```$/ {exit}
		inq {printf "%s ", $0}' "$QUERIES" | sed 's/15s/500ms/g'
}

# prom_totals QUERY [JQ_KEY]: "key=total ..." from an instant query, the key
# a series' protocol unless JQ_KEY makes another from its labels.
prom_totals() {
	prom_get /api/v1/query --data-urlencode "query=$1" |
		jq -r "[.data.result[] | [(.metric | ${2:-.protocol}), (.value[1] | tonumber)]] | group_by(.[0])
			| map(\"\\(.[0][0])=\\(map(.[1]) | add | round)\") | join(\" \")"
}

# check_totals: every shipped query and panel that sums drops, against
# every frame counted, first bursts included.
check_totals() {
	log "totals of the shipped queries against the frames counted"
	local want got q range ok=1 line first
	check_total() { # WHAT GOT
		if [ "$(nonzero "$2")" = "$(nonzero "$want")" ]; then
			line="$1: $2 = expected $want"
		else
			line="$1: $2 != expected $want"
			ok=0
		fi
		note "$line"
	}
	note "frames counted: $(jq -s '[.[].frames] | add' "${COUNTED[@]}") in ${#COUNTED[@]} sends of the mix while attached$([ ! -s "$WORK/reloads.json" ] || echo ", $(jq .delivered "$WORK/reloads.json") UDP frames through the reloads"); dropped per protocol: $(counted_totals | tr ' \n' '= ' | sed 's/ $//')"
	first=$(influx_first)
	want=$(minus "")
	note "InfluxDB: expected = every frame dropped, first bursts included (each series' first point, zero for a standing one: $(awk '{s[$1] += $2} END {for (p in s) printf "%s=%d ", p, s[p]}' <<<"$first" | xargs -n1 | sort | paste -sd' '))"

	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Dropped packets per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | [.tags.protocol, .values[0][1]]')
	check_total "InfluxQL 'Dropped packets per protocol'" "$got"
	got=$(doc_query "Top dropped protocols" | jq -r '[.results[0].series[0].values[] | "\(.[2])=\(.[1])"] | sort | join(" ")')
	check_total "InfluxQL 'Top dropped protocols'" "$got"
	# A rate is increases over 5s buckets / 5: times 5 and summed, the total.
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Drop rate per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | [.tags.protocol, ([.values[][1]] | add * 5)]')
	check_total "InfluxQL 'Drop rate per protocol' (sum of rate x 5s)" "$got"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Drop and pass rate per protocol" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'" and .tags.action == "drop") | [.tags.protocol, ([.values[][1]] | add * 5)]')
	check_total "InfluxQL 'Drop and pass rate per protocol', drop (sum of rate x 5s)" "$got"

	# The rule queries against the frames each rule decided.
	local protocol_want=$want rule_key='.tags.rule + "/" + .tags.action'
	first=$(influx_rule_first)
	want=$(rule_minus "")
	note "InfluxDB rules: expected = every frame decided (each rule series' first point: $(tr '\n' ' ' <<<"$first" | sed 's/ $//'))"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Frames per rule" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | ['"$rule_key"', .values[0][1]]')
	check_total "InfluxQL 'Frames per rule'" "$got"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Frame rate per rule" {print $2}')" \
		'select(.tags.interface == "'"$DEV"'") | ['"$rule_key"', ([.values[][1]] | add * 5)]')
	check_total "InfluxQL 'Frame rate per rule' (sum of rate x 5s)" "$got"
	local rule_want=$want

	while IFS=$'\t' read -r title q; do
		case $title in
		"Dropped packets per protocol (time range)")
			want=$protocol_want got=$(influx_totals "$q" '[.tags.protocol, .values[0][1]]') ;;
		"Dropped packets/s per protocol")
			want=$protocol_want got=$(influx_totals "$q" '[.tags.protocol, ([.values[][1]] | add * 5)]') ;;
		"Frames per rule (time range)")
			want=$rule_want got=$(influx_totals "$q" "[$rule_key, .values[0][1]]") ;;
		"Frames/s per rule")
			want=$rule_want got=$(influx_totals "$q" "[$rule_key, ([.values[][1]] | add * 5)]") ;;
		*) continue ;;
		esac
		check_total "Grafana panel '$title'" "$got"
	done < <(dashboard_queries)

	range=$(($(since_ms "$t_run1") / 1000 + 5))
	first=$(prom_first "$range")
	want=$(minus "")
	note "Prometheus: expected = every frame dropped, first bursts included (each series' first sample: $(awk '{s[$1] += $2} END {for (p in s) printf "%s=%d ", p, s[p]}' <<<"$first" | xargs -n1 | sort | paste -sd' '))"
	q=$(doc_promql "Dropped packets per protocol (PromQL)" | sed "s/\[1h:/[${range}s:/")
	[ -n "$q" ] || fail "$QUERIES has no PromQL block under '### Dropped packets per protocol (PromQL)'"
	got=$(prom_totals "$q")
	check_total "PromQL 'Dropped packets per protocol' over ${range}s" "$got"
	first=$(prom_rule_first "$range")
	want=$(rule_minus "")
	note "Prometheus rules: expected = every frame decided (each rule series' first sample: $(tr '\n' ' ' <<<"$first" | sed 's/ $//'))"
	q=$(doc_promql "Frames per rule (PromQL)" | sed "s/\[1h:/[${range}s:/")
	[ -n "$q" ] || fail "$QUERIES has no PromQL block under '### Frames per rule (PromQL)'"
	got=$(prom_totals "$q" '.rule + "/" + .action')
	check_total "PromQL 'Frames per rule' over ${range}s" "$got"

	# For the record, not asserted: increase()'s extrapolated estimate, and
	# the InfluxQL these documents shipped before (whole buckets with a
	# restart thrown away).
	note "  (estimate, not asserted) PromQL increase(): $(prom_totals "sum by (protocol) (increase(xdp_drop_packets{job=\"telegraf\",action=\"drop\"}[${range}s]))")"
	note "  (former query, not asserted) non_negative_difference over 5s buckets: $(influx_totals "SELECT sum(\"delta\") FROM (SELECT non_negative_difference(last(\"packets\")) AS \"delta\" FROM \"xdp_drop\"
		WHERE \"action\" = 'drop' AND time > now() - 1h GROUP BY time(5s), *) GROUP BY \"protocol\"" '[.tags.protocol, .values[0][1]]')"
	note "Flux: not run (InfluxDB $(influxd version 2>/dev/null | awk '{print $2}') has no Flux: /api/v2/query answers $(nsx curl -s -o /dev/null -w '%{http_code}' -XPOST http://127.0.0.1:8086/api/v2/query))"
	((ok)) || fail "a shipped query's total differs from the frames counted"
}

# ---------------------------------------------------------------- errors

# link_error_since MS: the error text of $DEV's last not-attached point since MS.
link_error_since() {
	influx_query "SELECT last(\"error\") FROM \"xdp_drop_link\" WHERE \"interface\" = '$DEV' AND \"attached\" = false AND time >= ${1}ms" |
		jq -r '.results[0].series[0].values[0][1] // empty'
}

# not_attached_alerts: "state" of each XDPDropNotAttached alert on $DEV (job telegraf), one a line.
not_attached_alerts() {
	prom_get /api/v1/alerts | jq -r --arg dev "$DEV" '.data.alerts[] | select(.labels.alertname == "XDPDropNotAttached"
		and .labels.interface == $dev and .labels.job == "telegraf") | .state'
}
not_attached_firing() { [ "$(not_attached_alerts)" = firing ]; }
no_not_attached() { [ -z "$(not_attached_alerts)" ]; }
# error_series_exposed: the default prometheus_client still exposes an error-labelled series of $DEV.
error_series_exposed() {
	nsx curl -sS --fail http://127.0.0.1:9273/metrics | grep -q "^xdp_drop_link_attached{error=\"[^\"]*.*interface=\"$DEV\""
}
no_error_series() { ! error_series_exposed; }

# alert_label_sets NAME SECONDS: distinct label sets (alertstate aside) NAME had in the last SECONDS.
alert_label_sets() {
	prom_get /api/v1/query --data-urlencode "query=count_over_time(ALERTS{alertname=\"$1\"}[${2}s])" |
		jq -c '[.data.result[].metric | del(.alertstate)] | unique | .[]'
}

# interface_error_then_clear: $DEV disappears (the plugin reports it not
# found), the message changes (another interface appears, and the error
# lists the interfaces), then $DEV is back. With prometheus_client at its
# defaults the error is a label: one XDPDropNotAttached for $DEV while it
# lasts, whatever the message; none after, even while the error's series
# linger; no XDPDropLinkMetricsMissing at all.
interface_error_then_clear() {
	log "an interface error that appears, changes its message, then clears"
	local t_err msg1 msg2 sets t_fire t_back t_clear n
	# Phase 4 stops Telegraf for longer than this run's for:, so
	# XDPDropLinkMetricsMissing may still be resolving from it: start from a
	# quiet state, or its last evaluations would be counted against the error.
	missing_quiet() { [ -z "$(alert_label_sets XDPDropLinkMetricsMissing 5)" ]; }
	wait_until "$HANG" missing_quiet || fail "XDPDropLinkMetricsMissing still active ${HANG}s after Telegraf was back: $(alert_label_sets XDPDropLinkMetricsMissing 5)"
	t_err=$(now_ms)
	ip -n "$NS" link del "$DEV"
	have_error() { [ -n "$(link_error_since "$t_err")" ]; }
	wait_until 20 have_error || fail "no not-attached xdp_drop_link point with an error after $DEV was deleted"
	msg1=$(link_error_since "$t_err")
	ip -n "$NS" link add xdpx0 type veth peer name xdpx1
	new_message() { local m; m=$(link_error_since "$t_err"); [ -n "$m" ] && [ "$m" != "$msg1" ]; }
	wait_until 20 new_message || fail "the error message did not change when another interface appeared: '$msg1'"
	msg2=$(link_error_since "$t_err")
	note "error on $DEV: '$msg1', then '$msg2'"
	wait_until 20 error_series_exposed || fail "the default prometheus_client exposes no error label for $DEV"
	! nsx curl -sS --fail "http://$PROM_RECOMMENDED/metrics" | grep -q '^xdp_drop_link_attached{error=' ||
		fail "prometheus_client with fieldexclude = [\"error\"] still exposes an error label"
	note "prometheus_client: error label at the defaults; none with the snippet's fieldexclude"

	# The attached series of before lingers for expiration_interval (60s),
	# then for: runs.
	wait_until 120 not_attached_firing || fail "XDPDropNotAttached not firing for $DEV within 120s: '$(not_attached_alerts | paste -sd' ')'"
	t_fire=$(since_ms "$t_err")
	n=$(prom_get /api/v1/query --data-urlencode "query=count(count by (error) (last_over_time(xdp_drop_link_attached{job=\"telegraf\",interface=\"$DEV\",error!=\"\"}[5m])))" |
		jq -r '.data.result[0].value[1] // 0')
	((n >= 2)) || fail "Prometheus saw $n error label values for $DEV, want the two messages"
	sets=$(alert_label_sets XDPDropNotAttached $(($(since_ms "$t_err") / 1000 + 2)))
	[ "$(wc -l <<<"$sets")" = 1 ] || fail "XDPDropNotAttached had several label sets: $sets"
	jq -e 'has("error") or has("mode") | not' <<<"$sets" >/dev/null || fail "XDPDropNotAttached carries error or mode: $sets"
	note "XDPDropNotAttached: exactly one alert for $DEV over $n error messages, firing $t_fire ms after the error (60s expiration_interval + for: $ALERT_FOR), labels $sets"

	t_back=$(now_ms)
	ip -n "$NS" link del xdpx0
	ip -n "$NS" link add "$DEV" type veth peer name "$PEER"
	for l in "$DEV" "$PEER"; do ip -n "$NS" link set "$l" up; done
	wait_until 20 xdp_attached || fail "$DEV not attached again 20s after it came back"
	wait_until 20 link_point_since "$t_back" || fail "no attached xdp_drop_link point after $DEV came back"
	wait_until 20 no_not_attached || fail "XDPDropNotAttached still active 20s after $DEV was attached again"
	t_clear=$(now_ms)
	note "cleared: $DEV attached again, XDPDropNotAttached resolved $(since_ms "$t_back") ms after it came back"

	# None after: while the error's series linger in prometheus_client, and
	# for: and a few evaluations more once they are gone.
	still_none() { no_not_attached || fail "XDPDropNotAttached active again after the error cleared"; no_error_series; }
	wait_until 90 still_none || fail "prometheus_client still exposes $DEV's error label 90s after it cleared"
	local t_gone
	t_gone=$(now_ms)
	quiet_for() { no_not_attached || fail "XDPDropNotAttached active again after the error cleared"; (($(since_ms "$t_gone") > $1)); }
	wait_until 30 quiet_for 10000 || true
	sets=$(alert_label_sets XDPDropNotAttached $(($(since_ms "$t_clear") / 1000)))
	[ -z "$sets" ] || fail "XDPDropNotAttached pending or firing after the error cleared: $sets"
	note "XDPDropNotAttached: none in the $(($(since_ms "$t_clear") / 1000)) s after the error cleared (its series expired after $(((t_gone - t_clear) / 1000)) s)"
	local window failed
	window=$(($(since_ms "$t_err") / 1000))
	sets=$(alert_label_sets XDPDropLinkMetricsMissing "$window")
	if [ -n "$sets" ]; then
		# A scrape that fails (up 0: on a busy machine Telegraf may not
		# answer within the 1s scrape interval) marks every series stale,
		# and then the metrics are missing indeed: only an alert without
		# one is the plugin's doing.
		failed=$(prom_get /api/v1/query --data-urlencode "query=count_over_time((up{job=\"telegraf\"} == 0)[${window}s:1s])" |
			jq -r '.data.result[0].value[1] // 0')
		((failed > 0)) || fail "XDPDropLinkMetricsMissing was pending or firing after the error: $sets"
		note "XDPDropLinkMetricsMissing pending or firing after the error, during $failed failed scrapes of Telegraf (up 0): not the plugin's doing"
	fi
	# Earlier in the run it may fire, rightly: Telegraf is stopped in phase
	# 4 for longer than this run's for:, and its series are gone meanwhile.
	note "XDPDropLinkMetricsMissing: never pending nor firing from the error to its expiry"
	check_generic_mode
}

# check_generic_mode: XDPDropGenericMode never active; native mode, so the
# fallback field, when this build reports it, is 0.
check_generic_mode() {
	local sets fb
	sets=$(alert_label_sets XDPDropGenericMode $(($(since_ms "$t_run1") / 1000 + 2)))
	[ -z "$sets" ] || fail "XDPDropGenericMode was pending or firing in native mode: $sets"
	fb=$(nsx curl -sS --fail http://127.0.0.1:9273/metrics | grep "^xdp_drop_link_fallback{.*interface=\"$DEV\"" || true)
	if [ -n "$fb" ]; then
		grep -q ' 0$' <<<"$fb" || fail "xdp_drop_link_fallback for $DEV in native mode: $fb"
		note "XDPDropGenericMode: never pending nor firing; xdp_drop_link_fallback 0 in native mode"
	else
		note "XDPDropGenericMode: never pending nor firing; this build reports no fallback field (the rule is tested by promtool)"
	fi
}

# ---------------------------------------------------------------- bans

BAN_SOURCE=203.0.113.7     # sendban's source: banned by the run's LAPI
BAN_REFUSED=203.0.113.200  # a decision inside the bans' allow_prefix: refused, counted
BAN_ALLOW=203.0.113.192/26 # the bans' allow_prefix
BANNED=()                  # sendban reports of every frame a ban dropped, in order
BAN_PROCS=0                # plugin processes that ran with [bans]
BAN_REFUSED_WANT=0         # refused, summed over those processes' last report (the plugin's own counters)
BAN_ADDED_WANT=0           # added, likewise

# ban_point SINCE_MS: "packets active refused added synced" of $DEV's last
# crowdsec xdp_drop_ban point since SINCE_MS.
ban_point() {
	influx_query "SELECT last(\"packets\") AS \"packets\", \"active\", \"refused\", \"added\", \"synced\" FROM \"xdp_drop_ban\"
		WHERE \"interface\" = '$DEV' AND \"origin\" = 'crowdsec' AND time >= ${1}ms" |
		jq -r '.results[0].series[0].values[0] // empty | .[1:] | map(tostring) | join(" ")'
}
# ban_in_force SINCE_MS: a point since SINCE_MS has the ban in force and the
# refused decision counted (the process pulled from the LAPI).
ban_in_force() { awk '$2 == 1 && $3 >= 1 && $5 > 0 {ok = 1} END {exit !ok}' <<<"$(ban_point "$1")"; }
# ban_packets_are SINCE_MS N: the last point since SINCE_MS counts N frames dropped by bans.
ban_packets_are() { [ "$(ban_point "$1" | cut -d' ' -f1)" = "$2" ]; }

# send_banned NAME COUNT: COUNT frames from the banned source, counted in
# the ban totals and, as ipv4/gre drops, in the drop totals.
send_banned() {
	nsx "$WORK/bin/sendban" -netns "$NS" -iface "$PEER" -count "$2" >"$WORK/$1.json" || fail "sendban failed"
	BANNED+=("$WORK/$1.json")
	COUNTED+=("$WORK/$1.json")
	PROC_BANNED=$((PROC_BANNED + $2))
}

# landed WHAT SINCE_MS: the current process's ban frames are in InfluxDB and
# Prometheus has scraped them (so a kill after this loses none).
landed() {
	local t
	wait_until 20 ban_packets_are "$2" "$PROC_BANNED" ||
		fail "$1: xdp_drop_ban packets in InfluxDB '$(ban_point "$2")', want $PROC_BANNED"
	t=$(now_ms)
	wait_until 20 prom_scraped_since "$t" || fail "$1: Prometheus did not scrape prometheus_client after $t"
	LANDED_MS=$(now_ms)
}

# ban_process_done: adds the running process's feed counts (its last report)
# to what the totals must give.
ban_process_done() {
	local p
	p=$(ban_point "$T_BANS")
	BAN_REFUSED_WANT=$((BAN_REFUSED_WANT + $(cut -d' ' -f3 <<<"$p")))
	BAN_ADDED_WANT=$((BAN_ADDED_WANT + $(cut -d' ' -f4 <<<"$p")))
}

# restart_in_bucket SINCE_MS: "growth restart after" times (ms) of the
# first point of the last process before its restart that counted the
# growth, and the first point after the restart, when both fall in one
# time(10s) bucket (what a bucketed difference loses); nothing otherwise.
restart_in_bucket() {
	influx_query "SELECT \"packets\" FROM \"xdp_drop_ban\" WHERE \"interface\" = '$DEV' AND \"origin\" = 'crowdsec' AND time >= ${1}ms" |
		jq -r '[.results[0].series[0].values[]] as $v
			| [0, (range(1; $v | length) | select($v[.][1] < $v[. - 1][1]))] | .[-1] as $r | (.[-2] // 0) as $p
			| if $r == 0 then empty else
				([range($p; $r) | select($v[.][1] == $v[$r - 1][1])] | first) as $g
				| if (($v[$g][0] / 10000 | floor) == ($v[$r][0] / 10000 | floor)) and $g > 0 and $v[$g][1] > $v[$g - 1][1]
				  then "\($v[$g][0]) \($v[$r - 1][0]) \($v[$r][0])" else empty end end'
}

# bans_under_traffic: [bans] on, fed by a real LAPI (lapifeed) that bans
# BAN_SOURCE and holds a decision inside the allow-list; frames from the
# banned source before and after a SIGKILL of the plugin that comes inside
# a time(10s) bucket, after growth in that bucket: what the shipped ban
# queries (and drop queries) must count exactly.
bans_under_traffic() {
	log "bans: a LAPI, a ban under traffic, a restart inside a 10s bucket"
	local t_lapi t attempt got g r a
	t_lapi=$(now_ms)
	ip netns exec "$NS" "$WORK/bin/lapifeed" -netns "$NS" -dir "$WORK/lapi" -key_file "$WORK/crowdsec.key" \
		-ban "$BAN_SOURCE" -ban "$BAN_REFUSED" >"$WORK/lapi.json" 2>"$LOGS/lapifeed.log" &
	lapi_up() { [ -s "$WORK/lapi.json" ]; }
	wait_until "$HANG" lapi_up || fail "lapifeed did not start a LAPI: $(tail -n 20 "$LOGS/lapifeed.log")"
	note "bans: LAPI on $(jq -r .url "$WORK/lapi.json") (crowdsec -no-cs, $(since_ms "$t_lapi") ms), decisions: ban $BAN_SOURCE, ban $BAN_REFUSED (inside allow_prefix $BAN_ALLOW)"
	cat >>"$WORK/xdp_drop.conf" <<-EOF

		  [inputs.xdp_drop.bans]
		    allow_prefix = ["$BAN_ALLOW"]
		    [inputs.xdp_drop.bans.crowdsec]
		      url = "$(jq -r .url "$WORK/lapi.json")"
		      api_key_file = "$WORK/crowdsec.key"
		      interval = "1s"
	EOF
	T_BANS=$(now_ms)
	restart_plugin TERM
	wait_until 20 ban_in_force "$T_BANS" || fail "bans: no xdp_drop_ban point with the ban in force after [bans] was set: '$(ban_point "$T_BANS")'"
	BAN_PROCS=1 PROC_BANNED=0
	note "bans: in force: xdp_drop_ban packets active refused added synced = $(ban_point "$T_BANS")"
	send_banned ban-a 300
	landed "ban-a" "$T_BANS"

	# Growth early in a bucket, gathered, then a SIGKILL a few seconds into
	# it: the restarted plugin's first point falls in the same bucket. A
	# busy machine may push it into the next one; then again, twice at most.
	bucket_start() { local s=$(($(now_ms) % 10000)); ((s >= 300 && s < 1300)); }
	for attempt in 1 2 3; do
		wait_until 11 bucket_start || fail "bans: the clock never reached 0.3 s into a 10 s bucket"
		t=$(now_ms)
		send_banned "ban-b$attempt" 200
		landed "ban-b$attempt" "$t"
		ban_process_done
		note "bans: growth of 200 sent $((t % 10000)) ms into a 10 s bucket, SIGKILL $(($(now_ms) % 10000)) ms into it"
		restart_plugin KILL
		t=$(now_ms)
		BAN_PROCS=$((BAN_PROCS + 1)) PROC_BANNED=0
		wait_until 20 ban_in_force "$t" || fail "bans: the restarted plugin has not put the ban in force: '$(ban_point "$t")'"
		send_banned "ban-c$attempt" 100
		landed "ban-c$attempt" "$t"
		got=$(restart_in_bucket "$T_BANS")
		[ -z "$got" ] || break
		note "bans: attempt $attempt: the restarted plugin's first point fell in the next bucket; again"
	done
	[ -n "$got" ] || fail "bans: in 3 attempts no restart fell inside the 10 s bucket of the growth before it"
	ban_process_done
	read -r g r a <<<"$got"
	note "bans: restart inside one 10 s bucket: growth at +$((g % 10000)) ms, last point before the kill at +$((r % 10000)) ms, first after at +$((a % 10000)) ms (attempt $attempt)"
	check_ban_queries
	note "bans: done in $(since_ms "$t_lapi") ms"
}

# doc_promql_blocks HEADING: every PromQL block under "### HEADING", one a
# line, the step made half this run's scrape interval.
doc_promql_blocks() {
	awk -v h="$1" '/^### / {in_h = (substr($0, 5) == h)}
		in_h && /^```promql$/ {inq = 1; q = ""; next}
		inq && /^```$/ {inq = 0; print q; next}
		inq {q = q $0 " "}' "$QUERIES" | sed 's/15s/500ms/g'
}

# check_ban_queries: every shipped ban query and panel against what was
# sent from the banned source and the plugin's own feed counts, exactly.
check_ban_queries() {
	log "the shipped ban queries against the frames banned"
	local want got q title range ok=1 out
	ban_total() { # WHAT GOT WANT
		if [ "$2" = "$3" ]; then
			note "$1: $2 = expected $3"
		else
			note "$1: ${2:-nothing} != expected $3"
			ok=0
		fi
	}
	# A total starts from the series' first point: the feed's counts may be
	# above zero there (a pull before the first gather), packets are not (no
	# frame came from the banned source before the ban was seen in force).
	local first refused added
	first=$(influx_query "SELECT first(\"packets\"), first(\"refused\"), first(\"added\") FROM \"xdp_drop_ban\"
		WHERE \"interface\" = '$DEV' AND \"origin\" = 'crowdsec' AND time >= ${t_run1}ms" |
		jq -r '.results[0].series[0].values[0][1:] | map(tostring) | join(" ")')
	read -r _ refused added <<<"$first"
	want="crowdsec=$(($(jq -s '[.[].frames] | add' "${BANNED[@]}") - ${first%% *}))"
	refused=$((BAN_REFUSED_WANT - refused)) added=$((BAN_ADDED_WANT - added))
	note "bans: ${#BANNED[@]} sends from $BAN_SOURCE ($want frames), over $BAN_PROCS plugin processes; their last reports: refused $BAN_REFUSED_WANT, added $BAN_ADDED_WANT; the series' first point: packets refused added $first"
	local dev_sel='select(.tags.interface == "'"$DEV"'")'
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Frames dropped by bans" {print $2}')" "$dev_sel | [.tags.origin, .values[0][1]]")
	ban_total "InfluxQL 'Frames dropped by bans'" "$got" "$want"
	got=$(influx_totals "$(doc_queries | awk -F'\t' '$1 == "Ban drop rate" {print $2}')" "$dev_sel | [.tags.origin, ([.values[][1]] | add * 5)]")
	ban_total "InfluxQL 'Ban drop rate' (sum of rate x 5s)" "$got" "$want"
	q=$(doc_queries | awk -F'\t' '$1 == "Refused bans per minute" {print $2}')
	got=$(influx_totals "$q" "$dev_sel | [.tags.origin, ([.values[][1]] | add)]")
	ban_total "InfluxQL 'Refused bans per minute' (summed)" "$got" "crowdsec=$refused"
	got=$(influx_totals "${q//\"refused\"/\"added\"}" "$dev_sel | [.tags.origin, ([.values[][1]] | add)]")
	ban_total "InfluxQL 'Refused bans per minute' with \"added\" (summed)" "$got" "crowdsec=$added"
	got=$(doc_query "Bans in force" | jq -r "[.results[0].series[]? | $dev_sel | \"\(.tags.origin)=\(.values[-1][1])\"] | join(\" \")")
	ban_total "InfluxQL 'Bans in force' (last)" "$got" "crowdsec=1"
	out=$(doc_query "Ban feed status")
	got=$(jq -r --argjson from "$((T_BANS / 1000))" --argjson to "$(($(now_ms) / 1000))" \
		"[.results[0].series[]? | $dev_sel | .values[0] | \"synced \(if .[1] >= \$from and .[1] <= \$to then \"in the run\" else .[1] end) active \(.[2]) error \(.[3] // \"none\")\"] | join(\";\")" <<<"$out")
	ban_total "InfluxQL 'Ban feed status'" "$got" "synced in the run active 1 error none"

	while IFS=$'\t' read -r title q; do
		case $title in
		"Frames/s dropped by bans")
			got=$(influx_totals "$q" '[.tags.origin, ([.values[][1]] | add * 5)]')
			ban_total "Grafana panel '$title' (sum of rate x 5s)" "$got" "$want" ;;
		"Bans in force")
			got=$(influx_query "$q" | jq -r '[.results[0].series[]? | "\(.tags.origin)=\(.values[-1][1])"] | join(" ")')
			ban_total "Grafana panel '$title' (last)" "$got" "crowdsec=1" ;;
		"Ban feeds")
			got=$(influx_query "$q" | jq -r --argjson from "$T_BANS" --argjson to "$(now_ms)" \
				'[.results[0].series[]? | .values[0] | "synced \(if .[1] >= $from and .[1] <= $to then "in the run" else .[1] end) active \(.[2]) error \(.[3] // "none")"] | join(";")')
			ban_total "Grafana panel '$title'" "$got" "synced in the run active 1 error none" ;;
		esac
	done < <(dashboard_queries)

	# Whole 15 s steps, one more than the phase lasted: the subquery's steps
	# are aligned to the clock, so a range of n s holds as little as n - 15 s
	# of differences (before the phase the ban series did not exist), and
	# its last step may come before the last send.
	# And a last step after the last send was scraped: the first 15 s
	# boundary past it.
	local step_end=$(((LANDED_MS / 15000 + 1) * 15000 + 500))
	while (($(now_ms) < step_end)); do sleep 0.2; done
	range=$((($(since_ms "$T_BANS") / 1000 + 5 + 14) / 15 * 15 + 15))
	q=$(doc_promql_blocks "Bans (PromQL)" | grep 'sum_over_time' | sed "s/\[1h:/[${range}s:/")
	[ -n "$q" ] || fail "$QUERIES has no PromQL ban total under '### Bans (PromQL)'"
	ban_total "PromQL 'The frames bans dropped' over ${range}s" "$(prom_totals "$q" .origin)" "$want"
	got=$(prom_totals "$(doc_promql_blocks "Bans (PromQL)" | grep 'xdp_drop_ban_active')" .origin)
	ban_total "PromQL 'Bans in force'" "$got" "crowdsec=1"
	got=$(prom_get /api/v1/query --data-urlencode "query=$(doc_promql_blocks "Bans (PromQL)" | grep 'xdp_drop_ban_synced')" |
		jq -r '[.data.result[] | .value[1] | tonumber | if . >= 0 and . < 10 then "under 10 s" else tostring end] | join(" ")')
	ban_total "PromQL 'Seconds since the last good pull'" "$got" "under 10 s"
	while read -r q; do
		[ -n "$q" ] || continue
		prom_get /api/v1/query --data-urlencode "query=$q" | jq -e '.data.result | length > 0' >/dev/null ||
			fail "PromQL ban query gives nothing: $q"
	done < <(doc_promql_blocks "Bans (PromQL)" | grep 'rate(')
	note "PromQL ban rates (drop rate, refused per minute) have data; estimates, not asserted"
	note "  (former query, not asserted) 'Frames dropped by bans' on time(10s) buckets: $(influx_totals "SELECT sum(\"inc\") FROM (SELECT \"d\" AS \"inc\" FROM (SELECT difference(last(\"packets\")) AS \"d\", moving_average(last(\"packets\"), 2) + difference(last(\"packets\")) / 2 AS \"c\" FROM \"xdp_drop_ban\" WHERE \"action\" = 'drop' AND time > now() - 1h GROUP BY time(10s), * fill(none)) WHERE \"d\" >= 0), (SELECT \"c\" AS \"inc\" FROM (SELECT difference(last(\"packets\")) AS \"d\", moving_average(last(\"packets\"), 2) + difference(last(\"packets\")) / 2 AS \"c\" FROM \"xdp_drop_ban\" WHERE \"action\" = 'drop' AND time > now() - 1h GROUP BY time(10s), * fill(none)) WHERE \"d\" < 0) GROUP BY \"origin\"" '[.tags.origin, .values[0][1]]')"
	((ok)) || fail "a shipped ban query's total differs from the frames banned or the plugin's counts"
}

# flowspec_point SINCE_MS: "packets bytes rule_text" of $DEV's last
# xdp_drop_flowspec point since SINCE_MS (the run's one rule).
flowspec_point() {
	influx_query "SELECT last(\"packets\") AS \"packets\", \"bytes\", \"rule_text\" FROM \"xdp_drop_flowspec\"
		WHERE \"interface\" = '$DEV' AND time >= ${1}ms" |
		jq -r '.results[0].series[0].values[0] // empty | .[1:] | map(tostring) | join(" ")'
}
# flowspec_peer SINCE_MS: "up state accepted" of the last xdp_drop_flowspec_peer point since SINCE_MS.
flowspec_peer() {
	influx_query "SELECT last(\"up\") AS \"up\", \"state\", \"accepted\" FROM \"xdp_drop_flowspec_peer\" WHERE time >= ${1}ms" |
		jq -r '.results[0].series[0].values[0] // empty | .[1:] | map(tostring) | join(" ")'
}
flowspec_alert() {
	prom_get /api/v1/alerts | jq -r --arg s "$1" '[.data.alerts[] | select(.labels.alertname == "XDPDropFlowSpecPeerDown" and .state == $s) | .labels.peer] | unique | join(",")'
}

# flowspec_under_traffic: [flowspec] on, peering with Debian's gobgpd as the
# route server on a loopback port of the run's namespace: a rule announced
# there (the NTP reflection signature, to an address of the host) counts
# exactly the frames it matches, in InfluxDB and Prometheus; withdrawn, its
# series ends; gobgpd killed, the peer's point says down (the alert is
# check_flowspec_alert's, at the end of the run).
flowspec_under_traffic() {
	log "flowspec: gobgpd announces a rule; its frames counted; the peer goes down"
	local t0 t got want rule
	t0=$(now_ms)
	nsx ip addr add "$FS_HOST/32" dev lo
	cat >"$WORK/gobgpd.toml" <<-EOF
		[global.config]
		  as = 65000
		  router-id = "127.0.0.2"
		  port = $FS_PORT
		  local-address-list = ["127.0.0.2"]
		[[neighbors]]
		  [neighbors.config]
		    neighbor-address = "127.0.0.1"
		    peer-as = 65001
		  [neighbors.transport.config]
		    passive-mode = true
		  [[neighbors.afi-safis]]
		    [neighbors.afi-safis.config]
		      afi-safi-name = "ipv4-flowspec"
	EOF
	# Not through nsx: $! must be gobgpd itself (ip netns exec execs it), not a subshell.
	ip netns exec "$NS" gobgpd -f "$WORK/gobgpd.toml" -t toml --api-hosts "127.0.0.1:$FS_API" >"$LOGS/gobgpd.log" 2>&1 &
	FS_GOBGPD=$!
	cat >>"$WORK/xdp_drop.conf" <<-EOF

		  [inputs.xdp_drop.flowspec]
		    local_as = 65001
		    router_id = "192.0.2.10"
		    [[inputs.xdp_drop.flowspec.peer]]
		      address = "127.0.0.2"
		      port = $FS_PORT
		      peer_as = 65000
	EOF
	T_FLOWSPEC=$(now_ms)
	restart_plugin TERM
	peer_up() { [ "$(flowspec_peer "$T_FLOWSPEC" | cut -d' ' -f1-2)" = "true established" ]; }
	wait_until 30 peer_up || fail "flowspec: no xdp_drop_flowspec_peer point with the session up: '$(flowspec_peer "$T_FLOWSPEC")'; gobgpd: $(tail -n 5 "$LOGS/gobgpd.log")"
	note "flowspec: gobgpd (Debian $(gobgpd --version 2>&1 | head -n 1)) on 127.0.0.2:$FS_PORT, session up $(since_ms "$t0") ms after it started"

	t=$(now_ms)
	nsx gobgp -p "$FS_API" global rib -a ipv4-flowspec add match destination "$FS_HOST/32" protocol udp source-port '==123' packet-length '>=400' then discard ||
		fail "flowspec: gobgp could not add the rule"
	rule_in() { [ -n "$(flowspec_point "$t")" ]; }
	wait_until 10 rule_in || fail "flowspec: the rule announced has no xdp_drop_flowspec point"
	rule=$(flowspec_point "$t" | cut -d' ' -f3-)
	note "flowspec: rule in force, reported $(since_ms "$t") ms after gobgp announced it: $rule"
	nsx "$WORK/bin/sendflow" -netns "$NS" -iface "$PEER" -dst "$FS_HOST" -count 150 >"$WORK/flow.json" || fail "sendflow failed"
	want="$(jq -r '"\(.packets) \(.bytes)"' "$WORK/flow.json")"
	counted() { [ "$(flowspec_point "$t" | cut -d' ' -f1-2)" = "$want" ]; }
	wait_until 20 counted || fail "flowspec: xdp_drop_flowspec packets bytes '$(flowspec_point "$t" | cut -d' ' -f1-2)', want '$want' (and $(jq .others "$WORK/flow.json") frames it must not match)"
	prom_flow() {
		prom_get /api/v1/query --data-urlencode "query=sum(xdp_drop_flowspec_packets{interface=\"$DEV\"}) + 0 * sum(xdp_drop_flowspec_bytes{interface=\"$DEV\"})" |
			jq -r '.data.result[0].value[1] // empty'
	}
	prom_counted() { [ "$(prom_flow)" = "${want%% *}" ]; }
	wait_until 20 prom_counted || fail "flowspec: Prometheus xdp_drop_flowspec_packets '$(prom_flow)', want ${want%% *}"
	note "flowspec: InfluxDB and Prometheus: the rule matched $want (packets bytes) of $(jq '.packets + .others' "$WORK/flow.json") frames sent, exactly"

	# Withdrawn: the rule's series ends (a last point, then none), and
	# frames sent after it are matched by nothing.
	t=$(now_ms)
	nsx gobgp -p "$FS_API" global rib -a ipv4-flowspec del match destination "$FS_HOST/32" protocol udp source-port '==123' packet-length '>=400' then discard ||
		fail "flowspec: gobgp could not withdraw the rule"
	peer_empty() { [ "$(flowspec_peer "$t" | cut -d' ' -f3)" = 0 ]; }
	wait_until 10 peer_empty || fail "flowspec: the peer's point still counts accepted rules after the withdrawal: '$(flowspec_peer "$t")'"
	local t_gone
	t_gone=$(now_ms)
	wait_until 10 link_point_since "$t_gone" || fail "flowspec: no gather after the withdrawal"
	nsx "$WORK/bin/sendflow" -netns "$NS" -iface "$PEER" -dst "$FS_HOST" -count 150 >/dev/null || fail "sendflow failed"
	t_gone=$(now_ms)
	wait_until 10 link_point_since "$t_gone" || fail "flowspec: no gather after the frames sent past the withdrawal"
	[ -z "$(flowspec_point "$t_gone")" ] || fail "flowspec: the rule withdrawn still has points: '$(flowspec_point "$t_gone")'"
	[ "$(flowspec_point "$t" | cut -d' ' -f1-2)" = "$want" ] || fail "flowspec: the withdrawn rule's last point '$(flowspec_point "$t")', want '$want'"
	note "flowspec: withdrawn: accepted 0 at the peer, the rule's last point $want, no point after; 150 more frames matched by nothing"

	# The peer down: the alert comes once prometheus_client has let the
	# series of the old state label expire (60 s at its defaults), which
	# the stages after this one wait out (check_flowspec_alert).
	[ -z "$(flowspec_alert firing)$(flowspec_alert pending)" ] ||
		fail "flowspec: XDPDropFlowSpecPeerDown already pending or firing with the session up: '$(flowspec_alert firing)$(flowspec_alert pending)'"
	FS_KILLED_MS=$(now_ms)
	[ "$(ps -o comm= -p "$FS_GOBGPD")" = gobgpd ] || fail "flowspec: pid $FS_GOBGPD is $(ps -o comm= -p "$FS_GOBGPD"), not gobgpd"
	kill -KILL "$FS_GOBGPD"
	wait "$FS_GOBGPD" 2>/dev/null || true
	peer_down() { [ "$(flowspec_peer "$FS_KILLED_MS" | cut -d' ' -f1)" = false ]; }
	wait_until 20 peer_down || fail "flowspec: the peer's point still says up after gobgpd was killed: '$(flowspec_peer "$FS_KILLED_MS")'"
	note "flowspec: gobgpd killed: the peer's point says down $(since_ms "$FS_KILLED_MS") ms later; done in $(since_ms "$t0") ms"
}

# check_flowspec_alert: the shipped peer-down alert fires for the peer
# flowspec_under_traffic killed, and reaches Alertmanager.
check_flowspec_alert() {
	log "flowspec: the peer-down alert"
	fs_firing() { [ "$(flowspec_alert firing)" = 127.0.0.2 ]; }
	wait_until 100 fs_firing || fail "flowspec: XDPDropFlowSpecPeerDown not firing for 127.0.0.2 (firing: '$(flowspec_alert firing)', pending: '$(flowspec_alert pending)')"
	note "flowspec: XDPDropFlowSpecPeerDown firing $(since_ms "$FS_KILLED_MS") ms after gobgpd was killed"
	fs_in_am() { nsx curl -sSf http://127.0.0.1:9093/api/v2/alerts | jq -e '[.[] | select(.labels.alertname == "XDPDropFlowSpecPeerDown")] | length > 0' >/dev/null; }
	wait_until 30 fs_in_am || fail "flowspec: Alertmanager has no XDPDropFlowSpecPeerDown"
	note "flowspec: XDPDropFlowSpecPeerDown active in Alertmanager"
}
