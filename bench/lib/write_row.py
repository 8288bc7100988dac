"""One Markdown row of bench/server.sh's write table from the JSON that
`kiln bench write --json` prints on stdin."""
import json
import sys

r = json.load(sys.stdin)
t = r["total"]
cells = [
    r["ack"], r["clients"], r["batch"], f"{t['qps']:.0f}", f"{r['rows_per_sec']:.0f}",
    f"{t['p50_ms']:.2f}", f"{t['p99_ms']:.2f}", f"{t['p999_ms']:.2f}", t["errors"],
]
print("| " + " | ".join(str(c) for c in cells) + " |")
