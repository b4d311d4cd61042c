#!/usr/bin/env bash
# End-to-end run of xdp_drop with the real pipeline: a pinned Telegraf runs
# telegraf-xdp-drop under inputs.execd, attached to a veth in a network
# namespace of its own; Telegraf writes to InfluxDB 1.x and serves
# prometheus_client; Prometheus evaluates the shipped alert rules and
# notifies Alertmanager. A known traffic mix is sent through the veth and
# checked end to end, then reloads under steady traffic (handover, no frame
# unfiltered) and the lifecycle under Telegraf (SIGTERM, SIGKILL of the
# plugin, restart). Run as root: make e2e.
#
# Safety: everything runs inside the namespace this script creates; the
# plugin's config names only the veth created there, and every server
# listens on 127.0.0.1 there. Nothing attaches in the initial namespace.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$PWD

TELEGRAF_VERSION=v1.37.2
TELEGRAF_TAGS=custom,inputs.execd,outputs.file,outputs.influxdb,outputs.prometheus_client,parsers.influx,serializers.influx,serializers.prometheus
TELEGRAF_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/xdp_drop/telegraf-$TELEGRAF_VERSION
TELEGRAF=$TELEGRAF_DIR/telegraf

DEV=xdpe0           # the plugin attaches here
PEER=xdpe1          # sendmix sends from here
DROP=udp,ipv6-icmp,gre
RESTART_DELAY=2     # seconds, inputs.execd restart_delay
THRESHOLD_PPS=1     # e2e drop-rate threshold, through xdp_drop:drop_threshold_pps
ALERT_FOR=5s        # e2e for: of every alert (the shipped ones are minutes)
HANDOVER_TIMEOUT=3  # seconds, the plugin's handover_timeout
RELOADS=3           # Telegraf reloads (SIGHUP) under steady traffic
HANG=60             # seconds: an outcome not reached by then is a hang, not a slow machine

RULES=$ROOT/examples/prometheus/xdp_drop.rules.yml
RULES_TEST=$ROOT/examples/prometheus/xdp_drop.rules.test.yml
RULE_RULES=$ROOT/examples/prometheus/xdp_drop_rule.rules.yml
RULE_RULES_TEST=$ROOT/examples/prometheus/xdp_drop_rule.rules.test.yml
BAN_RULES=$ROOT/examples/prometheus/xdp_drop_ban.rules.yml
BAN_RULES_TEST=$ROOT/examples/prometheus/xdp_drop_ban.rules.test.yml
FLOW_RULES=$ROOT/examples/prometheus/xdp_drop_flowspec.rules.yml
FLOW_RULES_TEST=$ROOT/examples/prometheus/xdp_drop_flowspec.rules.test.yml
RULE_DROP=udp-from-40000 # e2e drop rule: the mix's UDP (source port 40000), which DROP drops anyway
RULE_NEVER=never         # e2e rule that matches nothing: zero counts; its prefix comes from a file
RULE_LIMIT=sctp-ceiling  # e2e limit rule: SCTP to port 9, which only sendlimit sends, at the end
LIMIT_BURST=50           # its burst; its rate is 1 frame/s, per rule
FS_HOST=198.51.100.10    # the host address (on lo) the run's FlowSpec rule names
FS_PORT=1790             # gobgpd's BGP port, on 127.0.0.2 in the run's namespace
FS_API=50051             # gobgpd's gRPC port (the gobgp CLI), on 127.0.0.1 there
EXECD_SNIPPET=$ROOT/examples/telegraf.d/xdp_drop.conf
QUERIES=$ROOT/examples/influxdb/queries.md
DASHBOARD=$ROOT/examples/grafana/xdp_drop.json
# shellcheck source=test/e2e/downstream.sh
source "$ROOT/test/e2e/downstream.sh"

START_US=${EPOCHREALTIME/[.,]/}
SUMMARY=()
NS=""
WORK=""
TELEGRAF_PID=""
OK=0

log() { printf '== %s\n' "$*" >&2; }
note() { SUMMARY+=("$*"); printf '   %s\n' "$*" >&2; }
now_ms() { local us=${EPOCHREALTIME/[.,]/}; echo $((us / 1000)); }
since_ms() { echo $(($(now_ms) - $1)); }

