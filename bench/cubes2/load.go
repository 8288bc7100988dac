package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"time"
)

// The table. A sort key (--sort-key) is appended as WITH (sort_key = ...).
const createTable = `CREATE TABLE visits (ts TIMESTAMP NOT NULL, site_id BIGINT NOT NULL, country VARCHAR NOT NULL, device VARCHAR NOT NULL, session_id BIGINT NOT NULL, latency_ms BIGINT NOT NULL)`

type row struct {
	tsMs    int64 // ms since the epoch
	site    int64
	country uint8
	device  uint8
	session int64
	latency int64
}

// cumulative: the running sums of weights, for weighted picks.
func cumulative(w []float64) []float64 {
	c := make([]float64, len(w))
	s := 0.0
	for i, x := range w {
		s += x
		c[i] = s
	}
	return c
}

func pick(r *rng, cum []float64) int {
	u := r.float() * cum[len(cum)-1]
	i := sort.SearchFloat64s(cum, u)
	if i >= len(cum) {
		i = len(cum) - 1
	}
	return i
}

// perm48: a bijection of [0, 2^48) (odd multiplications and xorshifts),
// so session ids are scrambled yet distinct.
func perm48(x uint64) int64 {
	const m = (uint64(1) << 48) - 1
	x &= m
	x = (x * 0x5deece66d5) & m
	x ^= x >> 21
	x = (x * 0x9e3779b97f4b) & m // odd
	x ^= x >> 17
	x = (x * 0xd6e8feb86659) & m
	return int64(x)
}

// generator: the data, day by day in time order.
type generator struct {
	r        *rng
	siteOf   []int64 // site rank -> site_id
	siteCum  []float64
	ctryCum  []float64
	devCum   []float64
	hourCum  []float64
	sessions uint64
	seedOff  uint64
}

func newGenerator(seed uint64) *generator {
	g := &generator{r: &rng{state: seed ^ 0x5eed_c0be_5000_0002}, seedOff: seed * 0x9e3779b9}
	// 60 sites, zipf-like (s = 1.1) over a seeded permutation of the ids.
	g.siteOf = make([]int64, numSites)
	for i := range g.siteOf {
		g.siteOf[i] = int64(i + 1)
	}
	for i := numSites - 1; i > 0; i-- {
		j := g.r.intn(i + 1)
		g.siteOf[i], g.siteOf[j] = g.siteOf[j], g.siteOf[i]
	}
	w := make([]float64, numSites)
	for k := range w {
		w[k] = 1 / math.Pow(float64(k+1), 1.1)
	}
	g.siteCum = cumulative(w)
	// 25 countries, zipf-like (s = 0.9) in list order.
	w = make([]float64, len(countries))
	for k := range w {
		w[k] = 1 / math.Pow(float64(k+1), 0.9)
	}
	g.ctryCum = cumulative(w)
	g.devCum = cumulative([]float64{0.45, 0.40, 0.10, 0.05})
	// Diurnal traffic: lowest around 04:00 UTC, highest around 16:00.
	w = make([]float64, 24)
	for h := range w {
		w[h] = 0.65 - 0.35*math.Cos(2*math.Pi*float64(h-4)/24)
	}
	g.hourCum = cumulative(w)
	return g
}

var deviceLatency = []float64{1.0, 1.6, 1.3, 1.1}

// day: `n` rows of day `d` (0-based), sorted by time: sessions of 1-30
// events on one site, one country and one device, within the day.
func (g *generator) day(d int, n int) []row {
	r := g.r
	rows := make([]row, 0, n)
	dayStart := dataStart.AddDate(0, 0, d).UnixMilli()
	for len(rows) < n {
		site := g.siteOf[pick(r, g.siteCum)]
		ctry := pick(r, g.ctryCum)
		dev := pick(r, g.devCum)
		events := 1 + int(-math.Log(1-r.float())*4.5)
		if events > 30 {
			events = 30
		}
		if left := n - len(rows); events > left {
			events = left
		}
		session := perm48(g.sessions + g.seedOff)
		g.sessions++
		t := int64(pick(r, g.hourCum))*3_600_000 + int64(r.intn(3_600_000))
		base := 4.3 + 0.02*float64(ctry) // median ~75 ms, slower far down the list
		for e := 0; e < events; e++ {
			if e > 0 {
				t += 1000 + int64(-math.Log(1-r.float())*90_000) // ~90 s between events
			}
			if t >= dayMs {
				t = dayMs - 1 - int64(r.intn(1000))
			}
			lat := math.Exp(base+0.6*r.normal()) * deviceLatency[dev]
			if r.float() < 0.005 {
				lat *= 5 + 15*r.float() // outliers
			}
			ms := int64(lat)
			if ms < 1 {
				ms = 1
			}
			rows = append(rows, row{dayStart + t, site, uint8(ctry), uint8(dev), session, ms})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.tsMs != b.tsMs {
			return cmpI(a.tsMs, b.tsMs)
		}
		if a.session != b.session {
			return cmpI(a.session, b.session)
		}
		return cmpI(a.latency, b.latency)
	})
	return rows
}

