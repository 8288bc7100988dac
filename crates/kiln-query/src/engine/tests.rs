use kiln_storage::{Db, StorageConfig};

use super::bounds::{MAX_BATCH_ROWS, MAX_PARTITIONS};
use super::*;
use crate::ErrorKind;

async fn engine(dir: &std::path::Path) -> Engine {
    let engine = Engine::new(Db::open(StorageConfig::for_dir(dir)).await.unwrap()).unwrap();
    engine
        .execute("CREATE TABLE t (ts TIMESTAMP NOT NULL, v BIGINT)")
        .await
        .unwrap();
    engine
}

fn kind(r: Result<Vec<Output>>) -> ErrorKind {
    r.expect_err("fails").kind()
}

#[tokio::test]
async fn an_unknown_table_is_typed_and_a_table_function_is_not_one() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let not_found = ErrorKind::Storage(kiln_storage::ErrorKind::TableNotFound);
    assert_eq!(kind(e.execute("SELECT * FROM nope").await), not_found);
    assert_eq!(
        kind(e.execute("INSERT INTO nope VALUES (1)").await),
        not_found
    );
    assert_eq!(
        kind(e.execute("SELECT * FROM t JOIN nope ON true").await),
        not_found
    );
    // A planning error over a table function or a CTE is not "no table".
    assert_eq!(
        kind(e.execute("SELECT no_col FROM generate_series(1, 3)").await),
        ErrorKind::UndefinedColumn
    );
    assert_eq!(
        kind(e.execute("WITH c AS (SELECT 1 AS a) SELECT b FROM c").await),
        ErrorKind::UndefinedColumn
    );
    assert_eq!(
        kind(e.execute("SELECT no_col FROM t").await),
        ErrorKind::UndefinedColumn
    );
    // An unknown function is named; a known one failing to plan is not it.
    let unknown = e.execute("SELECT no_such_fn(1)").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::UndefinedFunction);
    assert_eq!(unknown.to_string(), "function no_such_fn does not exist");
    assert_eq!(
        kind(e.execute("SELECT abs('a', 'b')").await),
        ErrorKind::Syntax
    );
}

#[tokio::test]
async fn every_statement_is_a_registered_query() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    e.execute("SELECT count(*) FROM t; SELECT 1").await.unwrap();
    let _ = e.execute("SELECT * FROM nope").await;
    let seen: Vec<(String, &str, &str)> = e
        .queries()
        .snapshot()
        .iter()
        .map(|q| (q.text.clone(), q.protocol, q.status().as_str()))
        .collect();
    assert!(
        seen.contains(&("SELECT count(*) FROM t; SELECT 1".into(), "embedded", "ok")),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("SELECT * FROM nope".into(), "embedded", "error")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn create_table_as_select_is_refused_as_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let err = e
        .execute("CREATE TABLE c AS SELECT * FROM t")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(
        err.to_string().contains("INSERT INTO it ... SELECT"),
        "{err}"
    );
}

/// The value of the last statement's first row, second column (SHOW's).
fn shown(out: &[Output]) -> String {
    let Some(Output::Rows { batches, .. }) = out.last() else {
        panic!("no rows: {out:?}");
    };
    let col = arrow::compute::cast(batches[0].column(1), &DataType::Utf8).unwrap();
    col.as_string::<i32>().value(0).to_string()
}

#[tokio::test]
async fn set_changes_its_own_query_only() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let out = e
        .execute("SET datafusion.execution.batch_size = 7; SHOW datafusion.execution.batch_size")
        .await
        .unwrap();
    assert_eq!(shown(&out), "7");
    let out = e
        .execute("SHOW datafusion.execution.batch_size")
        .await
        .unwrap();
    assert_eq!(shown(&out), "8192");
    assert_eq!(e.session().state().config().batch_size(), 8192);
    assert_eq!(
        kind(
            e.execute("SET datafusion.runtime.memory_limit = '1G'")
                .await
        ),
        ErrorKind::PermissionDenied
    );
}

#[tokio::test]
async fn settings_that_multiply_a_querys_buffers_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    for (name, most) in [
        ("target_partitions", MAX_PARTITIONS),
        ("batch_size", MAX_BATCH_ROWS),
    ] {
        let set =
            format!("SET datafusion.execution.{name} = {most}; SHOW datafusion.execution.{name}");
        assert_eq!(shown(&e.execute(&set).await.unwrap()), most.to_string());
        let over = format!("SET datafusion.execution.{name} = {}", most + 1);
        let err = e.execute(&over).await.expect_err(&over);
        assert_eq!(err.kind(), ErrorKind::LimitExceeded, "{over}");
        let want = format!(
            "{} is more than {most}, the most a session may set",
            most + 1
        );
        assert!(err.to_string().contains(&want), "{err}");
    }
}

#[tokio::test]
async fn server_files_are_refused_without_file_access() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let out = tmp.path().join("x.csv");
    for sql in [
        format!("COPY (SELECT 1) TO '{}'", out.display()),
        format!("COPY t TO '{}'", out.display()),
        format!("EXPLAIN ANALYZE COPY t TO '{}'", out.display()),
        format!("COPY t FROM '{}'", out.display()),
        format!(
            "CREATE EXTERNAL TABLE x (a INT) STORED AS CSV LOCATION '{}'",
            out.display()
        ),
    ] {
        assert_eq!(
            kind(e.execute(&sql).await),
            ErrorKind::PermissionDenied,
            "{sql}"
        );
    }
    assert!(!out.exists());
}
