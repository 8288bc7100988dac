#!/usr/bin/env bash
# bucketfns.sh BUILD... : charts that bucket time as BI tools write it,
# not with date_trunc, over the visits table of bench/cubes2 with the cubes
# of bench/cubes2.sql (WORKLOAD=visits, the default), or over abtest with
# those of bench/cubes.sql (WORKLOAD=abtest, DATA a data directory of
# `kiln gen abtest` rows):
#   daily  Metabase's day: CAST(ts AS DATE), grouped and filtered
#          (BETWEEN two dates), distinct sessions or users (cubes
#          visits_daily, ab_daily);
#   hour   hour of day: extract(hour FROM ts) over a day range (cubes
#          visits_hourly, ab_hourly);
#   bucket Grafana on a TimescaleDB source: time_bucket(INTERVAL '3
#          hours', ts) over a day range (visits_hourly, ab_hourly);
#   week   Metabase's and Superset's weeks from Sunday: date_trunc('week',
#          ts + INTERVAL '1 day') - INTERVAL '1 day' over a day range,
#          distinct sessions or users (visits_daily, ab_daily);
#   between Grafana's time filter, `ts BETWEEN a AND b` (an inclusive
#          end), by time_bucket of an hour (visits_hourly, ab_hourly).
#          Both ends fall at one random second of the day, cutting hours,
#          as Grafana's relative ranges (now-7d to now) move with every
#          refresh: queries seldom repeat. T=SECONDS fixes that second
#          (T=26000: 07:13:20), so queries repeat within seconds, as when
#          many viewers open one dashboard.
#   epoch  Grafana's PostgreSQL macros: $__timeGroupAlias(ts, '1h'),
#          floor(extract(epoch from ts)/3600)*3600, over $__timeFilter(ts),
#          the range of between (visits_hourly, ab_hourly).
# CHARTS picks some (default all six).
# Each query has a random site or experiment and range; abtest's charts
# group by arm too. Runs each BUILD (a release kiln
# binary) in the order given, so `bucketfns.sh A B B A` alternates two
# builds; a BUILD written off:PATH runs PATH without cubes (raw reads,
# with the partial-aggregate cache), the baseline cubes are measured
# against. Per build: a fresh copy of DATA with the cubes built, then per
# chart C clients (default 16) for SECS s (default 10) after a 5 s
# warm-up, over the simple protocol (pgbench -M simple), prepared
# statements (pgbench -M prepared) and HTTP with the values written in
# (bench/textload). DATA (default /tmp/cubes2-data-3000000-1) is made by
# bench/cubes2.sh if missing. Prints one line per build, chart and door:
#   build chart door q/s ... cube=N (queries a cube answered, of system.cubes)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
[ $# -gt 0 ] || { echo "usage: bucketfns.sh BUILD..." >&2; exit 2; }
trap bench_cleanup EXIT
pg_install
WORKLOAD=${WORKLOAD:-visits}
DATA=${DATA:-/tmp/cubes2-data-3000000-1}; C=${C:-16}; SECS=${SECS:-10}
RUN=${RUN_DIR:-/tmp/bucketfns-run}
WORK=$(mktemp -d)
chmod 755 "$WORK"
[ -d "$DATA" ] || [ "$WORKLOAD" != visits ] || KILN_BIN=$1 DATA=$DATA MODES=" " "$ROOT/bench/cubes2.sh" 1
(cd "$ROOT/bench/textload" && go build -o "$WORK/textload" .)

# The charts: pgbench's text (the same for both protocols, so values are
# whole parameters) and textload's (values written in as literals).
case $WORKLOAD in
  visits)
    CUBES=$ROOT/bench/cubes2.sql
    PG_SET=$'\\set s random(1, 60)\n\\set a random(10, 17)\n\\set b random(20, 27)\n\\set t random(0, 86399)'
    ONE="visits WHERE site_id = :s" ONE_HTTP="visits WHERE site_id = {s:1-60}"
    TS=ts MONTH=10 DAY0=1790726400 A_HTTP="{a:10-17}" B_HTTP="{b:20-27}"
    DAILY="count(DISTINCT session_id) AS sessions" HOUR="count(*) AS events"
    BUCKET="count(*) AS events" BY="" ;;
  abtest)
    CUBES=$ROOT/bench/cubes.sql
    PG_SET=$'\\set e random(1, 40)\n\\set a random(1, 5)\n\\set b random(8, 14)\n\\set t random(0, 86399)'
    ONE="abtest WHERE experiment_id = :e" ONE_HTTP="abtest WHERE experiment_id = {e:1-40}"
    TS=event_time MONTH=11 DAY0=1793404800 A_HTTP="0{a:1-5}" B_HTTP="{b:10-14}"
    DAILY="arm, count(DISTINCT user_id) AS users" HOUR="arm, count(*) AS events"
    BUCKET="arm, sum(amount) AS revenue" BY=", 2" ;;
  *) echo "WORKLOAD is visits or abtest" >&2; exit 2 ;;