fail() {
	printf '\nFAIL: %s\n' "$*" >&2
	if [ -n "$WORK" ] && [ -d "$WORK/logs" ]; then
		for f in "$WORK"/logs/*.log; do
			[ -s "$f" ] || continue
			printf -- '--- last lines of %s\n' "$f" >&2
			tail -n 15 "$f" >&2
		done
	fi
	exit 1
}

# wait_until SECONDS COMMAND...: polls COMMAND every 100 ms; returns 1 on timeout.
wait_until() {
	local deadline=$(($(now_ms) + $1 * 1000))
	shift
	until "$@"; do
		(($(now_ms) < deadline)) || return 1
		sleep 0.1
	done
}

# nsx runs a (foreground) command inside the namespace.
nsx() { ip netns exec "$NS" "$@"; }

# The handover processes' socket directory, removed at the end when this
# run made it (and left it empty).
HANDOVER_DIR=${TMPDIR:-/tmp}/xdp_drop-handover-$(id -u)
[ -e "$HANDOVER_DIR" ] && HANDOVER_DIR=""

cleanup() {
	local rc=$?
	set +e
	if [ -n "$NS" ] && [ -e "/run/netns/$NS" ]; then
		# Telegraf first, so that the plugin detaches through the normal path
		# and Telegraf does not log failed writes to a stopped InfluxDB.
		if [ -n "$TELEGRAF_PID" ] && [ "$(ip netns identify "$TELEGRAF_PID" 2>/dev/null)" = "$NS" ] &&
			kill -TERM "$TELEGRAF_PID" 2>/dev/null; then
			for _ in $(seq 50); do
				kill -0 "$TELEGRAF_PID" 2>/dev/null || break
				sleep 0.1
			done
		fi
		# Every process in the namespace is one this run started (or their
		# children): end them by pid, politely first.
		local pids
		mapfile -t pids < <(ip netns pids "$NS")
		((${#pids[@]} == 0)) || kill -TERM "${pids[@]}" 2>/dev/null
		for _ in $(seq 50); do
			[ -n "$(ip netns pids "$NS")" ] || break
			sleep 0.1
		done
		mapfile -t pids < <(ip netns pids "$NS")
		((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null
		sleep 0.2
		# Each try detaches the mount the path reaches, so tries get through
		# mounts stacked on the file while other processes change mounts.
		for _ in $(seq 30); do
			ip netns del "$NS" 2>/dev/null || true
			[ -e "/run/netns/$NS" ] || break
			sleep 0.1
		done
		if [ -e "/run/netns/$NS" ]; then
			echo "network namespace $NS is left behind: $(ip netns del "$NS" 2>&1); mounts on it: $(grep -F " /run/netns/$NS " /proc/self/mountinfo)" >&2
		fi
	fi
	wait 2>/dev/null
	[ -z "$HANDOVER_DIR" ] || rmdir "$HANDOVER_DIR"/i-* "$HANDOVER_DIR" 2>/dev/null
	if [ -n "$WORK" ]; then
		if [ "$OK" = 1 ] && [ -z "${E2E_KEEP:-}" ]; then
			rm -rf "$WORK"
		else
			echo "logs and configs kept in $WORK" >&2
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" -eq 0 ] || fail "run as root: the e2e creates a network namespace and attaches XDP"

# ---------------------------------------------------------------- tools
log "dependencies"
need=()
for pkg in influxdb influxdb-client prometheus prometheus-alertmanager iproute2 curl jq gobgpd; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
	note "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's crowdsec for the ban feed's LAPI (lapifeed runs its own, on a
# private port and database); installed as .ci/run does, offline: its
# postinst registers with CrowdSec's online API unless these credentials exist.
if ! dpkg-query -W -f='${Status}' crowdsec 2>/dev/null | grep -q "install ok installed"; then
	note "installing crowdsec"
	mkdir -p /etc/crowdsec
	if [ ! -s /etc/crowdsec/online_api_credentials.yaml ]; then
		printf 'url: https://api.crowdsec.net/\nlogin: offline\npassword: offline\n' >/etc/crowdsec/online_api_credentials.yaml
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq crowdsec >/dev/null
fi
command -v go >/dev/null || fail "go is not on PATH"

log "promtool: the shipped rules and their unit tests"
promtool check rules "$RULES" >/dev/null || fail "promtool check rules $RULES"
(cd "$(dirname "$RULES_TEST")" && promtool test rules "$(basename "$RULES_TEST")") >/dev/null ||
	fail "promtool test rules $RULES_TEST"
promtool check rules "$RULE_RULES" >/dev/null || fail "promtool check rules $RULE_RULES"
(cd "$(dirname "$RULE_RULES_TEST")" && promtool test rules "$(basename "$RULE_RULES_TEST")") >/dev/null ||
	fail "promtool test rules $RULE_RULES_TEST"
promtool check rules "$BAN_RULES" >/dev/null || fail "promtool check rules $BAN_RULES"
(cd "$(dirname "$BAN_RULES_TEST")" && promtool test rules "$(basename "$BAN_RULES_TEST")") >/dev/null ||
	fail "promtool test rules $BAN_RULES_TEST"
promtool check rules "$FLOW_RULES" >/dev/null || fail "promtool check rules $FLOW_RULES"
(cd "$(dirname "$FLOW_RULES_TEST")" && promtool test rules "$(basename "$FLOW_RULES_TEST")") >/dev/null ||
	fail "promtool test rules $FLOW_RULES_TEST"
jq -e '.panels | length > 0' "$DASHBOARD" >/dev/null || fail "$DASHBOARD is not a dashboard in valid JSON"
note "promtool: rules valid, unit tests pass; dashboard JSON valid"

# The cached Telegraf is used only when it was built from the pinned
# version with exactly these plugins; go version -m reads both from it.
telegraf_cached() {
	[ -x "$TELEGRAF" ] || return 1
	local info
	info=$(go version -m "$TELEGRAF") || return 1
	grep -qE "^\s+mod\s+github.com/influxdata/telegraf\s+$TELEGRAF_VERSION\s" <<<"$info" &&
		grep -qE "^\s+build\s+-tags=$TELEGRAF_TAGS$" <<<"$info"
}
if telegraf_cached; then
	note "telegraf $TELEGRAF_VERSION: cached in $TELEGRAF_DIR"
else
	log "building telegraf $TELEGRAF_VERSION into $TELEGRAF_DIR (once; about a minute from cold Go caches)"
	t0=$(now_ms)
	mkdir -p "$TELEGRAF_DIR"
	GOBIN=$TELEGRAF_DIR go install -tags "$TELEGRAF_TAGS" "github.com/influxdata/telegraf/cmd/telegraf@$TELEGRAF_VERSION"
	telegraf_cached || fail "built $TELEGRAF, but go version -m does not show $TELEGRAF_VERSION with tags $TELEGRAF_TAGS"
	note "telegraf $TELEGRAF_VERSION: built in $(($(since_ms "$t0") / 1000))s"
fi

WORK=$(mktemp -d /tmp/xdpdrop-e2e.XXXXXX)
mkdir -p "$WORK/bin" "$WORK/logs" "$WORK/influxdb" "$WORK/prometheus" "$WORK/alertmanager"
LOGS=$WORK/logs

log "building telegraf-xdp-drop and sendmix"
go build -o "$WORK/bin/telegraf-xdp-drop" ./cmd/telegraf-xdp-drop
go build -o "$WORK/bin/sendmix" ./test/e2e/sendmix
go build -o "$WORK/bin/udpstream" ./test/e2e/udpstream
go build -o "$WORK/bin/sendlimit" ./test/e2e/sendlimit
go build -o "$WORK/bin/sendban" ./test/e2e/sendban
go build -o "$WORK/bin/lapifeed" ./test/e2e/lapifeed
go build -o "$WORK/bin/sendflow" ./test/e2e/sendflow

# ---------------------------------------------------------------- namespace
log "network namespace"
NS=${XDP_DROP_E2E_NETNS_PREFIX:-xdpdrop-e2e-}$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
ip netns add "$NS"
# IPv6 off before the veth exists, so the kernel sends nothing of its own
# (no router solicitations, no DAD) and every counted frame is ours.
nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip -n "$NS" link add "$DEV" type veth peer name "$PEER"
for l in lo "$DEV" "$PEER"; do ip -n "$NS" link set "$l" up; done
note "namespace $NS: veth $DEV (XDP) <- $PEER (traffic)"

# xdp_prog_id prints the id of the XDP program on $DEV, or nothing.
xdp_prog_id() { ip -n "$NS" -j link show dev "$DEV" | jq -r '.[0].xdp.prog.id // empty'; }
xdp_attached() { [ -n "$(xdp_prog_id)" ]; }
xdp_detached() { [ -z "$(xdp_prog_id)" ]; }

# ---------------------------------------------------------------- configs
printf '198.18.0.0/15\n' >"$WORK/never.txt"
cat >"$WORK/xdp_drop.conf" <<EOF
[[inputs.xdp_drop]]
  interfaces = ["$DEV"]
  drop = [$(sed 's/[^,]*/"&"/g; s/,/, /g' <<<"$DROP")]
  handover_timeout = "${HANDOVER_TIMEOUT}s"
  # Every dropped frame sampled: the mix's sources are the top sources.
  sample_rate = 1
  top_sources = 5

  # Rules that change no frame's action from what drop gives it, so that
  # sendmix's expected series hold: one counts the mix's UDP, one nothing,
  # and a limit rule that no frame of the mix matches (check_limit).
  [[inputs.xdp_drop.rule]]
    name = "$RULE_DROP"
    action = "drop"
    protocol = ["udp"]
    src_port = [40000]

  [[inputs.xdp_drop.rule]]
    name = "$RULE_NEVER"
    action = "pass"
    protocol = ["tcp"]
    src_prefix_file = ["$WORK/never.txt"]

  [[inputs.xdp_drop.rule]]
    name = "$RULE_LIMIT"
    action = "limit"
    protocol = ["sctp"]
    dst_port = [9]
    rate = 1
    burst = $LIMIT_BURST
    per = "rule"
EOF

cat >"$WORK/influxdb.conf" <<EOF
reporting-disabled = true
bind-address = "127.0.0.1:8088"
[meta]
  dir = "$WORK/influxdb/meta"
[data]
  dir = "$WORK/influxdb/data"
  wal-dir = "$WORK/influxdb/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:8086"
  log-enabled = false
EOF

# Telegraf's execd section is the shipped snippet with this run's paths and
# restart delay, so the snippet itself is what gets tested.
execd=$(sed -e "s|/usr/local/bin/telegraf-xdp-drop|$WORK/bin/telegraf-xdp-drop|" \
	-e "s|/etc/telegraf-xdp-drop/xdp_drop.conf|$WORK/xdp_drop.conf|" \
	-e "s|restart_delay = \"[^\"]*\"|restart_delay = \"${RESTART_DELAY}s\"|" "$EXECD_SNIPPET")
if ! grep -q "\"$WORK/bin/telegraf-xdp-drop\", \"-config\", \"$WORK/xdp_drop.conf\", \"-poll_interval_disabled\"" <<<"$execd" ||
	! grep -q "restart_delay = \"${RESTART_DELAY}s\"" <<<"$execd" || ! grep -q 'signal = "STDIN"' <<<"$execd"; then
	fail "$EXECD_SNIPPET no longer has the command, signal and restart_delay lines this run rewrites"
fi
cat >"$WORK/telegraf.conf" <<EOF
[agent]
  interval = "1s"
  flush_interval = "1s"
  collection_jitter = "0s"
  flush_jitter = "0s"
  hostname = "e2e"

$execd

[[outputs.influxdb]]
  urls = ["http://127.0.0.1:8086"]
  database = "telegraf"

[[outputs.prometheus_client]]
  listen = "127.0.0.1:9273"
  metric_version = 2
  collectors_exclude = ["gocollector", "process"]
EOF
recommended_output >>"$WORK/telegraf.conf"

# The shipped rules, unchanged but for the for: durations (minutes in
# production); the threshold comes from the override the rules file
# documents, a recording rule in a file of its own.
sed -E "s/^( +for: ).*/\1$ALERT_FOR/" "$RULES" >"$WORK/prometheus/xdp_drop.rules.yml"
diff <(grep -vE '^ +for: ' "$RULES") <(grep -vE '^ +for: ' "$WORK/prometheus/xdp_drop.rules.yml") >/dev/null ||
	fail "rewriting for: changed more than for: lines"
[ "$(grep -cE "^ +for: $ALERT_FOR$" "$WORK/prometheus/xdp_drop.rules.yml")" = "$(grep -cE '^ +- alert: ' "$RULES")" ] ||
	fail "not every alert in $RULES has a for: line to shorten"
sed -E "s/^( +for: ).*/\1$ALERT_FOR/" "$RULE_RULES" >"$WORK/prometheus/xdp_drop_rule.rules.yml"
# The ban rules have no for: (they compare the age of the last sync); as shipped.
cp "$BAN_RULES" "$WORK/prometheus/xdp_drop_ban.rules.yml"
sed -E "s/^( +for: ).*/\1$ALERT_FOR/" "$FLOW_RULES" >"$WORK/prometheus/xdp_drop_flowspec.rules.yml"
cat >"$WORK/prometheus/threshold.rules.yml" <<EOF
groups:
  - name: xdp_drop_e2e_threshold
    rules:
      - record: xdp_drop:drop_threshold_pps
        expr: vector($THRESHOLD_PPS)
      - record: xdp_drop:rule_drop_threshold_pps
        expr: vector($THRESHOLD_PPS)
EOF
cat >"$WORK/prometheus/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $WORK/prometheus/xdp_drop.rules.yml
  - $WORK/prometheus/xdp_drop_rule.rules.yml
  - $WORK/prometheus/xdp_drop_ban.rules.yml
  - $WORK/prometheus/xdp_drop_flowspec.rules.yml
  - $WORK/prometheus/threshold.rules.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["127.0.0.1:9093"]
scrape_configs:
  - job_name: telegraf
    static_configs:
      - targets: ["127.0.0.1:9273"]
EOF
promtool check config "$WORK/prometheus/prometheus.yml" >/dev/null || fail "promtool check config"

cat >"$WORK/alertmanager/alertmanager.yml" <<EOF
route:
  receiver: blackhole
  group_wait: 1s
  group_interval: 1s
receivers:
  - name: blackhole
EOF

# ---------------------------------------------------------------- services
http_ok() { nsx curl -sf -o /dev/null "$1"; }

log "starting influxd, alertmanager, prometheus"
ip netns exec "$NS" influxd run -config "$WORK/influxdb.conf" >"$LOGS/influxd.log" 2>&1 &
ip netns exec "$NS" prometheus-alertmanager --config.file="$WORK/alertmanager/alertmanager.yml" \
	--storage.path="$WORK/alertmanager" --web.listen-address=127.0.0.1:9093 \
	--cluster.listen-address= >"$LOGS/alertmanager.log" 2>&1 &
ip netns exec "$NS" prometheus --config.file="$WORK/prometheus/prometheus.yml" \
	--storage.tsdb.path="$WORK/prometheus/data" --web.listen-address=127.0.0.1:9090 \
	>"$LOGS/prometheus.log" 2>&1 &
wait_until 30 http_ok http://127.0.0.1:8086/ping || fail "influxd did not answer /ping"
wait_until 30 http_ok http://127.0.0.1:9093/-/ready || fail "alertmanager not ready"
wait_until 30 http_ok http://127.0.0.1:9090/-/ready || fail "prometheus not ready"

start_telegraf() {
	ip netns exec "$NS" "$TELEGRAF" --config "$WORK/telegraf.conf" >"$LOGS/$1" 2>&1 &
	TELEGRAF_PID=$!
}

# plugin_pid prints the pid of telegraf-xdp-drop running under Telegraf.
plugin_pid() { ps -o pid=,comm= --ppid "$TELEGRAF_PID" | awk '$2 ~ /^telegraf-xdp-dr/ {print $1}'; }

# ---------------------------------------------------------------- queries
influx_query() {
	local out
	out=$(nsx curl -sS -G http://127.0.0.1:8086/query --data-urlencode db=telegraf \
		--data-urlencode epoch=ms --data-urlencode "q=$1") || return 1
	if ! jq -e '.results[0] | has("error") | not' <<<"$out" >/dev/null; then
		echo "InfluxDB: $(jq -r '.results[0].error // .error' <<<"$out") in: $1" >&2
		return 1
	fi
	printf '%s\n' "$out"
}

# latest_counts SINCE_MS: "interface family protocol action packets bytes"
# per series with traffic, from the last point of each since SINCE_MS (the
# standing series at zero left out: zero_series lists them).
latest_counts() {
	influx_query "SELECT last(\"packets\") AS \"packets\", last(\"bytes\") AS \"bytes\" FROM \"xdp_drop\"
		WHERE time >= ${1}ms GROUP BY \"interface\", \"family\", \"protocol\", \"action\"" |
		jq -r '.results[0].series[]? | select(.values[0][1] != 0) | [.tags.interface, .tags.family, .tags.protocol, .tags.action,
			.values[0][1], .values[0][2]] | map(tostring) | join(" ")' | sort
}

