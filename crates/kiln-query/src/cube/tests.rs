use super::statement::{CubeStatement, parse};
use super::unit::Unit;

const HOUR: i64 = 3_600_000_000_000;
const DAY: i64 = 24 * HOUR;

#[test]
fn buckets_match_date_trunc() {
    // 2026-11-25 13:45, a Wednesday; then times before 1970.
    let t = 1_795_441_500 * 1_000_000_000 + 2 * DAY;
    assert_eq!(Unit::Hour.floor(t), Some(t - 45 * 60_000_000_000));
    assert_eq!(
        Unit::Day.floor(t),
        Some(t - 13 * HOUR - 45 * 60_000_000_000)
    );
    let monday = Unit::Day.floor(t).unwrap() - 2 * DAY;
    assert_eq!(Unit::Week.floor(t), Some(monday));
    assert_eq!(Unit::Week.ceil(t), Some(monday + 7 * DAY));
    assert_eq!(Unit::Month.floor(t), Some(1_793_491_200 * 1_000_000_000));
    assert_eq!(Unit::Month.ceil(t), Some(1_796_083_200 * 1_000_000_000));
    assert_eq!(Unit::Quarter.floor(t), Some(1_790_812_800 * 1_000_000_000));
    assert_eq!(Unit::Year.ceil(t), Some(1_798_761_600 * 1_000_000_000));
    assert_eq!(Unit::Day.floor(-1), Some(-DAY));
    assert_eq!(Unit::Day.ceil(-1), Some(0));
    // 1969-12-29 was a Monday.
    assert_eq!(Unit::Week.floor(-1), Some(-3 * DAY));
    assert_eq!(Unit::Hour.ceil(HOUR), Some(HOUR));
}

#[test]
fn buckets_out_of_range_are_none() {
    assert_eq!(Unit::Hour.ceil(i64::MAX), None);
    assert_eq!(Unit::Week.floor(i64::MIN), None);
    assert_eq!(Unit::Day.floor(i64::MIN), None);
    assert_eq!(Unit::Month.ceil(i64::MAX), None);
}

#[test]
fn coarser_units_cover_finer_ones() {
    assert!(Unit::Day.covers(Unit::Hour));
    assert!(Unit::Month.covers(Unit::Day));
    assert!(Unit::Year.covers(Unit::Quarter));
    assert!(Unit::Week.covers(Unit::Day));
    assert!(!Unit::Month.covers(Unit::Week));
    assert!(!Unit::Hour.covers(Unit::Day));
    assert!(!Unit::Week.covers(Unit::Month));
}

#[test]
fn statements_parse_and_errors_say_where() {
    let s = parse(
        "create cube IF NOT EXISTS c ON t DIMENSIONS (region, date_trunc('day', ts) AS day) \
         MEASURES (count(*) AS n, sum(x));",
    )
    .unwrap()
    .unwrap();
    let CubeStatement::Create {
        name,
        table,
        dimensions,
        measures,
        if_not_exists,
    } = s
    else {
        panic!("{s:?}")
    };
    assert_eq!(
        (name.as_str(), table.as_str(), if_not_exists),
        ("c", "t", true)
    );
    let names: Vec<_> = dimensions
        .iter()
        .chain(&measures)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["region", "day", "n", "m2"]);
    assert_eq!(measures[1].sql, "sum(x)");
    assert_eq!(parse("SHOW CUBES").unwrap().unwrap(), CubeStatement::Show);
    assert!(parse("SELECT 1").is_none());
    let e = parse("CREATE CUBE c ON t DIMENSIONS (a) MEASURES ()")
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("at least one measure"), "{e}");
    let e = parse("CREATE CUBE c ON t DIMS (a) MEASURES (count(*))")
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("expected DIMENSIONS"), "{e}");
    let e = parse("CREATE CUBE c ON t DIMENSIONS (a, a) MEASURES (count(*))")
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string().contains("two cube columns are named a"),
        "{e}"
    );
}

/// A distinct count's accumulator arguments: an Int64 result, no inputs
/// (states are merged, not computed).
fn distinct_args(
    schema: &datafusion::arrow::datatypes::Schema,
) -> datafusion::logical_expr::function::AccumulatorArgs<'_> {
    use datafusion::arrow::datatypes::{DataType, Field};
    datafusion::logical_expr::function::AccumulatorArgs {
        return_field: std::sync::Arc::new(Field::new("c", DataType::Int64, false)),
        schema,
        ignore_nulls: false,
        order_bys: &[],
        is_reversed: false,
        name: "c",
        is_distinct: false,
        exprs: &[],
        expr_fields: &[],
    }
}

