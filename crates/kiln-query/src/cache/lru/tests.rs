use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ByteLru;

fn alive(_: &Arc<AtomicBool>) -> bool {
    false
}

#[test]
fn counts_lookups_and_bytes() {
    let c: ByteLru<String, u32> = ByteLru::new(100, 100, 100 / 8);
    assert!(c.insert("a".into(), 1, 30, |_| false));
    assert!(c.insert("b".into(), 2, 30, |_| false));
    assert_eq!((c.usage(), c.entries()), (60, 2));
    assert_eq!(c.get("a"), Some(1));
    assert_eq!(c.get("zz"), None);
    assert_eq!(c.lookups(), (1, 1));
    // A peek counts nothing.
    assert_eq!(c.peek("b"), Some(2));
    assert_eq!(c.lookups(), (1, 1));
    // Replacing an entry replaces its bytes.
    assert!(c.insert("a".into(), 3, 10, |_| false));
    assert_eq!((c.usage(), c.get("a")), (40, Some(3)));
    c.remove(&"a".to_string());
    assert_eq!((c.usage(), c.entries()), (30, 1));
}

#[test]
fn evicts_least_recently_used_down_to_seven_eighths() {
    let c: ByteLru<u32, u32> = ByteLru::new(80, 80, 80 / 8);
    for k in 0..8 {
        assert!(c.insert(k, k, 10, |_| false));
    }
    // 0 and 1 used again: 2 is now the least recently used.
    c.get(&0);
    c.get(&1);
    assert!(c.insert(8, 8, 10, |_| false));
    // Room made down to 70 bytes (7/8) including the new entry: 2 and 3 go.
    assert_eq!(c.usage(), 70);
    assert!(
        !c.contains(&2) && !c.contains(&3),
        "least recently used evicted"
    );
    assert!(c.contains(&0) && c.contains(&1) && c.contains(&8));
    assert!(c.usage() <= c.capacity());
}

#[test]
fn without_headroom_evicts_just_enough() {
    let c: ByteLru<u32, u32> = ByteLru::new(80, 80, 0);
    for k in 0..8 {
        c.insert(k, k, 10, |_| false);
    }
    c.insert(8, 8, 10, |_| false);
    // One entry (the least recently used) made room: the cache stays full.
    assert_eq!((c.usage(), c.entries()), (80, 8));
    assert!(!c.contains(&0));
}

#[test]
fn dead_entries_go_first() {
    let c: ByteLru<u32, Arc<AtomicBool>> = ByteLru::new(40, 40, 40 / 8);
    let flags: Vec<_> = (0..4).map(|_| Arc::new(AtomicBool::new(false))).collect();
    for (k, f) in flags.iter().enumerate() {
        c.insert(k as u32, f.clone(), 10, alive);
    }
    // The most recently used entry is dead: it goes before older live ones.
    flags[3].store(true, Ordering::Relaxed);
    c.insert(9, Arc::new(AtomicBool::new(false)), 10, |f| {
        f.load(Ordering::Relaxed)
    });
    assert!(!c.contains(&3), "the dead entry is evicted");
    assert!(c.contains(&1) && c.contains(&2) && c.contains(&9));
}

#[test]
fn dead_entries_can_be_dropped_at_once() {
    let c: ByteLru<u32, Arc<AtomicBool>> = ByteLru::new(100, 100, 100 / 8);
    let dead = Arc::new(AtomicBool::new(true));
    c.insert(1, dead.clone(), 10, alive);
    c.insert(2, Arc::new(AtomicBool::new(false)), 10, alive);
    c.remove_dead(|f| f.load(Ordering::Relaxed));
    assert_eq!((c.entries(), c.usage(), c.contains(&2)), (1, 10, true));
}

#[test]
fn oversized_entries_and_a_zero_capacity_keep_nothing() {
    let c: ByteLru<u32, u32> = ByteLru::new(100, 10, 100 / 8);
    assert!(!c.insert(1, 1, 11, |_| false), "over the largest entry");
    assert!(c.insert(2, 2, 10, |_| false));
    let off: ByteLru<u32, u32> = ByteLru::new(0, 0, 0);
    assert!(!off.insert(1, 1, 0, |_| false));
    assert_eq!(off.entries(), 0);
}

#[test]
fn concurrent_inserts_stay_within_capacity() {
    let c = Arc::new(ByteLru::<u32, u32>::new(1000, 100, 125));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    c.insert(t * 1000 + i, i, 7 + (i as usize % 50), |_| false);
                    c.get(&(t * 1000 + i / 2));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert!(c.usage() <= 1000, "{}", c.usage());
}
