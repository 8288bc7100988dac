use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::*;

fn registry(
    max_concurrent: usize,
    max_queued: usize,
    timeout: Option<Duration>,
) -> Arc<QueryRegistry> {
    QueryRegistry::new(QueryLimits {
        max_concurrent,
        slot_time: None,
        max_queued,
        timeout,
        history: 4,
        ..Default::default()
    })
}

fn status_of(r: &QueryRegistry, id: u64) -> Status {
    r.snapshot()
        .into_iter()
        .find(|q| q.id == id)
        .map(|q| q.status())
        .expect("query recorded")
}

type Item = std::result::Result<u64, String>;

fn items(n: u64) -> impl Stream<Item = Item> + Send + Unpin + 'static {
    futures::stream::iter((0..n).map(Ok))
}

#[tokio::test]
async fn finished_query_is_recorded_ok_with_rows() {
    let r = registry(4, 4, None);
    let h = Arc::new(r.begin("http", "SELECT 1", None).await.unwrap());
    let id = h.info().id;
    assert_eq!(status_of(&r, id), Status::Running);
    let got: Vec<Item> = h
        .guard(items(3), |n| n + 1, |_| "stop".to_string())
        .collect()
        .await;
    assert_eq!(got.len(), 3);
    let q = r.snapshot().into_iter().find(|q| q.id == id).unwrap();
    assert_eq!(
        (q.status(), q.rows(), q.text.as_str()),
        (Status::Ok, 1 + 2 + 3, "SELECT 1")
    );
}

#[tokio::test]
async fn stream_dropped_early_is_cancelled() {
    let r = registry(4, 4, None);
    let h = Arc::new(r.begin("pg", "SELECT x", Some(7)).await.unwrap());
    let id = h.info().id;
    let mut s = Box::pin(h.guard(items(10), |_| 1, |_| "stop".to_string()));
    assert!(s.next().await.is_some());
    drop(s);
    assert_eq!(status_of(&r, id), Status::Cancelled);
}

#[tokio::test]
async fn full_queue_is_refused_and_slot_is_released() {
    let r = registry(1, 0, None);
    let first = r.begin("pg", "a", None).await.unwrap();
    let err = r.begin("pg", "b", None).await.err().expect("refused");
    assert!(matches!(err, Error::Overloaded(_)), "{err}");
    drop(first);
    let third = r.begin("pg", "c", None).await.unwrap();
    assert_eq!(third.info().status(), Status::Running);
}

#[tokio::test(start_paused = true)]
async fn queued_query_waits_for_a_slot_and_can_be_cancelled() {
    let r = registry(1, 8, None);
    let first = r.begin("pg", "a", None).await.unwrap();
    let r2 = r.clone();
    let waiter =
        tokio::spawn(async move { r2.begin("pg", "b", Some(9)).await.map(|h| h.info().id) });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let queued = r.snapshot().into_iter().find(|q| q.text == "b").unwrap();
    assert_eq!(queued.status(), Status::Queued);
    assert_eq!(r.cancel_session(9), 1);
    assert!(matches!(waiter.await.unwrap(), Err(Error::Cancelled)));
    assert_eq!(status_of(&r, queued.id), Status::Cancelled);
    // The running query of another session was not touched.
    assert_eq!(first.info().status(), Status::Running);
}

#[tokio::test(start_paused = true)]
async fn deadline_stops_run_and_stream() {
    let r = registry(4, 4, Some(Duration::from_millis(50)));
    let h = r.begin("http", "slow", None).await.unwrap();
    let id = h.info().id;
    let res = h.run(std::future::pending::<()>()).await;
    assert!(matches!(res, Err(Error::Timeout(d)) if d == Duration::from_millis(50)));
    drop(h);
    assert_eq!(status_of(&r, id), Status::Timeout);

    let h = Arc::new(r.begin("http", "slow stream", None).await.unwrap());
    let id = h.info().id;
    let pending = futures::stream::pending::<Item>();
    let got: Vec<Item> = h
        .guard(pending, |_| 1, |s| format!("{s:?}"))
        .collect()
        .await;
    assert_eq!(got, vec![Err("Timeout(50ms)".to_string())]);
    assert_eq!(status_of(&r, id), Status::Timeout);
}