#[test]
fn distinct_counts_and_states_agree_above_and_below_the_hashed_size() {
    use super::distinct::{DistinctValues, decode};
    use super::gaps::encode;
    use super::ordinals::Ordinals;
    use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
    use datafusion::arrow::datatypes::{DataType, Int64Type, Schema};
    use datafusion::logical_expr::{AggregateUDFImpl, EmitTo};
    use std::sync::Arc;
    // Group 0 gets few values, group 1 many (hashed), each from several
    // states overlapping in part, as parts of a cube merge.
    let states: Vec<(usize, Vec<u64>)> = (0..40u64)
        .map(|i| (1, (i * 50..i * 50 + 120).map(|v| v * 7919).collect()))
        .chain([(0, vec![3, 5, 9]), (0, vec![5, 9, 11])])
        .collect();
    let mut expect = [vec![], vec![]];
    for (g, v) in &states {
        expect[*g].extend(v.iter().copied());
    }
    for e in &mut expect {
        e.sort_unstable();
        e.dedup();
    }
    assert!(expect[1].len() > 1000);
    let bytes: BinaryArray = states.iter().map(|(_, v)| Some(encode(v))).collect();
    let groups: Vec<usize> = states.iter().map(|(g, _)| *g).collect();
    let schema = Schema::empty();
    let args = || distinct_args(&schema);
    let ids: ArrayRef = Arc::new(bytes);
    // States as parts keep them (ids), as a scan gives them (ordinals, and
    // ids past a full dictionary), and both mixed, as a query merging a
    // scan's states with another partition's gets them.
    for (form, max) in [
        ("ids", 0),
        ("ordinals", usize::MAX),
        ("full", 700),
        ("mixed", 3000),
    ] {
        let ordinals = Arc::new(Ordinals::with_max(max));
        let udaf = DistinctValues::new(ordinals.clone());
        let input: Vec<Vec<ArrayRef>> = match form {
            "ids" => vec![vec![ids.clone()]],
            "mixed" => vec![
                vec![ordinals.encode(&ids.slice(0, 20)).unwrap()],
                vec![ids.slice(20, ids.len() - 20)],
            ],
            _ => vec![vec![ordinals.encode(&ids).unwrap()]],
        };
        let merge = |acc: &mut Box<dyn datafusion::logical_expr::GroupsAccumulator>| {
            let mut at = 0;
            for i in &input {
                let n = i[0].len();
                acc.merge_batch(i, &groups[at..at + n], 2).unwrap();
                at += n;
            }
        };
        let mut acc = udaf.create_groups_accumulator(args()).unwrap();
        merge(&mut acc);
        let counts = acc.evaluate(EmitTo::All).unwrap();
        let counts = counts.as_primitive::<Int64Type>();
        assert_eq!(
            counts.values().to_vec(),
            vec![4, expect[1].len() as i64],
            "{form}"
        );
        let mut acc = udaf.create_groups_accumulator(args()).unwrap();
        merge(&mut acc);
        let state = acc.state(EmitTo::All).unwrap();
        for (g, e) in expect.iter().enumerate() {
            let mut back = vec![];
            decode(state[0].as_binary::<i32>().value(g), &mut back).unwrap();
            assert_eq!(&back, e, "{form}, group {g}: sorted and distinct");
        }
        // A query's partial states in the scan's form, merged again.
        let scanned = DistinctValues::scanned(ordinals.clone());
        let mut acc = scanned.create_groups_accumulator(args()).unwrap();
        merge(&mut acc);
        let state = acc.state(EmitTo::All).unwrap();
        assert_eq!(state[0].data_type(), &DataType::LargeBinary);
        let mut acc = scanned.create_groups_accumulator(args()).unwrap();
        acc.merge_batch(&state, &[1, 0], 2).unwrap();
        let counts = acc.evaluate(EmitTo::All).unwrap();
        let counts = counts.as_primitive::<Int64Type>();
        assert_eq!(
            counts.values().to_vec(),
            vec![expect[1].len() as i64, 4],
            "{form}, partial states in the scan's form"
        );
        let given = match form {
            "ids" => 0,
            "full" => 700,
            "ordinals" => expect[0].len() + expect[1].len(),
            _ => ordinals.given().clamp(1, max - 1),
        };
        assert_eq!(ordinals.given(), given, "{form}");
    }
}

