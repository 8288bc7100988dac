use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;
use crate::admission::{QueryLimits, QueryRegistry};

#[test]
fn partitions_are_shared_among_running_queries() {
    assert_eq!(partitions_for(2, 0), 2);
    assert_eq!(partitions_for(2, 1), 2);
    assert_eq!(partitions_for(2, 2), 1);
    assert_eq!(partitions_for(2, 150), 1);
    assert_eq!(partitions_for(8, 3), 2);
    assert_eq!(partitions_for(1, 1), 1);
}

#[tokio::test]
async fn a_query_planned_beside_others_gets_fewer_partitions() {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    let queries = QueryRegistry::new(QueryLimits::default());
    let partitions = |q: &QueryRegistry| query_state(&ctx, q).config().target_partitions();
    assert_eq!(partitions(&queries), 4);
    let a = queries.begin("pg", "a", None).await.unwrap();
    let b = queries.begin("pg", "b", None).await.unwrap();
    assert_eq!(partitions(&queries), 2);
    drop((a, b));
    assert_eq!(partitions(&queries), 4);
    // The session's own setting is untouched.
    assert_eq!(ctx.state().config().target_partitions(), 4);
}
