//! Tests for the A/B event generator: determinism, thread-count independence,
//! statistical shape and lossless round trips through the text formats.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use arrow::array::{Array, AsArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};
use arrow::record_batch::RecordBatch;

use super::*;
use crate::error::Error;

fn all(g: &AbTestGen) -> RecordBatch {
    let batches: Vec<_> = g.batches().collect();
    concat_batches(&abtest_schema(), &batches).unwrap()
}

fn small(rows: u64, seed: u64, batch_rows: usize) -> AbTestGen {
    AbTestGen {
        batch_rows,
        ..AbTestGen::new(rows, seed)
    }
}

fn write(g: &AbTestGen, path: &Path, format: OutFormat) -> u64 {
    let mut last = 0;
    let n = write_file(g, path, format, &mut |rows| {
        assert!(rows > last, "progress must increase");
        last = rows;
    })
    .unwrap();
    assert_eq!(n, g.rows);
    assert_eq!(last, g.rows, "final progress report is the total");
    n
}

#[test]
fn schema_and_ddl_agree() {
    let schema = abtest_schema();
    let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "event_time",
            "experiment_id",
            "arm",
            "user_id",
            "region",
            "platform",
            "action",
            "page_url",
            "amount",
            "dwell_ms"
        ]
    );
    for f in schema.fields() {
        assert_eq!(f.is_nullable(), f.name() == "amount", "{}", f.name());
        let ddl_col = ABTEST_DDL
            .split(['(', ','])
            .find(|c| c.trim().starts_with(&format!("{} ", f.name())))
            .unwrap();
        assert_eq!(ddl_col.contains("NOT NULL"), !f.is_nullable());
    }
    let sql = include_str!("../../../../bench/sql/abtest.sql");
    let portable = sql.trim().trim_end_matches(';');
    assert!(ABTEST_DDL.starts_with(&format!("{portable} WITH (")));
    let kiln = include_str!("../../../../bench/sql/abtest.kiln.sql");
    assert_eq!(kiln.trim().trim_end_matches(';'), ABTEST_DDL);
    // The default start really is 2026-11-01T00:00:00Z.
    let ts = arrow::array::TimestampNanosecondArray::from(vec![DEFAULT_START_NS]);
    let shown = arrow::util::display::array_value_to_string(&ts, 0).unwrap();
    assert_eq!(shown, "2026-11-01T00:00:00");
}

#[test]
fn shape_of_batches() {
    let g = small(10_001, 1, 1000);
    assert_eq!(g.num_batches(), 11);
    assert_eq!(g.batch(10).num_rows(), 1);
    assert_eq!(g.batch(11).num_rows(), 0);
    assert_eq!(g.batches().map(|b| b.num_rows()).sum::<usize>(), 10_001);
    assert_eq!(AbTestGen::new(0, 1).num_batches(), 0);
    let d = AbTestGen::new(1_000_000, 1);
    assert_eq!(
        (d.users, d.batch_rows, d.start_ns),
        (100_000, 65_536, DEFAULT_START_NS)
    );
    assert_eq!(AbTestGen::new(5_000, 1).users, 1000);
    assert_eq!(g.batch(0).schema(), abtest_schema());
}

#[test]
fn same_seed_same_data_different_seed_different_data() {
    let a: Vec<_> = small(30_000, 42, 4096).batches().collect();
    let b: Vec<_> = small(30_000, 42, 4096).batches().collect();
    assert_eq!(a, b);
    let c: Vec<_> = small(30_000, 43, 4096).batches().collect();
    assert_ne!(a, c);
    // Every column actually depends on the seed (not only some of them).
    let (a, c) = (all(&small(30_000, 42, 4096)), all(&small(30_000, 43, 4096)));
    for i in 0..a.num_columns() {
        assert_ne!(a.column(i), c.column(i), "column {i} ignores the seed");
    }
    // Batches are independent of each other: batch 5 alone equals batch 5 in sequence.
    let g = small(30_000, 42, 4096);
    assert_eq!(g.batch(5), g.batches().nth(5).unwrap());
    assert_ne!(g.batch(4).column(3), g.batch(5).column(3));
}

