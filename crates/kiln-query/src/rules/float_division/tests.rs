use std::sync::Arc;

use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use super::*;

fn ctx() -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_analyzer_rule(Arc::new(FloatDivision))
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
