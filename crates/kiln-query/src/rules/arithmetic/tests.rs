use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use super::*;

fn ctx() -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_analyzer_rule(Arc::new(CheckedArithmetic))
        .build();
    SessionContext::new_with_state(state)
}

async fn run(sql: &str) -> Result<Vec<arrow::record_batch::RecordBatch>> {
    ctx().sql(sql).await?.collect().await
}

#[tokio::test]
async fn a_float_divided_by_zero_is_an_error() {
    for sql in [
        "SELECT 1.0 / 0.0",
        "SELECT CAST(x AS DOUBLE) / 0.0 FROM (VALUES (1), (2)) t(x)",
        "SELECT CAST(x AS REAL) / CAST(y AS REAL) FROM (VALUES (1, 1), (2, 0)) t(x, y)",
    ] {
        let e = run(sql).await.unwrap_err();
        assert!(
            matches!(e.find_root(), DataFusionError::ArrowError(a, _) if matches!(**a, ArrowError::DivideByZero)),
            "{sql}: {e}"
        );
    }
}

#[tokio::test]
async fn other_divisions_and_names_are_unchanged() {
    let batches = run(
        "SELECT CAST(x AS DOUBLE) / 4.0, CAST(NULL AS DOUBLE) / 0.0 AS n FROM (VALUES (1)) t(x)",
    )
    .await
    .unwrap();
    let schema = batches[0].schema();
    assert_eq!(schema.field(0).name(), "t.x / Float64(4)");
    let col = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .unwrap();
    assert_eq!(col.value(0), 0.25);
    assert!(batches[0].column(1).is_null(0));
}

fn overflowed(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::ArrowError(a, _) if matches!(**a, ArrowError::ArithmeticOverflow(_)))
}

#[tokio::test]
async fn integer_overflow_is_an_error() {
    for sql in [
        "SELECT 9223372036854775807 + 1",
        "SELECT CAST(-9223372036854775808 AS BIGINT) - 1",
        "SELECT 4611686018427387904 * 2",
        "SELECT x + 1 FROM (VALUES (1), (9223372036854775807)) t(x)",
        "SELECT 1 - x FROM (VALUES (1), (-9223372036854775807)) t(x)",
        "SELECT x * y FROM (VALUES (3, 4), (3037000500, 3037000500)) t(x, y)",
        "SELECT -x FROM (VALUES (1), (-9223372036854775808)) t(x)",
        "SELECT CAST(x AS INT) + CAST(x AS INT) FROM (VALUES (1), (2147483647)) t(x)",
        "SELECT CAST(x AS SMALLINT) * CAST(2 AS SMALLINT) FROM (VALUES (20000)) t(x)",
        "SELECT arrow_cast(x, 'UInt32') - arrow_cast(y, 'UInt32') FROM (VALUES (1, 2)) t(x, y)",
        "SELECT count(*) FROM (VALUES (1), (9223372036854775807)) t(x) WHERE x + 1 > 0",
        "SELECT sum(x * 2) FROM (VALUES (1), (9223372036854775807)) t(x)",
        "SELECT x + 1 AS k, count(*) FROM (VALUES (9223372036854775807)) t(x) GROUP BY x + 1",
    ] {
        let e = run(sql).await.unwrap_err();
        assert!(overflowed(&e), "{sql}: {e}");
    }
}

