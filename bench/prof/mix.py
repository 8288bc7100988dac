import sys, random, time, datetime as dt, statistics
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import psycopg, workload
port = int(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
rng = random.Random(7)
params = []
for _ in range(n):
    e = rng.randint(1, 20); s = rng.randint(0, 6)
    f = dt.datetime(2026, 11, 1) + dt.timedelta(days=s)
    params.append({"p1": e, "p2": f, "p3": f + dt.timedelta(days=7)})
c = psycopg.connect(f"host=127.0.0.1 port={port} user=kiln dbname=kiln", autocommit=True)
qs = workload.load_queries("kiln")
tot = {}
for name, sql in qs:
    s = workload.to_psycopg(sql)
    for p in params[:2]: c.execute(s, p, prepare=True).fetchall()
    ts = []
    for p in params:
        t = time.perf_counter(); c.execute(s, p, prepare=True).fetchall(); ts.append((time.perf_counter() - t) * 1000)
    tot[name] = statistics.mean(ts)
S = sum(tot.values())
for k, v in tot.items(): print(f"{k:28s} {v:7.1f} ms {100*v/S:5.1f}%")
print(f"{'sum':28s} {S:7.1f}")
