use arrow::datatypes::{Field, Schema};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, col, lit};
use datafusion::prelude::SessionContext;

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("k", DataType::Int64, true),
        Field::new("s", DataType::Utf8View, true),
    ]))
}

/// Five containers: k in 0..=9, 10..=19, 20..=29, unknown, and all null;
/// s from "b" to "d" in each.
fn containers() -> Vec<ContainerStats> {
    let str = |v: &str| Some(StatValue::Str(v.into()));
    let ts = (Some(StatValue::Int(0)), Some(StatValue::Int(1)), Some(0));
    let ranged = |lo: i64, hi: i64| ContainerStats {
        columns: vec![
            ts.clone(),
            (Some(StatValue::Int(lo)), Some(StatValue::Int(hi)), Some(0)),
            (str("b"), str("d"), Some(0)),
        ],
        rows: Some(10),
    };
    let mut unknown = ranged(0, 0);
    unknown.columns[1] = (None, None, None);
    let mut all_null = ranged(0, 0);
    all_null.columns[1] = (None, None, Some(10));
    vec![
        ranged(0, 9),
        ranged(10, 19),
        ranged(20, 29),
        unknown,
        all_null,
    ]
}

fn physical(e: Expr) -> Arc<dyn PhysicalExpr> {
    let df_schema = DFSchema::try_from(schema().as_ref().clone()).unwrap();
    SessionContext::new()
        .create_physical_expr(e, &df_schema)
        .unwrap()
}

/// DataFusion's general pruning of the same predicate.
fn full(e: &Arc<dyn PhysicalExpr>) -> Pruner {
    let p = PruningPredicateBuilder::new()
        .with_file_schema(schema())
        .build(e.clone())
        .unwrap();
    Pruner::Full(Arc::unwrap_or_clone(p))
}

#[test]
fn comparisons_prune_directly_and_as_datafusion_does() {
    let cases = [
        (col("k").eq(lit(15i64)), [false, true, false, true, false]),
        (lit(15i64).eq(col("k")), [false, true, false, true, false]),
        (col("k").lt(lit(10i64)), [true, false, false, true, false]),
        (col("k").lt_eq(lit(10i64)), [true, true, false, true, false]),
        (lit(10i64).gt_eq(col("k")), [true, true, false, true, false]),
        (col("k").gt(lit(19i64)), [false, false, true, true, false]),
        (col("k").gt_eq(lit(19i64)), [false, true, true, true, false]),
        (
            col("k").gt_eq(lit(5i64)).and(col("k").lt(lit(10i64))),
            [true, false, false, true, false],
        ),
        (col("k").eq(lit(100i64)), [false, false, false, true, false]),
        (col("s").eq(lit("c")), [true, true, true, true, true]),
        (col("s").gt(lit("d")), [false, false, false, false, false]),
        (
            col("s").lt(lit("b")).and(col("k").gt(lit(0i64))),
            [false, false, false, false, false],
        ),
    ];
    for (e, want) in cases {
        let p = physical(e.clone());
        let bounds = pruner(Some(&p), &schema()).unwrap();
        assert!(matches!(*bounds, Pruner::Bounds(_)), "{e}");
        let got = keep(Some(&bounds), &schema(), &containers());
        assert_eq!(got, want, "{e}");
        assert_eq!(got, keep(Some(&full(&p)), &schema(), &containers()), "{e}");
    }
}

#[test]
fn other_filters_take_datafusions_pruning() {
    for e in [
        col("k").eq(lit(1i64)).or(col("k").eq(lit(25i64))),
        col("k").is_null(),
        col("k").not_eq(lit(3i64)),
        col("k").eq(col("k")),
        col("k").in_list(vec![lit(1i64), lit(25i64)], false),
    ] {
        let p = physical(e.clone());
        assert!(
            !matches!(
                pruner(Some(&p), &schema()).as_deref(),
                Some(Pruner::Bounds(_))
            ),
            "{e}"
        );
    }
    let or = physical(col("k").eq(lit(1i64)).or(col("k").eq(lit(25i64))));
    assert_eq!(
        keep(
            pruner(Some(&or), &schema()).as_deref(),
            &schema(),
            &containers()
        ),
        [true, false, true, true, false]
    );
}

#[test]
fn a_volatile_value_is_not_a_bound() {
    let random = datafusion::functions::math::random();
    let call = Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
        random,
        vec![],
    ));
    let e = physical(col("k").lt(datafusion::logical_expr::cast(call, DataType::Int64)));
    assert!(!matches!(
        pruner(Some(&e), &schema()).as_deref(),
        Some(Pruner::Bounds(_))
    ));
}

/// A container whose timestamps run from `lo` to `hi` ns (k and s unknown).
fn timed(lo: i64, hi: i64) -> ContainerStats {
    ContainerStats {
        columns: vec![
            (Some(StatValue::Int(lo)), Some(StatValue::Int(hi)), Some(0)),
            (None, None, None),
            (None, None, None),
        ],
        rows: Some(10),
    }
}