# zero_series SINCE_MS: "family/protocol/action" of the $DEV series whose
# last point since SINCE_MS is at zero.
zero_series() {
	influx_query "SELECT last(\"packets\") AS \"packets\" FROM \"xdp_drop\"
		WHERE \"interface\" = '$DEV' AND time >= ${1}ms GROUP BY \"family\", \"protocol\", \"action\"" |
		jq -r '.results[0].series[]? | select(.values[0][1] == 0) | "\(.tags.family)/\(.tags.protocol)/\(.tags.action)"' | sort
}

# expected_counts REPORT: the same lines from what sendmix says it sent.
expected_counts() {
	jq -r --arg dev "$DEV" '.series[] | [$dev, .family, .protocol, .action, .packets, .bytes]
		| map(tostring) | join(" ")' "$1" | sort
}
counts_match() { [ "$(latest_counts "$1")" = "$(expected_counts "$2")" ]; }

# counts_at_least SINCE_MS REPORT...: every series the reports name holds at
# least their summed packets and bytes in InfluxDB's latest points.
counts_at_least() {
	local since=$1
	shift
	awk 'NR == FNR {want[$1 " " $2 " " $3 " " $4] = $5 " " $6; n++; next}
		{k = $1 " " $2 " " $3 " " $4}
		k in want {split(want[k], w, " "); if ($5 + 0 >= w[1] + 0 && $6 + 0 >= w[2] + 0) ok++}
		END {exit !(n > 0 && ok == n)}' \
		<(jq -rs --arg dev "$DEV" '[.[].series[]] | group_by([.family, .protocol, .action])[]
			| [$dev, .[0].family, .[0].protocol, .[0].action, (map(.packets) | add), (map(.bytes) | add)]
			| map(tostring) | join(" ")' "$@") \
		<(latest_counts "$since")
}

# send_mix NAME: one round of the mix from $PEER; sendmix's report goes to $WORK/NAME.json.
send_mix() {
	nsx "$WORK/bin/sendmix" -netns "$NS" -iface "$PEER" -drop "$DROP" -rounds 1 >"$WORK/$1.json" ||
		fail "sendmix failed"
}

# check_counts SINCE_MS REPORT WHAT: InfluxDB's latest counters since
# SINCE_MS must equal, series for series, what sendmix reported sending.
check_counts() {
	if ! wait_until "$HANG" counts_match "$1" "$2"; then
		echo "expected (sent):" >&2
		expected_counts "$2" | sed 's/^/  /' >&2
		echo "got (InfluxDB, latest):" >&2
		latest_counts "$1" | sed 's/^/  /' >&2
		fail "$3: InfluxDB does not hold exactly what was sent"
	fi
}

# link_state SINCE_MS: "interface mode attached program_id" of the last xdp_drop_link point.
link_state() {
	influx_query "SELECT last(\"attached\") AS \"attached\", \"program_id\" FROM \"xdp_drop_link\"
		WHERE time >= ${1}ms GROUP BY \"interface\", \"mode\"" |
		jq -r '.results[0].series[]? | [.tags.interface, .tags.mode, .values[0][1], .values[0][2]]
			| map(tostring) | join(" ")'
}

prom_get() { nsx curl -sS --fail -G "http://127.0.0.1:9090$1" "${@:2}"; }

# alert_protocols NAME STATE: protocols of the $DEV alerts NAME in STATE.
alert_protocols() {
	prom_get /api/v1/alerts | jq -r --arg n "$1" --arg s "$2" --arg dev "$DEV" \
		'[.data.alerts[] | select(.labels.alertname == $n and .state == $s and .labels.interface == $dev)
		  | .labels.protocol] | unique | join(" ")'
}
am_protocols() {
	nsx curl -sS --fail -G http://127.0.0.1:9093/api/v2/alerts --data-urlencode "filter=alertname=\"$1\"" |
		jq -r --arg dev "$DEV" '[.[] | select(.status.state == "active" and .labels.interface == $dev)
			| .labels.protocol] | unique | join(" ")'
}

