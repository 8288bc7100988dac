package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// queryTimeout bounds one query, so a stuck one counts as an error.
const queryTimeout = 60 * time.Second

// A client connection of one protocol.
type conn interface {
	do(ctx context.Context, c call) error
	close()
}

type pgConn struct {
	c      *pgx.Conn
	simple bool
	bounds bounds
}

// connectPg: a pgx connection; simple: QueryExecModeSimpleProtocol (the
// values are inlined by the caller), else the default mode (statements
// prepared and cached per connection). cubesOff: SET kiln.cubes = off.
func connectPg(ctx context.Context, url string, simple, cubesOff bool) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if simple {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cubesOff {
		if _, err := c.Exec(ctx, "SET kiln.cubes = off"); err != nil {
			c.Close(ctx)
			return nil, fmt.Errorf("SET kiln.cubes = off: %w", err)
		}
	}
	return c, nil
}

func (p *pgConn) do(ctx context.Context, c call) error {
	var rows pgx.Rows
	var err error
	if p.simple {
		rows, err = p.c.Query(ctx, c.inline(p.bounds))
	} else {
		rows, err = p.c.Query(ctx, c.sql(), c.args()...)
	}
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

func (p *pgConn) close() { p.c.Close(context.Background()) }

type httpConn struct {
	client *http.Client
	url    string
}

func (h *httpConn) do(ctx context.Context, c call) error {
	body, _ := json.Marshal(map[string]any{"sql": c.sql(), "params": c.jsonParams()})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func (h *httpConn) close() {}

func openConn(ctx context.Context, protocol, url string, cubesOff bool, hc *http.Client) (conn, error) {
	switch protocol {
	case "pg", "pg-simple", "pg-typed", "pg-superset":
		simple := protocol != "pg"
		c, err := connectPg(ctx, url, simple, cubesOff)
		if err != nil {
			return nil, err
		}
		b := map[string]bounds{"pg-typed": typedBounds, "pg-superset": supersetBounds}[protocol]
		return &pgConn{c: c, simple: simple, bounds: b}, nil
	case "http":
		u := httpBase(url) + "/v1/sql?format=ndjson"
		if cubesOff {
			u += "&cubes=off"
		}
		return &httpConn{client: hc, url: u}, nil
	}
	return nil, fmt.Errorf("unknown protocol %q (pg, pg-simple, pg-typed, pg-superset, http)", protocol)
}

type result struct {
	QPS     float64 `json:"qps"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Errors  int64   `json:"errors"`
	Queries int64   `json:"queries"`
}

// run: `clients` closed-loop clients for `dur`; a query counts if it ends
// before the deadline.
func run(protocol, url string, clients int, dur time.Duration, seed uint64, cubesOff bool) (result, error) {
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients * 2,
		IdleConnTimeout:     time.Minute,
	}}
	conns := make([]conn, clients)
	for i := range conns {
		c, err := openConn(ctx, protocol, url, cubesOff, hc)
		if err != nil {
			for _, o := range conns[:i] {
				o.close()
			}
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()

	var errs atomic.Int64
	var printed atomic.Int64
	lat := make([][]float64, clients)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := clientRng(seed, i)
			for time.Now().Before(deadline) {
				c := nextCall(r)
				qctx, cancel := context.WithTimeout(ctx, queryTimeout)
				t0 := time.Now()
				err := conns[i].do(qctx, c)
				t1 := time.Now()
				cancel()
				if t1.After(deadline) {
					break
				}
				if err != nil {
					errs.Add(1)
					if printed.Add(1) <= 5 {
						fmt.Fprintf(os.Stderr, "error: %s: %v\n", c, err)
					}
					// A broken pg connection stays broken: reopen it.
					if p, ok := conns[i].(*pgConn); ok && p.c.IsClosed() {
						if n, err := openConn(ctx, protocol, url, cubesOff, hc); err == nil {
							conns[i] = n
						}
					}
					continue
				}
				lat[i] = append(lat[i], float64(t1.Sub(t0).Microseconds())/1000)
			}
		}(i)
	}
	wg.Wait()
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Float64s(all)
	return result{
		QPS:     round(float64(len(all))/dur.Seconds(), 1),
		P50:     round(percentile(all, 0.50), 2),
		P99:     round(percentile(all, 0.99), 2),
		Errors:  errs.Load(),
		Queries: int64(len(all)),
	}, nil
}

// percentile: nearest rank of sorted values (0 when there are none).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

func round(x float64, digits int) float64 {
	m := math.Pow(10, float64(digits))
	return math.Round(x*m) / m
}
