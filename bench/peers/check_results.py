"""Runs every dashboard query once per parameter set on each engine and
checks that all engines give the same answer.

Why: a throughput table means little if the systems compute different
things. The portable SQL (and any per-engine override) must return the same
rows everywhere, up to float rounding: values are compared in order (every
query is ORDER BY'd), numbers with a relative tolerance of 1e-6, NULL and NaN
as equal (ClickHouse returns NaN where the others return NULL for a variance
of fewer than two values), timestamps as naive UTC `YYYY-MM-DD HH:MM:SS`.

Usage:
  python check_results.py --parquet FILE [--engines duckdb,chdb,postgres,datafusion]
                          [--workdir DIR] [--kiln-url postgres://...] [--cases 1:0,2:7,...]
The first engine is the reference. `--kiln-url` adds a running Kiln server
(loaded with the same file) reached through its PostgreSQL port.
Exits 1 if any query fails or differs.
"""
import argparse
import datetime as dt
import math
import sys
import tempfile
from decimal import Decimal

import workload
from engines import ENGINES

REL_TOL = 1e-6


def norm(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, Decimal):
        return float(v)
    if hasattr(v, "to_pydatetime"):  # pandas Timestamp
        v = v.to_pydatetime()
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, dt.date):
        return v.strftime("%Y-%m-%d 00:00:00")
    return v


def same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)
    return a == b


def diff(ref, got):
    """None if equal, else a short description of the first difference."""
    if len(ref) != len(got):
        return f"{len(got)} rows, expected {len(ref)}"
    for n, (r, g) in enumerate(zip(ref, got)):
        if len(r) != len(g) or not all(same(x, y) for x, y in zip(r, g)):
            return f"row {n}: {g} != {r}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parquet", required=True)
    ap.add_argument("--engines", default="duckdb,chdb,postgres,datafusion")
    ap.add_argument("--workdir", default=None, help="engine data (default: a temp dir)")
    ap.add_argument("--kiln-url", default=None)
    ap.add_argument("--cases", default="1:0,2:7,5:3,20:1", help="experiment:start_day,...")
    a = ap.parse_args()
    workdir = a.workdir or tempfile.mkdtemp(prefix="kiln-check-")
    cases = []
    for c in a.cases.split(","):
        e, d = (int(x) for x in c.split(":"))
        start = workload.DATA_START + dt.timedelta(days=d)
        cases.append((e, start, start + dt.timedelta(days=workload.RANGE_DAYS)))
    names = [e for e in a.engines.split(",") if e] + (["kiln"] if a.kiln_url else [])
    names_q = workload.query_names()

    results = {}  # engine -> {(query, case): rows or Exception}
    for name in names:
        eng = ENGINES[name](workdir, a.parquet, a.kiln_url) if name == "kiln" else ENGINES[name](workdir, a.parquet)
        try:
            eng.load()
            client = eng.connect()
            res = results[name] = {}
            for qi in range(len(names_q)):
                for ci, params in enumerate(cases):
                    try:
                        res[qi, ci] = [tuple(norm(v) for v in row) for row in client.run(qi, params)]
                    except Exception as ex:  # report and go on
                        res[qi, ci] = ex
                        if name == "postgres" or name == "kiln":
                            client.con.rollback()
            client.close()
        finally:
            eng.close()

    ref, failures = names[0], 0
    print(f"| query | rows | {' | '.join(names)} |")
    print(f"|---|---|{'---|' * len(names)}")
    for qi, qn in enumerate(names_q):
        cells, nrows = [], []
        for name in names:
            bad = []
            for ci in range(len(cases)):
                got, want = results[name][qi, ci], results[ref][qi, ci]
                if isinstance(got, Exception):
                    bad.append(f"case {ci}: ERROR {str(got).splitlines()[0][:150]}")
                elif isinstance(want, Exception):
                    bad.append(f"case {ci}: reference failed")
                elif (d := diff(want, got)) is not None:
                    bad.append(f"case {ci}: {d}")
                if name == ref and not isinstance(got, Exception):
                    nrows.append(str(len(got)))
            failures += bool(bad)
            cells.append("ok" if not bad else "FAIL")
            for b in bad:
                print(f"  {qn} on {name}: {b}", file=sys.stderr)
        print(f"| {qn} | {'/'.join(nrows)} | {' | '.join(cells)} |")
    print(f"\n{len(names_q) * len(names) - failures} passed, {failures} failed "
          f"({len(cases)} parameter sets per query, reference: {ref})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