# doc_queries: every InfluxQL block of queries.md, by its ### heading,
# one line each ("heading<TAB>query"), the outer buckets shortened for a
# short run (the increases are taken between raw points, as shipped).
doc_queries() {
	awk '/^### / {h = substr($0, 5)}
		/^```sql$/ {q = ""; inq = 1; next}
		/^```$/ && inq {inq = 0; print h "\t" q; next}
		inq {q = q " " $0}' "$QUERIES" | sed 's/time(1m)/time(5s)/g; s|/ 60 AS|/ 5 AS|g'
}
doc_query() {
	local q
	q=$(doc_queries | awk -F'\t' -v h="$1" '$1 == h {print $2}')
	[ -n "$q" ] || fail "$QUERIES has no InfluxQL block under '### $1'"
	influx_query "$q" || fail "documented query '$1' failed"
}

# The dashboard's queries, with Grafana's macros as Grafana would fill them
# for the last hour, all hosts and $DEV.
dashboard_queries() {
	# shellcheck disable=SC2016 # Grafana's macros, matched literally
	jq -r '.panels[] | select(.targets) | .title as $t | .targets[] | [$t, .query] | join("\t")' "$DASHBOARD" |
		sed -e 's/\$timeFilter/time > now() - 1h/g' -e 's/\$__interval_ms/5000/g' -e 's/\$__interval/5s/g' -e 's/\$host/.*/g' -e "s/\\\$interface/$DEV/g"
}
# udp_drop_points SINCE_MS: the ipv4/udp drop counter of every point since SINCE_MS, in time order.
udp_drop_points() {
	influx_query "SELECT \"packets\" FROM \"xdp_drop\" WHERE \"interface\" = '$DEV' AND \"family\" = 'ipv4'
		AND \"protocol\" = 'udp' AND \"action\" = 'drop' AND time >= ${1}ms" |
		jq -r '.results[0].series[0].values[]?[1]'
}
udp_drop_latest() { udp_drop_points "$1" | tail -n 1; }

# rule_counts SINCE_MS: "rule action packets" per xdp_drop_rule series on
# $DEV, from the last point of each since SINCE_MS.
rule_counts() {
	influx_query "SELECT last(\"packets\") AS \"packets\" FROM \"xdp_drop_rule\"
		WHERE \"interface\" = '$DEV' AND time >= ${1}ms GROUP BY \"rule\", \"action\"" |
		jq -r '.results[0].series[]? | [.tags.rule, .tags.action, .values[0][1]] | map(tostring) | join(" ")' | sort
}

# check_rule_counts SINCE_MS REPORT: in InfluxDB the drop rule counted
# exactly the UDP sendmix sent, the other rule zero.
check_rule_counts() {
	local udp want
	udp=$(jq '[.series[] | select(.protocol == "udp") | .packets] | add' "$2")
	want=$(printf '%s pass 0\n%s drop %s\n%s pass 0\n%s drop 0\n' "$RULE_NEVER" "$RULE_DROP" "$udp" "$RULE_LIMIT" "$RULE_LIMIT" | sort)
	rules_match() { [ "$(rule_counts "$1")" = "$want" ]; }
	wait_until 20 rules_match "$1" ||
		fail "xdp_drop_rule in InfluxDB: want '$(tr '\n' ';' <<<"$want")', got '$(rule_counts "$1" | tr '\n' ';')'"
	note "InfluxDB: xdp_drop_rule $RULE_DROP drop = $udp packets (the mix's UDP), $RULE_NEVER pass = 0, $RULE_LIMIT pass = drop = 0, exactly"
}

# rule_alerts STATE: the rules XDPDropRuleHighDropRate is in STATE for on $DEV.
rule_alerts() {
	prom_get /api/v1/alerts | jq -r --arg s "$1" --arg dev "$DEV" \
		'[.data.alerts[] | select(.labels.alertname == "XDPDropRuleHighDropRate" and .state == $s
		  and .labels.interface == $dev) | .labels.rule] | unique | join(" ")'
}
rule_alerts_am() {
	nsx curl -sS --fail -G http://127.0.0.1:9093/api/v2/alerts --data-urlencode 'filter=alertname="XDPDropRuleHighDropRate"' |
		jq -r --arg dev "$DEV" '[.[] | select(.status.state == "active" and .labels.interface == $dev) | .labels.rule] | unique | join(" ")'
}

# check_rule_alert: under steady traffic the shipped XDPDropRuleHighDropRate
# fires for the drop rule, and only for it, and reaches Alertmanager.
check_rule_alert() {
	local t0 rates
	t0=$(now_ms)
	rule_firing() { [ "$(rule_alerts firing)" = "$RULE_DROP" ]; }
	wait_until 90 rule_firing || fail "XDPDropRuleHighDropRate firing for '$(rule_alerts firing)', want '$RULE_DROP'"
	rule_in_am() { [ "$(rule_alerts_am)" = "$RULE_DROP" ]; }
	wait_until 30 rule_in_am || fail "Alertmanager has XDPDropRuleHighDropRate for '$(rule_alerts_am)', want '$RULE_DROP'"
	rates=$(prom_get /api/v1/query --data-urlencode 'query=xdp_drop:rule_dropped_packets:rate2m' |
		jq -r '[.data.result[] | "\(.metric.rule)=\(.value[1] | tonumber | floor)"] | sort | join(" ")')
	note "Prometheus: XDPDropRuleHighDropRate firing for rule $RULE_DROP, active in Alertmanager ($(since_ms "$t0") ms after the protocol alert); xdp_drop:rule_dropped_packets:rate2m (pps): $rates"
}