#[test]
fn a_group_merged_from_one_large_state_or_several_counts_each_ordinal_once() {
    use super::distinct::{DistinctValues, decode};
    use super::gaps::encode;
    use super::ordinals::{self, Ordinals};
    use datafusion::arrow::array::{ArrayRef, AsArray, BinaryArray, LargeBinaryArray};
    use datafusion::arrow::datatypes::{Int64Type, Schema};
    use datafusion::logical_expr::{AggregateUDFImpl, EmitTo};
    use std::sync::Arc;
    // Ids 0..5000 get ordinals 0..5000: a group goes to a bitset from 512
    // ordinals on, so each state below is past that on its own.
    let dictionary = Arc::new(Ordinals::default());
    let all: Vec<u64> = (0..5000).collect();
    let ids: ArrayRef = Arc::new(BinaryArray::from_iter_values([encode(&all)]));
    dictionary.encode(&ids).unwrap();
    assert_eq!(dictionary.given(), 5000);
    let state = |ords: Vec<u32>| {
        let mut out = vec![];
        ordinals::state(&ords, &[], &mut out);
        out
    };
    // Group 0: one sorted state (as a rollup's); group 1: one unsorted
    // (as a part's); group 2: two overlapping ones; group 3: three.
    let states = LargeBinaryArray::from_iter_values([
        state((0..3000).collect()),
        state((0..3000).rev().collect()),
        state((0..3000).collect()),
        state((2500..4000).collect()),
        state((0..600).collect()),
        state((100..200).collect()),
        state((4990..5000).collect()),
    ]);
    let states: Vec<ArrayRef> = vec![Arc::new(states)];
    let groups = [0, 1, 2, 2, 3, 3, 3];
    let schema = Schema::empty();
    let udaf = DistinctValues::new(dictionary.clone());
    let mut acc = udaf
        .create_groups_accumulator(distinct_args(&schema))
        .unwrap();
    acc.merge_batch(&states, &groups, 4).unwrap();
    let counts = acc.evaluate(EmitTo::All).unwrap();
    assert_eq!(
        counts.as_primitive::<Int64Type>().values().to_vec(),
        [3000, 3000, 4000, 610]
    );
    // Their states hold the same values, sorted, as ids.
    let mut acc = udaf
        .create_groups_accumulator(distinct_args(&schema))
        .unwrap();
    acc.merge_batch(&states, &groups, 4).unwrap();
    let out = acc.state(EmitTo::All).unwrap();
    let expect: [Vec<u64>; 4] = [
        (0..3000).collect(),
        (0..3000).collect(),
        (0..4000).collect(),
        (0..600).chain(4990..5000).collect(),
    ];
    for (g, e) in expect.iter().enumerate() {
        let mut back = vec![];
        decode(out[0].as_binary::<i32>().value(g), &mut back).unwrap();
        assert_eq!(&back, e, "group {g}");
    }
}

#[test]
fn a_scan_state_names_its_corruption() {
    use super::ordinals::{split, values};
    let decode = |state: &[u8], given| {
        split(state, given).map(|(o, i)| {
            let ids = i
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()));
            (values(o).collect::<Vec<_>>(), ids.collect::<Vec<_>>())
        })
    };
    let ok = [
        1u32.to_le_bytes().as_slice(),
        &7u32.to_le_bytes(),
        &9u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(decode(&ok, 8).unwrap(), (vec![7], vec![9]));
    for bad in [&ok[..3], &ok[..6], &ok[..ok.len() - 1]] {
        let e = decode(bad, 8).unwrap_err().to_string();
        assert!(e.contains("cube ordinals"), "{e}");
    }
    // An ordinal the dictionary never gave (a bitset would grow to it).
    let e = decode(&ok, 7).unwrap_err().to_string();
    assert!(e.contains("ordinal 7 was never given"), "{e}");
    let e = super::ordinals::Ordinals::default()
        .ids([7], |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("ordinal 7 was never given"), "{e}");
}

