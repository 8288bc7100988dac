use arrow::array::{Array, AsArray};
use arrow::datatypes::Int32Type;
use datafusion::prelude::SessionContext;

use super::{MAX_CALL_STEPS, MAX_VALUE_STEPS};

fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    crate::functions::register(&ctx);
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<Vec<i32>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int32Type>().values().to_vec())
        .collect())
}

#[tokio::test]
async fn a_comparison_past_its_steps_is_refused_before_it_runs() {
    let ctx = ctx();
    // Constants: refused while planning (folded), naming the characters.
    let side = (MAX_VALUE_STEPS as f64).sqrt() as usize + 1;
    let sql = format!("SELECT levenshtein(repeat('é', {side}), repeat('b', {side}))");
    let e = run(&ctx, &sql).await.unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "levenshtein(): comparing strings of {side} and {side} characters takes {} steps, more than the 100000000-step limit on one value",
            side * side
        )),
        "{e}"
    );
    // Characters, not bytes: 'é' is two bytes, and a product of bytes past
    // the limit whose characters are within it is compared.
    let half = side / 2 + 1;
    let sql = format!("SELECT levenshtein(repeat('é', {side}), repeat('b', {half}))");
    assert_eq!(run(&ctx, &sql).await.unwrap(), vec![side as i32]);
    // Unchanged answers, NULLs included, within the limits.
    let sql = "SELECT levenshtein(a, b) FROM (VALUES ('kitten', 'sitting'), (NULL, 'x'), ('flaw', 'lawn')) t(a, b)";
    let ctx2 = ctx.clone();
    let batches = ctx2.sql(sql).await.unwrap().collect().await.unwrap();
    let column = batches[0].column(0).as_primitive::<Int32Type>();
    assert_eq!(
        (column.value(0), column.is_null(1), column.value(2)),
        (3, true, 2)
    );
}

#[tokio::test]
async fn a_call_whose_rows_together_pass_the_limit_is_refused() {
    let ctx = ctx();
    // Each row within the one-value limit, all of them past the call's.
    let side = 9_000;
    let rows = (MAX_CALL_STEPS / (side * side) as u64) as usize + 1;
    let sql = format!(
        "SELECT levenshtein(repeat('a', {side}), repeat('b', {side}) || x::text) FROM generate_series(1, {rows}) g(x)"
    );
    let e = run(&ctx, &sql).await.unwrap_err().to_string();
    assert!(
        e.contains("more than the 1000000000-step limit on one call"),
        "{e}"
    );
}