# check_reloads: RELOADS Telegraf reloads (SIGHUP) while udpstream sends UDP
# without pause. Each reload's new plugin takes the attachment over in
# place: no UDP frame reaches the stack, the program id and the counters
# carry on, and InfluxDB's udp drop total equals what was there before plus
# what was sent. With sampling (this run's config) the new plugin puts a
# fresh program on the same link, on the same counters, for a sample ring
# of its own: the program id changes at each reload, the rest holds.
check_reloads() {
	log "phase 3b: $RELOADS Telegraf reloads (SIGHUP) under steady UDP"
	local t_start base prog pid newpid i report took
	t_start=$(now_ms)
	prog=$(xdp_prog_id)
	base=$(udp_drop_latest "$t_run1")
	[ -n "$base" ] || fail "no ipv4/udp drop counter in InfluxDB before the reloads"
	ip netns exec "$NS" "$WORK/bin/udpstream" -netns "$NS" -iface "$PEER" -sink "$DEV" \
		>"$WORK/reloads.json" 2>"$LOGS/udpstream.log" &
	local stream=$!
	sleep 2
	for i in $(seq "$RELOADS"); do
		pid=$(plugin_pid)
		kill -HUP "$TELEGRAF_PID"
		new_plugin() { newpid=$(plugin_pid); [ -n "$newpid" ] && [ "$newpid" != "$pid" ]; }
		wait_until "$HANG" new_plugin || fail "reload $i: no new telegraf-xdp-drop under Telegraf"
		taken() { [ "$(grep -c 'taken over in place' "$LOGS/telegraf-1.log")" -ge "$i" ]; }
		wait_until "$HANG" taken || fail "reload $i: the new plugin did not take the attachment over"
		if grep -qE '^  sample_rate = [1-9]' "$WORK/xdp_drop.conf"; then
			[ -n "$(xdp_prog_id)" ] && [ "$(xdp_prog_id)" != "$prog" ] ||
				fail "reload $i: program id $(xdp_prog_id), want a fresh program (sampling) in place of $prog"
			grep 'taken over in place' "$LOGS/telegraf-1.log" | tail -n 1 | grep -q 'counters continue' ||
				fail "reload $i: the counters did not continue: $(grep 'taken over in place' "$LOGS/telegraf-1.log" | tail -n 1)"
			prog=$(xdp_prog_id)
		else
			[ "$(xdp_prog_id)" = "$prog" ] || fail "reload $i: program id $(xdp_prog_id), want $prog kept"
		fi
		sleep 2
	done
	kill -TERM "$stream"
	wait "$stream" || fail "udpstream failed: $(cat "$LOGS/udpstream.log")"
	report=$WORK/reloads.json
	note "reloads: $(jq -r '"\(.delivered) UDP frames in \(.seconds | floor) s (\(.frames_per_second) frames/s)"' "$report") through $RELOADS reloads, program id now $prog (a fresh one per reload with sampling)"
	[ "$(jq .leaked "$report")" = 0 ] || fail "reloads: $(jq .leaked "$report") UDP frames reached $DEV's stack"
	[ "$(jq .polls_without_xdp "$report")" = 0 ] ||
		fail "reloads: $DEV without XDP in $(jq .polls_without_xdp "$report") polls, longest $(jq .longest_without_xdp_ms "$report") ms"
	note "reloads: 0 UDP frames reached $DEV's stack; $(jq .polls "$report") polls (every ms), none without XDP"

	local want=$((base + $(jq .delivered "$report")))
	total_is() { [ "$(udp_drop_latest "$t_start")" = "$want" ]; }
	wait_until "$HANG" total_is || fail "reloads: InfluxDB's udp drop total is $(udp_drop_latest "$t_start"), want $base + $(jq .delivered "$report") = $want"
	udp_drop_points "$t_start" | awk 'NR > 1 && $1 < prev {bad = 1} {prev = $1} END {exit bad}' ||
		fail "reloads: the udp drop counter went down in InfluxDB: $(udp_drop_points "$t_start" | paste -sd' ')"
	note "reloads: InfluxDB udp drop total $want = $base before + $(jq .delivered "$report") sent; monotonic over $(udp_drop_points "$t_start" | wc -l) points"
	note "reloads: plugin log: $(grep 'taken over in place' "$LOGS/telegraf-1.log" | tail -n 1 | sed 's/.*\] //')"
	wait_until "$HANG" one_plugin || fail "reloads: handover processes left: $(ip netns pids "$NS" | xargs -r ps -o pid=,args= -p | grep telegraf-xdp-drop)"
	# execd's own race on a process's exit (Telegraf closes the pipes while
	# its readers still read them) logs these at random; anything else fails.
	local race='E! \[inputs\.execd\] Error in plugin: (error reading stderr: )?read \|0: file already closed$'
	! grep ' E! ' "$LOGS/telegraf-1.log" | grep -vE "$race" || fail "reloads: Telegraf logged errors"
	note "reloads: Telegraf log: no other E! line; $(grep -cE "$race" "$LOGS/telegraf-1.log" || true) of execd's pipe race on exit ('file already closed')"
	took=$(since_ms "$t_start")
	note "reloads: done in $took ms; one telegraf-xdp-drop process left, no handover process"
}
one_plugin() { [ "$(ip netns pids "$NS" | xargs -r ps -o comm= -p | grep -c '^telegraf-xdp-dr')" = 1 ]; }

# ================================================================ phase 1
log "phase 1: Telegraf starts the plugin; one round of the mix; exact counts in InfluxDB"
t_run1=$(now_ms)
start_telegraf telegraf-1.log
wait_until "$HANG" xdp_attached || fail "$DEV has no XDP program ${HANG}s after Telegraf started"
note "run 1: attached $(since_ms "$t_run1") ms after Telegraf started (program id $(xdp_prog_id))"
prog1=$(xdp_prog_id)
# Telegraf has gathered once the link point is in InfluxDB; counters are
# still at zero then: only the standing series are reported, at zero.
link_up() { [ "$(link_state "$t_run1")" = "$DEV native true $prog1" ]; }
wait_until "$HANG" link_up || fail "xdp_drop_link in InfluxDB: want '$DEV native true $prog1', got '$(link_state "$t_run1")'"
[ -z "$(latest_counts "$t_run1")" ] || fail "xdp_drop points with traffic before any traffic: $(latest_counts "$t_run1")"
standing_before_burst
# The first burst of every class, between two gathers.
send_mix sent1
check_counts "$t_run1" "$WORK/sent1.json" "phase 1"
note "InfluxDB: latest xdp_drop per (interface,family,protocol,action) = sent, exactly ($(jq '.series | length' "$WORK/sent1.json") series, $(jq .frames "$WORK/sent1.json") frames)"
note "InfluxDB: xdp_drop_link $DEV mode=native attached=true program_id=$prog1 (= ip link)"
check_rule_counts "$t_run1" "$WORK/sent1.json"