#[test]
fn a_group_below_the_bitset_size_counts_each_ordinal_once() {
    use super::distinct::DistinctValues;
    use super::gaps::encode;
    use super::ordinals::Ordinals;
    use datafusion::arrow::array::{ArrayRef, AsArray, BinaryArray};
    use datafusion::arrow::datatypes::{Int64Type, Schema};
    use datafusion::logical_expr::{AggregateUDFImpl, EmitTo};
    use std::sync::Arc;
    let ordinals = Arc::new(Ordinals::with_max(usize::MAX));
    let udaf = DistinctValues::new(ordinals.clone());
    let schema = Schema::empty();
    // Lists of 64 to 511 ordinals (counted through the thread's scratch
    // bitset), with repeats, counted one after another on one thread.
    let count = |ranges: &[(u64, u64)]| {
        let states: BinaryArray = ranges
            .iter()
            .map(|&(a, b)| Some(encode(&(a..b).map(|v| v * 31).collect::<Vec<_>>())))
            .collect();
        let states: ArrayRef = Arc::new(states);
        let scanned = ordinals.encode(&states).unwrap();
        let mut acc = udaf
            .create_groups_accumulator(distinct_args(&schema))
            .unwrap();
        acc.merge_batch(&[scanned], &vec![0; ranges.len()], 1)
            .unwrap();
        let counts = acc.evaluate(EmitTo::All).unwrap();
        counts.as_primitive::<Int64Type>().value(0)
    };
    assert_eq!(count(&[(0, 100), (50, 150), (100, 200)]), 200);
    assert_eq!(count(&[(0, 80), (0, 80)]), 80);
    assert_eq!(count(&[(150, 250), (120, 180)]), 130);
}