fn day_of_ts() -> Expr {
    datafusion::logical_expr::cast(col("ts"), DataType::Date32)
}

fn date(d: i32) -> Expr {
    lit(ScalarValue::Date32(Some(d)))
}

#[test]
fn a_timestamps_day_against_a_date_is_decided_by_its_statistics() {
    let day = |d: i64| d * NANOS_PER_DAY;
    let containers = [
        timed(day(9), day(10) - 1),
        timed(day(9) + 5, day(10) + 5),
        timed(day(10), day(13) - 1),
        timed(day(12) + 1, day(13)),
        timed(day(13), day(14)),
    ];
    // Days 10 to 12, as BI tools write a day range, and the same with
    // strict comparisons.
    let ranges = [
        day_of_ts().between(date(10), date(12)),
        day_of_ts().gt(date(9)).and(day_of_ts().lt(date(13))),
        date(10).lt_eq(day_of_ts()).and(date(12).gt_eq(day_of_ts())),
    ];
    for e in ranges {
        let e = physical(e);
        let p = pruner(Some(&e), &schema()).unwrap();
        assert!(matches!(p.as_ref(), Pruner::Bounds(_)), "{e}");
        let kept = keep(Some(&p), &schema(), &containers);
        assert_eq!(kept, [false, true, true, true, false], "{e}");
        // Bit 0: the lower end left to compare; bit 1: the upper end.
        let left = Conjuncts::of(&e, &schema()).residuals_of(&schema(), &containers);
        assert_eq!(left, [0b01, 0b01, 0, 0b10, 0b10], "{e}");
    }
    // Before 1970 too: the last nanosecond of 1969 is of day -1.
    let e = physical(day_of_ts().gt_eq(date(0)));
    let left = Conjuncts::of(&e, &schema()).residuals_of(&schema(), &[timed(-1, 0), timed(0, 5)]);
    assert_eq!(left, [1, 0]);
    // One day (`BETWEEN d AND d` is planned as `= d`): two midnights.
    let e = physical(day_of_ts().eq(date(10)));
    let p = pruner(Some(&e), &schema()).unwrap();
    assert!(matches!(p.as_ref(), Pruner::Bounds(_)));
    let within = [
        timed(day(10), day(11) - 1),
        timed(day(10) - 1, day(10)),
        timed(day(11), day(12)),
    ];
    assert_eq!(keep(Some(&p), &schema(), &within), [true, true, false]);
    let left = Conjuncts::of(&e, &schema()).residuals_of(&schema(), &within);
    assert_eq!(left, [0, 1, 1]);
}

/// Over random containers around midnights (before 1970 too), a day
/// comparison is proven exactly when both ends satisfy it (evaluated), and
/// pruned exactly when no time between them can.
#[test]
fn a_days_bound_agrees_with_evaluating_it() {
    let mut x: u64 = 7;
    let mut next = |n: i64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((x >> 33) as i64).rem_euclid(n)
    };
    let ops = [
        Operator::Lt,
        Operator::LtEq,
        Operator::Gt,
        Operator::GtEq,
        Operator::Eq,
    ];
    for _ in 0..400 {
        // Within a nanosecond to a day of a midnight between days -3 and 3.
        let mut at = || {
            let near = [0, 1, 2, 3_600_000_000_000, NANOS_PER_DAY - 1][next(5) as usize];
            (next(7) - 3) * NANOS_PER_DAY + near * [1, -1][next(2) as usize]
        };
        let (a, b) = (at(), at());
        let (lo, hi) = (a.min(b), a.max(b));
        let d = next(7) as i32 - 3;
        let op = ops[next(5) as usize];
        let e = physical(Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
            Box::new(day_of_ts()),
            op,
            Box::new(date(d)),
        )));
        let ends = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(arrow::array::TimestampNanosecondArray::from(vec![lo, hi])),
                Arc::new(arrow::array::Int64Array::from(vec![None, None])),
                Arc::new(arrow::array::StringViewArray::from(vec![
                    None::<&str>,
                    None,
                ])),
            ],
        )
        .unwrap();
        let truth = e.evaluate(&ends).unwrap().into_array(2).unwrap();
        let truth = truth.as_boolean();
        let both = truth.value(0) && truth.value(1);
        // Some row between the ends is of the day: for `=`, a day between
        // theirs; else (a day grows with its time) one end.
        let neither = match op {
            Operator::Eq => {
                let day = |t: i64| t.div_euclid(NANOS_PER_DAY);
                !(day(lo)..=day(hi)).contains(&i64::from(d))
            }
            _ => !truth.value(0) && !truth.value(1),
        };
        let c = [timed(lo, hi)];
        let left = Conjuncts::of(&e, &schema()).residuals_of(&schema(), &c);
        assert_eq!(left == [0], both, "{e} over {lo}..={hi}");
        let p = pruner(Some(&e), &schema()).unwrap();
        assert_eq!(
            !keep(Some(&p), &schema(), &c)[0],
            neither,
            "{e} over {lo}..={hi}"
        );
    }
}
