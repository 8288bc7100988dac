//! `kiln serve --storage s3://...` against a real S3-compatible server
//! (moto, started on a free loopback port): the catalog, manifests and
//! segments live in the bucket and the WAL stays local; a restart is warm
//! from the disk cache; two servers on one prefix cannot both commit; a
//! store that answers 503 or stalls (a fault proxy in front of it) delays
//! flushes and fails cold reads with a message naming the object, and both
//! heal by themselves when it recovers.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Server;
use common::s3::{Fault, FaultProxy, S3Server};
use serde_json::json;

const BUCKET: &str = "kiln-e2e";

fn start(dir: &Path, s3: &S3Server, prefix: &str, extra: &[&str]) -> Server {
    start_at(dir, &s3.endpoint, prefix, extra)
}

/// A server whose S3 endpoint is `endpoint` (the server, or a proxy).
fn start_at(dir: &Path, endpoint: &str, prefix: &str, extra: &[&str]) -> Server {
    let flags = S3Server::flags_for(endpoint, BUCKET, prefix);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    // A segment per day, so a flush of a few days writes several files.
    args.extend(["--flush-age", "300ms", "--compaction", "false"]);
    args.extend(["--segment-pack-rows", "0"]);
    args.extend(extra);
    Server::start(dir, &args)
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ndjson(from: usize, n: usize) -> Vec<u8> {
    (from..from + n)
        .map(|i| {
            format!(
                "{{\"ts\":\"2026-03-0{}T10:00:{:02}Z\",\"k\":\"k{}\",\"v\":{i}}}\n",
                1 + i % 3,
                i % 60,
                i % 7
            )
        })
        .collect::<String>()
        .into_bytes()
}

fn write(s: &Server, from: usize, n: usize) {
    let ct = [("Content-Type", "application/x-ndjson")];
    let (status, v) = s.write("ev", &ct, &ndjson(from, n));
    assert_eq!(status, 200, "{v}");
}

fn cache(s: &Server, layer: &str, metric: &str) -> i64 {
    let q =
        format!("SELECT value FROM system.cache WHERE layer = '{layer}' AND metric = '{metric}'");
    s.rows(&q)[0][0].as_i64().unwrap()
}

fn segments(s: &Server) -> i64 {
    s.rows("SELECT segments FROM system.tables WHERE table_name = 'ev'")[0][0]
        .as_i64()
        .unwrap()
}

const SUMMARY: &str = "SELECT k, count(*), sum(v) FROM ev GROUP BY k ORDER BY k";

#[test]
fn data_lives_in_the_bucket_and_a_restarted_node_is_warm() {
    let s3 = S3Server::start(BUCKET);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = start(&dir, &s3, "node", &[]);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, k TEXT, v BIGINT) WITH (time_column = 'ts')");
    write(&s, 0, 3_000);
    wait_for("a flush", || segments(&s) >= 3);
    write(&s, 3_000, 500);
    let before = s.rows(SUMMARY);
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[3_500]]));

    // Catalog, manifests and segments are in the bucket, not on local disk.
    let keys = s3.keys(BUCKET, "node/");
    assert!(keys.contains(&"node/catalog.json".to_string()), "{keys:?}");
    assert!(keys.iter().any(|k| k.contains("/manifest/")), "{keys:?}");
    assert!(
        keys.iter().filter(|k| k.ends_with(".parquet")).count() >= 3,
        "{keys:?}"
    );
    assert!(!dir.join("catalog.json").exists());
    assert!(!dir.join("tables").exists());
    assert!(dir.join("wal").is_dir(), "the WAL stays local");
    // Flushed segments were written through: reading them fetched nothing.
    assert!(cache(&s, "objects", "written_through") >= 3);
    assert_eq!(cache(&s, "objects", "misses"), 0);
    assert!(s.metric("kiln_object_cache_hits_total") > 0.0);
    assert_eq!(s.psql(SUMMARY).lines().count(), 7);

    // A restart: the rows in the WAL are replayed, the rest read from the
    // bucket, and every chunk comes from the disk cache.
    assert!(s.terminate().success());
    let s = start(&dir, &s3, "node", &[]);
    assert_eq!(s.rows(SUMMARY), before);
    assert_eq!(cache(&s, "objects", "misses"), 0, "the disk cache was kept");
    assert!(cache(&s, "objects", "hits") > 0);

    // Without the disk cache the same answer comes from the bucket.
    assert!(s.terminate().success());
    std::fs::remove_dir_all(dir.join("cache")).unwrap();
    let s = start(&dir, &s3, "node", &[]);
    assert_eq!(s.rows(SUMMARY), before);
    assert!(cache(&s, "objects", "misses") > 0);
    assert!(cache(&s, "store", "fetched_bytes") > 0);
}