#[test]
fn a_kept_bitset_is_clean_for_the_next_group() {
    use super::distinct::{DistinctValues, clean_kept};
    use super::gaps::encode;
    use super::ordinals::Ordinals;
    use datafusion::arrow::array::{ArrayRef, AsArray, BinaryArray};
    use datafusion::arrow::datatypes::{Int64Type, Schema};
    use datafusion::logical_expr::{AggregateUDFImpl, EmitTo};
    use std::sync::Arc;
    let ordinals = Arc::new(Ordinals::with_max(usize::MAX));
    let schema = Schema::empty();
    let states = |ranges: &[(u64, u64)]| -> ArrayRef {
        let states: BinaryArray = ranges
            .iter()
            .map(|&(a, b)| Some(encode(&(a..b).map(|v| v * 31).collect::<Vec<_>>())))
            .collect();
        ordinals.encode(&(Arc::new(states) as ArrayRef)).unwrap()
    };
    // Groups of 512 ordinals and more are counted in bitsets, one after
    // another on this thread: each must count only its own.
    let count = |udaf: &DistinctValues, states: ArrayRef, n: usize| {
        let mut acc = udaf
            .create_groups_accumulator(distinct_args(&schema))
            .unwrap();
        acc.merge_batch(&[states], &vec![0; n], 1).unwrap();
        let counts = acc.evaluate(EmitTo::All).unwrap();
        counts.as_primitive::<Int64Type>().value(0)
    };
    let ids = DistinctValues::new(ordinals.clone());
    let before = clean_kept();
    assert_eq!(count(&ids, states(&[(0, 3000), (2000, 2600)]), 2), 3000);
    // The count took a kept bitset if the thread had one, and gave it back.
    assert_eq!(clean_kept(), before.max(1), "the counted bitset is kept");
    assert_eq!(count(&ids, states(&[(1000, 1600)]), 1), 600);
    assert_eq!(count(&ids, states(&[(2500, 3100), (500, 1100)]), 2), 1200);
    // A query's partial state in the scan's form reads its bitset once,
    // zeroing it: the next group on this thread starts clean too.
    let scanned = DistinctValues::scanned(ordinals.clone());
    let mut acc = scanned
        .create_groups_accumulator(distinct_args(&schema))
        .unwrap();
    acc.merge_batch(&[states(&[(0, 700), (600, 1300)])], &[0, 0], 1)
        .unwrap();
    let before = clean_kept();
    let partial = acc.state(EmitTo::All).unwrap();
    assert_eq!(clean_kept(), before + 1, "the read bitset is kept");
    assert_eq!(count(&scanned, partial[0].clone(), 1), 1300);
    assert_eq!(count(&ids, states(&[(3000, 3600)]), 1), 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_missing_the_same_part_make_it_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use datafusion::arrow::array::{Int64Array, RecordBatch};

    let cubes = super::Cubes::new(1 << 20);
    let made = std::sync::Arc::new(AtomicUsize::new(0));
    let batch = RecordBatch::try_from_iter([(
        "n",
        std::sync::Arc::new(Int64Array::from(vec![1, 2, 3])) as _,
    )])
    .unwrap();
    let asks = (0..8).map(|_| {
        let (cubes, made, batch) = (cubes.clone(), made.clone(), batch.clone());
        tokio::spawn(async move {
            cubes
                .kept("part#3".into(), async {
                    made.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Ok(batch)
                })
                .await
                .unwrap()
                .num_rows()
        })
    });
    for rows in futures::future::join_all(asks).await {
        assert_eq!(rows.unwrap(), 3);
    }
    assert_eq!(made.load(Ordering::SeqCst), 1);
    assert!(cubes.making.is_empty());
}

#[test]
fn a_cube_reads_only_the_columns_its_dimensions_and_measures_name() {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::functions_aggregate::expr_fn::{count, sum};
    use datafusion::logical_expr::{Expr, col, lit};

    let schema = Schema::new(
        ["a", "b", "c", "d", "e"]
            .map(|n| Field::new(n, DataType::Int64, true))
            .to_vec(),
    );
    let func = |e: Expr| match e {
        Expr::AggregateFunction(f) => f,
        e => panic!("{e}"),
    };
    let dims = [col("e").gt(lit(0)), col("b")];
    let read = super::plan::read_columns(&schema, &dims, &[func(sum(col("d") + col("b")))]);
    assert_eq!(read, [1, 3, 4]);
    // `count(*)` alone names no column: one is still read, to count rows.
    assert_eq!(
        super::plan::read_columns(&schema, &[], &[func(count(lit(1)))]),
        [0]
    );
}

/// A batch the memstore merges from batches that have a cube's states
/// (an active buffer's binary counter) makes its states from theirs and
/// from its other rows, lets theirs go once made, and answers as the rows
/// read raw do; a freeze keeps the batches and their states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_batch_makes_its_states_from_those_it_inherits() {
    use arrow::util::pretty::pretty_format_batches;
    use kiln_storage::{Db, StorageConfig};

    use super::scan::MEM_STATES_MIN_ROWS;
    use crate::{Engine, Output};

    let tmp = tempfile::tempdir().unwrap();
    let mut storage = StorageConfig::for_dir(tmp.path());
    storage.background_interval = std::time::Duration::from_secs(3600);
    storage.memstore_freeze_bytes = kiln_storage::ByteSize::kib(512);
    let engine = Engine::new(Db::open(storage).await.unwrap()).unwrap();
    for sql in [
        "CREATE TABLE t (ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT, u BIGINT)",
        "CREATE CUBE c ON t DIMENSIONS (date_trunc('hour', ts) AS h, k) \
         MEASURES (count(*) AS n, sum(v) AS s, min(v) AS lo, count(DISTINCT u) AS users)",
    ] {
        engine.execute(sql).await.unwrap();
    }
    let mut next = 0i64;
    let mut write = |rows: i64| {
        next += rows;
        insert_day(next - rows..next)
    };
    let query = "SELECT date_trunc('hour', ts) AS h, k, count(*), sum(v), min(v), \
                 count(DISTINCT u) FROM t GROUP BY 1, 2 ORDER BY 1, 2";
    async fn rows_of(engine: &Engine, sql: &str) -> String {
        match engine.execute(sql).await.unwrap().pop().unwrap() {
            Output::Rows { batches, .. } => pretty_format_batches(&batches).unwrap().to_string(),
            other => panic!("not rows: {other:?}"),
        }
    }
    // The same query over a subquery no cube answers: the rows read raw.
    let raw = query.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
    let plan = rows_of(&engine, &format!("EXPLAIN {query}")).await;
    assert!(plan.contains("CubeScan"), "{plan}");
    let same = async |what: &str| {
        let got = rows_of(&engine, query).await;
        assert_eq!(got, rows_of(&engine, &raw).await, "{what}");
    };
    let t = engine.db().table("t").unwrap();
    let whole = (t.cubes()[0].id, u64::MAX);
    let batches = || t.snapshot().mem_by_days();
    engine.execute(&write(2_000)).await.unwrap();
    same("first").await;
    let first = batches();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].1.derived_keys(), [whole], "states made");
    // More rows than the first batch: the next snapshot merges both.
    engine.execute(&write(3_000)).await.unwrap();
    let merged = batches();
    assert_eq!(merged.len(), 1);
    let inherited = merged[0].1.inherited(whole);
    assert_eq!(inherited.len(), 1);
    assert_eq!(inherited[0].0, 0..2_000);
    assert!(merged[0].1.derived_keys().is_empty());
    let held = t.mem.bytes();
    same("merged").await;
    assert!(merged[0].1.inherited(whole).is_empty(), "let go once made");
    assert_eq!(merged[0].1.derived_keys(), [whole]);
    assert!(
        t.mem.bytes() < held + merged[0].1.charged(),
        "inherited no longer counted"
    );
    // Rows read 1,000 at a time until the day freezes: the batches after
    // the 5,000 merge with it once they outgrow it, inheriting its states,
    // and the freeze keeps the buffer's batches as they are.
    let kept = merged[0].1.clone();
    let mut rows = 5_000;
    while t.snapshot().version.frozen.is_empty() {
        engine.execute(&write(1_000)).await.unwrap();
        rows += 1_000;
        assert!(rows <= 40_000, "no freeze");
    }
    let frozen = t.snapshot().version.frozen[0].clone();
    assert_eq!(frozen.rows(), rows);
    let first = &frozen.batches[0];
    let inherited = first.inherited(whole).first().map(|(r, _)| r.clone());
    assert!(
        std::sync::Arc::ptr_eq(first, &kept) || inherited == Some(0..5_000),
        "{frozen:?}"
    );
    same("frozen").await;
    for b in frozen
        .batches
        .iter()
        .filter(|b| b.rows() >= MEM_STATES_MIN_ROWS)
    {
        assert_eq!(b.derived_keys(), [whole]);
        assert!(b.inherited(whole).is_empty());
    }
    engine.db().flush_all().await.unwrap();
    assert_eq!(t.mem.bytes(), 0, "everything charged leaves with the rows");
    same("flushed").await;
}

