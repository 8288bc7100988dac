#!/usr/bin/env bash
# patterns.sh BUILD... : what checking regular expressions before they
# run costs (crates/kiln-query/src/shape/patterns.rs, and
# rules/checked_patterns.rs as they run). Each BUILD (a
# release kiln binary) in the order given, so `patterns.sh A B B A`
# alternates two builds, on a fresh 50-row table. One psycopg connection
# sends small queries one after another, each with other values: over the
# simple protocol with literals (so each is parsed and checked), a query
# with two regular expressions, one matching each row against a pattern
# computed from it (50 patterns), and a LIKE query as the control; then as
# prepared statements with parameters (psycopg prepare=True, so bound
# values are checked at every execution), the same two and a grouped
# query with a text parameter and no pattern. Prints per build and query
# the median of 5 rounds' medians of 300 queries, in us.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
trap bench_cleanup EXIT
for KILN in "$@"; do
  DIR=$(mktemp -d /tmp/rx.XXXXXX)
  BENCH_PIDS=()
  kiln_start "$DIR/data"
  kiln_sql "CREATE TABLE t (ts TIMESTAMP NOT NULL, s VARCHAR)" >/dev/null
  kiln_sql "INSERT INTO t SELECT TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 second', 'x' || CAST(x AS VARCHAR) FROM generate_series(1, 50) t(x)" >/dev/null
  python3 - "$KILN_PG_PORT" "$(basename "$KILN")" <<'PY'
import sys, time, statistics, psycopg
port, name = sys.argv[1], sys.argv[2]
with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="kiln", autocommit=True) as c:
    cur = c.cursor()
    cases = [
        ("regex", "SELECT count(*) FROM t WHERE s ~ '^x[0-9]{1,%d}(a|b)?$' AND s !~* 'y{2,}'", None),
        ("plain", "SELECT count(*) FROM t WHERE s LIKE 'x%d%%'", None),
        # a pattern per row, computed from a column: checked as it runs
        ("column", "SELECT count(*) FROM t WHERE s ~ concat('^', s, '%d?$')", None),
        ("regex $", "SELECT count(*) FROM t WHERE s ~ %s AND s !~* %s",
         lambda n: ["^x[0-9]{1,%d}(a|b)?$" % n, "y{2,}"]),
        ("plain $", "SELECT count(*) FROM t WHERE s LIKE %s", lambda n: ["x%d%%" % n]),
        ("grouped $", "SELECT date_trunc('minute', ts) AS m, count(*), min(s), max(length(s)) FROM t "
         "WHERE ts >= %s AND s <> %s AND (s LIKE 'x1%%' OR s LIKE 'x2%%') GROUP BY 1 ORDER BY 1",
         lambda n: ["2026-01-01 00:00:%02d" % (n % 30), "x%d" % n]),
    ]
    for label, q, params in cases:
        meds = []
        for rnd in range(5):
            ts = []
            for i in range(300):
                n = i % 50 + 1
                t = time.perf_counter()
                if params is None:
                    cur.execute(q % n)
                else:
                    cur.execute(q, params(n), prepare=True)
                cur.fetchall(); ts.append(time.perf_counter() - t)
            meds.append(statistics.median(ts) * 1e6)
        print(name, label, "median of 5 rounds of 300 (us):", round(statistics.median(meds), 1), [round(m, 1) for m in meds])
PY
  bench_cleanup
  rm -rf "$DIR"
done
