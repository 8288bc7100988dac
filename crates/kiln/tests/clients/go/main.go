// Kiln over the PostgreSQL wire with pgx v5 (github.com/jackc/pgx/v5), the
// driver behind most Go services and Grafana's PostgreSQL data source.
//
// It checks, against a running Kiln, with real results asserted:
//   - connect, SELECT 1;
//   - parameters of several Go types (int32, int64, float64, string,
//     time.Time, nil) in the default extended mode (binary formats where pgx
//     knows the type) and in QueryExecModeSimpleProtocol (values written into
//     the SQL text), plus the other exec modes pgx offers;
//   - scanning TIMESTAMP into time.Time, DOUBLE into float64, BIGINT into
//     int64, VARCHAR into string, NULLs into pointers; result column OIDs;
//   - transactions: Begin/INSERT/Rollback leaves nothing, Begin/INSERT/Commit
//     keeps the rows;
//   - CopyFrom (binary COPY) of 10,000 rows;
//   - SendBatch of INSERTs and SELECTs;
//   - a context timeout stopping a long query promptly, with the pool (and a
//     connection using CancelRequest) usable after;
//   - *pgconn.PgError SQLSTATEs: 42601, 42P01, 42703, 22012;
//   - streaming 2,000,000 rows row by row.
//
// Every check runs and its result goes to stderr. A check in knownGaps
// (below: what fails against Kiln today, and why) that fails is reported as
// a known gap; one that passes fails the run, so the list stays true. Any
// other failure fails the run: failures are listed at the end and the
// program exits 1.
//
// Usage: go run . PGPORT     (prints "ok" on stdout and exits 0 when every
// check passes or is a known gap)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// knownGaps: checks that fail against Kiln today, name -> why. Strict: a
// listed check that passes fails the run ("now passes: remove it from
// knownGaps").
var knownGaps = map[string]string{}

var (
	port     string
	failures []string
	ran      = map[string]bool{}
	ctx      = context.Background()
)

func dsn() string {
	return fmt.Sprintf("postgres://kiln:kiln@127.0.0.1:%s/kiln?sslmode=disable&connect_timeout=10", port)
}

// logf writes a progress line to stderr (stdout is "ok" alone on success).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// check runs one named check, recording (not stopping at) a failure; a
// check in knownGaps must fail.
func check(name string, f func() error) {
	ran[name] = true
	start := time.Now()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		err = f()
	}()
	why, known := knownGaps[name]
	if err != nil {
		msg := fmt.Sprintf("%s: %v", name, describe(err))
		if known {
			logf("known gap: %s: %s", name, why)
			logf("    (got %s)", msg)
			return
		}
		failures = append(failures, msg)
		logf("FAIL %s (%.2fs)", msg, time.Since(start).Seconds())
		return
	}
	if known {
		failures = append(failures, name+": now passes: remove it from knownGaps")
		logf("FAIL %s: now passes: remove it from knownGaps", name)
		return
	}
	logf("pass %s (%.2fs)", name, time.Since(start).Seconds())
}

// describe adds the SQLSTATE to a server error.
func describe(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%v [SQLSTATE %s]", err, pe.Code)
	}
	return err.Error()
}

func connect(c context.Context) (*pgx.Conn, error) {
	return pgx.Connect(c, dsn())
}

func connectMode(mode pgx.QueryExecMode) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn())
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = mode
	return pgx.ConnectConfig(ctx, cfg)
}

