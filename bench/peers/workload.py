"""The dashboard workload for the peer engines: its SQL and its parameters.

Why: Kiln's load tester (`kiln bench query --workload dashboard`, Rust) and
this Python harness must send every system the same queries with the same
parameters in the same order. Both read `bench/workload/dashboard/*.sql`
and implement the generator specified in `bench/workload/README.md`; this is
the Python side. Engine-specific text comes from override files
`NN_name.<engine>.sql`, and placeholders are rewritten here for drivers that
do not take PostgreSQL's `$1` (psycopg, chDB).
"""
import datetime as dt
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "workload" / "dashboard"
DATA_START = dt.datetime(2026, 11, 1)
EXPERIMENTS, START_DAYS, RANGE_DAYS = 20, 8, 7
M64 = (1 << 64) - 1
_PLACEHOLDER = re.compile(r"\$([1-9][0-9]*)")
# chDB (ClickHouse) binds typed named parameters: {name:Type}.
CHDB_TYPES = {1: "Int64", 2: "DateTime64(6)", 3: "DateTime64(6)"}


def query_names():
    """The workload's query names, in query-index order (01_... is index 0)."""
    return sorted(p.stem for p in DASHBOARD.glob("[0-9][0-9]_*.sql") if "." not in p.stem)


def statement(text):
    """One statement: full-line `--` comments and a trailing `;` removed."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";").rstrip()


def load_queries(engine):
    """[(name, sql)] for `engine`, using `NN_name.<engine>.sql` where present."""
    out = []
    for name in query_names():
        override = DASHBOARD / f"{name}.{engine}.sql"
        path = override if override.exists() else DASHBOARD / f"{name}.sql"
        out.append((path.name, statement(path.read_text())))
    return out


def to_psycopg(sql):
    """`$N` -> `%(pN)s` (psycopg's named form; repeated names share one server parameter)."""
    return _PLACEHOLDER.sub(r"%(p\1)s", sql.replace("%", "%%"))


def to_chdb(sql):
    """`$N` -> `{pN:Type}` (ClickHouse query parameters)."""
    return _PLACEHOLDER.sub(lambda m: "{p%s:%s}" % (m.group(1), CHDB_TYPES[int(m.group(1))]), sql)


class SplitMix64:
    """SplitMix64 (Steele, Lea, Flood 2014), all arithmetic wrapping at 2**64."""

    def __init__(self, state):
        self.state = state & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


class CallGen:
    """The calls of one client: state starts at seed * 1_000_003 + client."""

    def __init__(self, seed, client, queries=15):
        self.rng = SplitMix64(seed * 1_000_003 + client)
        self.queries = queries

    def next_call(self):
        """(query index, experiment_id, range start, range end)."""
        query = self.rng.next() % self.queries
        experiment = 1 + self.rng.next() % EXPERIMENTS
        start = DATA_START + dt.timedelta(days=self.rng.next() % START_DAYS)
        return query, experiment, start, start + dt.timedelta(days=RANGE_DAYS)


if __name__ == "__main__":
    # Prints the first calls of seed 1, client 0: a cross-check for the Rust side.
    g = CallGen(1, 0)
    print(hex(SplitMix64(1_000_003).next()))
    for _ in range(5):
        q, e, a, b = g.next_call()
        print(q, e, a.isoformat(" "), b.isoformat(" "))