#[tokio::test]
async fn cancel_by_id_ends_the_stream_with_the_stop_item() {
    let r = registry(4, 4, None);
    let h = Arc::new(r.begin("pg", "long", Some(1)).await.unwrap());
    let id = h.info().id;
    let mut s = Box::pin(h.guard(
        items(2).chain(futures::stream::pending()),
        |_| 1,
        |s| format!("{s:?}"),
    ));
    assert_eq!(s.next().await, Some(Ok(0)));
    assert!(r.cancel(id));
    // Already-buffered items may still come; the stream then ends with the stop.
    let rest: Vec<Item> = s.collect().await;
    assert_eq!(rest.last(), Some(&Err("Cancelled".to_string())));
    let q = r.snapshot().into_iter().find(|q| q.id == id).unwrap();
    assert_eq!(q.status(), Status::Cancelled);
    assert!(!r.cancel(id), "a finished query cannot be cancelled");
}

#[tokio::test]
async fn history_is_bounded_and_newest_first() {
    let r = registry(4, 4, None);
    for i in 0..10 {
        drop(r.begin("http", &format!("q{i}"), None).await.unwrap());
    }
    let texts: Vec<String> = r.snapshot().iter().map(|q| q.text.clone()).collect();
    assert_eq!(texts, vec!["q9", "q8", "q7", "q6"]);
}

#[tokio::test]
async fn running_counts_queries_holding_a_slot() {
    let r = registry(4, 4, None);
    assert_eq!(r.running(), 0);
    let a = r.begin("pg", "a", None).await.unwrap();
    let b = r.begin("http", "b", None).await.unwrap();
    assert_eq!(r.running(), 2);
    drop(a);
    assert_eq!(r.running(), 1);
    drop(b);
    assert_eq!(r.running(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_query_past_its_slot_time_lets_the_next_one_start() {
    let r = QueryRegistry::new(QueryLimits {
        max_concurrent: 1,
        slot_time: Some(Duration::from_secs(1)),
        max_queued: 8,
        ..Default::default()
    });
    let long = r.begin("pg", "long", None).await.unwrap();
    let r2 = r.clone();
    let next = tokio::spawn(async move { r2.begin("pg", "next", None).await });
    tokio::time::sleep(Duration::from_millis(999)).await;
    assert!(!next.is_finished(), "started while the slot was held");
    assert_eq!(r.running(), 1);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let next = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the next query started")
        .unwrap()
        .unwrap();
    // Both run; only the newer one holds a slot.
    assert_eq!(long.info().status(), Status::Running);
    assert_eq!(next.info().status(), Status::Running);
    assert_eq!(r.running(), 1);
    drop(long);
    assert_eq!(r.running(), 1, "the long query no longer held a slot");
    drop(next);
    assert_eq!(r.running(), 0);
}

#[tokio::test]
async fn heavy_queries_wait_while_the_memory_pool_is_nearly_spent() {
    use datafusion::execution::memory_pool::MemoryConsumer;
    let r = registry(4, 4, Some(Duration::from_secs(5)));
    let server = Arc::new(crate::memory::ServerPool::accounted_only(1000));
    r.set_memory_pool(server.clone());
    let pool: Arc<dyn datafusion::execution::memory_pool::MemoryPool> = server;
    let first = r.begin("http", "SELECT big", None).await.unwrap();
    let held = MemoryConsumer::new("sort").register(&pool);
    held.try_grow(900).unwrap();

    // Above the high-water mark, with another query running: it waits.
    let r2 = r.clone();
    let waiting = tokio::spawn(async move { r2.begin("http", "SELECT next", None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    // Light queries do not wait for memory.
    let light = Begin {
        light: true,
        ..Default::default()
    };
    r.begin_with("http", "SELECT 1", None, light).await.unwrap();
    // Memory freed: it starts.
    drop(held);
    let next = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("admitted once memory is freed")
        .unwrap()
        .unwrap();
    assert_eq!(next.info().status(), Status::Running);
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn past_its_slot_time_a_query_keeps_its_slot_while_memory_is_short() {
    use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
    let r = QueryRegistry::new(QueryLimits {
        max_concurrent: 1,
        slot_time: Some(Duration::from_secs(1)),
        max_queued: 8,
        ..Default::default()
    });
    let server = Arc::new(crate::memory::ServerPool::accounted_only(1000));
    r.set_memory_pool(server.clone());
    let pool: Arc<dyn MemoryPool> = server;
    let long = r.begin("pg", "long", None).await.unwrap();
    let held = MemoryConsumer::new("agg").register(&pool);
    held.try_grow(900).unwrap();
    let r2 = r.clone();
    let next = tokio::spawn(async move { r2.begin("pg", "next", None).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !next.is_finished(),
        "started past the slot time under memory pressure"
    );
    assert_eq!(r.running(), 1);
    // Memory freed: the slot passes on at the next look.
    held.shrink(800);
    let next = tokio::time::timeout(Duration::from_secs(1), next)
        .await
        .expect("the next query started")
        .unwrap()
        .unwrap();
    assert_eq!(next.info().status(), Status::Running);
    drop((long, next, held));
}