#[tokio::test]
async fn integer_arithmetic_in_range_is_unchanged() {
    let batches = run("SELECT x + 1, x - y, x * y, -x, x + NULL AS n, \
         CAST(y AS INT) + CAST(y AS INT) AS i \
         FROM (VALUES (CAST(-9223372036854775807 AS BIGINT), 1)) t(x, y)")
    .await
    .unwrap();
    let b = &batches[0];
    let schema = b.schema();
    assert_eq!(schema.field(0).name(), "t.x + Int64(1)");
    assert_eq!(schema.field(1).name(), "t.x - t.y");
    assert_eq!(schema.field(5).data_type(), &DataType::Int32);
    let int = |i: usize| {
        b.column(i)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!(int(0), -9223372036854775806);
    assert_eq!(int(1), i64::MIN);
    assert_eq!(int(2), -9223372036854775807);
    assert_eq!(int(3), 9223372036854775807);
    assert!(b.column(4).is_null(0));
    // Only the rows that are not NULL are checked: a NULL row's value
    // slot holds whatever it holds.
    let batches = run("SELECT x * 2 FROM (VALUES (CAST(NULL AS BIGINT)), (4)) t(x)")
        .await
        .unwrap();
    assert_eq!(batches[0].column(0).null_count(), 1);
}

#[tokio::test]
async fn the_plan_names_the_checked_functions() {
    let batches = run("EXPLAIN SELECT x * 2 + 1, -x FROM (VALUES (1)) t(x)")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    for f in ["checked_add(checked_mul(", "checked_negate("] {
        assert!(text.contains(f), "{f} not in\n{text}");
    }
    // Timestamps and intervals are not integers: left as they are.
    let batches = run("EXPLAIN SELECT now() - INTERVAL '1 day'")
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(!text.contains("checked_"), "{text}");
}

#[test]
fn a_null_rows_value_is_not_checked() {
    use arrow::array::Int64Array;
    use arrow::buffer::NullBuffer;
    // A NULL row's slot may hold any value: here one that would overflow.
    let x = Int64Array::new(
        vec![i64::MAX, 1, i64::MIN].into(),
        Some(NullBuffer::from(vec![false, true, false])),
    );
    for op in [IntOp::Add, IntOp::Sub, IntOp::Mul, IntOp::Negate] {
        let f = CheckedInt::new(op);
        let x = ColumnarValue::Array(Arc::new(x.clone()));
        let args = match op {
            IntOp::Negate => vec![x],
            _ => vec![x, ColumnarValue::Scalar(ScalarValue::Int64(Some(2)))],
        };
        let out = f
            .invoke_with_args(ScalarFunctionArgs {
                number_rows: 3,
                arg_fields: args
                    .iter()
                    .map(|_| Arc::new(arrow::datatypes::Field::new("x", DataType::Int64, true)))
                    .collect(),
                return_field: Arc::new(arrow::datatypes::Field::new("r", DataType::Int64, true)),
                config_options: Arc::new(ConfigOptions::default()),
                args,
            })
            .unwrap()
            .into_array(3)
            .unwrap();
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(out.null_count(), 2, "{op:?}");
        let want = match op {
            IntOp::Add => 3,
            IntOp::Sub => -1,
            IntOp::Mul => 2,
            IntOp::Negate => -1,
        };
        assert_eq!(out.value(1), want, "{op:?}");
    }
}

#[tokio::test]
async fn string_concat_keeps_its_name_its_nulls_and_its_type() {
    let batches = run("SELECT s || t, s || 'x', arrow_cast(s, 'Utf8View') || arrow_cast(t, 'Utf8View') AS v FROM (VALUES ('a', 'b'), ('c', NULL)) w(s, t)")
        .await
        .unwrap();
    let batch = &batches[0];
    assert_eq!(batch.schema().field(0).name(), "w.s || w.t");
    assert_eq!(batch.schema().field(2).data_type(), &DataType::Utf8View);
    let text = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let rows: Vec<&str> = text.lines().skip(3).take(2).collect();
    assert_eq!(
        rows,
        [
            "| ab         | ax               | ab |",
            "|            | cx               |    |"
        ]
    );
}

/// `sql` run as the session's planner runs it: temporal operators made
/// checked once the plan is optimized.
async fn run_planned(sql: &str) -> Result<Vec<arrow::record_batch::RecordBatch>> {
    let ctx = ctx();
    let optimized = ctx.sql(sql).await?.into_optimized_plan()?;
    let plan = checked_time(&optimized)?.unwrap_or(optimized);
    let plan = ctx.state().create_physical_plan(&plan).await?;
    datafusion::physical_plan::collect(plan, ctx.task_ctx()).await
}

#[tokio::test]
async fn a_timestamp_or_date_moved_past_its_years_is_out_of_range() {
    for sql in [
        "SELECT TIMESTAMP '2262-01-01' + INTERVAL '1 year'",
        "SELECT INTERVAL '1 year' + TIMESTAMP '2262-01-01'",
        "SELECT t - INTERVAL '300 years' FROM (VALUES (TIMESTAMP '1900-01-01')) v(t)",
        "SELECT d + INTERVAL '6000000 years' FROM (VALUES (DATE '2000-01-01')) v(d)",
    ] {
        let e = run_planned(sql).await.unwrap_err();
        let found = match e.find_root() {
            DataFusionError::External(x) => x.downcast_ref::<Error>().map(Error::kind),
            _ => None,
        };
        assert_eq!(
            found,
            Some(crate::error::ErrorKind::DatetimeOutOfRange),
            "{sql}: {e}"
        );
    }
    // In range, answers, types and names are the operator's own.
    let batches = run_planned(
        "SELECT TIMESTAMP '2026-01-31' + INTERVAL '1 month' AS t, DATE '2026-03-01' - INTERVAL '1 day' AS d, \
         INTERVAL '1 hour' + TIMESTAMP '2026-01-01 23:30:00' AS u",
    )
    .await
    .unwrap();
    let shown = arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(shown.contains("2026-02-28T00:00:00"), "{shown}");
    assert!(shown.contains("2026-02-28 "), "{shown}");
    assert!(shown.contains("2026-01-02T00:30:00"), "{shown}");
    // The optimized plan keeps the operator; the planned one calls the
    // checked function, under the operator's name.
    let ctx = ctx();
    let sql = "SELECT t + INTERVAL '1 day' AS moved FROM (VALUES (TIMESTAMP '2026-01-01')) v(t)";
    let optimized = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
    assert!(
        !optimized
            .display_indent()
            .to_string()
            .contains("checked_time")
    );
    let planned = checked_time(&optimized).unwrap().unwrap();
    let shown = planned.display_indent().to_string();
    assert!(shown.contains("checked_time_add"), "{shown}");
    assert_eq!(planned.schema().field(0).name(), "moved");
    // A plan of no temporal operator is left as it is.
    let plain = ctx
        .sql("SELECT 1 + 2")
        .await
        .unwrap()
        .into_optimized_plan()
        .unwrap();
    assert!(checked_time(&plain).unwrap().is_none());
    // The analyzer pass alone leaves temporal operators to planning.
    assert!(
        run("SELECT TIMESTAMP '2262-01-01' + INTERVAL '1 year'")
            .await
            .is_err()
    );
}