func exec(conn *pgx.Conn, sql string, args ...any) error {
	_, err := conn.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func count(conn *pgx.Conn, sql string, args ...any) (int64, error) {
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	return n, nil
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . PGPORT")
		os.Exit(2)
	}
	port = os.Args[1]

	conn, err := connect(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL connect: %s\n", describe(err))
		os.Exit(1)
	}
	defer conn.Close(ctx)
	logf("pass connect")

	check("SELECT 1", func() error {
		var one int32
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return err
		}
		if one != 1 {
			return fmt.Errorf("got %d", one)
		}
		return nil
	})

	setup := func() error {
		for _, s := range []string{
			"DROP TABLE IF EXISTS pgx_t",
			"CREATE TABLE pgx_t (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT)",
			"DROP TABLE IF EXISTS pgx_ins",
			"CREATE TABLE pgx_ins (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT)",
			"DROP TABLE IF EXISTS pgx_tx",
			"CREATE TABLE pgx_tx (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT)",
			"DROP TABLE IF EXISTS pgx_copy",
			"CREATE TABLE pgx_copy (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT)",
			"DROP TABLE IF EXISTS pgx_batch",
			"CREATE TABLE pgx_batch (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT)",
			"INSERT INTO pgx_t VALUES ('2026-01-01 00:00:00', 'a', 1.5, 1), " +
				"('2026-01-01 00:00:01.250', 'b', -2.25, 2), " +
				"('2026-01-01 00:00:02', NULL, NULL, NULL)",
		} {
			if err := exec(conn, s); err != nil {
				return err
			}
		}
		return nil
	}
	check("setup (CREATE TABLE, INSERT)", setup)

	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"extended (CacheStatement, default)", pgx.QueryExecModeCacheStatement},
		{"CacheDescribe", pgx.QueryExecModeCacheDescribe},
		{"DescribeExec", pgx.QueryExecModeDescribeExec},
		{"Exec", pgx.QueryExecModeExec},
		{"SimpleProtocol", pgx.QueryExecModeSimpleProtocol},
	}
	for _, m := range modes {
		m := m
		var mc *pgx.Conn
		check("connect mode "+m.name, func() error {
			var err error
			mc, err = connectMode(m.mode)
			return err
		})
		if mc == nil {
			continue
		}
		for _, pc := range paramCases {
			pc := pc
			check(fmt.Sprintf("param %s, mode %s", pc.name, m.name), func() error { return paramRoundTrip(mc, pc.sql, pc.arg, pc.want) })
		}
		key := int64(len(m.name))*100 + int64(m.mode)
		check("INSERT with parameters (NULLs too), mode "+m.name, func() error { return paramsInsert(mc, key) })
		check("params in WHERE + scan types, mode "+m.name, func() error { return paramsWhere(mc) })
		check("NULL columns into pointers, mode "+m.name, func() error { return nullsIntoPointers(mc) })
		mc.Close(ctx)
	}

	check("result column type OIDs", func() error {
		rows, err := conn.Query(ctx, "SELECT ts, host, v, n FROM pgx_t ORDER BY ts")
		if err != nil {
			return err
		}
		defer rows.Close()
		want := []uint32{1114, 1043, 701, 20} // timestamp, varchar, float8, int8
		var got []uint32
		for _, fd := range rows.FieldDescriptions() {
			got = append(got, fd.DataTypeOID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// VARCHAR may honestly be reported as text (25).
		if len(got) != 4 || got[0] != want[0] || (got[1] != 1043 && got[1] != 25) || got[2] != want[2] || got[3] != want[3] {
			return fmt.Errorf("OIDs %v, want %v", got, want)
		}
		return nil
	})

	check("transaction rollback then commit", func() error { return transactions(conn) })

	// pgx's CopyFrom only speaks binary COPY.
	check("CopyFrom 10,000 rows (binary COPY)", func() error { return copyFrom() })

	check("SendBatch INSERTs and SELECTs", func() error { return batch(conn) })
	check("SendBatch in a transaction", func() error { return batchTx(conn) })

	check("context timeout cancels a long query (pool, default handler)", func() error { return cancelPool() })
	check("context timeout cancels a long query (CancelRequest handler, same conn reused)", func() error { return cancelRequest() })

	for _, e := range []struct{ sql, code string }{
		{"SELEC 1", "42601"},
		{"SELECT * FROM pgx_nope", "42P01"},
		{"SELECT nope FROM pgx_t", "42703"},
		{"SELECT 1/0", "22012"},
		{"SELECT v/0.0 FROM pgx_t", "22012"},
	} {
		e := e
		for _, m := range []struct {
			name string
			mode pgx.QueryExecMode
		}{{"extended", pgx.QueryExecModeCacheStatement}, {"simple", pgx.QueryExecModeSimpleProtocol}} {
			check(fmt.Sprintf("SQLSTATE %s for %q (%s)", e.code, e.sql, m.name), func() error {
				var x any
				err := conn.QueryRow(ctx, e.sql, m.mode).Scan(&x)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) {
					return fmt.Errorf("want *pgconn.PgError %s, got %v", e.code, err)
				}
				if pe.Code != e.code {
					return fmt.Errorf("SQLSTATE %s, want %s (%s)", pe.Code, e.code, pe.Message)
				}
				if pe.Severity != "ERROR" {
					return fmt.Errorf("severity %q", pe.Severity)
				}
				return nil
			})
		}
	}
	check("connection usable after errors", func() error {
		n, err := count(conn, "SELECT count(*) FROM pgx_t")
		if err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("count %d, want 3", n)
		}
		return nil
	})

	check("stream 2,000,000 rows row by row", func() error { return stream(conn) })

	for name := range knownGaps {
		if !ran[name] {
			failures = append(failures, name+": in knownGaps but never ran (renamed?)")
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(os.Stderr, "\n%d check(s) failed:\n", len(failures))
		for _, f := range failures {
			fmt.Fprintln(os.Stderr, "  - "+f)
		}
		os.Exit(1)
	}
	fmt.Println("ok")
}

