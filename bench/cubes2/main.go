// cubes2: a second cube benchmark, independent of bench/workload/dashboard
// (other data, other queries), to check that a speed-up of cubes holds on
// data and charts it was not tuned on. bench/cubes2.sh drives it; the
// cubes are in bench/cubes2.sql.
//
// The table `visits` is web traffic of 60 sites over 30 days from
// 2026-10-01: sessions of 1-30 events on one site, in one country, on one
// device, within one day, with scrambled 48-bit ids; latency log-normal.
// Six chart templates each filter one site and a day-aligned range:
// see workload.go.
//
//	cubes2 load  --http HOST:PORT --rows N --seed S [--batch 50000] [--sort-key COLS]
//	cubes2 run   --protocol pg|pg-simple|pg-typed|pg-superset|http --url URL --clients C --duration D --seed S [--cubes on|off]
//	cubes2 check --url postgres://... --seed S [--n 60] [--require-cube]
//
// run prints one JSON line: {"qps", "p50_ms", "p99_ms", "errors", "queries"};
// the first errors go to stderr. check exits 1 on a mismatch.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var err error
	switch cmd {
	case "load":
		addr := fs.String("http", "127.0.0.1:8080", "Kiln's HTTP address (host:port)")
		rows := fs.Int("rows", 3_000_000, "rows to write")
		seed := fs.Uint64("seed", 1, "data seed")
		batch := fs.Int("batch", 50_000, "rows per write request")
		sortKey := fs.String("sort-key", "", "the table's sort_key (none by default)")
		fs.Parse(args)
		err = load(*addr, *rows, *seed, *batch, *sortKey)
	case "stream":
		addr := fs.String("http", "127.0.0.1:8080", "Kiln's HTTP address (host:port)")
		rate := fs.Int("rate", 20_000, "rows per second at most")
		batch := fs.Int("batch", 200, "rows per write request")
		dur := fs.Duration("duration", 30*time.Second, "how long to write")
		seed := fs.Uint64("seed", 99, "data seed (not the loaded data's)")
		days := fs.Int("days", 2, "the last days of the data written to")
		fs.Parse(args)
		err = stream(*addr, *rate, *batch, *dur, *seed, *days)
	case "run":
		protocol := fs.String("protocol", "pg", "pg, pg-simple, pg-typed (bounds as TIMESTAMP '...'), pg-superset (bounds as TO_TIMESTAMP('...', template)) or http")
		url := fs.String("url", "", "postgres://... or http://host:port")
		clients := fs.Int("clients", 50, "concurrent clients")
		dur := fs.Duration("duration", 20*time.Second, "measured time")
		seed := fs.Uint64("seed", 7, "parameter seed")
		cubes := fs.String("cubes", "on", "on, or off: answer from raw rows only")
		fs.Parse(args)
		if *cubes != "on" && *cubes != "off" {
			err = fmt.Errorf("--cubes on|off, not %q", *cubes)
			break
		}
		var res result
		res, err = run(*protocol, *url, *clients, *dur, *seed, *cubes == "off")
		if err == nil {
			fmt.Printf("{\"qps\":%v,\"p50_ms\":%v,\"p99_ms\":%v,\"errors\":%d,\"queries\":%d}\n",
				res.QPS, res.P50, res.P99, res.Errors, res.Queries)
		}
	case "check":
		url := fs.String("url", "", "postgres://...")
		seed := fs.Uint64("seed", 11, "parameter seed")
		n := fs.Int("n", 60, "template instances")
		require := fs.Bool("require-cube", false, "fail when EXPLAIN of a template shows no CubeScan")
		fs.Parse(args)
		err = check(*url, *seed, *n, *require)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cubes2 %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cubes2 load|stream|run|check [flags] (cubes2 CMD -h for the flags)")
	os.Exit(2)
}
