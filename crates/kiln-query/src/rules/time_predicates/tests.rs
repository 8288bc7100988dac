use std::sync::Arc;

use arrow::array::{RecordBatch, TimestampMillisecondArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{DataFrame, SessionContext};

use super::TimePredicates;

const DAY_NS: i64 = 86_400_000_000_000;
/// 2026-10-30T00:00:00Z.
const START_NS: i64 = 1_761_782_400_000_000_000;

/// Instants around day, month and year boundaries: every 15 minutes over
/// six days from 2026-10-30, one nanosecond either side of each midnight,
/// the new year 2027 and a NULL.
fn table() -> MemTable {
    let mut ns: Vec<Option<i64>> = vec![None];
    for day in 0..6 {
        let midnight = START_NS + day * DAY_NS;
        ns.extend([midnight - 1, midnight, midnight + 1].map(Some));
        ns.extend((0..96).map(|q| Some(midnight + q * 900_000_000_000)));
    }
    let new_year: i64 = 1_798_761_600_000_000_000; // 2027-01-01
    ns.extend([new_year - 1, new_year, new_year + 1].map(Some));
    let ms: Vec<Option<i64>> = ns.iter().map(|v| v.map(|v| v / 1_000_000)).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        Field::new(
            "ts_ms",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        ),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from(ns)),
            Arc::new(TimestampMillisecondArray::from(ms)),
        ],
    )
    .unwrap();
    MemTable::try_new(schema, vec![vec![batch]]).unwrap()
}

fn context(with_rule: bool) -> SessionContext {
    let mut builder = SessionStateBuilder::new().with_default_features();
    if with_rule {
        builder = builder.with_optimizer_rule(Arc::new(TimePredicates));
    }
    let ctx = SessionContext::new_with_state(builder.build());
    ctx.register_table("t", Arc::new(table())).unwrap();
    ctx
}

