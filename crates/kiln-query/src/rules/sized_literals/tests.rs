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
    assert!(!plan.contains("SizedLiteral"), "{plan}");
}

#[test]
fn only_string_and_binary_constants_from_the_threshold_are_wrapped() {
    let lit = |v: ScalarValue| Arc::new(Literal::new(v)) as Arc<dyn PhysicalExpr>;
    let text = |n: usize| ScalarValue::Utf8(Some("a".repeat(n)));
    assert_eq!(large(&lit(text(WRAPPED_FROM))), Some(WRAPPED_FROM));
    assert_eq!(large(&lit(text(WRAPPED_FROM - 1))), None);
    let view = ScalarValue::Utf8View(Some("é".repeat(WRAPPED_FROM)));
    assert_eq!(large(&lit(view)), Some(2 * WRAPPED_FROM));
    let bytes = ScalarValue::LargeBinary(Some(vec![0; 5000]));
    assert_eq!(large(&lit(bytes)), Some(5000));
    assert_eq!(large(&lit(ScalarValue::Int64(Some(7)))), None);
    assert_eq!(large(&lit(ScalarValue::Utf8(None))), None);
}