var tsParam = time.Date(2026, 3, 4, 5, 6, 7, 250000000, time.UTC)

// anyInt: an integer result of either width. PostgreSQL types `$1 + 1` as
// int4 (an integer literal is int4); Kiln's integer literals are int8.
type anyInt int64

// paramCases: one parameter each, whose type the server infers from a cast
// (the statement is Parsed without parameter types, as pgx does).
var paramCases = []struct {
	name string
	sql  string
	arg  any
	want any
}{
	{"int32 as $1::INT", "SELECT $1::INT", int32(-7), int32(-7)},
	{"int64 as $1::BIGINT", "SELECT $1::BIGINT", int64(9007199254740993), int64(9007199254740993)},
	{"float64 as $1::DOUBLE", "SELECT $1::DOUBLE", 3.25, 3.25},
	{"string as $1::VARCHAR", "SELECT $1::VARCHAR", "it's ü", "it's ü"},
	{"time.Time as $1::TIMESTAMP", "SELECT $1::TIMESTAMP", tsParam, tsParam},
	{"nil as $1::BIGINT", "SELECT $1::BIGINT", nil, nil},
	{"int64 in $1 + 1", "SELECT $1 + 1", int64(41), anyInt(42)},
	{"nil in $1 IS NULL", "SELECT $1::VARCHAR IS NULL", nil, true},
}

// paramRoundTrip sends one parameter and compares what comes back. In the
// extended modes that Parse without parameter types (CacheStatement, the
// default, and DescribeExec) pgx sends the parameter in binary when the
// ParameterDescription names a type it knows (int4, int8, float8,
// timestamp); QueryExecModeSimpleProtocol writes it into the SQL text as a
// quoted literal ('41').
func paramRoundTrip(c *pgx.Conn, sql string, arg, want any) error {
	var got any
	if err := c.QueryRow(ctx, sql, arg).Scan(&got); err != nil {
		return err
	}
	ok := false
	switch w := want.(type) {
	case time.Time:
		g, isT := got.(time.Time)
		ok = isT && g.Equal(w)
	case nil:
		ok = got == nil
	case anyInt:
		switch g := got.(type) {
		case int32:
			ok = int64(g) == int64(w)
		case int64:
			ok = g == int64(w)
		}
	default:
		ok = fmt.Sprintf("%T %v", got, got) == fmt.Sprintf("%T %v", want, want)
	}
	if !ok {
		return fmt.Errorf("got %T %v, want %T %v", got, got, want, want)
	}
	return nil
}