# Metric names as prometheus_client exposes them: what the rules use.
metrics=$(nsx curl -sS --fail http://127.0.0.1:9273/metrics)
for want in \
	"xdp_drop_packets{action=\"drop\",family=\"ipv4\",host=\"e2e\",interface=\"$DEV\",protocol=\"udp\"} $(jq '.series[] | select(.family == "ipv4" and .protocol == "udp") | .packets' "$WORK/sent1.json")" \
	"xdp_drop_bytes{action=\"pass\",family=\"l2\",host=\"e2e\",interface=\"$DEV\",protocol=\"arp\"} $(jq '.series[] | select(.protocol == "arp") | .bytes' "$WORK/sent1.json")" \
	"xdp_drop_link_attached{host=\"e2e\",interface=\"$DEV\",mode=\"native\"} 1" \
	"xdp_drop_link_program_id{host=\"e2e\",interface=\"$DEV\",mode=\"native\"} $prog1"; do
	grep -qxF "$want" <<<"$metrics" || fail "prometheus_client does not expose '$want'; it has: $(grep '^xdp_drop' <<<"$metrics")"
done
note "prometheus_client: $(grep -c '^xdp_drop' <<<"$metrics") xdp_drop* samples; $(grep '^# TYPE xdp_drop_packets' <<<"$metrics" | cut -d' ' -f3-)"
check_counter_types
prom_caught_up "the first round"
check_first_burst

# ================================================================ phase 2
log "phase 2: steady traffic until the drop-rate alert fires and reaches Alertmanager"
want_alerts=$(jq -r '[.series[] | select(.action == "drop") | .protocol] | unique | join(" ")' "$WORK/sent1.json")
t_steady=$(now_ms)
# Paced at 10 rounds/s at most (about 2000 frames/s): enough to cross the
# threshold in seconds, light on a shared machine. Rounds take longer when
# the machine is busy (each send waits for an RCU grace period).
ip netns exec "$NS" "$WORK/bin/sendmix" -netns "$NS" -iface "$PEER" -drop "$DROP" -duration 120s -every 100ms \
	>"$WORK/steady.json" 2>"$LOGS/sendmix.log" &
SENDER_PID=$!
firing() { [ "$(alert_protocols XDPDropHighDropRate firing)" = "$want_alerts" ]; }
wait_until 90 firing || fail "XDPDropHighDropRate firing for '$(alert_protocols XDPDropHighDropRate firing)', want '$want_alerts'"
note "Prometheus: XDPDropHighDropRate firing for $DEV: $want_alerts ($(since_ms "$t_steady") ms after steady traffic began)"
in_am() { [ "$(am_protocols XDPDropHighDropRate)" = "$want_alerts" ]; }
wait_until 30 in_am || fail "Alertmanager has XDPDropHighDropRate for '$(am_protocols XDPDropHighDropRate)', want '$want_alerts'"
note "Alertmanager: XDPDropHighDropRate active for $want_alerts ($(since_ms "$t_steady") ms)"
check_rule_alert
rates=$(prom_get /api/v1/query --data-urlencode 'query=xdp_drop:dropped_packets:rate2m' |
	jq -r '[.data.result[] | "\(.metric.protocol)=\(.value[1] | tonumber | floor)"] | sort | join(" ")')
note "Prometheus: xdp_drop:dropped_packets:rate2m (pps): $rates (threshold $THRESHOLD_PPS)"
kill -TERM "$SENDER_PID"
wait "$SENDER_PID" || fail "steady sendmix failed: $(cat "$LOGS/sendmix.log")"
note "steady traffic: $(jq -r '"\(.frames) frames in \(.seconds | floor) s, \(.frames / .seconds | floor) frames/s"' "$WORK/steady.json")"

# Nothing here is a dry run: the would_drop alerts, on the same threshold as
# the drop alerts that fired above, must not even be pending; nor, with no
# [bans], the ban feed's.
for a in XDPDropNotAttached XDPDropGenericMode XDPDropLinkMetricsMissing XDPDropHighWouldDropRate XDPDropRuleHighWouldDropRate XDPDropBanSyncFailing XDPDropBanFeedStale; do
	n=$(prom_get /api/v1/alerts | jq --arg n "$a" '[.data.alerts[] | select(.labels.alertname == $n)] | length')
	[ "$n" = 0 ] || fail "$a is pending or firing: $(prom_get /api/v1/alerts | jq -c --arg n "$a" '.data.alerts[] | select(.labels.alertname == $n)')"
done
bad_rules=$(prom_get /api/v1/rules | jq -r '[.data.groups[].rules[] | select(.health != "ok") | .name] | join(" ")')
[ -z "$bad_rules" ] || fail "rules not healthy in Prometheus: $bad_rules"
note "Prometheus: XDPDropNotAttached, XDPDropGenericMode, XDPDropLinkMetricsMissing, XDPDropHighWouldDropRate, XDPDropRuleHighWouldDropRate, XDPDropBanSyncFailing, XDPDropBanFeedStale inactive; all rules healthy"

# ================================================================ phase 3
log "phase 3: the documented InfluxQL queries"
# The last gathers of the steady traffic have landed once InfluxDB's latest
# counters hold all that was sent (a sender stopped by SIGTERM may have sent
# a little more than it reports, never less).
steady_landed() { counts_at_least "$t_run1" "$WORK/sent1.json" "$WORK/steady.json"; }
wait_until "$HANG" steady_landed || fail "InfluxDB's latest counters stay below what was sent: $(latest_counts "$t_run1")"
doc_queries | cut -f1 | grep -q . || fail "no InfluxQL blocks found in $QUERIES"
while IFS=$'\t' read -r heading _; do
	doc_query "$heading" >/dev/null
done < <(doc_queries)
note "queries.md: all $(doc_queries | wc -l) InfluxQL blocks run without error"

# check_drop_rate: the drop-rate query has every dropped protocol on $DEV,
# no negative rate, and a positive one per protocol.
check_drop_rate() {
	local out got
	out=$(doc_query "Drop rate per protocol")
	# A standing series nothing reached (sctp here) has a rate of 0 throughout.
	got=$(jq -r --arg dev "$DEV" '[.results[0].series[]? | select(.tags.interface == $dev and ([.values[][1]] | max > 0)) | .tags.protocol]
		| unique | join(" ")' <<<"$out")
	[ "$got" = "$want_alerts" ] || fail "drop rate per protocol: protocols '$got', want '$want_alerts'"
	jq -e '[.results[0].series[].values[][1]] | length > 0 and all(. >= 0)' <<<"$out" >/dev/null ||
		fail "drop rate per protocol: empty or negative: $(jq -c '.results[0].series' <<<"$out")"
	jq -r '[.results[0].series[] | select([.values[][1]] | max > 0) | "\(.tags.protocol) max \([.values[][1]] | max | floor)"] | join(", ")' <<<"$out"
}
rates=$(check_drop_rate)
note "drop rate per protocol (pps, 5s buckets): $rates"

out=$(doc_query "Top dropped protocols")
top=$(jq -r '[.results[0].series[0].values[] | select(.[1] > 0) | .[2]] | sort | join(" ")' <<<"$out")
[ "$top" = "$want_alerts" ] || fail "top dropped protocols: '$top', want '$want_alerts'"
note "top dropped protocols: $(jq -r '[.results[0].series[0].values | sort_by(-.[1])[] | "\(.[2]) \(.[1])"] | join(", ")' <<<"$out")"

# want_sources: the top sources of the mix's dropped frames, the /24 and
# /64 of its IPv4 and IPv6 source addresses.
want_sources="192.0.2.0/24 2001:db8::/64"
out=$(doc_query "Top sources of dropped traffic")
sources=$(jq -r --arg dev "$DEV" '[.results[0].series[]? | select(.tags.interface == $dev) | .values[0][1]] | sort | join(" ")' <<<"$out")
[ "$sources" = "$want_sources" ] || fail "top sources of dropped traffic: '$sources', want '$want_sources'"
note "top sources of dropped traffic (InfluxQL): $(jq -r '[.results[0].series[]? | "\(.tags.rank) \(.values[0][1]) share \(.values[0][3])"] | join(", ")' <<<"$out")"
q=$(doc_promql "Top sources of dropped traffic (PromQL)")
[ -n "$q" ] || fail "$QUERIES has no PromQL block under '### Top sources of dropped traffic (PromQL)'"
got=$(prom_get /api/v1/query --data-urlencode "query=$q" | jq -r --arg dev "$DEV" '[.data.result[] | select(.metric.interface == $dev) | .metric.source] | unique | join(" ")')
[ "$got" = "$want_sources" ] || fail "PromQL top sources of dropped traffic: '$got', want '$want_sources'"
note "top sources of dropped traffic (PromQL): $got"

out=$(doc_query "Link status")
link=$(jq -r '.results[0].series[] | [.tags.interface, .values[0][1], .values[0][2], .values[0][3]] | map(tostring) | join(" ")' <<<"$out")
[ "$link" = "$DEV true native $prog1" ] || fail "link status: '$link', want '$DEV true native $prog1'"
out=$(doc_query "Gathers not attached")
[ "$(jq '.results[0].series | length' <<<"$out")" = 0 ] || fail "gathers not attached: $(jq -c '.results[0].series' <<<"$out")"
note "link status: $link; no gather found $DEV detached"

while IFS=$'\t' read -r title q; do
	out=$(influx_query "$q") || fail "dashboard panel '$title': query failed"
	case $title in
	"Dropped packets/s per protocol" | "Dropped bits/s per protocol")
		got=$(jq -r '[.results[0].series[]? | select([.values[][1]] | max > 0) | .tags.protocol] | unique | join(" ")' <<<"$out")
		[ "$got" = "$want_alerts" ] || fail "dashboard panel '$title': protocols '$got', want '$want_alerts'" ;;
	"Top sources of dropped traffic")
		got=$(jq -r '[.results[0].series[]?.values[]?[1]] | unique | join(" ")' <<<"$out")
		[ "$got" = "$want_sources" ] || fail "dashboard panel '$title': sources '$got', want '$want_sources'" ;;
	"Passed packets/s per protocol" | "Link status" | "Attached")
		jq -e '.results[0].series | length > 0' <<<"$out" >/dev/null || fail "dashboard panel '$title': no data" ;;
	"Sampled frames/s: read, capped, lost")
		# sample_rate = 1: the mix's dropped frames were sampled.
		got=$(jq -r --arg dev "$DEV" '[.results[0].series[]? | select(.tags.interface == $dev) | .columns[1:][]] | join(" ")' <<<"$out")
		[ "$got" = "sampled capped lost" ] || fail "dashboard panel '$title': columns '$got' for $DEV, want 'sampled capped lost'"
		jq -e --arg dev "$DEV" '[.results[0].series[]? | select(.tags.interface == $dev) | .values[][1]] | max > 0' <<<"$out" >/dev/null ||
			fail "dashboard panel '$title': no sampled frames/s above 0 for $DEV: $(jq -c '.results[0].series' <<<"$out")"
		sampling_panel=$(jq -r --arg dev "$DEV" '[.results[0].series[]? | select(.tags.interface == $dev) | .values[]] | "max \(map(.[1]) | max | floor) sampled/s, \(map(.[2]) | max) capped/s, \(map(.[3]) | max) lost/s"' <<<"$out") ;;
	"Prefix files")
		got=$(jq -r '[.results[0].series[]? | "\(.tags.interface) \(.tags.rule) prefixes=\(.values[0][2]) error=\(.values[0][3] // "none")"] | join(";")' <<<"$out")
		[ "$got" = "$DEV $RULE_NEVER prefixes=1 error=none" ] || fail "dashboard panel '$title': '$got', want '$DEV $RULE_NEVER prefixes=1 error=none'"
		loaded=$(jq '.results[0].series[0].values[0][1]' <<<"$out")
		((loaded >= t_run1 - 1000 && loaded <= $(now_ms))) || fail "dashboard panel '$title': loaded $loaded ms, not within the run (from $t_run1)"
		prefix_panel="$got, loaded $((($(now_ms) - loaded) / 1000)) s ago" ;;
	"Frames/s per rule" | "Frames per rule (time range)")
		# Every rule, also the one that never matched.
		got=$(jq -r '[.results[0].series[]? | "\(.tags.rule)/\(.tags.action)"] | unique | join(" ")' <<<"$out")
		rules="$RULE_NEVER/pass $RULE_LIMIT/drop $RULE_LIMIT/pass $RULE_DROP/drop"
		[ "$got" = "$rules" ] || fail "dashboard panel '$title': rules '$got', want '$rules'" ;;
	esac