/// A day's small in-memory batches share states kept with the newest of
/// them, counted in the memstore's bytes until the rows are flushed, and
/// answer as the rows read raw do as the run grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_days_small_batches_keep_their_states_with_the_newest() {
    use arrow::util::pretty::pretty_format_batches;
    use kiln_storage::{Db, StorageConfig};

    use super::mem::TAIL;
    use super::scan::MEM_STATES_MIN_ROWS;
    use crate::{Engine, Output};

    let tmp = tempfile::tempdir().unwrap();
    let mut storage = StorageConfig::for_dir(tmp.path());
    storage.background_interval = std::time::Duration::from_secs(3600);
    let engine = Engine::new(Db::open(storage).await.unwrap()).unwrap();
    for sql in [
        "CREATE TABLE t (ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT, u BIGINT)",
        "CREATE CUBE c ON t DIMENSIONS (date_trunc('hour', ts) AS h, k) \
         MEASURES (count(*) AS n, sum(v) AS s, count(DISTINCT u) AS users)",
    ] {
        engine.execute(sql).await.unwrap();
    }
    let mut next = 0i64;
    let mut write = |rows: i64| {
        next += rows;
        insert_day(next - rows..next)
    };
    async fn rows_of(engine: &Engine, sql: &str) -> String {
        match engine.execute(sql).await.unwrap().pop().unwrap() {
            Output::Rows { batches, .. } => pretty_format_batches(&batches).unwrap().to_string(),
            other => panic!("not rows: {other:?}"),
        }
    }
    // A range cutting the hours too: its edges are read raw.
    let queries = [
        "SELECT date_trunc('hour', ts) AS h, k, count(*), sum(v), count(DISTINCT u) \
         FROM t GROUP BY 1, 2 ORDER BY 1, 2",
        "SELECT k, count(*), sum(v) FROM t WHERE ts >= TIMESTAMP '2026-11-02 03:30:00' \
         AND ts < TIMESTAMP '2026-11-02 20:00:00' GROUP BY k ORDER BY k",
    ];
    let t = engine.db().table("t").unwrap();
    let tail = (t.cubes()[0].id, TAIL);
    for (round, rows) in [300, 200, 100, 50].into_iter().enumerate() {
        engine.execute(&write(rows)).await.unwrap();
        for query in queries {
            let plan = rows_of(&engine, &format!("EXPLAIN {query}")).await;
            assert!(plan.contains("CubeScan"), "{plan}");
            let raw = query.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
            let got = rows_of(&engine, query).await;
            assert_eq!(got, rows_of(&engine, &raw).await, "round {round}: {query}");
        }
        let batches = t.snapshot().mem_by_days();
        assert!(batches.iter().all(|(_, b)| b.rows() < MEM_STATES_MIN_ROWS));
        let (newest, older) = batches.split_last().unwrap();
        assert_eq!(newest.1.derived_keys(), [tail], "round {round}");
        assert!(newest.1.charged() > 0, "round {round}");
        // Each older batch was the newest once; its states went since.
        assert_eq!(older.len(), round, "no batch merged");
        for (_, b) in older {
            assert!(!b.derived_keys().contains(&tail), "round {round}");
        }
    }
    // Writes of 40 rows: each new batch merges with the newest ones no
    // larger than it, into a batch inheriting the last run's states. The
    // states grow from those of the last run: its groups and the new
    // rows' stay apart (more rows than groups), which no aggregation of
    // the run's rows would give.
    let groups = |sql: &str| {
        let sql = sql.to_string();
        let engine = &engine;
        async move {
            match engine.execute(&sql).await.unwrap().pop().unwrap() {
                Output::Rows { batches, .. } => batches.iter().map(|b| b.num_rows()).sum::<usize>(),
                other => panic!("not rows: {other:?}"),
            }
        }
    };
    for round in 0..12 {
        engine.execute(&write(40)).await.unwrap();
        for query in queries {
            let raw = query.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
            let got = rows_of(&engine, query).await;
            assert_eq!(got, rows_of(&engine, &raw).await, "round {round}: {query}");
        }
        let batches = t.snapshot().mem_by_days();
        let newest = &batches.last().unwrap().1;
        assert!(newest.inherited(tail).is_empty(), "round {round}: let go");
        let kept = super::mem::tail_rows(newest, tail).expect("states kept");
        let groups = groups("SELECT DISTINCT date_trunc('hour', ts), k FROM t").await;
        assert!(
            kept > groups,
            "round {round}: {kept} rows of {groups} groups"
        );
    }
    engine.db().flush_all().await.unwrap();
    assert_eq!(t.mem.bytes(), 0, "everything charged leaves with the rows");
}

