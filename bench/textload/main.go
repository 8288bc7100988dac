// textload: closed-loop clients sending one query text with its values
// written in over HTTP (POST /v1/sql, as BI tools' HTTP drivers do), each
// query with new values. Prints q/s, p50 and p99 latency and errors.
//
//	textload URL CLIENTS SECONDS TEMPLATE
//
// In TEMPLATE, {name:lo-hi} is replaced by a random integer in [lo, hi],
// and a later {name} by the same value, so a text can write one value
// twice (a range's end). Client i draws from seed i.
package main

import (
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

var field = regexp.MustCompile(`\{(\w+)(?::(\d+)-(\d+))?\}`)

// fill writes template's fields with values drawn from r.
func fill(template string, r *rand.Rand) string {
	drawn := map[string]string{}
	return field.ReplaceAllStringFunc(template, func(m string) string {
		g := field.FindStringSubmatch(m)
		if g[2] == "" {
			return drawn[g[1]]
		}
		lo, _ := strconv.Atoi(g[2])
		hi, _ := strconv.Atoi(g[3])
		v := strconv.Itoa(lo + r.Intn(hi-lo+1))
		drawn[g[1]] = v
		return v
	})
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: textload URL CLIENTS SECONDS TEMPLATE")
		os.Exit(2)
	}
	url := strings.TrimSuffix(os.Args[1], "/") + "/v1/sql"
	clients, err1 := strconv.Atoi(os.Args[2])
	secs, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || clients < 1 || secs < 1 {
		fmt.Fprintln(os.Stderr, "CLIENTS and SECONDS must be positive integers")
		os.Exit(2)
	}
	template := os.Args[4]
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	var mu sync.Mutex
	var latencies []float64
	errors := 0
	var firstError string
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(i)))
			var mine []float64
			bad, why := 0, ""
			for time.Now().Before(deadline) {
				q := fill(template, r)
				t0 := time.Now()
				resp, err := client.Post(url, "application/sql", strings.NewReader(q))
				if err != nil {
					bad, why = bad+1, err.Error()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad, why = bad+1, string(body)
					continue
				}
				mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			errors += bad
			if why != "" && firstError == "" {
				firstError = why
			}
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	sort.Float64s(latencies)
	at := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(q*float64(len(latencies)-1))]
	}
	fmt.Printf("%.1f q/s p50 %.2f ms p99 %.2f ms errors %d\n",
		float64(len(latencies))/float64(secs), at(0.5), at(0.99), errors)
	if firstError != "" {
		fmt.Fprintln(os.Stderr, "first error:", firstError)
	}
}