#[test]
fn same_seed_same_file_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let g = small(20_000, 9, 3000);
    for (ext, format) in [
        ("csv", OutFormat::Csv),
        ("parquet", OutFormat::Parquet),
        ("ndjson", OutFormat::Ndjson),
    ] {
        let p1 = dir.path().join(format!("a.{ext}"));
        let p2 = dir.path().join(format!("b.{ext}"));
        let p3 = dir.path().join(format!("c.{ext}"));
        write(&g, &p1, format);
        write(&g, &p2, format);
        write(&small(20_000, 10, 3000), &p3, format);
        let (b1, b2, b3) = (
            std::fs::read(&p1).unwrap(),
            std::fs::read(&p2).unwrap(),
            std::fs::read(&p3).unwrap(),
        );
        assert!(b1.len() > 100_000, "{ext}: {} bytes", b1.len());
        assert!(b1 == b2, "{ext} output differs between runs");
        assert!(b1 != b3, "{ext} output ignores the seed");
    }
}

#[test]
fn parallel_equals_sequential() {
    let g = small(20_500, 3, 1000);
    let sequential: Vec<_> = g.batches().collect();
    for threads in [1, 2, 3, 4, 8, 64] {
        let mut got = Vec::new();
        par_for_each_batch(&g, threads, &mut |b| {
            got.push(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 21, "threads={threads}");
        assert!(got == sequential, "threads={threads}");
    }
}

#[test]
fn parallel_stops_at_sink_error() {
    let g = small(50_000, 3, 1000);
    let mut calls = 0;
    let err = par_for_each_batch(&g, 4, &mut |_| {
        calls += 1;
        if calls == 4 {
            Err(Error::Io(std::io::Error::other("disk full")))
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err}");
    assert_eq!(calls, 4);
    let missing = Path::new("/nonexistent-kiln-dir/x.csv");
    let res = write_file(&g, missing, OutFormat::Csv, &mut |_| {});
    assert!(matches!(res, Err(Error::Io(_))));
}

#[test]
fn out_format_from_path() {
    let f = |p: &str| OutFormat::from_path(Path::new(p));
    assert_eq!(f("/tmp/x.parquet"), Some(OutFormat::Parquet));
    assert_eq!(f("x.CSV"), Some(OutFormat::Csv));
    assert_eq!(f("x.ndjson"), Some(OutFormat::Ndjson));
    assert_eq!(f("x.jsonl"), Some(OutFormat::Ndjson));
    assert_eq!(f("x.json"), Some(OutFormat::Ndjson));
    assert_eq!(f("x.txt"), None);
    assert_eq!(f("parquet"), None);
}

/// A shorter window holds every row's time, and its rows still span it.
#[test]
fn a_window_of_one_day_holds_every_rows_time() {
    let day = 86_400 * 1_000_000_000;
    let g = AbTestGen {
        start_ns: DEFAULT_START_NS + 13 * day,
        span_ns: day,
        ..small(20_000, 5, 4096)
    };
    let b = all(&g);
    let ts = b.column(0).as_primitive::<TimestampNanosecondType>();
    let (lo, hi) = (g.start_ns, g.start_ns + day);
    assert!(ts.values().iter().all(|t| (lo..hi).contains(t)));
    let first = *ts.values().iter().min().unwrap();
    let last = *ts.values().iter().max().unwrap();
    assert!(
        first < lo + day / 10 && last > hi - day / 10,
        "{first} {last}"
    );
}

#[test]
fn invariants_on_200k_rows() {
    let rows = 200_000u64;
    let g = AbTestGen::new(rows, 2026);
    let b = all(&g);
    assert_eq!(b.num_rows() as u64, rows);
    for c in b.columns() {
        let is_amount = c.data_type() == &arrow::datatypes::DataType::Float64;
        assert_eq!(c.null_count() > 0, is_amount);
    }
    let ts = b.column(0).as_primitive::<TimestampNanosecondType>();
    let exp = b.column(1).as_primitive::<Int64Type>();
    let arm = b.column(2).as_string::<i32>();
    let user = b.column(3).as_primitive::<Int64Type>();
    let region = b.column(4).as_string::<i32>();
    let platform = b.column(5).as_string::<i32>();
    let action = b.column(6).as_string::<i32>();
    let url = b.column(7).as_string::<i32>();
    let amount = b.column(8).as_primitive::<Float64Type>();
    let dwell = b.column(9).as_primitive::<Int64Type>();
    let n = rows as f64;

    // Time: inside the window, covering it, and in arrival order up to jitter.
    let (start, end) = (g.start_ns, g.start_ns + SPAN_NS);
    let mut running_max = start;
    for &t in ts.values() {
        assert!((start..end).contains(&t), "{t} outside window");
        assert!(
            t >= running_max - 2 * JITTER_NS,
            "out of order by more than jitter"
        );
        running_max = running_max.max(t);
    }
    assert!(ts.value(0) < start + 3600 * 1_000_000_000);
    assert!(ts.value(ts.len() - 1) > end - 3600 * 1_000_000_000);

    // Arm stable per (experiment, user) and roughly 50/50 over pairs.
    let mut arms: HashMap<(i64, i64), &str> = HashMap::new();
    for i in 0..b.num_rows() {
        let prev = arms.insert((exp.value(i), user.value(i)), arm.value(i));
        assert!(prev.is_none_or(|p| p == arm.value(i)), "user switched arms");
        assert!(arm.value(i) == "control" || arm.value(i) == "treatment");
    }
    let treated = arms.values().filter(|a| **a == "treatment").count() as f64 / arms.len() as f64;
    assert!((0.47..0.53).contains(&treated), "treatment share {treated}");

    // Amount iff purchase, within 5..=500 with 2 decimals.
    let mut purchases = [0u64; 2];
    let mut per_arm = [0u64; 2];
    for i in 0..b.num_rows() {
        let is_purchase = action.value(i) == "purchase";
        assert_eq!(amount.is_valid(i), is_purchase);
        if is_purchase {
            let a = amount.value(i);
            assert!((5.0..=500.0).contains(&a), "{a}");
            assert!(((a * 100.0).round() - a * 100.0).abs() < 1e-6, "{a}");
        }
        let t = (arm.value(i) == "treatment") as usize;
        per_arm[t] += 1;
        purchases[t] += is_purchase as u64;
    }
    let (pc, pt) = (
        purchases[0] as f64 / per_arm[0] as f64,
        purchases[1] as f64 / per_arm[1] as f64,
    );
    assert!(
        (0.035..0.045).contains(&pc) && (0.039..0.049).contains(&pt),
        "{pc} {pt}"
    );
    assert!(pt > pc, "treatment should convert better: {pt} vs {pc}");

    // Funnel shares.
    let share = |a: &str| action.iter().filter(|v| *v == Some(a)).count() as f64 / n;
    assert!((0.68..0.72).contains(&share("view")));
    assert!((0.165..0.195).contains(&share("click")));
    assert!((0.07..0.09).contains(&share("add_to_cart")));

    // LIKE selectivities.
    let feed = url
        .iter()
        .filter(|u| u.unwrap().contains("src=feed"))
        .count() as f64
        / n;
    let item = url
        .iter()
        .filter(|u| u.unwrap().starts_with("/item/"))
        .count() as f64
        / n;
    assert!((0.15..0.25).contains(&feed), "src=feed {feed}");
    assert!((0.40..0.50).contains(&item), "/item/ {item}");

    // User skew: top 1% of users hold > 10% of rows; ids scrambled below 2^40.
    let mut per_user: HashMap<i64, u64> = HashMap::new();
    for &u in user.values() {
        assert!((0..1 << 40).contains(&u));
        *per_user.entry(u).or_default() += 1;
    }
    let mut counts: Vec<u64> = per_user.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let top = (g.users as usize / 100).max(1);
    let top_share = counts.iter().take(top).sum::<u64>() as f64 / n;
    assert!(top_share > 0.10, "top 1% share {top_share}");
    eprintln!(
        "feed={feed:.3} item={item:.3} top1%={top_share:.3} users={} purchase c/t={pc:.4}/{pt:.4} treated={treated:.3}",
        per_user.len()
    );
    assert!(
        per_user.len() > 5_000,
        "only {} distinct users",
        per_user.len()
    );
    let small_ids = per_user.keys().filter(|&&u| u < 1_000_000).count();
    assert!(small_ids < per_user.len() / 100, "ids look unscrambled");

    // Experiments: all 20 present, 1..=20, heavily skewed.
    let mut per_exp = [0u64; 21];
    for &e in exp.values() {
        assert!((1..=NUM_EXPERIMENTS).contains(&e));
        per_exp[e as usize] += 1;
    }
    assert!(per_exp[1..].iter().all(|&c| c > 0));
    let max = *per_exp.iter().max().unwrap();
    let min = *per_exp[1..].iter().min().unwrap();
    assert!(max > 5 * min, "experiments not skewed: {per_exp:?}");

    // Dimensions: only known values, all of them used, skewed regions.
    fn distinct(col: &arrow::array::StringArray) -> HashMap<&str, u64> {
        let mut m: HashMap<&str, u64> = HashMap::new();
        for v in col.iter() {
            *m.entry(v.unwrap()).or_default() += 1;
        }
        m
    }
    let regions = distinct(region);
    assert_eq!(regions.len(), REGIONS.len());
    assert!(regions.keys().all(|r| REGIONS.contains(r)));
    let (rmax, rmin) = (
        regions.values().max().unwrap(),
        regions.values().min().unwrap(),
    );
    assert!(*rmax > 3 * *rmin, "regions not skewed: {regions:?}");
    let platforms = distinct(platform);
    assert_eq!(platforms.len(), 3);
    assert!(platforms.keys().all(|p| PLATFORMS.contains(p)));

    // Dwell: 0..=600000 ms, exponential-ish with mean ~20 s.
    let mean = dwell.values().iter().sum::<i64>() as f64 / n;
    assert!(dwell.values().iter().all(|d| (0..=600_000).contains(d)));
    assert!((18_000.0..22_000.0).contains(&mean), "dwell mean {mean}");
    let median = {
        let mut v = dwell.values().to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    };
    assert!((median as f64) < 0.8 * mean, "dwell not skewed");
}

#[test]
fn csv_and_ndjson_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let g = small(25_000, 77, 4000);
    let expected = all(&g);

    let csv_path = dir.path().join("abtest.csv");
    write(&g, &csv_path, OutFormat::Csv);
    let text = std::fs::read_to_string(&csv_path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "event_time,experiment_id,arm,user_id,region,platform,action,page_url,amount,dwell_ms"
    );
    let first = lines.next().unwrap();
    assert!(first.starts_with("2026-11-01T00:0"), "{first}");
    assert_eq!(
        first.split(',').next().unwrap().len(),
        "2026-11-01T00:00:00.123456789".len()
    );
    let reader = arrow::csv::ReaderBuilder::new(abtest_schema())
        .with_header(true)
        .with_batch_size(7000)
        .build(File::open(&csv_path).unwrap())
        .unwrap();
    let got: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(concat_batches(&abtest_schema(), &got).unwrap(), expected);

    let json_path = dir.path().join("abtest.jsonl");
    write(&g, &json_path, OutFormat::Ndjson);
    let reader = arrow::json::ReaderBuilder::new(abtest_schema())
        .with_batch_size(7000)
        .build(BufReader::new(File::open(&json_path).unwrap()))
        .unwrap();
    let got: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(concat_batches(&abtest_schema(), &got).unwrap(), expected);
}

#[test]
fn parquet_round_trip_with_zstd_and_statistics() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::Compression;

    let dir = tempfile::tempdir().unwrap();
    let g = small(25_000, 5, 4000);
    let path = dir.path().join("abtest.parquet");
    write(&g, &path, OutFormat::Parquet);
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
    let meta = builder.metadata().clone();
    assert_eq!(builder.schema(), &abtest_schema());
    let got: Vec<_> = builder.build().unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(concat_batches(&abtest_schema(), &got).unwrap(), all(&g));
    for col in meta.row_group(0).columns() {
        assert!(
            matches!(col.compression(), Compression::ZSTD(_)),
            "{:?}",
            col.compression()
        );
        assert!(
            col.statistics()
                .is_some_and(|s| s.min_bytes_opt().is_some())
        );
    }
}

#[test]
fn generation_speed_1m_rows() {
    // Loose measurement only (debug builds are slow); never asserts timing.
    let g = AbTestGen::new(1_000_000, 1);
    let t = std::time::Instant::now();
    let mut rows = 0;
    par_for_each_batch(&g, 2, &mut |b| {
        rows += b.num_rows();
        Ok(())
    })
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(rows, 1_000_000);
    eprintln!(
        "generated 1M rows in {secs:.2}s ({:.0} rows/s)",
        rows as f64 / secs
    );
}

#[test]
#[ignore = "throughput check; run with `cargo test -p kiln-bench --release -- --ignored`"]
fn write_10m_rows_parquet_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("abtest.parquet");
    let g = AbTestGen::new(10_000_000, 1);
    let t = std::time::Instant::now();
    let n = write_file(&g, &path, OutFormat::Parquet, &mut |_| {}).unwrap();
    let secs = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(n, 10_000_000);
    eprintln!(
        "wrote 10M rows ({:.0} MiB parquet) in {secs:.1}s",
        size as f64 / 1048576.0
    );
}
