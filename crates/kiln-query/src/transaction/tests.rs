use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use super::*;

fn batch(n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
}

#[test]
fn commit_takes_every_staged_row_once() {
    let t = Transaction::new(1 << 20);
    t.stage("a", batch(3)).unwrap();
    t.stage("a", batch(2)).unwrap();
    assert_eq!(t.rows(), 5);
    let w = t.take().unwrap();
    assert_eq!(w.table, "a");
    assert_eq!(w.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
    assert!(t.take().is_none(), "taken twice");
}

#[test]
fn a_second_table_is_refused_and_stages_nothing() {
    let t = Transaction::new(1 << 20);
    t.stage("a", batch(1)).unwrap();
    let e = t.stage("b", batch(1)).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
    assert!(e.to_string().contains("\"a\""), "{e}");
    assert_eq!(t.rows(), 1);
}

#[test]
fn rows_past_the_limit_are_refused() {
    let t = Transaction::new(2000);
    t.stage("a", batch(10)).unwrap();
    let e = t.stage("a", batch(1000)).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::LimitExceeded);
    assert_eq!(t.rows(), 10);
}

#[test]
fn an_empty_transaction_writes_nothing() {
    let t = Transaction::new(1 << 20);
    t.stage("a", batch(0)).unwrap();
    assert!(t.take().is_none());
}

#[test]
fn rollback_to_a_savepoint_drops_only_what_came_after_it() {
    let t = Transaction::new(1 << 20);
    t.stage("a", batch(1)).unwrap();
    t.savepoint("s1");
    t.stage("a", batch(2)).unwrap();
    t.savepoint("s2");
    t.stage("a", batch(4)).unwrap();
    t.rollback_to("s1").unwrap();
    assert_eq!(t.rows(), 1);
    // s1 stays, s2 is gone.
    assert_eq!(
        t.release("s2").unwrap_err().kind(),
        crate::ErrorKind::NoSavepoint
    );
    t.stage("a", batch(8)).unwrap();
    t.release("s1").unwrap();
    assert_eq!(t.rows(), 9);
    assert!(t.rollback_to("s1").is_err());
}

#[test]
fn rolling_back_past_the_first_write_frees_the_table() {
    let t = Transaction::new(1 << 20);
    t.savepoint("s");
    t.stage("a", batch(1)).unwrap();
    t.rollback_to("s").unwrap();
    t.stage("b", batch(1)).unwrap();
    assert_eq!(t.take().unwrap().table, "b");
}
