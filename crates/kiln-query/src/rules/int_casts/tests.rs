use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use super::*;

fn ctx() -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_analyzer_rule(Arc::new(RoundedIntCasts))
        .build();
    SessionContext::new_with_state(state)
}

async fn run(sql: &str) -> Result<String> {
    let batches = ctx().sql(sql).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

#[tokio::test]
async fn fractions_round_half_away_from_zero() {
    let got = run(
        "SELECT CAST(1.5 AS INT) AS a, CAST(2.5 AS INT) AS b, CAST(-1.5 AS BIGINT) AS c, \
         CAST(2.7 AS SMALLINT) AS d, CAST(x AS INT) AS e, CAST(CAST(x AS REAL) AS INT) AS f, \
         TRY_CAST(y AS INT) AS g \
         FROM (VALUES (2.5, 3.5), (-2.5, 1.2), (0.49, -0.6)) t(x, y) ORDER BY x",
    )
    .await
    .unwrap();
    insta::assert_snapshot!(got, @r"
    +---+---+----+---+----+----+----+
    | a | b | c  | d | e  | f  | g  |
    +---+---+----+---+----+----+----+
    | 2 | 3 | -2 | 3 | -3 | -3 | 1  |
    | 2 | 3 | -2 | 3 | 0  | 0  | -1 |
    | 2 | 3 | -2 | 3 | 3  | 3  | 4  |
    +---+---+----+---+----+----+----+
    ");
}

#[tokio::test]
async fn names_are_kept_and_out_of_range_still_fails() {
    let df = ctx()
        .sql("SELECT CAST(x AS INT) FROM (VALUES (1.5)) t(x)")
        .await
        .unwrap();
    let plain = SessionContext::new()
        .sql("SELECT CAST(x AS INT) FROM (VALUES (1.5)) t(x)")
        .await
        .unwrap();
    assert_eq!(df.schema().field_names(), plain.schema().field_names());
    assert!(run("SELECT CAST(1e12 AS INT)").await.is_err());
}