done < <(dashboard_queries)
note "Grafana dashboard: all $(dashboard_queries | wc -l) panel queries run; drop panels show $want_alerts"
note "Grafana dashboard: sampling panel $sampling_panel; prefix files panel: $prefix_panel"

errors=$(grep -c ' E! ' "$LOGS/telegraf-1.log" || true)
[ "$errors" = 0 ] || fail "Telegraf logged errors in a clean run: $(grep ' E! ' "$LOGS/telegraf-1.log")"
note "Telegraf log (run 1): no E! line; plugin said: $(grep -m1 'attached in' "$LOGS/telegraf-1.log" | sed 's/.*\] //')"

check_reloads
prom_caught_up "the reloads"

# ================================================================ phase 4
log "phase 4: lifecycle under Telegraf"
t0=$(now_ms)
pid1=$(plugin_pid)
[ -n "$pid1" ] || fail "no telegraf-xdp-drop process under Telegraf ($TELEGRAF_PID)"
kill -TERM "$TELEGRAF_PID"
# Held for a successor that does not come, then released.
wait_until $((HANDOVER_TIMEOUT + HANG)) xdp_detached ||
	fail "$DEV still has XDP program $(xdp_prog_id) $((HANDOVER_TIMEOUT + HANG))s after SIGTERM to Telegraf (handover_timeout ${HANDOVER_TIMEOUT}s)"
note "SIGTERM to Telegraf: $DEV without XDP after $(since_ms "$t0") ms (handover_timeout ${HANDOVER_TIMEOUT}s, no successor)"
no_holder() { ! ip netns pids "$NS" | xargs -r ps -o comm= -p | grep -q '^telegraf-xdp-dr'; }
wait_until "$HANG" no_holder || fail "a telegraf-xdp-drop process outlived the handover timeout: $(ip netns pids "$NS" | xargs -r ps -o pid=,args= -p | grep telegraf-xdp-drop)"
rc=0
wait "$TELEGRAF_PID" || rc=$?
TELEGRAF_PID=""
[ "$rc" = 0 ] || fail "Telegraf exited with status $rc after SIGTERM"
! kill -0 "$pid1" 2>/dev/null || fail "telegraf-xdp-drop ($pid1) outlived Telegraf"
note "Telegraf exited 0 after $(since_ms "$t0") ms; the plugin process is gone"

t_run2=$(now_ms)
start_telegraf telegraf-2.log
wait_until "$HANG" xdp_attached || fail "$DEV has no XDP program ${HANG}s after Telegraf restarted"
note "run 2: attached $(since_ms "$t_run2") ms after Telegraf started (program id $(xdp_prog_id))"
have_plugin() { [ -n "$(plugin_pid)" ]; }
wait_until 5 have_plugin || fail "no telegraf-xdp-drop under Telegraf"
pid2=$(plugin_pid)
prog2=$(xdp_prog_id)

# exited PID: the process is gone or a zombie (its files, the bpf_link
# among them, are closed by then).
exited() { [ ! -e "/proc/$1/stat" ] || [ "$(awk '{print $3}' "/proc/$1/stat")" = Z ]; }
t_kill=$(now_ms)
kill -KILL "$pid2"
wait_until "$HANG" exited "$pid2" || fail "telegraf-xdp-drop ($pid2) still running ${HANG}s after SIGKILL"
dead_ms=$(since_ms "$t_kill")
wait_until "$HANG" xdp_detached || fail "$DEV still has XDP program $(xdp_prog_id) ${HANG}s after SIGKILL of the plugin"
note "SIGKILL of the plugin ($pid2): process gone after $dead_ms ms, $DEV without XDP after $(since_ms "$t_kill") ms"
reattached() { local id; id=$(xdp_prog_id); [ -n "$id" ] && [ "$id" != "$prog2" ]; }
wait_until $((RESTART_DELAY + HANG)) reattached || fail "$DEV not attached again within $((RESTART_DELAY + HANG))s of the kill"
t_reattach=$(now_ms)
back_ms=$((t_reattach - t_kill))
((back_ms >= RESTART_DELAY * 1000 - 200)) || fail "re-attached after $back_ms ms, before restart_delay (${RESTART_DELAY}s)"
prog3=$(xdp_prog_id)
pid3=$(plugin_pid)
if [ -z "$pid3" ] || [ "$pid3" = "$pid2" ]; then
	fail "no new telegraf-xdp-drop under Telegraf after the kill"
fi
note "Telegraf restarted the plugin (pid $pid3): attached again $back_ms ms after the kill (restart_delay ${RESTART_DELAY}s, program id $prog3)"

link_back() { [ "$(link_state "$t_reattach")" = "$DEV native true $prog3" ]; }
wait_until "$HANG" link_back || fail "xdp_drop_link after restart: '$(link_state "$t_reattach")', want '$DEV native true $prog3'"
send_mix sent2
check_counts "$t_reattach" "$WORK/sent2.json" "after the restart"
note "after the restart: points flow again; counters restarted from zero (latest = one round, exactly)"

# Across the reset, the documented query stays non-negative; a plain
# derivative shows the reset as a negative rate.
rates=$(check_drop_rate)
note "drop rate across the reset (documented query): $rates"
neg=$(influx_query "SELECT min(\"d\") FROM (SELECT derivative(last(\"packets\"), 1s) AS \"d\" FROM \"xdp_drop\"
	WHERE \"action\" = 'drop' AND time > now() - 1h GROUP BY time(5s), *)" | jq '.results[0].series[0].values[0][1] | floor')
((neg < 0)) || fail "expected the counter reset to show as a negative plain derivative, min is $neg"
note "a plain derivative() sees the reset (min $neg pps); non_negative_derivative does not"

notattached=$(prom_get /api/v1/query --data-urlencode "query=count_over_time(ALERTS{alertname=\"XDPDropNotAttached\"}[1h])" |
	jq '.data.result | length')
[ "$notattached" = 0 ] || fail "XDPDropNotAttached was pending or firing during the run"
missing=$(prom_get /api/v1/query --data-urlencode "query=max_over_time(ALERTS{alertname=\"XDPDropLinkMetricsMissing\"}[1h])" |
	jq -r '[.data.result[].metric.alertstate] | unique | join(",")')
note "XDPDropNotAttached never pending nor firing (restarts included); XDPDropLinkMetricsMissing states seen: ${missing:-none}"
e2=$(grep -c ' E! ' "$LOGS/telegraf-2.log" || true)
note "Telegraf log (run 2, plugin killed): $e2 E! lines: $(grep ' E! ' "$LOGS/telegraf-2.log" | sed 's/^[^ ]* //' | sort -u | paste -sd'|' || true)"

points=$(influx_query 'SELECT count("packets") FROM "xdp_drop"' | jq '.results[0].series[0].values[0][1]')
links=$(influx_query 'SELECT count("attached") FROM "xdp_drop_link"' | jq '.results[0].series[0].values[0][1]')
note "InfluxDB holds $points xdp_drop points and $links xdp_drop_link points"

restarts_under_traffic
bans_under_traffic
check_totals
interface_error_then_clear
flowspec_under_traffic

# ================================================================ dry run
# lp_counts FILE: "interface family protocol action packets bytes" per
# xdp_drop series with traffic, from its last point in the line protocol in FILE.
lp_counts() {
	awk '$1 ~ /^xdp_drop,/ {
		n = split($1, t, ","); delete tag
		for (i = 2; i <= n; i++) { split(t[i], kv, "="); tag[kv[1]] = kv[2] }
		m = split($2, f, ","); delete fld
		for (i = 1; i <= m; i++) { split(f[i], kv, "="); sub(/i$/, "", kv[2]); fld[kv[1]] = kv[2] }
		if (fld["packets"] != 0) last[tag["interface"] " " tag["family"] " " tag["protocol"] " " tag["action"]] = fld["packets"] " " fld["bytes"]
	} END { for (k in last) print k, last[k] }' "$1" | sort
}

