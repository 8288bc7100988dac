"""Small synthetic `abtest` Parquet file for developing the peer benchmark.

Why: the real data comes from `kiln gen abtest` (crates/kiln-bench/src/gen),
which needs a release build of Kiln. This script makes a file with the same
schema and the same value sets and shapes (14 days from 2026-11-01, Zipf
users, hash-stable arm/home attributes, funnel actions, URL strings, amounts
only on purchases) with numpy + pyarrow only, so the peer harness and the
cross-engine result check can be exercised without building Kiln. Rows are
NOT identical to `kiln gen`'s output.

Usage: python make_parquet.py OUT.parquet [--rows N] [--seed S]
"""
import argparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

START_NS = 1_793_491_200_000_000_000  # 2026-11-01T00:00:00
SPAN_NS = 14 * 86_400 * 10**9
JITTER_NS = 3 * 60 * 10**9
REGIONS = ["us-east", "us-west", "eu-west", "eu-central", "ap-south", "ap-northeast",
           "sa-east", "ca-central", "eu-north", "ap-southeast", "me-central", "af-south"]
REGION_W = [22, 14, 13, 10, 9, 8, 6, 5, 4, 4, 3, 2]
PLATFORMS, PLATFORM_W = ["ios", "android", "web"], [36, 41, 23]
ACTIONS = ["view", "click", "add_to_cart", "purchase"]
ACTION_W = [[70, 18, 8, 4], [69.2, 18.2, 8.2, 4.4]]  # control, treatment
ARMS = ["control", "treatment"]
TERMS = ["shoes", "jacket", "headphones", "laptop", "coffee", "sofa", "lamp", "watch",
         "backpack", "tent", "camera", "jeans", "blender", "desk", "toys", "vitamins"]
CATS = ["electronics", "fashion", "home", "sports", "beauty", "books", "garden", "toys"]
SOURCES, SOURCE_W = ["feed", "search", "ads", "push", None], [40, 22, 15, 10, 13]
M64 = (1 << 64) - 1


def mix(x):
    """SplitMix64 finalizer on a uint64 numpy array (hash for stable attributes)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def pick(weights, u):
    """Categorical index for uniforms u in [0, 1)."""
    cw = np.cumsum(np.asarray(weights, dtype=float))
    return np.minimum(np.searchsorted(cw / cw[-1], u, side="right"), len(cw) - 1)


def unit(h):
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def urls(rng, act):
    out = []
    for a in act:
        if a == 3:
            out.append(f"/checkout/confirm?order={rng.integers(1_000_000, 10_000_000)}")
            continue
        page = "cart" if a == 2 and rng.random() < 0.15 else "item" if a == 2 else \
            ["item", "search", "home", "cat", "cart", "acct"][pick([45, 18, 14, 13, 5, 5], rng.random())]
        if page == "item":
            item = 10_000 + int(rng.random() ** 3 * 90_000)
            src = SOURCES[pick(SOURCE_W, rng.random())]
            out.append(f"/item/{item}?src={src}&pos={rng.integers(1, 51)}" if src else f"/item/{item}")
        elif page == "search":
            t = TERMS[rng.integers(0, 16)]
            out.append(f"/search?q={t}&src=ads" if rng.random() < 0.3 else f"/search?q={t}")
        elif page == "home":
            out.append("/home?src=push" if rng.random() < 0.3 else "/home")
        elif page == "cat":
            c, p = CATS[rng.integers(0, 8)], rng.integers(1, 11)
            out.append(f"/c/{c}?src=feed&page={p}" if rng.random() < 0.2 else f"/c/{c}?page={p}")
        else:
            out.append("/cart" if page == "cart" else "/account/orders")
    return out


def make(rows, seed):
    rng = np.random.default_rng(seed)
    users = max(rows // 10, 1000)
    i = np.arange(rows, dtype=np.int64)
    t = START_NS + (i * (SPAN_NS // 1000) // rows) * 1000  # in-order position
    t = np.clip(t + rng.integers(-JITTER_NS, JITTER_NS + 1, rows), START_NS, START_NS + SPAN_NS - 1)
    zipf_w = np.arange(1, users + 1, dtype=float) ** -1.1
    rank = pick(zipf_w, rng.random(rows)).astype(np.uint64)
    with np.errstate(over="ignore"):
        user = (mix(rank + np.uint64(seed)) & np.uint64((1 << 40) - 1)).astype(np.int64)
    home = mix(user.astype(np.uint64) ^ np.uint64(0x5EED))
    exp_w = np.arange(1, 21, dtype=float) ** -1.2
    exp = 1 + np.where(rng.random(rows) < 0.6, pick(exp_w, unit(home)), pick(exp_w, rng.random(rows)))
    arm = (mix(mix(exp.astype(np.uint64)) ^ user.astype(np.uint64)) & np.uint64(1)).astype(np.int64)
    region = np.where(rng.random(rows) < 0.85, pick(REGION_W, unit(mix(home))), pick(REGION_W, rng.random(rows)))
    platform = np.where(rng.random(rows) < 0.8, pick(PLATFORM_W, unit(mix(mix(home)))),
                        pick(PLATFORM_W, rng.random(rows)))
    u = rng.random(rows)
    act = np.where(arm == 0, pick(ACTION_W[0], u), pick(ACTION_W[1], u))
    amt = np.round(np.clip(np.exp(np.log(35) + 0.85 * rng.standard_normal(rows)), 5, 500) * 100) / 100
    dwell = np.minimum((-np.log(1.0 - rng.random(rows)) * 20_000).astype(np.int64), 600_000)
    cols = {
        "event_time": pa.array(t, pa.timestamp("ns")),
        "experiment_id": pa.array(exp.astype(np.int64)),
        "arm": pa.array(np.array(ARMS)[arm]),
        "user_id": pa.array(user),
        "region": pa.array(np.array(REGIONS)[region]),
        "platform": pa.array(np.array(PLATFORMS)[platform]),
        "action": pa.array(np.array(ACTIONS)[act]),
        "page_url": pa.array(urls(rng, act)),
        "amount": pa.array(np.where(act == 3, amt, np.nan), mask=act != 3),
        "dwell_ms": pa.array(dwell),
    }
    schema = pa.schema([pa.field(k, v.type, nullable=(k == "amount")) for k, v in cols.items()])
    return pa.Table.from_pydict(cols, schema=schema)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    pq.write_table(make(a.rows, a.seed), a.out, row_group_size=65_536)
    print(f"wrote {a.rows} rows to {a.out}")


if __name__ == "__main__":
    main()