esac
[ -z "${T:-}" ] || PG_SET=${PG_SET/random(0, 86399)/$T}
# chart_text CHART FROM A B: the chart's text over FROM (the table and its
# equality) from day A to before day B (as given, or day B included for
# daily, whose range is a BETWEEN of dates).
chart_text() {
  local chart=$1 from=$2 a=$3 b=$4
  case $chart in
    daily) echo "SELECT CAST($TS AS DATE) AS day, $DAILY FROM $from AND CAST($TS AS DATE) BETWEEN $a AND $b GROUP BY 1$BY ORDER BY 1$BY" ;;
    hour) echo "SELECT extract(hour FROM $TS) AS hour, $HOUR FROM $from AND $TS >= $a AND $TS < $b GROUP BY 1$BY ORDER BY 1$BY" ;;
    bucket) echo "SELECT time_bucket(INTERVAL '3 hours', $TS) AS time, $BUCKET FROM $from AND $TS >= $a AND $TS < $b GROUP BY 1$BY ORDER BY 1$BY" ;;
    week) echo "SELECT date_trunc('week', $TS + INTERVAL '1 day') - INTERVAL '1 day' AS week, $DAILY FROM $from AND $TS >= $a AND $TS < $b GROUP BY 1$BY ORDER BY 1$BY" ;;
    between) echo "SELECT time_bucket(INTERVAL '1 hour', $TS) AS time, $BUCKET FROM $from AND $TS BETWEEN $a AND $b GROUP BY 1$BY ORDER BY 1$BY" ;;
    epoch) echo "SELECT floor(extract(epoch from $TS)/3600)*3600 AS \"time\", $BUCKET FROM $from AND $TS BETWEEN $a AND $b GROUP BY 1$BY ORDER BY 1$BY" ;;
  esac
}
pg_text() {
  local a="make_date(2026, $MONTH, :a)" b="make_date(2026, $MONTH, :b)"
  if [ "$1" = between ] || [ "$1" = epoch ]; then
    # Seconds since the epoch: day 0 of the month (DAY0), plus days and
    # the second of the day.
    a="to_timestamp($DAY0 + :a * 86400 + :t)" b="to_timestamp($DAY0 + :b * 86400 + :t)"
  fi
  echo "$(chart_text "$1" "$ONE" "$a" "$b");"
}
http_text() {
  local a="'2026-$MONTH-$A_HTTP'" b="'2026-$MONTH-$B_HTTP'"
  case $1 in
    daily) a="DATE $a" b="DATE $b" ;;
    # As Grafana writes it: RFC 3339 strings.
    between|epoch)
      local at="{hr:10-23}:{mi:10-59}:{sec:10-59}"
      [ -z "${T:-}" ] || at=$(printf '%02d:%02d:%02d' $((T / 3600)) $((T / 60 % 60)) $((T % 60)))
      a="'2026-$MONTH-${A_HTTP}T${at}Z'"
      b="'2026-$MONTH-${B_HTTP}T$(echo "$at" | sed -E 's/\{([a-z]+):[0-9-]+\}/{\1}/g')Z'" ;;
  esac
  chart_text "$1" "$ONE_HTTP" "$a" "$b"
}

answered() {
  kiln_sql "SELECT coalesce(sum(queries_answered), 0) FROM system.cubes" | sed -E 's/.*"rows":\[\[([0-9]+)\]\].*/\1/'
}
pgbench() {
  "$PG_BIN/pgbench" -n -M "$1" -h 127.0.0.1 -p "$KILN_PG_PORT" -U postgres -c "$C" -j 2 \
    -T "$2" -f "$WORK/pg.sql" postgres 2>&1
}

for build in "$@"; do
  KILN=${build#off:}
  rm -rf "$RUN"; cp -r "$DATA" "$RUN"
  kiln_start "$RUN"
  [ "$KILN" != "$build" ] || kiln_cubes "$CUBES"
  for chart in ${CHARTS:-daily hour bucket week between epoch}; do
    printf '%s\n%s\n' "$PG_SET" "$(pg_text $chart)" >"$WORK/pg.sql"
    for mode in simple prepared; do
      pgbench $mode 5 >/dev/null
      before=$(answered)
      tps=$(pgbench $mode "$SECS" | awk '/^tps/ {print $3}')
      echo "$build $chart pg-$mode $tps q/s cube=$(( $(answered) - before ))"
    done
    text=$(http_text $chart)
    "$WORK/textload" "http://$KILN_HTTP" "$C" 5 "$text" >/dev/null
    before=$(answered)
    echo "$build $chart http $("$WORK/textload" "http://$KILN_HTTP" "$C" "$SECS" "$text") cube=$(( $(answered) - before ))"
  done
  bench_cleanup; BENCH_PIDS=()
done
rm -rf "$WORK" "$RUN"
