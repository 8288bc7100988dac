use std::hash::{BuildHasher, RandomState};

use arrow::datatypes::{DataType, Field};
use datafusion::functions::datetime::date_trunc;
use datafusion::physical_expr::expressions::{Column, lit};

use super::*;

/// `date_trunc('day', ts)` planned under `partitions` target partitions.
fn call(partitions: usize) -> Arc<dyn PhysicalExpr> {
    let mut config = ConfigOptions::default();
    config.execution.target_partitions = partitions;
    let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None);
    Arc::new(ScalarFunctionExpr::new(
        "date_trunc",
        date_trunc(),
        vec![lit("day"), Arc::new(Column::new("ts", 0))],
        Arc::new(Field::new("date_trunc", ts, true)),
        Arc::new(config),
    ))
}

#[test]
fn keys_of_calls_ignore_the_settings_they_were_planned_under() {
    let (one, two) = (call(1), call(2));
    assert!(
        one.as_ref() != two.as_ref(),
        "DataFusion compares the settings"
    );
    let (a, b) = (bound(&one).unwrap(), bound(&two).unwrap());
    assert!(a.as_ref() == b.as_ref());
    let h = RandomState::new();
    assert_eq!(h.hash_one(&a), h.hash_one(&b));
    // Different arguments still make different keys.
    let other = bound(
        &call(1)
            .with_new_children(vec![lit("hour"), Arc::new(Column::new("ts", 0))])
            .unwrap(),
    )
    .unwrap();
    assert!(a.as_ref() != other.as_ref());
}
