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

#[test]
fn distinct_values_round_trip_and_refuse_corrupt_states() {
    use super::distinct::{decode, encode};
    let values = [0, 1, 127, 128, 300, 1 << 40, u64::MAX - 1, u64::MAX];
    let bytes = encode(&values);
    let mut back = vec![];
    decode(&bytes, &mut back).unwrap();
    assert_eq!(back, values);
    // Small gaps take one byte each.
    assert_eq!(encode(&[5, 6, 7, 100]).len(), 4);
    let mut out = vec![];
    assert!(decode(&[0x80], &mut out).is_err(), "a cut varint");
    assert!(decode(&[0xff; 11], &mut out).is_err(), "a varint too long");
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
    use super::distinct::{DistinctValues, decode, encode};
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
    use super::distinct::{DistinctValues, encode};
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
    use super::distinct::{DistinctValues, clean_kept, encode};
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
