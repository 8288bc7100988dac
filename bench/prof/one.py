import sys, random, datetime as dt
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import psycopg, workload
port = int(sys.argv[1]); want = sys.argv[2]; n = int(sys.argv[3])
rng = random.Random(7)
c = psycopg.connect(f"host=127.0.0.1 port={port} user=kiln dbname=kiln", autocommit=True)
for name, sql in workload.load_queries("kiln"):
    if not name.startswith(want): continue
    s = workload.to_psycopg(sql)
    for _ in range(n):
        e = rng.randint(1, 20); st = rng.randint(0, 6)
        f = dt.datetime(2026, 11, 1) + dt.timedelta(days=st)
        c.execute(s, {"p1": e, "p2": f, "p3": f + dt.timedelta(days=7)}, prepare=True).fetchall()