/// Two sorted batches of states interleaved are sorted, hold every row of
/// both, and put a group in both after the older's rows.
#[test]
fn interleaved_states_stay_sorted() {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::rollup::{interleaved, sorted};

    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Utf8, true),
        Field::new("v", DataType::Int64, false),
    ]));
    let batch = |seed: i64, rows: i64| {
        let a: Int64Array = (0..rows)
            .map(|i| ((i * seed) % 7 != 3).then_some((i * seed + seed) % 5))
            .collect();
        let b: StringArray = (0..rows)
            .map(|i| Some(["x", "y", "z"][((i + seed) % 3) as usize]))
            .collect();
        let v = Int64Array::from_iter_values((0..rows).map(|i| seed * 1000 + i));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(a), Arc::new(b), Arc::new(v)])
                .unwrap();
        sorted(batch, 2).unwrap()
    };
    for (older, newer) in [(40, 7), (3, 30), (0, 5), (5, 0), (1, 1), (64, 64)] {
        let (o, n) = (batch(3, older), batch(11, newer));
        let out = interleaved(&o, &n, 2).unwrap();
        assert_eq!(out.num_rows(), o.num_rows() + n.num_rows());
        let key = |b: &RecordBatch, i: usize| {
            let a = b.column(0).as_primitive::<Int64Type>();
            let s = b.column(1).as_string::<i32>();
            (a.is_valid(i).then(|| a.value(i)), s.value(i).to_string())
        };
        let v = out.column(2).as_primitive::<Int64Type>();
        for i in 1..out.num_rows() {
            let (prev, this) = (key(&out, i - 1), key(&out, i));
            assert!(prev <= this, "{older}+{newer}: row {i} out of order");
            if prev == this && v.value(i - 1) >= 11_000 {
                assert!(v.value(i) >= 11_000, "{older}+{newer}: newer before older");
            }
        }
        let mut values: Vec<i64> = v.values().to_vec();
        values.sort();
        let mut expected: Vec<i64> = (o.column(2).as_primitive::<Int64Type>().values().iter())
            .chain(n.column(2).as_primitive::<Int64Type>().values().iter())
            .copied()
            .collect();
        expected.sort();
        assert_eq!(values, expected, "{older}+{newer}");
    }
}

/// An INSERT into `t (ts, k, v, u)` of rows `ids`, spread over one day.
fn insert_day(ids: std::ops::Range<i64>) -> String {
    let values: Vec<String> = ids
        .map(|i| {
            let k = ["a", "b", "c"][(i % 3) as usize];
            format!(
                "(TIMESTAMP '2026-11-02 00:00:00' + INTERVAL '{} seconds', '{k}', {}, {})",
                i * 37 % 86_400,
                i % 101 - 50,
                i * 7 % 1_009
            )
        })
        .collect();
    format!("INSERT INTO t VALUES {}", values.join(", "))
}

