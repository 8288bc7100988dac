//! The guarded aggregates against the limit on one value: refused as the
//! values come in, in one group, in many, and across partial states;
//! answered under it; a `DISTINCT` aggregate judged by its result.

use arrow::array::{Int64Array, RecordBatch, StringViewBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;

/// Bytes of each value of `t.v`.
const VALUE: usize = 1_000_000;

/// A session with Kiln's functions and table `t (x BIGINT, v VARCHAR)` of
/// `partitions` partitions of `rows` rows each, `x` counting from 0 and
/// every `v` the same [`VALUE`]-byte text, shared by string views (so the
/// table itself takes one copy per partition).
fn context(partitions: usize, rows: usize) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(partitions);
    let ctx = SessionContext::new_with_config(config);
    crate::functions::register(&ctx);
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("v", DataType::Utf8View, false),
    ]));
    let parts = (0..partitions)
        .map(|p| {
            let from = (p * rows) as i64;
            let x = Int64Array::from_iter_values(from..from + rows as i64);
            let mut v = StringViewBuilder::with_capacity(rows);
            v.try_append_value_n("x".repeat(VALUE), rows).unwrap();
            let columns: Vec<ArrayRef> = vec![Arc::new(x), Arc::new(v.finish())];
            vec![RecordBatch::try_new(schema.clone(), columns).unwrap()]
        })
        .collect();
    let table = MemTable::try_new(schema, parts).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// `sql`'s batches, or its error as Kiln's.
async fn run(ctx: &SessionContext, sql: &str) -> std::result::Result<Vec<RecordBatch>, Error> {
    let df = ctx.sql(sql).await.map_err(Error::from)?;
    df.collect().await.map_err(Error::from)
}

/// The error of `sql`, checked to be the limit on one value of `name`.
async fn refused(ctx: &SessionContext, sql: &str, name: &str) -> String {
    let e = run(ctx, sql).await.expect_err(sql);
    assert_eq!(e.kind(), crate::ErrorKind::LimitExceeded, "{sql}: {e}");
    let message = e.to_string();
    let limit = format!("{MAX_VALUE_BYTES}-byte limit on one value");
    assert!(
        message.contains(&format!("{name}(): a result")),
        "{message}"
    );
    assert!(message.contains(&limit), "{message}");
    message
}

/// The lengths of the first column's values (text, or a list's elements).
fn lengths(batches: &[RecordBatch]) -> Vec<usize> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column(0);
            (0..c.len()).map(move |r| match c.data_type() {
                DataType::LargeUtf8 => c.as_string::<i64>().value_length(r) as usize,
                _ => c.as_list::<i32>().value_length(r) as usize,
            })
        })
        .collect()
}

#[tokio::test]
async fn a_value_past_the_limit_is_refused_as_its_values_come_in() {
    // 300 values of 1 MB: 300 MB, past the 256 MiB limit.
    let ctx = context(1, 300);
    for sql in [
        "SELECT string_agg(v, ',') FROM t",
        "SELECT string_agg(v, ',' ORDER BY x) FROM t",
        "SELECT x % 1 AS g, string_agg(v, ',') FROM t GROUP BY x % 1",
    ] {
        let message = refused(&ctx, sql, "string_agg").await;
        assert!(message.contains("holding at least"), "{message}");
    }
    for sql in [
        "SELECT array_agg(v) FROM t",
        "SELECT x % 1 AS g, array_agg(v) FROM t GROUP BY x % 1",
    ] {
        refused(&ctx, sql, "array_agg").await;
    }
}

#[tokio::test]
async fn partial_states_are_counted_where_they_merge() {
    // Two partitions of 140 values: each partial state 140 MB, under the
    // limit; merged, 280 MB.
    let ctx = context(2, 140);
    for (sql, name) in [
        ("SELECT string_agg(v, ',') FROM t", "string_agg"),
        ("SELECT array_agg(v) FROM t", "array_agg"),
        (
            "SELECT x % 1 AS g, array_agg(v) FROM t GROUP BY x % 1",
            "array_agg",
        ),
    ] {
        refused(&ctx, sql, name).await;
    }
}

#[tokio::test]
async fn values_under_the_limit_and_distinct_ones_are_answered() {
    let ctx = context(1, 300);
    // Two groups of 150 MB each.
    let groups = "SELECT string_agg(v, '') FROM t GROUP BY x % 2 ORDER BY x % 2";
    let got = lengths(&run(&ctx, groups).await.unwrap());
    assert_eq!(got, vec![150 * VALUE, 150 * VALUE]);
    let got = lengths(
        &run(&ctx, "SELECT array_agg(v) FROM t WHERE x < 100")
            .await
            .unwrap(),
    );
    assert_eq!(got, vec![100]);
    // 300 MB come in, one distinct value goes out.
    for sql in [
        "SELECT string_agg(DISTINCT v, ',') FROM t",
        "SELECT array_agg(DISTINCT v) FROM t",
    ] {
        let got = lengths(&run(&ctx, sql).await.unwrap());
        let want = match sql.contains("string_agg") {
            true => VALUE,
            false => 1,
        };
        assert_eq!(got, vec![want], "{sql}");
    }
}

#[tokio::test]
async fn a_distinct_result_past_the_limit_is_refused() {
    // 300 distinct values of 1 MB each.
    let ctx = context(1, 300);
    let sql = "SELECT string_agg(DISTINCT concat(CAST(x AS VARCHAR), v), ',') FROM t";
    let message = refused(&ctx, sql, "string_agg").await;
    assert!(message.contains("a result of 30"), "{message}");
}

#[test]
fn a_rows_bytes_are_its_values_in_any_nesting() {
    let text: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![
        Some("abc"),
        None,
        Some(""),
    ]));
    assert_eq!(
        (0..3).map(|r| row_bytes(&text, r)).collect::<Vec<_>>(),
        [3, 0, 0]
    );
    let list = ScalarValue::new_list_nullable(
        &[
            ScalarValue::Utf8(Some("abcd".into())),
            ScalarValue::Utf8(None),
            ScalarValue::Utf8(Some("ef".into())),
        ],
        &DataType::Utf8,
    );
    assert_eq!(value_bytes(&ScalarValue::List(list)), 6);
    let ints = ScalarValue::new_list_nullable(
        &[ScalarValue::Int64(Some(1)), ScalarValue::Int64(Some(2))],
        &DataType::Int64,
    );
    assert_eq!(value_bytes(&ScalarValue::List(ints)), 16);
    assert_eq!(value_bytes(&ScalarValue::LargeUtf8(Some("xyz".into()))), 3);
}
