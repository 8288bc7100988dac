use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;

use super::*;

fn ctx() -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_analyzer_rule(Arc::new(MarkSubqueries))
        .build();
    SessionContext::new_with_state(state)
}

async fn run(sql: &str) -> String {
    let batches = ctx().sql(sql).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

const T: &str = "(VALUES (1, 'a'), (2, 'b'), (3, NULL), (NULL, 'd')) t(x, s)";

#[tokio::test]
async fn in_and_exists_in_a_select_list_answer_as_postgresql() {
    // IN over a subquery without NULLs: NULL only for a NULL x.
    let got = run(&format!(
        "SELECT x, x IN (SELECT 2 UNION ALL SELECT 3) AS i, \
         x NOT IN (SELECT 2 UNION ALL SELECT 3) AS n FROM {T} ORDER BY x"
    ))
    .await;
    insta::assert_snapshot!(got, @r"
    +---+-------+-------+
    | x | i     | n     |
    +---+-------+-------+
    | 1 | false | true  |
    | 2 | true  | false |
    | 3 | true  | false |
    |   |       |       |
    +---+-------+-------+
    ");
    // A NULL in the subquery makes a miss unknown; an empty subquery
    // makes everything false, a NULL x included.
    let got = run(&format!(
        "SELECT x, x IN (SELECT CAST(NULL AS BIGINT) UNION ALL SELECT 2) AS i, \
         x IN (SELECT 1 WHERE false) AS e, \
         EXISTS (SELECT 1 WHERE false) AS ne, EXISTS (SELECT 1) AS ye FROM {T} ORDER BY x"
    ))
    .await;
    insta::assert_snapshot!(got, @r"
    +---+------+-------+-------+------+
    | x | i    | e     | ne    | ye   |
    +---+------+-------+-------+------+
    | 1 |      | false | false | true |
    | 2 | true | false | false | true |
    | 3 |      | false | false | true |
    |   |      | false | false | true |
    +---+------+-------+-------+------+
    ");
}

#[tokio::test]
async fn an_in_subquery_inside_case_and_order_by() {
    let got = run(&format!(
        "SELECT CASE WHEN s IN (SELECT 'b' UNION ALL SELECT 'd') THEN s ELSE 'other' END AS c \
         FROM {T} ORDER BY CASE WHEN s IN (SELECT 'b' UNION ALL SELECT 'd') THEN 0 ELSE 1 END, x"
    ))
    .await;
    insta::assert_snapshot!(got, @r"
    +-------+
    | c     |
    +-------+
    | b     |
    | d     |
    | other |
    | other |
    +-------+
    ");
}

#[tokio::test]
async fn names_are_kept_and_correlated_subqueries_left_alone() {
    let sql = format!("SELECT x IN (SELECT 1), EXISTS (SELECT 1) FROM {T}");
    let plain = SessionContext::new().sql(&sql).await.unwrap();
    let marked = ctx().sql(&sql).await.unwrap();
    assert_eq!(marked.schema().field_names(), plain.schema().field_names());
    // Correlated: not rewritten (DataFusion still refuses it).
    let plan = ctx()
        .sql(&format!(
            "SELECT x IN (SELECT u.y FROM (VALUES (1)) u(y) WHERE u.y = t.x) FROM {T}"
        ))
        .await
        .unwrap()
        .into_optimized_plan();
    if let Ok(plan) = plan {
        assert!(
            !plan.display_indent().to_string().contains("LeftMark"),
            "{}",
            plan.display_indent()
        );
    }
}
