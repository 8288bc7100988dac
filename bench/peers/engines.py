"""Loading the `abtest` Parquet file into each peer engine, and one client per thread.

Why: the peer benchmark compares Kiln with the engines a Kiln user would
otherwise pick. Each engine gets the data the way an expert of that engine
would set it up for this workload (per-experiment time-range scans), and is
driven through its usual Python client. Every engine exposes the same small
interface so the closed-loop driver (bench.py) and the result check
(check_results.py) treat them alike:

    engine = ENGINES[name](workdir, parquet); engine.load()
    client = engine.connect(); rows = client.run(i, (experiment, start, end))
    client.close(); engine.close()

`run` returns the rows as tuples. A load is skipped when `workdir` already
holds the same Parquet file's data (same path, size and mtime).
"""
import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import workload

DDL = (Path(__file__).resolve().parent.parent / "sql" / "abtest.sql").read_text().strip().rstrip(";")
COLUMNS = "event_time, experiment_id, arm, user_id, region, platform, action, page_url, amount, dwell_ms"


class Engine:
    name = ""
    note = ""  # anything the report must say about how the engine was driven

    def __init__(self, workdir, parquet):
        self.dir = Path(workdir) / self.name
        self.parquet = str(Path(parquet).resolve()) if parquet else None
        self.queries = workload.load_queries(self.name)

    def _stamp(self):
        st = os.stat(self.parquet)
        return {"parquet": self.parquet, "size": st.st_size, "mtime": st.st_mtime}

    def loaded(self):
        marker = self.dir / "loaded.json"
        return marker.exists() and json.loads(marker.read_text()) == self._stamp()

    def mark_loaded(self):
        (self.dir / "loaded.json").write_text(json.dumps(self._stamp()))

    def close(self):
        pass


class DuckDB(Engine):
    """A DuckDB database file; the table sorted by (experiment_id, event_time) so
    zone maps prune row groups. One cursor (= connection) per client thread."""
    name = "duckdb"

    def load(self, max_clients=0):
        import duckdb
        db = self.dir / "abtest.duckdb"
        if not self.loaded():
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
            con = duckdb.connect(str(db))
            con.execute(DDL)
            # Truncate ns to us (TIMESTAMP): same rule as the other engines.
            con.execute(f"""INSERT INTO abtest SELECT make_timestamp(epoch_ns(event_time) // 1000),
                {COLUMNS.split(', ', 1)[1]} FROM read_parquet(?) ORDER BY experiment_id, event_time""",
                        [self.parquet])
            con.execute("CHECKPOINT")
            con.close()
            self.mark_loaded()
        self.db = duckdb.connect(str(db), read_only=True)

    def connect(self):
        return DuckDBClient(self.db.cursor(), self.queries)

    def close(self):
        self.db.close()


class DuckDBClient:
    def __init__(self, cur, queries):
        self.cur, self.sql = cur, [q for _, q in queries]

    def run(self, i, params):
        return self.cur.execute(self.sql[i], list(params)).fetchall()

    def close(self):
        self.cur.close()