/// A compaction makes the merged segment's part of a cube by merging its
/// inputs' parts where they all have one, and from the rows where one
/// lacks it; either way every measure answers as the rows read raw do
/// (floating point to a relative 1e-9, a t-digest's percentile to 5% of
/// the values' range).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_merges_its_inputs_parts() {
    use std::sync::atomic::Ordering;

    use datafusion::arrow::array::{Array, AsArray, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Float64Type};
    use kiln_storage::{Db, StorageConfig};

    use crate::{Engine, Output};

    let tmp = tempfile::tempdir().unwrap();
    let mut storage = StorageConfig::for_dir(tmp.path());
    storage.background_interval = std::time::Duration::from_secs(3600);
    storage.compaction_min_segments = 2;
    let engine = Engine::new(Db::open(storage).await.unwrap()).unwrap();
    let measures = [
        "count(*)",
        "count(v)",
        "sum(v)",
        "min(v)",
        "max(v)",
        "avg(v)",
        "count(DISTINCT u)",
        "count(DISTINCT k)",
        "var_samp(v)",
        "var_pop(v)",
        "stddev_samp(v)",
        "stddev_pop(v)",
        "covar_samp(v, u)",
        "covar_pop(v, u)",
        "corr(v, u)",
        "approx_distinct(u)",
        "bitmap_agg(u)",
        "approx_percentile_cont(v, 0.5, 100)",
    ];
    let list = measures.join(", ");
    engine
        .execute("CREATE TABLE t (ts TIMESTAMP NOT NULL, k VARCHAR, v BIGINT, u BIGINT)")
        .await
        .unwrap();
    engine
        .execute(&format!(
            "CREATE CUBE c ON t DIMENSIONS (date_trunc('hour', ts) AS h, k) MEASURES ({list})"
        ))
        .await
        .unwrap();
    let db = engine.db().clone();
    engine.execute(&insert_day(0..1_500)).await.unwrap();
    db.flush_all().await.unwrap();
    // A cube the first segment has no part of (until the background
    // builds it): the merged segment's part is built from its rows.
    engine
        .execute(&format!(
            "CREATE CUBE d ON t DIMENSIONS (k) MEASURES ({list})"
        ))
        .await
        .unwrap();
    for ids in [1_500..3_500, 3_500..4_200] {
        engine.execute(&insert_day(ids)).await.unwrap();
        db.flush_all().await.unwrap();
    }
    let t = db.table("t").unwrap();
    let inputs = t.segments();
    assert_eq!(inputs.len(), 3);
    let whole = t
        .cubes()
        .iter()
        .filter(|c| inputs.iter().all(|s| s.part(c.id).is_some()))
        .count();
    assert!(whole >= 1, "cube c has every input's part");
    let merged = || db.metrics().parts_merged.load(Ordering::Relaxed);
    let before = merged();
    db.compact_all().await.unwrap();
    assert_eq!(t.segments().len(), 1, "compacted");
    assert_eq!(merged() - before, whole as u64, "parts merged");
    assert!(t.segments()[0].parts().len() == 2, "both cubes have parts");

    async fn batch(engine: &Engine, sql: &str) -> RecordBatch {
        let Output::Rows {
            batches, schema, ..
        } = engine.execute(sql).await.unwrap().pop().unwrap()
        else {
            panic!("rows expected")
        };
        datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap()
    }
    for keys in ["date_trunc('hour', ts), k", "k"] {
        let query = format!("SELECT {keys}, {list} FROM t GROUP BY {keys} ORDER BY {keys}");
        let plan = format!("{:?}", batch(&engine, &format!("EXPLAIN {query}")).await);
        assert!(plan.contains("CubeScan"), "{plan}");
        let raw = query.replace("FROM t", "FROM (SELECT * FROM t LIMIT 1000000000) AS t");
        let (got, want) = (batch(&engine, &query).await, batch(&engine, &raw).await);
        assert_eq!(got.num_rows(), want.num_rows(), "{query}");
        for (i, field) in want.schema().fields().iter().enumerate() {
            let (g, w) = (got.column(i), want.column(i));
            let name = field.name();
            match field.data_type() {
                DataType::Float64 => {
                    let (g, w) = (
                        g.as_primitive::<Float64Type>(),
                        w.as_primitive::<Float64Type>(),
                    );
                    for r in 0..w.len() {
                        assert_eq!(g.is_null(r), w.is_null(r), "{name} row {r}");
                        let (a, b) = (g.value(r), w.value(r));
                        let close = match name.contains("approx_percentile") {
                            true => (a - b).abs() <= 5.0,
                            false => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                        };
                        assert!(close, "{name} row {r}: {a} against {b}");
                    }
                }
                _ => assert_eq!(g, w, "{name}"),
            }
        }
    }
}
