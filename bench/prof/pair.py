# pair.py PORT_A PORT_B [ROUNDS]: each dashboard query on two servers, A and B
# taking turns on the same parameters (so both see the same machine noise),
# single client (ONE=1: one partition per query); prints per query the median ms of each and B/A, then the
# geometric mean of B/A. For machines without hardware counters.
import sys, random, time, statistics, math, datetime as dt
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import psycopg, workload
pa, pb = int(sys.argv[1]), int(sys.argv[2]); rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
conn = lambda p: psycopg.connect(f"host=127.0.0.1 port={p} user=kiln dbname=kiln", autocommit=True)
ca, cb = conn(pa), conn(pb)
if __import__("os").environ.get("ONE"):  # one partition: CPU time, not parallelism
    for c in (ca, cb): c.execute("SET datafusion.execution.target_partitions = 1")
rng = random.Random(5)
ratios = []
for name, sql in workload.load_queries("kiln"):
    s = workload.to_psycopg(sql); ta, tb = [], []
    for i in range(rounds + 3):
        e = rng.randint(1, 20); st = rng.randint(0, 6)
        f = dt.datetime(2026, 11, 1) + dt.timedelta(days=st)
        p = {"p1": e, "p2": f, "p3": f + dt.timedelta(days=7)}
        order = [(ca, ta), (cb, tb)] if i % 2 == 0 else [(cb, tb), (ca, ta)]
        for c, t in order:
            t0 = time.perf_counter(); c.execute(s, p, prepare=True).fetchall()
            if i >= 3: t.append((time.perf_counter() - t0) * 1000)
    ma, mb = statistics.median(ta), statistics.median(tb); ratios.append(mb / ma)
    print(f"{name[:24]:24} A {ma:7.2f}  B {mb:7.2f}  B/A {mb/ma:5.2f}")
print(f"geomean B/A {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
