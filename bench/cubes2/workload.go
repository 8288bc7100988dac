package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The data's shape, shared by the generator (load) and the query
// parameters (run, check).
const (
	numDays  = 30
	numSites = 60
	dayMs    = int64(86_400_000)
)

// dataStart: the first day of the data, 2026-10-01 00:00:00 (naive UTC).
var dataStart = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

var countries = []string{
	"US", "DE", "GB", "FR", "IN", "BR", "JP", "CA", "ES", "IT",
	"NL", "PL", "SE", "MX", "AU", "KR", "TR", "AR", "CH", "BE",
	"AT", "NO", "DK", "FI", "PT",
}

var devices = []string{"desktop", "mobile", "tablet", "tv"}

// rng: SplitMix64, the generator of both the data and the parameters.
type rng struct{ state uint64 }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn: uniform in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// float: uniform in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// normal: a standard normal draw (Box-Muller, one of the pair).
func (r *rng) normal() float64 {
	u1 := 1 - r.float() // (0, 1]
	u2 := r.float()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// clientRng: one client's parameter stream (the state the dashboard
// workload's generator starts from: seed * 1_000_003 + client).
func clientRng(seed uint64, client int) *rng {
	return &rng{state: seed*1_000_003 + uint64(client)}
}

// A query template. Placeholders: $1 site_id (BIGINT), $2 range start and
// $3 range end (TIMESTAMP, day-aligned, end exclusive), $4 country
// (VARCHAR) when the instance has one. {country} in the text is replaced
// by ` AND country = $4` or nothing.
type template struct {
	name string
	sql  string
	// country: the share of instances that filter one country (1 = all,
	// 0 = none).
	country float64
	// oneDay: the range is one day (the hourly chart).
	oneDay bool
}

var templates = []template{
	{
		name: "sessions_by_country",
		sql: `SELECT country, count(DISTINCT session_id) AS sessions
FROM visits
WHERE site_id = $1 AND ts >= $2 AND ts < $3
GROUP BY country
ORDER BY 2 DESC, 1
LIMIT 10`,
	},
	{
		name: "device_daily",
		sql: `SELECT date_trunc('day', ts) AS day, device, count(*) AS events, avg(latency_ms) AS avg_latency_ms
FROM visits
WHERE site_id = $1 AND ts >= $2 AND ts < $3{country}
GROUP BY date_trunc('day', ts), device
ORDER BY day, device`,
		country: 0.5,
	},
	{
		name: "daily_sessions",
		sql: `SELECT date_trunc('day', ts) AS day, count(DISTINCT session_id) AS sessions
FROM visits
WHERE site_id = $1 AND ts >= $2 AND ts < $3{country}
GROUP BY date_trunc('day', ts)
ORDER BY day`,
		country: 0.3,
	},
	{
		name: "mobile_latency",
		sql: `SELECT country, max(latency_ms) AS max_latency_ms, sum(latency_ms) AS total_latency_ms
FROM visits
WHERE site_id = $1 AND device = 'mobile' AND ts >= $2 AND ts < $3
GROUP BY country
ORDER BY country`,
	},
	{
		name: "site_country_totals",
		sql: `SELECT count(*) AS events, count(DISTINCT session_id) AS sessions
FROM visits
WHERE site_id = $1 AND country = $4 AND ts >= $2 AND ts < $3`,
		country: 1,
	},
	{
		name: "hourly_events",
		sql: `SELECT date_trunc('hour', ts) AS hour, count(*) AS events
FROM visits
WHERE site_id = $1 AND ts >= $2 AND ts < $3
GROUP BY date_trunc('hour', ts)
ORDER BY hour`,
		oneDay: true,
	},
}

// A call: one template instance.
type call struct {
	tmpl     int
	site     int64
	from, to time.Time
	country  string // "" = no country filter
}

// nextCall draws a template and its parameters: a site among 60, a day
// range of 2-12 days (1 day for the hourly chart) at a random start, and
// for some templates a country.
func nextCall(r *rng) call {
	t := r.intn(len(templates))
	c := call{tmpl: t, site: int64(1 + r.intn(numSites))}
	days := 2 + r.intn(11)
	if templates[t].oneDay {
		days = 1
	}
	start := r.intn(numDays - days + 1)
	c.from = dataStart.AddDate(0, 0, start)
	c.to = dataStart.AddDate(0, 0, start+days)
	// Always draw, so the stream does not depend on the template's share.
	u := r.float()
	k := r.intn(len(countries))
	if u < templates[t].country {
		c.country = countries[k]
	}
	return c
}

func (c call) template() template { return templates[c.tmpl] }

// sql: the text with placeholders.
func (c call) sql() string {
	f := ""
	if c.country != "" {
		f = " AND country = $4"
	}
	return strings.ReplaceAll(c.template().sql, "{country}", f)
}

// args: the extended protocol's parameters.
func (c call) args() []any {
	a := []any{c.site, c.from, c.to}
	if c.country != "" {
		a = append(a, c.country)
	}
	return a
}

// jsonParams: the HTTP API's parameters (timestamps as text).
func (c call) jsonParams() []any {
	a := []any{c.site, tsText(c.from), tsText(c.to)}
	if c.country != "" {
		a = append(a, c.country)
	}
	return a
}

// How the range's bounds are written into a text: as strings (Grafana),
// typed strings (TIMESTAMP '...', Tableau and Looker) or strings parsed by
// a template (Superset on PostgreSQL).
type bounds int

const (
	plainBounds bounds = iota
	typedBounds
	supersetBounds
)

// inline: the text with the values written in, as a BI tool sends it over
// the simple protocol, its bounds written as b says.
func (c call) inline(b bounds) string {
	ts := func(t time.Time) string {
		switch b {
		case typedBounds:
			return "TIMESTAMP " + quote(tsText(t))
		case supersetBounds:
			s := t.UTC().Format("2006-01-02 15:04:05.000000")
			return "TO_TIMESTAMP(" + quote(s) + ", 'YYYY-MM-DD HH24:MI:SS.US')"
		}
		return quote(tsText(t))
	}
	s := c.sql()
	s = strings.ReplaceAll(s, "$4", quote(c.country))
	s = strings.ReplaceAll(s, "$3", ts(c.to))
	s = strings.ReplaceAll(s, "$2", ts(c.from))
	return strings.ReplaceAll(s, "$1", fmt.Sprint(c.site))
}

func (c call) String() string {
	s := fmt.Sprintf("%s site=%d [%s, %s)", c.template().name, c.site, tsText(c.from), tsText(c.to))
	if c.country != "" {
		s += " country=" + c.country
	}
	return s
}

func tsText(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