class Chdb(Engine):
    """chDB (embedded ClickHouse): a MergeTree table ORDER BY (experiment_id,
    event_time), LowCardinality strings. One chDB connection per client thread
    to the same database path (the process holds one embedded engine)."""
    name = "chdb"
    note = ("chDB runs in the driver's process (one embedded ClickHouse engine); each client thread has its "
            "own chDB connection to it and the GIL is released while a query runs, so queries run concurrently"
            + (" -- but CHDB_SERIALIZE=1 was set: here they ran one at a time (a process-wide lock)."
               if os.environ.get("CHDB_SERIALIZE") == "1" else " (CHDB_SERIALIZE=1 would run them one at a time)."))

    def load(self, max_clients=0):
        import chdb
        self.url = f"{self.dir}?session_timezone=UTC"
        fresh = not self.loaded()
        if fresh:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
        self.conn = chdb.connect(self.url)  # keeps the engine up until close()
        if fresh:
            self.conn.query("""CREATE TABLE abtest (event_time DateTime64(6, 'UTC'), experiment_id Int64,
                arm LowCardinality(String), user_id Int64, region LowCardinality(String),
                platform LowCardinality(String), action LowCardinality(String), page_url String,
                amount Nullable(Float64), dwell_ms Int64)
                ENGINE = MergeTree ORDER BY (experiment_id, event_time)""")
            self.conn.query(f"INSERT INTO abtest SELECT {COLUMNS} FROM file('{self.parquet}', Parquet)")
            self.conn.query("OPTIMIZE TABLE abtest FINAL")
            self.mark_loaded()

    def connect(self):
        import chdb
        return ChdbClient(chdb.connect(self.url), self.queries)

    def close(self):
        self.conn.close()


