# duck_order.py: DuckDB over the same rows sorted two ways; median total ms of the 15 queries x 10 params
import sys, random, time, datetime as dt, statistics, os, duckdb
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import workload
from engines import DDL, COLUMNS
PARQUET = os.environ.get("PARQUET", "/tmp/kiln-bench/abtest.parquet")
# The first is bench/peers/run.sh's DuckDB file (sorted by experiment, then time).
dbs = {"exp,time": os.environ.get("DUCK_DB", "/tmp/kiln-peers/engines/duckdb/abtest.duckdb"),
       "exp,user,time": os.environ.get("DUCK_USER_DB", "/tmp/duck-user.duckdb")}
if not os.path.exists(dbs["exp,user,time"]):
    con = duckdb.connect(dbs["exp,user,time"]); con.execute(DDL)
    con.execute(f"""INSERT INTO abtest SELECT make_timestamp(epoch_ns(event_time) // 1000),
        {COLUMNS.split(', ', 1)[1]} FROM read_parquet(?) ORDER BY experiment_id, user_id, event_time""", [PARQUET])
    con.execute("CHECKPOINT"); con.close()
rng = random.Random(7); params = []
for _ in range(10):
    e = rng.randint(1, 20); s = rng.randint(0, 6); f = dt.datetime(2026, 11, 1) + dt.timedelta(days=s)
    params.append([e, f, f + dt.timedelta(days=7)])
qs = [q for _, q in workload.load_queries("duckdb")]
cons = {k: duckdb.connect(v, read_only=True) for k, v in dbs.items()}
res = {k: [] for k in dbs}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for k, c in cons.items():
        t = time.perf_counter()
        for q in qs:
            for p in params: c.execute(q, p).fetchall()
        res[k].append((time.perf_counter() - t) * 1000)
for k, v in res.items(): print(k, "median ms", round(statistics.median(v), 1), [round(x) for x in v])