#[test]
fn two_servers_on_one_prefix_cannot_both_commit() {
    let s3 = S3Server::start(BUCKET);
    let tmp = tempfile::tempdir().unwrap();
    let a = start(&tmp.path().join("a"), &s3, "shared", &[]);
    a.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, k TEXT, v BIGINT) WITH (time_column = 'ts')");
    write(&a, 0, 100);
    wait_for("A's first flush", || segments(&a) >= 1);
    let b = start(&tmp.path().join("b"), &s3, "shared", &[]);
    assert_eq!(b.rows("SELECT count(*) FROM ev"), json!([[100]]));

    // Both write and flush the next version: the first to commit wins, the
    // other is refused and says why; neither overwrites the other.
    write(&a, 100, 10);
    wait_for("A's second flush", || {
        a.rows("SELECT count(*) FROM ev") == json!([[110]])
            && a.rows("SELECT manifest_version FROM system.tables")[0][0].as_i64() >= Some(2)
    });
    write(&b, 200, 20);
    wait_for("B's refused commit", || {
        b.request("GET", "/ready", &[], b"").0 == 503
    });
    let (_, body) = b.request("GET", "/ready", &[], b"");
    let why = String::from_utf8_lossy(&body);
    assert!(why.contains("committed by another writer"), "{why}");
    assert!(why.contains("s3://kiln-e2e/shared"), "{why}");
    // B still answers with every row it acknowledged (they are in its WAL).
    assert_eq!(b.rows("SELECT count(*) FROM ev"), json!([[120]]));
    assert_eq!(a.request("GET", "/ready", &[], b"").0, 200);

    // The bucket holds A's history only: a third server sees A's 110 rows.
    drop(a);
    let c = start(&tmp.path().join("c"), &s3, "shared", &[]);
    assert_eq!(c.rows("SELECT count(*) FROM ev"), json!([[110]]));
}

#[test]
fn a_failing_store_delays_flushes_fails_cold_reads_clearly_and_heals() {
    let s3 = S3Server::start(BUCKET);
    let proxy = FaultProxy::start(&s3.endpoint);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    // No decoded-segment cache, so reads go to the object cache and store.
    let flags = [
        "--s3-retry-timeout",
        "2s",
        "--s3-request-timeout",
        "1s",
        "--segment-cache-bytes",
        "0",
    ];
    let s = start_at(&dir, &proxy.endpoint, "faults", &flags);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, k TEXT, v BIGINT) WITH (time_column = 'ts')");
    write(&s, 0, 300);
    wait_for("a flush", || segments(&s) >= 3);
    assert!(s.terminate().success());
    std::fs::remove_dir_all(dir.join("cache")).unwrap();
    let s = start_at(&dir, &proxy.endpoint, "faults", &flags);

    for fault in [Fault::Unavailable, Fault::Stall] {
        proxy.set(fault);
        // A cold read retries for --s3-retry-timeout, then fails, naming
        // the object it could not read.
        let started = Instant::now();
        let (status, body) = s.request(
            "POST",
            "/v1/sql",
            &[("Content-Type", "application/sql")],
            b"SELECT count(*) FROM ev",
        );
        let body = String::from_utf8_lossy(&body);
        assert_ne!(status, 200, "{fault:?}: {body}");
        assert!(body.contains(".parquet"), "{fault:?}: {body}");
        assert!(body.contains("s3://kiln-e2e/faults/"), "{fault:?}: {body}");
        assert!(body.contains("from the object store"), "{fault:?}: {body}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(900),
            "{fault:?}: no retry ({took:?})"
        );
        assert!(took < Duration::from_secs(30), "{fault:?}: {took:?}");
    }

    // Writes are still acknowledged (from the WAL); flushes fail and say so.
    proxy.set(Fault::Unavailable);
    write(&s, 300, 30);
    wait_for("the failed flush", || {
        s.request("GET", "/ready", &[], b"").0 == 503
    });

    // The store recovers: flushing resumes by itself, every row is there.
    proxy.set(Fault::None);
    wait_for("flushes to resume", || {
        s.request("GET", "/ready", &[], b"").0 == 200
    });
    assert_eq!(s.rows("SELECT count(*) FROM ev"), json!([[330]]));
    wait_for("the memstore to empty", || {
        s.rows("SELECT memstore_bytes FROM system.tables")[0][0] == json!(0)
    });
}

/// The sum of `name=N` over every scan of an EXPLAIN ANALYZE.
fn scan_metric(s: &Server, sql: &str, name: &str) -> u64 {
    let plan = s.rows(&format!("EXPLAIN ANALYZE {sql}")).to_string();
    let key = format!("{name}=");
    plan.match_indices(&key)
        .map(|(i, _)| {
            let digits: String = plan[i + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().unwrap()
        })
        .sum()
}

#[test]
fn explain_analyze_shows_each_scans_bytes_from_cache_and_from_store() {
    let s3 = S3Server::start(BUCKET);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let flags = ["--segment-cache-bytes", "0"];
    let s = start(&dir, &s3, "explain", &flags);
    s.sql("CREATE TABLE ev (ts TIMESTAMP NOT NULL, k TEXT, v BIGINT) WITH (time_column = 'ts')");
    write(&s, 0, 3_000);
    wait_for("a flush", || segments(&s) >= 3);
    assert!(s.terminate().success());
    std::fs::remove_dir_all(dir.join("cache")).unwrap();
    let s = start(&dir, &s3, "explain", &flags);

    let q = "SELECT k, sum(v) FROM ev GROUP BY k";
    let cold = scan_metric(&s, q, "bytes_from_store");
    assert!(cold > 0, "a cold scan fetches from the store");
    assert_eq!(scan_metric(&s, q, "bytes_from_store"), 0, "then it is warm");
    assert!(scan_metric(&s, q, "bytes_from_cache") > 0);
}
