package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// check: n template instances answered with cubes on (extended and simple
// protocol) and off (extended), compared exactly (floats to 1e-9
// relative). First, EXPLAIN of each template (values inlined) must show a
// CubeScan with cubes on (when requireCube) and none with cubes off.
func check(url string, seed uint64, n int, requireCube bool) error {
	ctx := context.Background()
	on, err := connectPg(ctx, url, false, false)
	if err != nil {
		return err
	}
	defer on.Close(ctx)
	off, err := connectPg(ctx, url, false, true)
	if err != nil {
		return err
	}
	defer off.Close(ctx)
	failed := 0

	// EXPLAIN: one instance of each template, with and without a country.
	r := clientRng(seed, 1000)
	seen := map[string]bool{}
	for tries := 0; tries < 10000 && len(seen) < 2*len(templates); tries++ {
		c := nextCall(r)
		key := fmt.Sprintf("%d/%v", c.tmpl, c.country != "")
		if seen[key] {
			continue
		}
		seen[key] = true
		planOn, err := explain(ctx, on, c)
		if err != nil {
			return fmt.Errorf("EXPLAIN %s: %w", c, err)
		}
		planOff, err := explain(ctx, off, c)
		if err != nil {
			return fmt.Errorf("EXPLAIN (cubes off) %s: %w", c, err)
		}
		cube := cubeName(planOn)
		fmt.Fprintf(os.Stderr, "explain %-20s country=%-5v cube=%s\n", c.template().name, c.country != "", cube)
		if cube == "" && requireCube {
			fmt.Fprintf(os.Stderr, "NOT ANSWERED BY A CUBE: %s\n%s\n%s\n", c, c.inline(plainBounds), planOn)
			failed++
		}
		if cubeName(planOff) != "" {
			fmt.Fprintf(os.Stderr, "CUBE USED WITH kiln.cubes = off: %s\n%s\n", c, planOff)
			failed++
		}
	}

	answered0, err := answered(ctx, on)
	if err != nil {
		return err
	}
	r = clientRng(seed, 0)
	var rowsSeen, empty int
	for i := 0; i < n; i++ {
		c := nextCall(r)
		a, err := fetch(ctx, on, c.sql(), c.args()...)
		if err != nil {
			return fmt.Errorf("%s (cubes on): %w", c, err)
		}
		// Bounds written in each of the ways BI tools write them, in turn.
		s, err := fetchSimple(ctx, on, c.inline(bounds(i%3)))
		if err != nil {
			return fmt.Errorf("%s (cubes on, simple protocol): %w", c, err)
		}
		b, err := fetch(ctx, off, c.sql(), c.args()...)
		if err != nil {
			return fmt.Errorf("%s (cubes off): %w", c, err)
		}
		rowsSeen += len(b)
		if len(b) == 0 || (len(b) == 1 && isZero(b[0])) {
			empty++
		}
		if msg := compare(a, b); msg != "" {
			failed++
			fmt.Fprintf(os.Stderr, "MISMATCH %s: cubes on vs off: %s\n  on:  %v\n  off: %v\n", c, msg, a, b)
		}
		if msg := compare(s, b); msg != "" {
			failed++
			fmt.Fprintf(os.Stderr, "MISMATCH %s: cubes on (simple protocol) vs off: %s\n  on:  %v\n  off: %v\n", c, msg, s, b)
		}
	}
	answered1, err := answered(ctx, on)
	if err != nil {
		return err
	}
	// Each instance ran twice with cubes on (extended, simple protocol).
	if got := answered1 - answered0; got != int64(2*n) && requireCube {
		fmt.Fprintf(os.Stderr, "system.cubes counted %d queries answered, not %d\n", got, 2*n)
		failed++
	}
	fmt.Fprintf(os.Stderr, "check: %d instances, %d result rows, %d empty results, %d answered by cubes, %d failures\n",
		n, rowsSeen, empty, answered1-answered0, failed)
	if failed > 0 {
		return fmt.Errorf("%d failures", failed)
	}
	return nil
}

// answered: the queries all cubes answered so far (system.cubes).
func answered(ctx context.Context, c *pgx.Conn) (int64, error) {
	var n int64
	err := c.QueryRow(ctx, "SELECT CAST(coalesce(sum(queries_answered), 0) AS BIGINT) FROM system.cubes").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("system.cubes: %w", err)
	}
	return n, nil
}

func explain(ctx context.Context, c *pgx.Conn, call call) (string, error) {
	rows, err := fetchSimple(ctx, c, "EXPLAIN "+call.inline(plainBounds))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, r := range rows {
		for _, v := range r {
			fmt.Fprintf(&b, "%v\t", v)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// cubeName: the cube a plan reads (`CubeScan: cube=NAME`), or "".
func cubeName(plan string) string {
	i := strings.Index(plan, "CubeScan: cube=")
	if i < 0 {
		return ""
	}
	s := plan[i+len("CubeScan: cube="):]
	if j := strings.IndexAny(s, " ,\t\n"); j >= 0 {
		s = s[:j]
	}
	return s
}

func fetch(ctx context.Context, c *pgx.Conn, sql string, args ...any) ([][]any, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func fetchSimple(ctx context.Context, c *pgx.Conn, sql string) ([][]any, error) {
	return fetch(ctx, c, sql, pgx.QueryExecModeSimpleProtocol)
}

func isZero(r []any) bool {
	for _, v := range r {
		if v != nil && norm(v) != any(int64(0)) {
			return false
		}
	}
	return true
}

// norm: a value in a comparable form (integers int64, floats float64).
func norm(v any) any {
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case uint32:
		return int64(x)
	case float32:
		return float64(x)
	case time.Time:
		return x.UTC()
	}
	return v
}

// compare: "" when a and b are the same rows, else what differs first.
func compare(a, b [][]any) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d rows vs %d", len(a), len(b))
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return fmt.Sprintf("row %d: %d columns vs %d", i, len(a[i]), len(b[i]))
		}
		for j := range a[i] {
			x, y := norm(a[i][j]), norm(b[i][j])
			fx, okx := x.(float64)
			fy, oky := y.(float64)
			switch {
			case okx && oky:
				if fx != fy && math.Abs(fx-fy) > 1e-9*math.Max(math.Abs(fx), math.Abs(fy)) {
					return fmt.Sprintf("row %d column %d: %v vs %v", i, j, fx, fy)
				}
			case fmt.Sprintf("%T", x) != fmt.Sprintf("%T", y):
				return fmt.Sprintf("row %d column %d: %T %v vs %T %v", i, j, x, x, y, y)
			default:
				if tx, ok := x.(time.Time); ok {
					if !tx.Equal(y.(time.Time)) {
						return fmt.Sprintf("row %d column %d: %v vs %v", i, j, x, y)
					}
				} else if x != y {
					return fmt.Sprintf("row %d column %d: %v vs %v", i, j, x, y)
				}
			}
		}
	}
	return ""
}
