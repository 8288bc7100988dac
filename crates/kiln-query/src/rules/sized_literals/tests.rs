use arrow::array::{Array, AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;

/// A session with [`SizedLiterals`] and table `t` (x BIGINT) of `rows`
/// rows in batches of 8,192.
fn context(rows: i64) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(1))
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(SizedLiterals))
        .build();
    let ctx = SessionContext::new_with_state(state);
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batches = (0..rows)
        .step_by(8192)
        .map(|from| {
            let x = Int64Array::from_iter_values(from..(from + 8192).min(rows));
            RecordBatch::try_new(schema.clone(), vec![Arc::new(x)]).unwrap()
        })
        .collect();
    let table = MemTable::try_new(schema, vec![batches]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// `sql`'s physical plan and the batches it returns (or its error).
async fn run(ctx: &SessionContext, sql: &str) -> (String, Result<Vec<RecordBatch>>) {
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string();
    (shown, collect(plan, ctx.task_ctx()).await)
}

#[tokio::test]
async fn a_large_constant_is_refused_for_a_batch_it_would_fill_past_the_limit() {
    let ctx = context(20_000);
    let big = "x".repeat(300_000);
    // 8,192 rows of 300,000 bytes: 2.3 GiB for one column of one batch.
    let (plan, out) = run(&ctx, &format!("SELECT '{big}' AS c, x FROM t")).await;
    assert!(plan.contains("ProjectionExec"), "{plan}");
    let e = out.unwrap_err().to_string();
    assert!(
        e.contains("a constant of 300000 bytes in the select list")
            && e.contains("8192 rows")
            && e.contains(&MAX_CALL_BYTES.to_string()),
        "{e}"
    );

    // Under the limit, the same constant in every row.
    let (_, out) = run(&ctx, &format!("SELECT '{big}' AS c, x FROM t LIMIT 3")).await;
    let rows: Vec<_> = out
        .unwrap()
        .into_iter()
        .filter(|b| b.num_rows() > 0)
        .collect();
    assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
    assert_eq!(rows[0].column(0).as_string::<i32>().value(0), big);
    let small = "y".repeat(2_000);
    let (plan, out) = run(&ctx, &format!("SELECT '{small}' AS c, x FROM t")).await;
    let out = out.unwrap();
    assert_eq!(out.iter().map(RecordBatch::num_rows).sum::<usize>(), 20_000);
    let c = out[2].column(0).as_string::<i32>();
    assert!((0..c.len()).all(|i| c.value(i) == small));
    // Shown as the constant itself.
    assert!(plan.contains(&small), "{plan}");
    assert!(!plan.contains("SizedScalar"), "{plan}");
}

#[tokio::test]
async fn an_expression_giving_a_large_constant_for_a_whole_batch_is_refused_too() {
    let ctx = context(20_000);
    let big = "x".repeat(300_000);
    for sql in [
        format!("SELECT CASE WHEN x >= 0 THEN '{big}' END AS c FROM t"),
        format!("SELECT coalesce(CASE WHEN x < 0 THEN 'a' END, '{big}') AS c FROM t"),
        // An aggregate evaluates its argument over the batch.
        format!("SELECT max(CASE WHEN x >= 0 THEN '{big}' END) AS c FROM t"),
    ] {
        let (_, out) = run(&ctx, &sql).await;
        let e = out.unwrap_err().to_string();
        assert!(
            e.contains("a constant of 300000 bytes in the select list"),
            "{e}"
        );
    }
    // Over fewer rows, the aggregate is answered.
    let (_, out) = run(
        &ctx,
        &format!(
            "SELECT octet_length(max(CASE WHEN x >= 0 THEN '{big}' END)) FROM t WHERE x < 100"
        ),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(
        out[0]
            .column(0)
            .as_primitive::<arrow::datatypes::Int32Type>()
            .value(0),
        300_000
    );
    // A view is kept once for all rows.
    let (_, out) = run(
        &ctx,
        &format!("SELECT arrow_cast('{big}', 'Utf8View') AS c, x FROM t"),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(out.iter().map(RecordBatch::num_rows).sum::<usize>(), 20_000);
    assert_eq!(out[1].column(0).as_string_view().value(7), big);
    // A constant joined to each row's value makes a column, left to Arrow;
    // one in a condition only returns small values.
    let mid = "z".repeat(2_000);
    let (plan, out) = run(
        &ctx,
        &format!("SELECT CAST(x AS VARCHAR) || '{mid}' AS c, CASE WHEN CAST(x AS VARCHAR) = '{big}' THEN 'y' ELSE 'n' END AS d FROM t WHERE x < 2"),
    )
    .await;
    let out = out.unwrap();
    let b = out.iter().find(|b| b.num_rows() > 0).unwrap();
    let text = |i: usize| arrow::compute::cast(b.column(i), &DataType::Utf8).unwrap();
    assert_eq!(text(0).as_string::<i32>().value(1), format!("1{mid}"));
    assert_eq!(text(1).as_string::<i32>().value(1), "n");
    assert!(plan.contains(&mid), "{plan}");
}

#[test]
fn string_and_binary_expressions_holding_a_large_constant_are_wrapped() {
    let lit = |v: ScalarValue| Arc::new(Literal::new(v)) as Arc<dyn PhysicalExpr>;
    let text = |n: usize| ScalarValue::Utf8(Some("a".repeat(n)));
    let utf8 = DataType::Utf8;
    assert!(wrapped(&lit(text(WRAPPED_FROM)), &utf8));
    assert!(!wrapped(&lit(text(WRAPPED_FROM - 1)), &utf8));
    assert!(!wrapped(&lit(ScalarValue::Utf8(None)), &utf8));
    let blob = lit(ScalarValue::LargeBinary(Some(vec![0; 5000])));
    assert!(wrapped(&blob, &DataType::LargeBinary));
    // A view's value is not copied per row; nor is a number.
    let view = lit(ScalarValue::Utf8View(Some("é".repeat(WRAPPED_FROM))));
    assert!(!wrapped(&view, &DataType::Utf8View));
    assert!(!wrapped(
        &lit(ScalarValue::Int64(Some(7))),
        &DataType::Int64
    ));
    // At any depth: a view cast to a string is copied.
    let cast = Arc::new(datafusion::physical_expr::expressions::CastExpr::new(
        view,
        DataType::Utf8,
        None,
    )) as Arc<dyn PhysicalExpr>;
    assert!(wrapped(&cast, &utf8));
}
