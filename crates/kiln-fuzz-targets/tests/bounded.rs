//! Every fuzz target fed a bounded number of mutated inputs on the stable
//! toolchain, in every test run: seeds of each format, mutated by a seeded
//! generator (flips, inserts, deletes, splices, repeats), so a run is
//! reproducible. `KILN_FUZZ_ITERATIONS` sets the count per target.
//! Regression inputs (crashes found by the fuzzers) are replayed first.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn iterations() -> usize {
    std::env::var("KILN_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![1, 2, 3])),
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(StringArray::from(vec![Some("a"), None, Some("c\"")])),
        ],
    )
    .unwrap()
}

fn arrow_seed() -> Vec<u8> {
    let b = batch();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(vec![], &b.schema()).unwrap();
    w.write(&b).unwrap();
    w.finish().unwrap();
    w.into_inner().unwrap()
}

fn parquet_seed() -> Vec<u8> {
    let b = batch();
    let mut out = vec![];
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, b.schema(), None).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    out
}

fn pg_seed() -> Vec<u8> {
    let mut m = vec![];
    let startup = b"\0\x03\0\0user\0kiln\0database\0kiln\0\0";
    m.extend_from_slice(&((startup.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(startup);
    for (tag, body) in [
        (b'Q', &b"SELECT 1\0"[..]),
        (b'P', &b"s1\0SELECT $1\0\0\x01\0\0\0\x17"[..]),
        (b'B', &b"\0s1\0\0\x01\0\0\0\x01\0\0\0\x011\0\0"[..]),
        (b'E', &b"\0\0\0\0\0"[..]),
        (b'S', &b""[..]),
    ] {
        m.push(tag);
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
    }
    m
}

fn mutate(rng: &mut StdRng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..rng.random_range(1..8) {
        let at = if v.is_empty() {
            0
        } else {
            rng.random_range(0..v.len())
        };
        match rng.random_range(0..6) {
            0 if !v.is_empty() => v[at] ^= 1 << rng.random_range(0..8),
            1 => v.insert(at, rng.random()),
            2 if !v.is_empty() => {
                v.remove(at);
            }
            3 if !other.is_empty() => {
                let from = rng.random_range(0..other.len());
                let len = rng.random_range(0..(other.len() - from).min(64) + 1);
                v.splice(at..at, other[from..from + len].iter().copied());
            }
            4 if !v.is_empty() => {
                let end = (at + rng.random_range(1..16)).min(v.len());
                let piece = v[at..end].to_vec();
                for _ in 0..rng.random_range(1..64) {
                    v.splice(at..at, piece.iter().copied());
                }
            }
            _ => v.truncate(at),
        }
    }
    v
}

/// Runs `target` over its seeds and their mutations, on a thread with the
/// server's stack size.
fn run(name: &str, target: fn(&[u8]), seeds: Vec<Vec<u8>>) {
    let n = iterations();
    let name = name.to_string();
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let mut rng = StdRng::seed_from_u64(0x6b696c6e);
            for seed in &seeds {
                target(seed);
            }
            for i in 0..n {
                let seed = &seeds[i % seeds.len()];
                let other = &seeds[(i + 1) % seeds.len()];
                let input = mutate(&mut rng, seed, other);
                target(&input);
            }
            eprintln!("{name}: {} inputs", n + seeds.len());
        })
        .unwrap()
        .join()
        .unwrap_or_else(|_| panic!("a fuzz target panicked"));
}

#[test]
fn ndjson() {
    let seeds = vec![
        br#"{"ts":"2026-11-01T00:00:00Z","id":1,"n":2,"x":1.5,"s":"a","b":true,"d":"2026-11-01"}"#
            .to_vec(),
        b"{\"ts\":1,\"id\":[[[[1]]]],\"s\":{\"a\":\"\\u00e9\"}}\n\n{\"id\":1e400}\n".to_vec(),
    ];
    run("ndjson", kiln_fuzz_targets::ndjson, seeds);
}

#[test]
fn csv() {
    let seeds = vec![
        b"ts,id,n,x,s,b,d\n2026-11-01T00:00:00Z,1,2,1.5,a,true,2026-11-01\n".to_vec(),
        "\u{feff}id,s\n1,\"a\"\"b\nc\"\n2,".as_bytes().to_vec(),
    ];
    run("csv", kiln_fuzz_targets::csv, seeds);
}

#[test]
fn arrow_ipc() {
    run(
        "arrow_ipc",
        kiln_fuzz_targets::arrow_ipc,
        vec![arrow_seed()],
    );
}

#[test]
fn parquet() {
    run("parquet", kiln_fuzz_targets::parquet, vec![parquet_seed()]);
}

#[test]
fn wal_payload() {
    let mut v2 = vec![2u8];
    v2.extend_from_slice(&7u64.to_le_bytes());
    v2.extend_from_slice(&0u64.to_le_bytes());
    v2.extend_from_slice(&0u16.to_le_bytes());
    v2.extend_from_slice(&arrow_seed());
    run("wal_payload", kiln_fuzz_targets::wal_payload, vec![v2]);
}

#[test]
fn cube_distinct_state() {
    let ids: Vec<u64> = (0..40u64).map(|i| (1 << 63) + i * i * 7_919).collect();
    let varint_gaps = vec![0x85, 0x01, 0x03, 0xff, 0x7f];
    let seeds = vec![kiln_query::cube::gaps::encode(&ids), varint_gaps];
    run(
        "cube_distinct_state",
        kiln_fuzz_targets::cube_distinct_state,
        seeds,
    );
}

#[test]
fn pg_message() {
    run("pg_message", kiln_fuzz_targets::pg_message, vec![pg_seed()]);
}

#[test]
fn sql() {
    let seeds: Vec<Vec<u8>> = [
        "SELECT a, count(*) FROM (VALUES (1, 'x'), (2, 'y')) t(a, b) WHERE a > 1 OR b LIKE 'x%' GROUP BY a ORDER BY 2 DESC LIMIT 3",
        "WITH c AS (SELECT 1 AS v) SELECT v + 1, CASE WHEN v IN (1, 2) THEN 'a' END FROM c UNION ALL SELECT 2, NULL",
        "SELECT date_trunc('day', now()) - INTERVAL '1 day', CAST('1.5' AS DOUBLE), repeat('ab', 3)",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    run("sql", kiln_fuzz_targets::sql, seeds);
}
