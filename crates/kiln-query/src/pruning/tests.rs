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
