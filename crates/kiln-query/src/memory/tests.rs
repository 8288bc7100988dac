use super::*;

fn reservation(pool: &Arc<dyn MemoryPool>, name: &str) -> MemoryReservation {
    MemoryConsumer::new(name).register(pool)
}

#[test]
fn a_query_stops_at_its_own_limit_and_frees_what_it_held() {
    let server: Arc<dyn MemoryPool> = Arc::new(ServerPool::accounted_only(1 << 20));
    let query: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 1000));
    let r = reservation(&query, "sort");
    r.try_grow(800).unwrap();
    assert_eq!(server.reserved(), 800);
    let e = r.try_grow(300).unwrap_err().to_string();
    assert!(e.contains("--query-memory-limit"), "{e}");
    assert_eq!(query.reserved(), 800);
    drop(r);
    assert_eq!((server.reserved(), query.reserved()), (0, 0));
}

#[test]
fn queries_together_stop_at_the_server_limit() {
    let server: Arc<dyn MemoryPool> = Arc::new(ServerPool::accounted_only(1000));
    let a: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 900));
    let b: Arc<dyn MemoryPool> = Arc::new(QueryPool::new(server.clone(), 900));
    let ra = reservation(&a, "agg a");
    let rb = reservation(&b, "agg b");
    ra.try_grow(700).unwrap();
    let e = rb.try_grow(700).unwrap_err().to_string();
    assert!(e.contains("--memory-limit"), "{e}");
    assert_eq!(b.reserved(), 0);
    // A tenth of the limit is left for the allocator's free pages.
    assert!(rb.try_grow(300).is_err());
    rb.try_grow(200).unwrap();
    assert_eq!(server.reserved(), 900);
    assert!(matches!(server.memory_limit(), MemoryLimit::Finite(900)));
}

#[test]
fn the_server_pool_refuses_growth_while_the_heap_holds_its_limit_for_queries() {
    use std::sync::atomic::AtomicUsize;
    let heap = Arc::new(AtomicUsize::new(5_000));
    let outside = Arc::new(AtomicUsize::new(1_000));
    let (h, o) = (heap.clone(), outside.clone());
    let server = Arc::new(ServerPool::new(
        1_000,
        Box::new(move || Some(h.load(Ordering::Relaxed))),
        Box::new(|| None),
        Box::new(move || o.load(Ordering::Relaxed)),
    ));
    // 4,000 of the heap was the server's own when the pool was made.
    assert_eq!(server.heap_in_queries(), Some(0));
    let pool: Arc<dyn MemoryPool> = server.clone();
    let r = reservation(&pool, "agg");
    r.try_grow(100).unwrap();
    // Queries hold 800 the pool never heard of.
    heap.store(5_800, Ordering::Relaxed);
    assert_eq!(server.in_use(), 800);
    let e = r.try_grow(200).unwrap_err().to_string();
    assert!(
        e.contains("--memory-limit") && e.contains("on the heap"),
        "{e}"
    );
    assert_eq!(server.reserved(), 100);
    // The heap keeps a tenth of the limit for the allocator's free pages.
    assert!(r.try_grow(150).is_err());
    r.try_grow(50).unwrap();
    // Growth of the server's own state (a memstore) is not query memory,
    // once the pool has re-read it.
    outside.store(1_800, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(OUTSIDE_REFRESH_MS + 10));
    assert_eq!(server.heap_in_queries(), Some(0));
    r.try_grow(500).unwrap();
}

#[test]
fn the_server_pool_refuses_growth_while_resident_memory_holds_the_whole_limit() {
    use std::sync::atomic::AtomicUsize;
    let resident = Arc::new(AtomicUsize::new(9_000));
    let outside = Arc::new(AtomicUsize::new(1_000));
    let (rs, o) = (resident.clone(), outside.clone());
    let server = Arc::new(ServerPool::new(
        1_000,
        Box::new(|| Some(0)),
        Box::new(move || Some(rs.load(Ordering::Relaxed))),
        Box::new(move || o.load(Ordering::Relaxed)),
    ));
    // 8,000 was resident apart from the server's state at start.
    assert_eq!(server.resident_in_queries(), Some(0));
    let pool: Arc<dyn MemoryPool> = server.clone();
    let r = reservation(&pool, "distinct");
    // The allocator keeps 900 of freed pages resident (the heap is
    // empty): half the pool is still granted, whatever is resident.
    resident.store(9_900, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(RESIDENT_REFRESH_MS + 5));
    assert_eq!(server.resident_in_queries(), Some(900));
    r.try_grow(400).unwrap();
    // Past half, the pool refuses growth beyond the limit resident.
    let e = r.try_grow(200).unwrap_err().to_string();
    assert!(e.contains("resident"), "{e}");
    assert_eq!(server.reserved(), 400);
    r.try_grow(100).unwrap();
    // The pages go back to the system: the pool grows again.
    resident.store(9_100, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(RESIDENT_REFRESH_MS + 5));
    r.try_grow(300).unwrap();
    assert_eq!(server.reserved(), 800);
    // A memstore growing is the server's, not the queries'.
    outside.store(1_500, Ordering::Relaxed);
    resident.store(9_700, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(OUTSIDE_REFRESH_MS + 5));
    assert_eq!(server.resident_in_queries(), Some(200));
}

#[test]
fn without_a_heap_figure_only_reservations_count() {
    let server = Arc::new(ServerPool::accounted_only(1_000));
    assert_eq!(server.heap_in_queries(), None);
    let pool: Arc<dyn MemoryPool> = server.clone();
    let r = reservation(&pool, "sort");
    r.try_grow(600).unwrap();
    assert_eq!(server.in_use(), 600);
    assert!(r.try_grow(500).is_err());
}
