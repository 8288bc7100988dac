import sys, time, datetime as dt
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "peers"))
import workload, psycopg
port=int(sys.argv[1]); secs=float(sys.argv[2]); skip=set(sys.argv[3].split(",")) if len(sys.argv)>3 else set()
con = psycopg.connect(f"host=127.0.0.1 port={port} user=kiln dbname=kiln", autocommit=True)
params = {"p1": 3, "p2": dt.datetime(2026, 11, 3), "p3": dt.datetime(2026, 11, 10)}
qs=[workload.to_psycopg(s) for n,s in workload.load_queries("kiln") if n[:2] not in skip]
end=time.time()+secs; n=0
while time.time()<end:
    for q in qs: con.execute(q, params, prepare=True).fetchall(); n+=1
print(n, "queries")