// paramsInsert writes a row with parameters of every type, NULLs
// included, and reads it back.
func paramsInsert(c *pgx.Conn, key int64) error {
	_, err := c.Exec(ctx, "INSERT INTO pgx_ins VALUES ($1, $2, $3, $4), ($5, $6, $7, $8)",
		tsParam, "x", 0.5, key, tsParam, nil, nil, key+1000)
	if err != nil {
		return fmt.Errorf("INSERT: %w", err)
	}
	var (
		ts   time.Time
		host *string
		v    *float64
		n    int64
	)
	rows, err := c.Query(ctx, "SELECT ts, host, v, n FROM pgx_ins WHERE n = $1 OR n = $2 ORDER BY n", key, key+1000)
	if err != nil {
		return err
	}
	var got []string
	_, err = pgx.ForEachRow(rows, []any{&ts, &host, &v, &n}, func() error {
		h, vv := "NULL", "NULL"
		if host != nil {
			h = *host
		}
		if v != nil {
			vv = fmt.Sprint(*v)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d", ts.Format(time.RFC3339Nano), h, vv, n))
		return nil
	})
	if err != nil {
		return err
	}
	want := fmt.Sprintf("[2026-03-04T05:06:07.25Z x 0.5 %d 2026-03-04T05:06:07.25Z NULL NULL %d]", key, key+1000)
	if fmt.Sprint(got) != want {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

func paramsWhere(c *pgx.Conn) error {
	rows, err := c.Query(ctx,
		"SELECT ts, host, v, n FROM pgx_t WHERE ts >= $1 AND n >= $2 AND v > $3 AND host <> $4 AND n < $5 ORDER BY ts",
		t0, int64(1), -10.0, "zzz", int32(100))
	if err != nil {
		return err
	}
	type row struct {
		ts   time.Time
		host string
		v    float64
		n    int64
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.ts, &r.host, &r.v, &r.n); err != nil {
			rows.Close()
			return err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	want := []row{
		{t0, "a", 1.5, 1},
		{t0.Add(1250 * time.Millisecond), "b", -2.25, 2},
	}
	if len(got) != len(want) {
		return fmt.Errorf("got %d rows %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if !got[i].ts.Equal(want[i].ts) || got[i].host != want[i].host || got[i].v != want[i].v || got[i].n != want[i].n {
			return fmt.Errorf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
		if got[i].ts.Location() != time.UTC {
			return fmt.Errorf("TIMESTAMP scanned with location %v, want UTC", got[i].ts.Location())
		}
	}
	return nil
}

func nullsIntoPointers(c *pgx.Conn) error {
	var (
		ts   *time.Time
		host *string
		v    *float64
		n    *int64
	)
	err := c.QueryRow(ctx, "SELECT ts, host, v, n FROM pgx_t WHERE host IS NULL").Scan(&ts, &host, &v, &n)
	if err != nil {
		return err
	}
	if ts == nil || !ts.Equal(t0.Add(2*time.Second)) || host != nil || v != nil || n != nil {
		return fmt.Errorf("got %v %v %v %v", ts, host, v, n)
	}
	// Non-NULL values into pointers too.
	err = c.QueryRow(ctx, "SELECT ts, host, v, n FROM pgx_t WHERE n = $1", int64(2)).Scan(&ts, &host, &v, &n)
	if err != nil {
		return err
	}
	if host == nil || *host != "b" || v == nil || *v != -2.25 || n == nil || *n != 2 {
		return fmt.Errorf("got %v %v %v %v", ts, host, v, n)
	}
	return nil
}

func transactions(c *pgx.Conn) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("Begin: %w", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := tx.Exec(ctx, "INSERT INTO pgx_tx VALUES ($1, $2, $3, $4)", t0.Add(time.Duration(i)*time.Second), "rb", float64(i), int64(i)); err != nil {
			tx.Rollback(ctx)
			return fmt.Errorf("INSERT in tx: %w", err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("Rollback: %w", err)
	}
	n, err := count(c, "SELECT count(*) FROM pgx_tx")
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("after Rollback count %d, want 0", n)
	}

	tx, err = c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("Begin: %w", err)
	}
	for i := 0; i < 5; i++ {
		if _, err := tx.Exec(ctx, "INSERT INTO pgx_tx VALUES ($1, $2, $3, $4)", t0.Add(time.Duration(i)*time.Second), "cm", float64(i), int64(i)); err != nil {
			tx.Rollback(ctx)
			return fmt.Errorf("INSERT in tx: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("Commit: %w", err)
	}
	var sum int64
	if err := c.QueryRow(ctx, "SELECT count(*), sum(n) FROM pgx_tx WHERE host = 'cm'").Scan(&n, &sum); err != nil {
		return err
	}
	if n != 5 || sum != 10 {
		return fmt.Errorf("after Commit count %d sum %d, want 5 10", n, sum)
	}

	// pgx.BeginFunc: an error returned from the function rolls back.
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO pgx_tx VALUES ($1, 'bf', 0, 0)", t0); err != nil {
			return err
		}
		return errors.New("undo")
	})
	if err == nil || err.Error() != "undo" {
		return fmt.Errorf("BeginFunc: %v", err)
	}
	n, err = count(c, "SELECT count(*) FROM pgx_tx")
	if err != nil {
		return err
	}
	if n != 5 {
		return fmt.Errorf("after BeginFunc rollback count %d, want 5", n)
	}
	return nil
}

func copyFrom() error {
	c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	const N = 10000
	rows := make([][]any, N)
	for i := 0; i < N; i++ {
		var host any = fmt.Sprintf("h%d", i%7)
		if i%10 == 0 {
			host = nil
		}
		rows[i] = []any{t0.Add(time.Duration(i) * time.Millisecond), host, float64(i) / 4, int64(i)}
	}
	n, err := c.CopyFrom(ctx, pgx.Identifier{"pgx_copy"}, []string{"ts", "host", "v", "n"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("CopyFrom: %w", err)
	}
	if n != N {
		return fmt.Errorf("CopyFrom reported %d rows, want %d", n, N)
	}
	var cnt, sum, nulls int64
	err = c.QueryRow(ctx, "SELECT count(*), sum(n), count(*) - count(host) FROM pgx_copy").Scan(&cnt, &sum, &nulls)
	if err != nil {
		return err
	}
	if cnt != N || sum != N*(N-1)/2 || nulls != N/10 {
		return fmt.Errorf("after CopyFrom count %d sum %d nulls %d", cnt, sum, nulls)
	}
	return nil
}

func batch(c *pgx.Conn) error {
	b := &pgx.Batch{}
	for i := 0; i < 10; i++ {
		b.Queue("INSERT INTO pgx_batch VALUES ($1, $2, $3, $4)", t0.Add(time.Duration(i)*time.Minute), fmt.Sprintf("b%d", i), float64(i)*0.5, int64(i))
	}
	b.Queue("SELECT count(*), sum(n) FROM pgx_batch")
	b.Queue("SELECT host FROM pgx_batch WHERE n = $1", int64(3))
	b.Queue("SELECT n FROM pgx_batch ORDER BY n DESC LIMIT 3")
	br := c.SendBatch(ctx, b)
	for i := 0; i < 10; i++ {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return fmt.Errorf("batch INSERT %d: %w", i, err)
		}
		if tag.RowsAffected() != 1 || !tag.Insert() {
			br.Close()
			return fmt.Errorf("batch INSERT %d: tag %q", i, tag.String())
		}
	}
	var cnt, sum int64
	if err := br.QueryRow().Scan(&cnt, &sum); err != nil {
		br.Close()
		return fmt.Errorf("batch count: %w", err)
	}
	// The batch is one implicit transaction in PostgreSQL (one Sync):
	// its INSERTs are visible to its later SELECTs.
	if cnt != 10 || sum != 45 {
		br.Close()
		return fmt.Errorf("batch SELECT after its INSERTs: count %d sum %d, want 10 45", cnt, sum)
	}
	var host string
	if err := br.QueryRow().Scan(&host); err != nil {
		br.Close()
		return fmt.Errorf("batch host: %w", err)
	}
	if host != "b3" {
		br.Close()
		return fmt.Errorf("batch host %q", host)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return err
	}
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		br.Close()
		return err
	}
	if fmt.Sprint(ns) != "[9 8 7]" {
		br.Close()
		return fmt.Errorf("batch top n %v", ns)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("batch Close: %w", err)
	}
	n, err := count(c, "SELECT count(*) FROM pgx_batch")
	if err != nil {
		return err
	}
	if n != 10 {
		return fmt.Errorf("after batch count %d", n)
	}
	return nil
}

func batchTx(c *pgx.Conn) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for i := 0; i < 5; i++ {
		b.Queue("INSERT INTO pgx_batch VALUES ($1, 'tx', 0, $2)", t0.Add(time.Hour), int64(100+i))
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		tx.Rollback(ctx)
		return fmt.Errorf("batch in tx: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("Commit: %w", err)
	}
	n, err := count(c, "SELECT count(*) FROM pgx_batch WHERE host = 'tx'")
	if err != nil {
		return err
	}
	if n != 5 {
		return fmt.Errorf("count %d, want 5", n)
	}
	return nil
}

const long = "SELECT count(*) FROM generate_series(1, 10000000000)"

func timedOut(err error) error {
	if err == nil {
		return errors.New("long query was not stopped")
	}
	if !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded) {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "57014" {
			return nil
		}
		return fmt.Errorf("want a timeout error, got %s", describe(err))
	}
	return nil
}

// The default handler (DeadlineContextWatcherHandler) closes the socket;
// pgxpool then replaces the connection.
func cancelPool() error {
	cfg, err := pgxpool.ParseConfig(dsn())
	if err != nil {
		return err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	c2, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	var n int64
	err = pool.QueryRow(c2, long).Scan(&n)
	el := time.Since(start)
	if e := timedOut(err); e != nil {
		return e
	}
	// Generous: the query would run for hours; CI machines are slow.
	if el > 5*time.Second {
		return fmt.Errorf("took %v to return", el)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pgx_t").Scan(&n); err != nil {
		return fmt.Errorf("pool after cancel: %w", err)
	}
	if n != 3 {
		return fmt.Errorf("pool after cancel: count %d", n)
	}
	return nil
}

// With CancelRequestContextWatcherHandler pgx sends a CancelRequest and
// the connection stays open: the server must answer 57014 and the same
// connection must keep working.
func cancelRequest() error {
	cfg, err := pgx.ParseConfig(dsn())
	if err != nil {
		return err
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 0, DeadlineDelay: 10 * time.Second}
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for round := 0; round < 2; round++ {
		c2, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		var n int64
		err = c.QueryRow(c2, long).Scan(&n)
		cancel()
		el := time.Since(start)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" {
			return fmt.Errorf("round %d: want 57014 from CancelRequest, got %s (after %v)", round, describe(err), el)
		}
		// Generous: the query would run for hours; CI machines are slow.
		if el > 5*time.Second {
			return fmt.Errorf("round %d: took %v", round, el)
		}
		if c.IsClosed() {
			return fmt.Errorf("round %d: connection closed after cancel", round)
		}
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pgx_t").Scan(&n); err != nil {
			return fmt.Errorf("round %d: same conn after cancel: %w", round, err)
		}
		if n != 3 {
			return fmt.Errorf("round %d: count %d", round, n)
		}
	}
	return nil
}

func stream(c *pgx.Conn) error {
	const N = 2000000
	start := time.Now()
	rows, err := c.Query(ctx, "SELECT * FROM generate_series(1, 2000000)")
	if err != nil {
		return err
	}
	defer rows.Close()
	var seen, sum int64
	var first time.Duration
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return err
		}
		if seen == 0 {
			first = time.Since(start)
		}
		seen++
		sum += v
		if v != seen {
			return fmt.Errorf("row %d is %d", seen, v)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("after %d rows: %w", seen, err)
	}
	if seen != N || sum != N*(N+1)/2 {
		return fmt.Errorf("got %d rows sum %d", seen, sum)
	}
	if tag := rows.CommandTag(); !strings.HasPrefix(tag.String(), "SELECT") || tag.RowsAffected() != N {
		return fmt.Errorf("command tag %q", tag.String())
	}
	logf("     (first row after %v, %d rows in %v)", first.Round(time.Millisecond), seen, time.Since(start).Round(time.Millisecond))
	return nil
}
