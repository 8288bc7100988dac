use arrow::array::Array;
use datafusion::prelude::SessionContext;

use super::*;

async fn one(ctx: &SessionContext, sql: &str) -> String {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let col = batches[0].column(0);
    datafusion::common::cast::as_string_array(col)
        .unwrap()
        .value(0)
        .to_string()
}

#[tokio::test]
async fn version_is_postgresql_s_format_naming_kiln() {
    let ctx = SessionContext::new();
    register_functions(&ctx, Arc::new(Settings::new(100)));
    let v = one(&ctx, "SELECT version()").await;
    assert!(v.starts_with("PostgreSQL 16.6 (Kiln "), "{v}");
}

#[tokio::test]
async fn current_setting_knows_what_clients_read() {
    let ctx = SessionContext::new();
    register_functions(&ctx, Arc::new(Settings::new(100)));
    assert_eq!(
        one(&ctx, "SELECT current_setting('server_version_num')").await,
        "160006"
    );
    assert_eq!(one(&ctx, "SELECT current_setting('TIMEZONE')").await, "UTC");
    // Given by the server's flags.
    assert_eq!(
        one(&ctx, "SELECT current_setting('max_connections')").await,
        "100"
    );
    let e = ctx
        .sql("SELECT current_setting('no_such')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unrecognized configuration parameter \"no_such\""),
        "{e}"
    );
    let missing = ctx
        .sql("SELECT current_setting('no_such', true) IS NULL")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(missing[0].num_rows(), 1);
}

#[tokio::test]
async fn to_regtype_finds_built_in_types_only() {
    let ctx = SessionContext::new();
    register_functions(&ctx, Arc::new(Settings::new(100)));
    let batches = ctx
        .sql("SELECT to_regtype('int8'), to_regtype('timestamp without time zone'), to_regtype('hstore')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let col = |i: usize| {
        batches[0]
            .column(i)
            .as_any()
            .downcast_ref::<arrow::array::Int32Array>()
            .unwrap()
            .clone()
    };
    assert_eq!(col(0).value(0), 20);
    assert_eq!(col(1).value(0), 1114);
    assert!(col(2).is_null(0));
}

#[tokio::test]
async fn no_column_has_a_serial_sequence() {
    let ctx = SessionContext::new();
    register_functions(&ctx, Arc::new(Settings::new(100)));
    let batches = ctx
        .sql("SELECT pg_get_serial_sequence('t', 'id')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert!(batches[0].column(0).is_null(0));
}