# check_dry_run: a second instance, with dry_run = true, on a veth of its
# own, run as execd runs it (line protocol on stdout, stopped by stdin EOF,
# releasing at once: no successor comes): for one round of the mix it
# reports what the drop list selects as would_drop, exactly as sendmix
# predicts, and drops nothing.
check_dry_run() {
	local dev=xdpe2 peer=xdpe3 pid in
	log "dry run: a dry_run = true instance on $dev"
	ip -n "$NS" link add "$dev" type veth peer name "$peer"
	ip -n "$NS" link set "$dev" up
	ip -n "$NS" link set "$peer" up
	cat >"$WORK/dry_run.conf" <<-EOF
		[[inputs.xdp_drop]]
		  interfaces = ["$dev"]
		  drop = [$(sed 's/[^,]*/"&"/g; s/,/, /g' <<<"$DROP")]
		  dry_run = true
		  handover_timeout = "0s"
	EOF
	mkfifo "$WORK/dry_run.stdin"
	ip netns exec "$NS" "$WORK/bin/telegraf-xdp-drop" -config "$WORK/dry_run.conf" -poll_interval 1s \
		<"$WORK/dry_run.stdin" >"$WORK/dry_run.lp" 2>"$LOGS/dry_run.log" &
	pid=$!
	exec {in}>"$WORK/dry_run.stdin"
	dry_attached() { [ -n "$(ip -n "$NS" -j link show dev "$dev" | jq -r '.[0].xdp.prog.id // empty')" ]; }
	wait_until 20 dry_attached || fail "$dev has no XDP program 20s after the dry_run instance started"
	nsx "$WORK/bin/sendmix" -netns "$NS" -iface "$peer" -drop "$DROP" -dry_run -rounds 1 >"$WORK/dry_run.json" ||
		fail "sendmix -dry_run failed"
	dry_match() { [ "$(lp_counts "$WORK/dry_run.lp")" = "$(DEV=$dev expected_counts "$WORK/dry_run.json")" ]; }
	if ! wait_until 20 dry_match; then
		echo "expected (sent):" >&2
		DEV=$dev expected_counts "$WORK/dry_run.json" | sed 's/^/  /' >&2
		echo "got (line protocol, latest):" >&2
		lp_counts "$WORK/dry_run.lp" | sed 's/^/  /' >&2
		fail "dry run: the plugin's output does not hold exactly what was sent"
	fi
	local would
	would=$(jq -r '[.series[] | select(.action == "would_drop") | .protocol] | unique | join(" ")' "$WORK/dry_run.json")
	[ -n "$would" ] || fail "dry run: sendmix predicts no would_drop series for -drop $DROP"
	! lp_counts "$WORK/dry_run.lp" | grep -q ' drop ' || fail "dry run: the plugin reported action=drop"
	exec {in}>&-
	wait_until 5 eval '! dry_attached' || fail "$dev still has XDP 5s after the stdin of the dry_run instance (handover_timeout 0s) closed"
	wait "$pid" || fail "the dry_run instance exited with status $?: $(tail -n 5 "$LOGS/dry_run.log")"
	note "dry run: $dev counted $(jq '[.series[] | select(.action == "would_drop") | .packets] | add' "$WORK/dry_run.json") frames would_drop ($would) and dropped none; every series = sent, exactly"
}
check_dry_run

# ================================================================ limit rule
# limit_counts SINCE_MS: "action packets bytes" of the limit rule's
# xdp_drop_rule series on $DEV.
limit_counts() {
	influx_query "SELECT last(\"packets\") AS \"packets\", last(\"bytes\") AS \"bytes\" FROM \"xdp_drop_rule\"
		WHERE \"interface\" = '$DEV' AND \"rule\" = '$RULE_LIMIT' AND time >= ${1}ms GROUP BY \"action\"" |
		jq -r '.results[0].series[]? | [.tags.action, .values[0][1], .values[0][2]] | map(tostring) | join(" ")' | sort
}
sctp_counts() { latest_counts "$1" | awk -v dev="$DEV" '$1 == dev && $3 == "sctp" {print $4, $5, $6}'; }
limit_alert() {
	prom_get /api/v1/alerts | jq -r --arg s "$1" --arg dev "$DEV" \
		'[.data.alerts[] | select(.labels.alertname == "XDPDropLimitRuleHighDropShare" and .state == $s
		  and .labels.interface == $dev) | .labels.rule] | unique | join(" ")'
}
limit_alert_am() {
	nsx curl -sS --fail -G http://127.0.0.1:9093/api/v2/alerts --data-urlencode 'filter=alertname="XDPDropLimitRuleHighDropShare"' |
		jq -r --arg dev "$DEV" '[.[] | select(.status.state == "active" and .labels.interface == $dev) | .labels.rule] | unique | join(" ")'
}

# check_limit: the limit rule (per rule, 1 frame/s, burst LIMIT_BURST) gets
# 200 frames in one send, well within a second: LIMIT_BURST pass, the rest
# are dropped, and InfluxDB holds the rule's pass and drop points and the
# sctp classes exactly so. Then steady SCTP far over the rate until the
# shipped XDPDropLimitRuleHighDropShare fires for it and reaches
# Alertmanager.
check_limit() {
	log "limit rule: $RULE_LIMIT (SCTP to port 9, per rule, rate 1/s, burst $LIMIT_BURST)"
	local t0 n size secs want sender
	t0=$(now_ms)
	[ -z "$(limit_counts "$t0" | awk '$2 != 0')" ] || fail "limit rule: counted frames before any were sent: $(limit_counts "$t0")"
	nsx "$WORK/bin/sendlimit" -netns "$NS" -iface "$PEER" -count 200 >"$WORK/limit.json" || fail "sendlimit failed"
	n=$(jq .frames "$WORK/limit.json")
	size=$(($(jq .bytes "$WORK/limit.json") / n))
	secs=$(jq '.seconds | floor' "$WORK/limit.json")
	[ "$secs" = 0 ] || fail "limit rule: sending $n frames took $(jq .seconds "$WORK/limit.json") s; the exact check needs them within a second"
	want=$(printf 'drop %d %d\npass %d %d\n' $((n - LIMIT_BURST)) $(((n - LIMIT_BURST) * size)) "$LIMIT_BURST" $((LIMIT_BURST * size)))
	limit_match() { [ "$(limit_counts "$t0")" = "$want" ] && [ "$(sctp_counts "$t0")" = "$want" ]; }
	wait_until 20 limit_match ||
		fail "limit rule in InfluxDB: want '$(tr '\n' ';' <<<"$want")' for the rule and the ipv4/sctp classes, got rule '$(limit_counts "$t0" | tr '\n' ';')', classes '$(sctp_counts "$t0" | tr '\n' ';')'"
	note "InfluxDB: xdp_drop_rule $RULE_LIMIT pass = $LIMIT_BURST (its burst), drop = $((n - LIMIT_BURST)) of $n frames sent in $(jq .seconds "$WORK/limit.json") s; ipv4/sctp classes alike, exactly"

	t0=$(now_ms)
	ip netns exec "$NS" "$WORK/bin/sendlimit" -netns "$NS" -iface "$PEER" -duration 120s -batch 20 -every 100ms \
		>"$WORK/limit_steady.json" 2>"$LOGS/sendlimit.log" &
	sender=$!
	limit_firing() { [ "$(limit_alert firing)" = "$RULE_LIMIT" ]; }
	wait_until 90 limit_firing || fail "XDPDropLimitRuleHighDropShare firing for '$(limit_alert firing)', want '$RULE_LIMIT'"
	limit_in_am() { [ "$(limit_alert_am)" = "$RULE_LIMIT" ]; }
	wait_until 30 limit_in_am || fail "Alertmanager has XDPDropLimitRuleHighDropShare for '$(limit_alert_am)', want '$RULE_LIMIT'"
	share=$(prom_get /api/v1/query --data-urlencode 'query=xdp_drop:limit_rule_drop_share:rate2m' |
		jq -r '[.data.result[] | "\(.metric.rule)=\(.value[1] | tonumber * 1000 | floor / 1000)"] | sort | join(" ")')
	kill -TERM "$sender"
	wait "$sender" || fail "steady sendlimit failed: $(cat "$LOGS/sendlimit.log")"
	note "Prometheus: XDPDropLimitRuleHighDropShare firing for $RULE_LIMIT, active in Alertmanager ($(since_ms "$t0") ms after steady SCTP began); xdp_drop:limit_rule_drop_share:rate2m: $share"
}
check_limit
check_flowspec_alert

OK=1
printf '\nxdp_drop e2e: PASS in %d s\n' $(((${EPOCHREALTIME/[.,]/} - START_US) / 1000000))
printf '  %s\n' "${SUMMARY[@]}"
