//! Crash test: the real `kiln` binary writes from concurrent writers while
//! flushes and compactions run, and is SIGKILLed at random points, several
//! rounds over one data directory. After each restart every acknowledged
//! row must be present exactly once.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

/// `kiln` on `dir` (on the test S3 server when the suites run on one).
fn kiln(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.envs(kiln_storage::testing::test_store_env(dir));
    // Small thresholds so freezes, flushes, compactions and WAL trimming all
    // happen within a round.
    c.env("KILN_MEMSTORE_FREEZE_BYTES", "4KiB")
        .env("KILN_FLUSH_BYTES", "48KiB")
        .env("KILN_FLUSH_AGE", "300ms")
        .env("KILN_FLUSH_GAP", "0ms")
        .env("KILN_BACKGROUND_INTERVAL", "20ms")
        .env("KILN_COMPACTION_MIN_SEGMENTS", "3")
        .env("KILN_SEGMENT_DELETE_DELAY", "0s")
        .env("KILN_WAL_SEGMENT_BYTES", "64KiB")
        .env("KILN_LOG", "error");
    c
}

fn query_ids(dir: &std::path::Path) -> Vec<i64> {
    query(dir, "SELECT id FROM crash")
}

/// The first column of `sql`'s rows, run by `kiln sql` on `dir`.
fn query(dir: &std::path::Path, sql: &str) -> Vec<i64> {
    let out = kiln(dir)
        .args(["sql", "--data-dir"])
        .arg(dir)
        .args(["--format", "csv", sql])
        .output()
        .expect("run kiln sql");
    assert!(
        out.status.success(),
        "kiln sql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.parse().unwrap())
        .collect()
}

#[test]
fn acknowledged_rows_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let seed = std::env::var("KILN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xC0FFEE);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut acked: HashSet<i64> = HashSet::new();
    let rounds = 12;
    for round in 0..rounds {
        let mut child = kiln(&dir)
            .args([
                "bench",
                "write-embedded",
                "--print-acks",
                "--duration",
                "1h",
                "--writers",
                "16",
                "--data-dir",
            ])
            .arg(&dir)
            .args(["--id-base", &(round as i64 * 100_000_000_000).to_string()])
            .args(["--batch", if round % 2 == 0 { "1" } else { "7" }])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kiln");
        let stdout = child.stdout.take().unwrap();
        // Kill after a random number of acknowledgements or a random time.
        let kill_after = rng.random_range(20..3000usize);
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(300..2500));
        let mut lines = BufReader::new(stdout).lines();
        let mut n = 0;
        while let Some(Ok(line)) = lines.next() {
            if let Some(id) = line.strip_prefix("ack ") {
                acked.insert(id.parse().unwrap());
                n += 1;
            }
            if n >= kill_after || Instant::now() >= deadline {
                break;
            }
        }
        child.kill().expect("SIGKILL");
        // Acks printed before the kill landed are still in the pipe.
        for line in lines.map_while(Result::ok) {
            if let Some(id) = line.strip_prefix("ack ") {
                acked.insert(id.parse().unwrap());
            }
        }
        child.wait().unwrap();
        assert!(n > 0, "round {round}: no write was acknowledged");

        let ids = query_ids(&dir);
        eprintln!(
            "round {round}: {n} acks seen before kill, {} acked in all, {} rows found",
            acked.len(),
            ids.len()
        );
        let unique: HashSet<i64> = ids.iter().copied().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "round {round}: a row is present twice"
        );
        let missing: Vec<_> = acked.difference(&unique).take(10).collect();
        assert!(
            missing.is_empty(),
            "round {round}: acknowledged rows lost, e.g. {missing:?} ({} acked, {} found)",
            acked.len(),
            ids.len()
        );
    }
    // Flushes ran: segments exist (on disk, or in the bucket).
    let segments = query(&dir, "SELECT count(*) FROM system.segments");
    assert!(segments[0] > 0, "no segment was flushed during the test");
}

#[test]
fn second_process_on_a_data_dir_gets_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut child = kiln(&dir)
        .args([
            "bench",
            "write-embedded",
            "--print-acks",
            "--duration",
            "1h",
            "--writers",
            "1",
            "--data-dir",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it owns the directory (first ack).
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("ack "));
    let out = kiln(&dir)
        .args(["sql", "--data-dir"])
        .arg(&dir)
        .arg("SELECT 1")
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another kiln process"), "{err}");
}