class ChdbClient:
    lock = threading.Lock() if os.environ.get("CHDB_SERIALIZE") == "1" else contextlib.nullcontext()

    def __init__(self, conn, queries):
        self.conn, self.sql = conn, [workload.to_chdb(q) for _, q in queries]

    def run(self, i, params):
        e, a, b = params
        with self.lock:
            t = self.conn.query(self.sql[i], "ArrowTable", params={"p1": e, "p2": a, "p3": b})
        return [tuple(r.values()) for r in t.to_pylist()]

    def close(self):
        self.conn.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres(Engine):
    """PostgreSQL from the OS packages: a fresh cluster (initdb, C locale) on
    127.0.0.1, loaded with COPY, B-tree index on (experiment_id, event_time),
    CLUSTERed on it, VACUUM ANALYZE. psycopg connection per client thread,
    server-side prepared statements (prepare=True)."""
    name = "postgres"

    def _bin(self, tool):
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"),
                       key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
        path = found[-1] if found else shutil.which(tool)
        if not path:
            raise RuntimeError(f"PostgreSQL's {tool} not found (apt-get install postgresql)")
        return path

    def _as_owner(self, *cmd):
        """Runs a server tool; as root, as the `postgres` user (initdb refuses root)."""
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(prefix + list(cmd), check=True, stdout=subprocess.DEVNULL)

    def _settings(self, max_clients):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20  # MiB
        return {
            "listen_addresses": "'127.0.0.1'", "unix_socket_directories": "''",
            "max_connections": max(100, max_clients + 20),
            "shared_buffers": f"{min(mem // 4, 8192)}MB",
            "effective_cache_size": f"{mem // 2}MB",
            "work_mem": "32MB", "maintenance_work_mem": "1GB",
            # JIT recompiles on every execution; on this workload it raised p99 (PG_JIT=on to compare).
            "jit": os.environ.get("PG_JIT", "off"),
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",  # disposable data
        }

    def load(self, max_clients=200):
        import psycopg
        data = self.dir / "data"
        fresh = not self.loaded()
        if fresh:
            shutil.rmtree(self.dir, ignore_errors=True)
            data.mkdir(parents=True)
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres")
                shutil.chown(data, "postgres")
                if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(data)]).returncode:
                    raise RuntimeError(f"user postgres cannot reach {data}: use a work dir it can "
                                       "traverse (BENCH_DIR, default /tmp/kiln-peers)")
            self._as_owner(self._bin("initdb"), "-D", str(data), "-U", "postgres",
                           "--auth=trust", "--no-locale", "-E", "UTF8")
        self.port = free_port()
        opts = " ".join(f"-c {k}={v}" for k, v in self._settings(max_clients).items())
        self._as_owner(self._bin("pg_ctl"), "-D", str(data), "-w", "-t", "120",
                       "-l", str(self.dir / "server.log"), "-o", f"-p {self.port} {opts}", "start")
        self.data = data
        (Path(self.dir) / "pgdata.path").write_text(str(data))  # for run.sh's cleanup trap
        if fresh:
            with psycopg.connect(**self.conninfo(), autocommit=True) as con:
                con.execute(DDL.replace("DOUBLE", "DOUBLE PRECISION"))
                copy_parquet(con, self.parquet)
                con.execute("CREATE INDEX abtest_exp_time ON abtest (experiment_id, event_time)")
                con.execute("CLUSTER abtest USING abtest_exp_time")
                con.execute("VACUUM ANALYZE abtest")
            self.mark_loaded()

    def conninfo(self):
        return {"host": "127.0.0.1", "port": self.port, "user": "postgres", "dbname": "postgres"}

    def connect(self):
        import psycopg
        return PgClient(psycopg.connect(**self.conninfo(), autocommit=True), self.queries)

    def close(self):
        self._as_owner(self._bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")


def copy_parquet(con, parquet):
    """Streams the Parquet file into `abtest` as CSV through COPY FROM STDIN."""
    import io
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    with con.cursor().copy(f"COPY abtest ({COLUMNS}) FROM STDIN (FORMAT csv)") as copy:
        for batch in pq.ParquetFile(parquet).iter_batches(batch_size=200_000, columns=COLUMNS.split(", ")):
            # ns -> us by truncation (PostgreSQL would round), as for the other engines.
            ts = pc.cast(batch.column(0), pa.timestamp("us"), safe=False)
            batch = pa.RecordBatch.from_arrays([ts] + batch.columns[1:], names=batch.schema.names)
            buf = io.BytesIO()
            pacsv.write_csv(batch, buf, pacsv.WriteOptions(include_header=False))
            copy.write(buf.getvalue())


class PgClient:
    """psycopg 3 with server-side prepared statements; also used for Kiln's pg port."""

    def __init__(self, con, queries, prepare=True):
        from psycopg.types.numeric import Int8
        self.con, self.cur, self.Int8, self.prepare = con, con.cursor(), Int8, prepare
        self.sql = [workload.to_psycopg(q) for _, q in queries]

    def run(self, i, params):
        e, a, b = params
        self.cur.execute(self.sql[i], {"p1": self.Int8(e), "p2": a, "p3": b}, prepare=self.prepare)
        return self.cur.fetchall()

    def close(self):
        self.con.close()


class Kiln(Engine):
    """A running Kiln server, reached on its PostgreSQL port (result checks only:
    Kiln's own load tester, `kiln bench query`, measures it)."""
    name = "kiln"

    def __init__(self, workdir, parquet, url=None):
        super().__init__(workdir, parquet)
        self.url = url or os.environ.get("KILN_PG_URL", "postgres://kiln@127.0.0.1:5433/kiln")

    def load(self, max_clients=0):
        pass

    def connect(self):
        import psycopg
        return PgClient(psycopg.connect(self.url, autocommit=True), self.queries)


class DataFusion(Engine):
    """Apache DataFusion (Python bindings) over the Parquet file: Kiln's SQL
    dialect without a Kiln build (result checks only)."""
    name = "datafusion"

    def load(self, max_clients=0):
        from datafusion import SessionContext
        self.ctx = SessionContext()
        self.ctx.register_parquet("abtest", self.parquet)
        # The portable files are Kiln's (DataFusion's) text.
        self.queries = workload.load_queries("kiln")

    def connect(self):
        return DataFusionClient(self.ctx, self.queries)


class DataFusionClient:
    def __init__(self, ctx, queries):
        self.ctx, self.sql = ctx, [q for _, q in queries]

    def run(self, i, params):
        pv = {str(k + 1): v for k, v in enumerate(params)}
        t = self.ctx.sql(self.sql[i], param_values=pv).to_arrow_table()
        return [tuple(r.values()) for r in t.to_pylist()]

    def close(self):
        pass


ENGINES = {e.name: e for e in (DuckDB, Chdb, Postgres, Kiln, DataFusion)}