async fn count(ctx: &SessionContext, predicate: &str) -> i64 {
    let batches = ctx
        .sql(&format!("SELECT count(*) FROM t WHERE {predicate}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    arrow::array::cast::AsArray::as_primitive::<arrow::datatypes::Int64Type>(batches[0].column(0))
        .value(0)
}

async fn filter_plan(ctx: &SessionContext, predicate: &str) -> String {
    let plan = ctx
        .sql(&format!("SELECT ts FROM t WHERE {predicate}"))
        .await
        .unwrap()
        .into_optimized_plan()
        .unwrap();
    plan.display_indent().to_string()
}

const LHS: &[&str] = &[
    "ts - INTERVAL '1 day'",
    "ts + INTERVAL '36 hours'",
    "INTERVAL '2 hours' + ts",
    "ts_ms - INTERVAL '90 minutes'",
    "date_trunc('day', ts)",
    "date_trunc('HOUR', ts)",
    "date_trunc('minute', ts_ms)",
    "date_trunc('month', ts)",
    "date_trunc('year', ts)",
    // Not rewritten (months vary in length; weeks start on Monday): still
    // compared, to check they are left alone and stay right.
    "ts - INTERVAL '1 month'",
    "date_trunc('week', ts)",
];

const CONSTANTS: &[&str] = &[
    "TIMESTAMP '2026-11-01 00:00:00'",
    "TIMESTAMP '2026-11-02 13:00:00'",
    "TIMESTAMP '2026-11-02 12:34:56.5'",
    "TIMESTAMP '2027-01-01 00:00:00'",
];

#[tokio::test]
async fn rewritten_predicates_select_the_same_rows() {
    let (plain, kiln) = (context(false), context(true));
    let mut checked = 0;
    for lhs in LHS {
        for c in CONSTANTS {
            for op in ["<", "<=", ">", ">=", "=", "<>"] {
                for predicate in [format!("{lhs} {op} {c}"), format!("{c} {op} {lhs}")] {
                    let (want, got) = (
                        count(&plain, &predicate).await,
                        count(&kiln, &predicate).await,
                    );
                    assert_eq!(got, want, "{predicate}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, LHS.len() * CONSTANTS.len() * 12);
    // Not vacuous: the boundaries split the rows.
    let plain = context(false);
    let below = count(
        &plain,
        "date_trunc('day', ts) < TIMESTAMP '2026-11-01 00:00:00'",
    )
    .await;
    assert!(below > 0 && below < count(&plain, "true").await - 1);
}

#[tokio::test]
async fn predicates_compare_the_bare_column() {
    let kiln = context(true);
    for predicate in [
        "ts - INTERVAL '1 day' < TIMESTAMP '2026-11-03 00:00:00'",
        "date_trunc('day', ts) < TIMESTAMP '2026-11-03 00:00:00'",
        "TIMESTAMP '2026-11-01 00:00:00' = date_trunc('month', ts)",
        "date_trunc('minute', ts_ms) >= TIMESTAMP '2026-11-02 13:00:00'",
    ] {
        let plan = filter_plan(&kiln, predicate).await;
        assert!(
            !plan.contains("date_trunc") && !plan.contains("Interval"),
            "{predicate}:\n{plan}"
        );
    }
    let plan = filter_plan(
        &kiln,
        "ts - INTERVAL '1 day' < TIMESTAMP '2026-11-03 00:00:00'",
    )
    .await;
    // 2026-11-04T00:00:00 in nanoseconds.
    assert!(
        plan.contains("t.ts < TimestampNanosecond(1793750400000000000, None)"),
        "{plan}"
    );
    // Off a boundary, or with a calendar-length interval: left alone.
    for predicate in [
        "date_trunc('day', ts) < TIMESTAMP '2026-11-02 12:34:56'",
        "ts - INTERVAL '1 month' < TIMESTAMP '2026-11-03 00:00:00'",
    ] {
        let plan = filter_plan(&kiln, predicate).await;
        assert!(
            plan.contains("date_trunc") || plan.contains("Interval"),
            "{predicate}:\n{plan}"
        );
    }
}

/// Rows where `predicate` holds with `$1` bound to `value` after the plan
/// was optimized with the placeholder, as a kept generic plan runs.
async fn count_generic(ctx: &SessionContext, predicate: &str, value: &ScalarValue) -> i64 {
    let state = ctx.state();
    let plan = ctx
        .sql(&format!("SELECT count(*) FROM t WHERE {predicate}"))
        .await
        .unwrap()
        .into_unoptimized_plan();
    let optimized = state.optimize(&plan).unwrap();
    let bound = optimized.with_param_values(vec![value.clone()]).unwrap();
    let batches = DataFrame::new(state, bound).collect().await.unwrap();
    arrow::array::cast::AsArray::as_primitive::<arrow::datatypes::Int64Type>(batches[0].column(0))
        .value(0)
}

#[tokio::test]
async fn shifts_against_a_placeholder_select_the_same_rows() {
    let (plain, kiln) = (context(false), context(true));
    let values = [
        START_NS + 2 * DAY_NS,
        START_NS + 2 * DAY_NS + 13 * 3_600_000_000_000,
        START_NS + 3 * DAY_NS + 1,
    ];
    let mut checked = 0;
    for (lhs, ms) in [
        ("ts - INTERVAL '1 day'", false),
        ("ts + INTERVAL '36 hours'", false),
        ("INTERVAL '2 hours' + ts", false),
        ("ts_ms - INTERVAL '90 minutes'", true),
        ("ts - INTERVAL '1 month'", false),
    ] {
        for ns in values {
            let value = if ms {
                ScalarValue::TimestampMillisecond(Some(ns / 1_000_000), None)
            } else {
                ScalarValue::TimestampNanosecond(Some(ns), None)
            };
            for op in ["<", "<=", ">", ">=", "=", "<>"] {
                for predicate in [format!("{lhs} {op} $1"), format!("$1 {op} {lhs}")] {
                    let want = count_generic(&plain, &predicate, &value).await;
                    let got = count_generic(&kiln, &predicate, &value).await;
                    assert_eq!(got, want, "{predicate} with {value}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 5 * 3 * 12);
    let some = count_generic(
        &plain,
        "ts - INTERVAL '1 day' < $1",
        &ScalarValue::TimestampNanosecond(Some(values[0]), None),
    )
    .await;
    assert!(some > 0 && some < count(&plain, "true").await - 1);
}

#[tokio::test]
async fn shifts_against_a_placeholder_compare_the_bare_column() {
    let kiln = context(true);
    let plan = filter_plan(&kiln, "ts - INTERVAL '1 day' < $1").await;
    assert!(plan.contains("t.ts < $1 + DurationNanosecond"), "{plan}");
    // A month varies in length: left alone.
    let plan = filter_plan(&kiln, "ts - INTERVAL '1 month' < $1").await;
    assert!(plan.contains("t.ts - IntervalMonthDayNano"), "{plan}");
}

async fn values(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

#[tokio::test]
async fn fixed_intervals_added_as_durations_give_the_same_values() {
    let (plain, kiln) = (context(false), context(true));
    for expr in [
        "ts + INTERVAL '1 day'",
        "ts - INTERVAL '36 hours 5 minutes'",
        "INTERVAL '2 hours' + ts",
        "ts_ms - INTERVAL '90 minutes'",
        "ts_ms + INTERVAL '1.5 seconds'",
        "date_trunc('day', ts) + INTERVAL '7 day'",
        // Left as intervals: a month varies, and a nanosecond is finer than
        // a millisecond tick.
        "ts + INTERVAL '1 month'",
        "ts_ms + INTERVAL '1 nanosecond'",
    ] {
        let sql = format!("SELECT {expr} AS v FROM t ORDER BY ts");
        let want = values(&plain, &sql).await.unwrap();
        let got = values(&kiln, &sql).await.unwrap();
        assert_eq!(got, want, "{expr}");
        let n: usize = want.iter().map(|b| b.num_rows()).sum();
        assert!(n > 500, "{expr}: {n} rows");
    }
    let plan = |sql: &'static str| {
        let kiln = &kiln;
        async move {
            let df = kiln.sql(sql).await.unwrap();
            df.into_optimized_plan()
                .unwrap()
                .display_indent()
                .to_string()
        }
    };
    let p = plan("SELECT date_trunc('day', ts) + INTERVAL '7 day' AS v FROM t").await;
    assert!(
        p.contains(r#"+ DurationNanosecond("604800000000000") AS v"#)
            && !p.contains("IntervalMonthDayNano"),
        "{p}"
    );
    let p = plan("SELECT ts_ms - INTERVAL '90 minutes' AS v FROM t").await;
    assert!(
        p.contains(r#"- DurationMillisecond("5400000") AS v"#),
        "{p}"
    );
    // Unaliased, the column keeps the name it had.
    let p = plan("SELECT ts - INTERVAL '1 hour' FROM t").await;
    assert!(p.contains("AS t.ts - IntervalMonthDayNano"), "{p}");
    let p = plan("SELECT ts + INTERVAL '1 month' AS v FROM t").await;
    assert!(p.contains("+ IntervalMonthDayNano"), "{p}");
    // Past the end of the nanosecond range both forms fail, neither wraps.
    let sql = "SELECT ts + INTERVAL '100000 days' FROM t";
    assert!(values(&plain, sql).await.is_err());
    let err = values(&kiln, sql).await.unwrap_err().to_string();
    assert!(err.contains("verflow"), "{err}");
}

/// `t` as a provider that applies its filters itself, as Kiln's does: they
/// are pushed into the scan as exact, and must be rewritten there.
#[derive(Debug)]
struct ExactFilters(MemTable);

#[async_trait::async_trait]
impl datafusion::catalog::TableProvider for ExactFilters {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.0.schema()
    }
    fn table_type(&self) -> datafusion::datasource::TableType {
        datafusion::datasource::TableType::Base
    }
    fn supports_filters_pushdown(
        &self,
        filters: &[&datafusion::logical_expr::Expr],
    ) -> datafusion::common::Result<Vec<datafusion::logical_expr::TableProviderFilterPushDown>>
    {
        Ok(vec![datafusion::logical_expr::TableProviderFilterPushDown::Exact; filters.len()])
    }
    async fn scan(
        &self,
        state: &dyn datafusion::catalog::Session,
        projection: Option<&Vec<usize>>,
        filters: &[datafusion::logical_expr::Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        self.0.scan(state, projection, filters, limit).await
    }
}

#[tokio::test]
async fn filters_pushed_into_the_scan_are_rewritten_there() {
    let kiln = context(true);
    kiln.deregister_table("t").unwrap();
    kiln.register_table("t", Arc::new(ExactFilters(table())))
        .unwrap();
    for (predicate, want) in [
        (
            "ts - INTERVAL '1 day' < $1",
            "full_filters=[t.ts < $1 + DurationNanosecond",
        ),
        (
            "date_trunc('day', ts) < TIMESTAMP '2026-11-03 00:00:00'",
            "full_filters=[t.ts < TimestampNanosecond(1793664000000000000, None)]",
        ),
    ] {
        let plan = filter_plan(&kiln, predicate).await;
        assert!(plan.contains(want), "{predicate}:\n{plan}");
        assert!(!plan.contains("Filter:"), "{predicate}:\n{plan}");
    }
}