func cmpI(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dayTargets: rows per day summing to n; weekends carry 75% of a
// weekday's traffic, and traffic grows 1% a day.
func dayTargets(n int) []int {
	w := make([]float64, numDays)
	sum := 0.0
	for d := range w {
		w[d] = 1 + 0.01*float64(d)
		switch dataStart.AddDate(0, 0, d).Weekday() {
		case time.Saturday, time.Sunday:
			w[d] *= 0.75
		}
		sum += w[d]
	}
	t := make([]int, numDays)
	total := 0
	for d := range w {
		t[d] = int(float64(n) * w[d] / sum)
		total += t[d]
	}
	t[numDays-1] += n - total
	return t
}

func postSQL(client *http.Client, base, sql string) ([]byte, error) {
	resp, err := client.Post(base+"/v1/sql", "application/sql", bytes.NewBufferString(sql))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d: %s", sql, resp.StatusCode, body)
	}
	return body, nil
}

func load(httpAddr string, n int, seed uint64, batch int, sortKey string) error {
	base := httpBase(httpAddr)
	client := &http.Client{Timeout: 10 * time.Minute}
	ddl := createTable
	if sortKey != "" {
		ddl += fmt.Sprintf(" WITH (sort_key = %s)", quote(sortKey))
	}
	if _, err := postSQL(client, base, ddl); err != nil {
		return err
	}
	started := time.Now()
	g := newGenerator(seed)
	var buf bytes.Buffer
	pending := 0
	written := 0
	send := func() error {
		if pending == 0 {
			return nil
		}
		if err := postRows(client, base, buf.Bytes(), pending); err != nil {
			return err
		}
		written += pending
		pending = 0
		buf.Reset()
		return nil
	}
	header := func() { buf.WriteString(csvHeader) }
	header()
	var line []byte
	for d, target := range dayTargets(n) {
		for _, x := range g.day(d, target) {
			line = appendCSV(line[:0], x)
			buf.Write(line)
			pending++
			if pending == batch {
				if err := send(); err != nil {
					return err
				}
				header()
			}
		}
	}
	if err := send(); err != nil {
		return err
	}
	body, err := postSQL(client, base, "SELECT count(*) FROM visits")
	if err != nil {
		return err
	}
	var res struct{ Rows [][]int64 }
	if err := json.Unmarshal(body, &res); err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return fmt.Errorf("count: unexpected answer %s", body)
	}
	if got := res.Rows[0][0]; got != int64(n) {
		return fmt.Errorf("count: the table has %d rows, %d were written", got, n)
	}
	fmt.Fprintf(os.Stderr, "loaded %d rows (%d sessions) in %.1f s; count(*) = %d\n",
		written, g.sessions, time.Since(started).Seconds(), n)
	return nil
}

// postRows: writes a CSV body of `rows` visits and checks that all of
// them were acknowledged.
func postRows(client *http.Client, base string, body []byte, rows int) error {
	resp, err := client.Post(base+"/v1/write/visits?timestamp_unit=ms", "text/csv", bytes.NewReader(body))
	if err != nil {
		return err
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("write: HTTP %d: %s", resp.StatusCode, answer)
	}
	var ack struct{ Rows int }
	if err := json.Unmarshal(answer, &ack); err != nil || ack.Rows != rows {
		return fmt.Errorf("write: expected %d rows acknowledged, got %s", rows, answer)
	}
	return nil
}

const csvHeader = "ts,site_id,country,device,session_id,latency_ms\n"

// appendCSV: one row as a CSV line.
func appendCSV(line []byte, x row) []byte {
	line = strconv.AppendInt(line, x.tsMs, 10)
	line = append(line, ',')
	line = strconv.AppendInt(line, x.site, 10)
	line = append(line, ',')
	line = append(line, countries[x.country]...)
	line = append(line, ',')
	line = append(line, devices[x.device]...)
	line = append(line, ',')
	line = strconv.AppendInt(line, x.session, 10)
	line = append(line, ',')
	line = strconv.AppendInt(line, x.latency, 10)
	return append(line, '\n')
}

// stream: a steady stream of new visits for dur, at most rate rows/s in
// requests of batch rows, each request one day of the last `days` days of
// the data (live traffic lands on recent days). Prints the rows/s written.
func stream(httpAddr string, rate, batch int, dur time.Duration, seed uint64, days int) error {
	base := httpBase(httpAddr)
	client := &http.Client{Timeout: time.Minute}
	g := newGenerator(seed)
	every := time.Duration(float64(time.Second) * float64(batch) / float64(rate))
	started := time.Now()
	next := started
	written := 0
	var buf bytes.Buffer
	var line []byte
	for i := 0; time.Since(started) < dur; i++ {
		time.Sleep(time.Until(next))
		if next = next.Add(every); next.Before(time.Now()) {
			next = time.Now() // behind: no burst to catch up
		}
		buf.Reset()
		buf.WriteString(csvHeader)
		for _, x := range g.day(numDays-1-i%days, batch) {
			line = appendCSV(line[:0], x)
			buf.Write(line)
		}
		if err := postRows(client, base, buf.Bytes(), batch); err != nil {
			return err
		}
		written += batch
	}
	fmt.Printf("{\"rows_per_sec\":%.0f}\n", float64(written)/time.Since(started).Seconds())
	return nil
}

func httpBase(addr string) string {
	if len(addr) >= 7 && (addr[:7] == "http://" || (len(addr) >= 8 && addr[:8] == "https://")) {
		return trimSlash(addr)
	}
	return "http://" + trimSlash(addr)
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}
