"""Combines the per-system JSON results of a peer run into Markdown tables.

Why: each system is measured by its own tool (Kiln by `kiln bench query`,
the peers by bench.py), all writing the same JSON shape
`{"system": ..., "levels": [{"clients", "queries", "qps", "mean_ms", "p50_ms",
"p95_ms", "p99_ms", "p999_ms", "errors"}, ...]}`; this puts them side by side:
q/s and p99 per concurrency level (plus Kiln/DuckDB q/s), then every statistic.

Usage: python report.py RESULTS_DIR   (reads RESULTS_DIR/{kiln,duckdb,chdb,postgres}.json)
"""
import json
import sys
from pathlib import Path

ORDER = ["kiln", "duckdb", "chdb", "postgres"]
STATS = ["queries", "qps", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "errors"]


def load(results_dir):
    systems = {}
    for name in ORDER:
        f = Path(results_dir) / f"{name}.json"
        if f.exists() and f.stat().st_size:
            systems[name] = json.loads(f.read_text())
    return systems


def fmt(v):
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def render(systems):
    out = []
    by_level = {s: {lvl["clients"]: lvl for lvl in r["levels"]} for s, r in systems.items()}
    levels = sorted({c for lv in by_level.values() for c in lv})
    names = list(systems)
    ratio = "kiln" in names and "duckdb" in names
    head = ["clients"] + [f"{s} {k}" for s in names for k in ("q/s", "p99 ms")]
    head += ["kiln/duckdb q/s"] if ratio else []
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in levels:
        row = [str(c)]
        for s in names:
            lvl = by_level[s].get(c)
            row += [fmt(lvl["qps"]), fmt(lvl["p99_ms"])] if lvl else ["-", "-"]
        if ratio:
            k, d = by_level["kiln"].get(c), by_level["duckdb"].get(c)
            row.append(f"{k['qps'] / d['qps']:.2f}x" if k and d and d["qps"] else "-")
        out.append("| " + " | ".join(row) + " |")
    out += ["", "| system | clients | " + " | ".join(STATS) + " |", "|" + "---|" * (len(STATS) + 2)]
    for s in names:
        for c in levels:
            lvl = by_level[s].get(c)
            if lvl:
                out.append(f"| {s} | {c} | " + " | ".join(fmt(lvl.get(k, "-")) for k in STATS) + " |")
    notes = [f"- {s}: {r['note']}" for s, r in systems.items() if r.get("note")]
    if notes:
        out += ["", "Notes:"] + notes
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    systems = load(sys.argv[1])
    if not systems:
        sys.exit(f"no results in {sys.argv[1]}")
    print(render(systems))


if __name__ == "__main__":
    main()
