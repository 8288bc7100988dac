import sys, random, datetime as dt
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import psycopg, workload
pa, pb = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(11)
params = []
for _ in range(6):
    e = rng.randint(1, 20); s = rng.randint(0, 6)
    f = dt.datetime(2026, 11, 1) + dt.timedelta(days=s, hours=rng.choice([0, 5]))
    params.append({"p1": e, "p2": f, "p3": f + dt.timedelta(days=rng.choice([1, 7]))})
ca = psycopg.connect(f"host=127.0.0.1 port={pa} user=kiln dbname=kiln", autocommit=True)
cb = psycopg.connect(f"host=127.0.0.1 port={pb} user=kiln dbname=kiln", autocommit=True)
bad = 0; n = 0
for name, sql in workload.load_queries("kiln"):
    s = workload.to_psycopg(sql)
    for p in params:
        for prep in (False, True, True, True, True, True, True):  # later runs use kept generic plans
            ra = ca.execute(s, p, prepare=prep).fetchall(); rb = cb.execute(s, p, prepare=prep).fetchall()
            def norm(rows): return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)
            n += 1
            if norm(ra) != norm(rb):
                bad += 1; print("DIFF", name, p, ra[:3], rb[:3])
for q in ["SELECT count(*) FROM abtest WHERE region = 'eu-west' AND amount > 50",
          "SELECT count(*), min(event_time), max(event_time) FROM abtest WHERE experiment_id BETWEEN 3 AND 5 AND event_time >= '2026-11-04 12:00:00'",
          "SELECT user_id, amount FROM abtest WHERE experiment_id = 7 AND amount > 90 ORDER BY event_time, user_id LIMIT 20",
          "SELECT count(*) FROM (SELECT * FROM abtest WHERE page_url LIKE '%src=feed%' LIMIT 1000)"]:
    ra = ca.execute(q).fetchall(); rb = cb.execute(q).fetchall(); n += 1
    if ra != rb: bad += 1; print("DIFF", q, ra[:3], rb[:3])
print(f"compared {n}, differing {bad}")
