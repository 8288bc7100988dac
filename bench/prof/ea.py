import sys, datetime as dt
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import psycopg, workload
port=int(sys.argv[1]); name=sys.argv[2]
c = psycopg.connect(f"host=127.0.0.1 port={port} user=kiln dbname=kiln", autocommit=True)
import os
if os.environ.get("ONE"): c.execute("SET datafusion.execution.target_partitions = 1")
for n, sql in workload.load_queries("kiln"):
    if n.startswith(name):
        f=dt.datetime(2026,11,3)
        s=workload.to_psycopg(sql)
        s="EXPLAIN ANALYZE "+s
        for r in c.execute(s, {"p1":5,"p2":f,"p3":f+dt.timedelta(days=7)}).fetchall():
            print(r[-1])
