//! Idempotency keys: a retried write carrying the same key as an earlier
//! one (same table, within `--idempotency-window`) is answered with the first
//! write's outcome instead of being written twice.
//!
//! Why in the storage layer: the key must be exactly as durable as the rows
//! it guards. It is logged in the write's own WAL record (see `codec`), so
//! both are on disk or neither is; the commit thread records it in memory
//! when it applies that record (before the record can be flushed and its WAL
//! file deleted), and recovery rebuilds the map from every WAL record still
//! on disk, flushed or not.
//!
//! How long keys live, exactly:
//! - A key is remembered for the window after its record's wall-clock time
//!   (the database's `Clock`), in memory and across restarts.
//! - Deleting WAL files (after a flush) would forget the keys logged only
//!   there, so the live keys are first saved to `idempotency.json` in the
//!   data directory (atomically: temporary file, fsync, rename); recovery
//!   loads that file, then the WAL. A key whose record was flushed and whose
//!   WAL file was deleted therefore survives a crash too.
//! - Memory is bounded by `--idempotency-max-keys`: beyond it the oldest keys
//!   are forgotten before their window ends (a warning is logged), after
//!   which a retry with such a key writes again. Expired keys are dropped
//!   lazily, on the next keyed write.
//! - A write that fails is not remembered (its retry may write), except once
//!   its record was handed to the WAL: then it is remembered even if the
//!   client went away before the answer, because the rows will be there.
//! - Concurrent requests with one key: the later ones wait for the first and
//!   then replay its answer (or, if it failed, the next one writes).
//! - The same key with a different body (its fingerprint differs) is
//!   refused with [`Error::IdempotencyConflict`].

use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::codec::KeyRecord;
use crate::db::Ack;
use crate::error::{Error, Result};
use crate::fs_util::write_atomic;

/// Longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// Name of the file holding the live keys, in the data directory.
pub(crate) const KEYS_FILE: &str = "idempotency.json";

/// A write's idempotency key and the fingerprint of the request it came
/// with (a retry must carry the same request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey {
    key: String,
    fingerprint: u64,
}

impl IdempotencyKey {
    /// `key` (1 to [`MAX_KEY_BYTES`] bytes) for a request whose identity is
    /// `parts` (e.g. content type, content encoding and raw body): see
    /// [`fingerprint`].
    pub fn new(key: impl Into<String>, parts: &[&[u8]]) -> Result<Self> {
        let key = key.into();
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(Error::data(format!(
                "idempotency key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
                key.len()
            )));
        }
        Ok(Self {
            key,
            fingerprint: fingerprint(parts),
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// A stable 64-bit hash (xxHash64, seed 0) of `parts`, each length-prefixed
/// so that moving bytes between parts changes it. Stable across versions and
/// processes: it is stored in the WAL.
pub fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(0);
    for p in parts {
        h.write(&(p.len() as u64).to_le_bytes());
        h.write(p);
    }
    h.finish()
}

/// What a finished write with a key answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    pub fingerprint: u64,
    pub rows: u64,
    pub ack: Ack,
    pub at_ns: i64,
}

enum Entry {
    /// A write with this key is under way; waiters watch its sender go away.
    Pending {
        token: u64,
        done: watch::Receiver<()>,
    },
    Done(Done),
}

type MapKey = (u64, Arc<str>);

#[derive(Default)]
struct State {
    map: HashMap<MapKey, Entry>,
    /// Done entries in the order they were recorded (≈ time order), for
    /// expiry and eviction; items whose entry changed since are skipped.
    order: VecDeque<(i64, MapKey)>,
    next_token: u64,
    last_evict_warning_ns: Option<i64>,
}

/// The key map of one database.
pub(crate) struct Keys {
    window_ns: i64,
    max_keys: usize,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    evicted: AtomicU64,
    /// Serializes writers of the keys file.
    persist: Mutex<()>,
}

/// The outcome of [`Keys::begin`].
pub(crate) enum Begin<'a> {
    /// Nobody used the key: the caller writes, holding the claim.
    Fresh(Claim<'a>),
    /// The key was used for the same request: answer this.
    Replay(Done),
}

impl Keys {
    pub(crate) fn new(window: Duration, max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            window_ns: i64::try_from(window.as_nanos()).unwrap_or(i64::MAX),
            max_keys: max_keys.max(1),
            clock,
            state: Mutex::new(State::default()),
            evicted: AtomicU64::new(0),
            persist: Mutex::new(()),
        }
    }

    fn expired(&self, at_ns: i64, now: i64) -> bool {
        at_ns.saturating_add(self.window_ns) <= now
    }

    /// Looks `key` up for a write to `table_id`; waits while another write
    /// with the same key is under way.
    pub(crate) async fn begin(&self, table_id: u64, key: &IdempotencyKey) -> Result<Begin<'_>> {
        let map_key: MapKey = (table_id, Arc::from(key.key.as_str()));
        loop {
            let mut wait = {
                let mut st = self.state.lock();
                let now = self.clock.now_ns();
                self.expire(&mut st, now);
                match st.map.get(&map_key) {
                    Some(Entry::Done(d)) if !self.expired(d.at_ns, now) => {
                        if d.fingerprint == key.fingerprint {
                            return Ok(Begin::Replay(*d));
                        }
                        return Err(Error::IdempotencyConflict {
                            key: key.key.clone(),
                        });
                    }
                    Some(Entry::Pending { done, .. }) => done.clone(),
                    Some(Entry::Done(_)) | None => {
                        let token = st.next_token;
                        st.next_token += 1;
                        let (tx, rx) = watch::channel(());
                        st.map
                            .insert(map_key.clone(), Entry::Pending { token, done: rx });
                        return Ok(Begin::Fresh(Claim {
                            keys: self,
                            key: map_key,
                            token,
                            on_drop: None,
                            _done: tx,
                        }));
                    }
                }
            };
            // Returns once the claim's sender is dropped (never sent on).
            let _ = wait.changed().await;
        }
    }

    /// Records a logged write's key (the commit thread, on apply; recovery,
    /// for every WAL record). Keeps an entry already done; skips expired ones.
    pub(crate) fn record(&self, table_id: u64, rec: &KeyRecord, at_ns: i64) {
        let now = self.clock.now_ns();
        if self.expired(at_ns, now) {
            return;
        }
        let done = Done {
            fingerprint: rec.fingerprint,
            rows: rec.rows,
            ack: rec.ack,
            at_ns,
        };
        let mut st = self.state.lock();
        self.set_done(&mut st, (table_id, Arc::from(rec.key.as_str())), done, now);
    }

    /// Makes `key` done unless it already is.
    fn set_done(&self, st: &mut State, key: MapKey, done: Done, now: i64) {
        if let Some(Entry::Done(_)) = st.map.get(&key) {
            return;
        }
        st.map.insert(key.clone(), Entry::Done(done));
        st.order.push_back((done.at_ns, key));
        self.expire(st, now);
    }

    /// Drops expired keys from the front, then the oldest beyond `max_keys`.
    fn expire(&self, st: &mut State, now: i64) {
        let mut evicted = 0u64;
        while let Some((at, key)) = st.order.front() {
            let expired = self.expired(*at, now);
            if !expired && st.map.len() <= self.max_keys {
                break;
            }
            let (at, key) = (*at, key.clone());
            st.order.pop_front();
            if matches!(st.map.get(&key), Some(Entry::Done(d)) if d.at_ns == at) {
                st.map.remove(&key);
                evicted += u64::from(!expired);
            }
        }
        if evicted > 0 {
            let total = self.evicted.fetch_add(evicted, Ordering::Relaxed) + evicted;
            let quiet = st
                .last_evict_warning_ns
                .is_some_and(|t| now.saturating_sub(t) < 60_000_000_000);
            if !quiet {
                st.last_evict_warning_ns = Some(now);
                tracing::warn!(
                    max_keys = self.max_keys,
                    evicted_total = total,
                    "more idempotency keys than --idempotency-max-keys within the window; \
                     forgetting the oldest early (their retries would write again)"
                );
            }
        }
    }

    /// Keys forgotten before their window ended, since open.
    #[cfg(test)]
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Live keys, remembered.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().map.len()
    }

    /// Saves every live done key to `dir/idempotency.json` (atomically), so
    /// they outlive the WAL files about to be deleted.
    pub(crate) fn persist(&self, dir: &Path) -> Result<()> {
        let _one_writer = self.persist.lock();
        let now = self.clock.now_ns();
        let keys: Vec<Saved> = {
            let st = self.state.lock();
            st.map
                .iter()
                .filter_map(|((table_id, key), e)| match e {
                    Entry::Done(d) if !self.expired(d.at_ns, now) => Some(Saved {
                        table_id: *table_id,
                        key: key.to_string(),
                        fingerprint: d.fingerprint,
                        rows: d.rows,
                        memory: d.ack == Ack::Memory,
                        at_ns: d.at_ns,
                    }),
                    _ => None,
                })
                .collect()
        };
        let json = serde_json::to_vec(&SavedFile { keys }).expect("keys serialize");
        write_atomic(&dir.join(KEYS_FILE), &json)
            .map_err(|e| Error::io(format!("{} {}", e.verb(), e.path.display()), e.source))
    }

    /// Loads the keys saved by [`Keys::persist`], if any. A damaged file is
    /// reported and ignored: it only costs deduplication of old retries.
    pub(crate) fn load(&self, dir: &Path) -> usize {
        let path = dir.join(KEYS_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read saved idempotency keys; ignoring them");
                return 0;
            }
        };
        let file: SavedFile = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "damaged saved idempotency keys; ignoring them");
                return 0;
            }
        };
        let n = file.keys.len();
        for k in file.keys {
            let rec = KeyRecord {
                key: k.key,
                fingerprint: k.fingerprint,
                rows: k.rows,
                ack: if k.memory { Ack::Memory } else { Ack::Durable },
            };
            self.record(k.table_id, &rec, k.at_ns);
        }
        n
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SavedFile {
    keys: Vec<Saved>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    table_id: u64,
    key: String,
    fingerprint: u64,
    rows: u64,
    memory: bool,
    at_ns: i64,
}

/// The right to write with a key. Dropping it settles the key: remembered
/// (with the outcome given to [`Claim::settle_done`]) or forgotten; either
/// way, waiting duplicates wake up.
pub(crate) struct Claim<'a> {
    keys: &'a Keys,
    key: MapKey,
    token: u64,
    on_drop: Option<Done>,
    /// Dropped last, after the map is settled: wakes the waiters.
    _done: watch::Sender<()>,
}

impl Claim<'_> {
    /// From now on the write counts as made: call it right before handing
    /// the record to the WAL (a failure to hand it over calls
    /// [`Claim::settle_forgotten`]).
    pub(crate) fn settle_done(&mut self, done: Done) {
        self.on_drop = Some(done);
    }

    /// The write failed: forget the key.
    pub(crate) fn settle_forgotten(&mut self) {
        self.on_drop = None;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let now = self.keys.clock.now_ns();
        let mut st = self.keys.state.lock();
        let ours = matches!(
            st.map.get(&self.key),
            Some(Entry::Pending { token, .. }) if *token == self.token
        );
        if !ours {
            return; // already recorded by the commit thread
        }
        match self.on_drop {
            Some(done) => self.keys.set_done(&mut st, self.key.clone(), done, now),
            None => {
                st.map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const SEC: i64 = 1_000_000_000;

    fn keys(max: usize) -> (Arc<Keys>, Arc<ManualClock>) {
        let clock = ManualClock::new(1_000 * SEC);
        let k = Keys::new(Duration::from_secs(600), max, clock.clone());
        (Arc::new(k), clock)
    }

    fn key(k: &str, body: &str) -> IdempotencyKey {
        IdempotencyKey::new(k, &[b"text/csv", body.as_bytes()]).unwrap()
    }

    /// Runs one keyed "write" of `rows` rows: Some(rows) if it wrote.
    async fn write(
        keys: &Keys,
        clock: &ManualClock,
        k: &IdempotencyKey,
        rows: u64,
    ) -> Result<Option<u64>> {
        match keys.begin(1, k).await? {
            Begin::Replay(d) => {
                assert_eq!(d.rows, rows);
                Ok(None)
            }
            Begin::Fresh(mut c) => {
                c.settle_done(Done {
                    fingerprint: k.fingerprint(),
                    rows,
                    ack: Ack::Durable,
                    at_ns: clock.now_ns(),
                });
                Ok(Some(rows))
            }
        }
    }

    #[tokio::test]
    async fn replays_within_the_window_and_forgets_after() {
        let (keys, clock) = keys(100);
        let k = key("a", "body");
        assert_eq!(write(&keys, &clock, &k, 3).await.unwrap(), Some(3));
        clock.advance(599 * SEC);
        assert_eq!(write(&keys, &clock, &k, 3).await.unwrap(), None);
        // Same key on another table is another key.
        assert!(matches!(keys.begin(2, &k).await.unwrap(), Begin::Fresh(_)));
        clock.advance(SEC);
        assert_eq!(write(&keys, &clock, &k, 3).await.unwrap(), Some(3));
        // The expired entry was replaced, and nothing else is left over.
        assert_eq!(keys.len(), 1);
        clock.advance(601 * SEC);
        let _ = keys.begin(1, &key("other", "x")).await.unwrap();
        assert_eq!(keys.len(), 0, "expired keys are dropped lazily");
    }

    #[tokio::test]
    async fn different_body_same_key_conflicts() {
        let (keys, clock) = keys(100);
        write(&keys, &clock, &key("a", "one"), 1).await.unwrap();
        let err = write(&keys, &clock, &key("a", "two"), 1).await.unwrap_err();
        assert!(
            matches!(err, Error::IdempotencyConflict { ref key } if key == "a"),
            "{err}"
        );
        // The content type is part of the request too.
        let other_type = IdempotencyKey::new("a", &[b"application/x-ndjson", b"one"]).unwrap();
        assert!(keys.begin(1, &other_type).await.is_err());
    }

    #[tokio::test]
    async fn failed_writes_are_forgotten() {
        let (keys, clock) = keys(100);
        let k = key("a", "body");
        match keys.begin(1, &k).await.unwrap() {
            Begin::Fresh(mut c) => {
                c.settle_done(Done {
                    fingerprint: k.fingerprint(),
                    rows: 1,
                    ack: Ack::Durable,
                    at_ns: 0,
                });
                c.settle_forgotten(); // the WAL refused it
            }
            Begin::Replay(_) => panic!("fresh key"),
        }
        assert_eq!(write(&keys, &clock, &k, 2).await.unwrap(), Some(2));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_duplicate_waits_then_replays_or_writes() {
        let (keys, clock) = keys(100);
        for first_fails in [false, true] {
            let k = key(if first_fails { "b" } else { "a" }, "body");
            let Begin::Fresh(mut claim) = keys.begin(1, &k).await.unwrap() else {
                panic!("fresh key")
            };
            let second = {
                let (keys, clock, k) = (keys.clone(), clock.clone(), k.clone());
                tokio::spawn(async move { write(&keys, &clock, &k, 5).await.unwrap() })
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(
                !second.is_finished(),
                "the duplicate must wait for the first"
            );
            if !first_fails {
                claim.settle_done(Done {
                    fingerprint: k.fingerprint(),
                    rows: 5,
                    ack: Ack::Memory,
                    at_ns: clock.now_ns(),
                });
            }
            drop(claim);
            let wrote = second.await.unwrap();
            assert_eq!(wrote, if first_fails { Some(5) } else { None });
        }
    }

    #[tokio::test]
    async fn commit_thread_record_wins_over_a_dropped_claim() {
        let (keys, clock) = keys(100);
        let k = key("a", "body");
        let Begin::Fresh(claim) = keys.begin(1, &k).await.unwrap() else {
            panic!()
        };
        let rec = KeyRecord {
            key: "a".into(),
            fingerprint: k.fingerprint(),
            rows: 4,
            ack: Ack::Durable,
        };
        keys.record(1, &rec, clock.now_ns());
        drop(claim); // e.g. the request failed to hear back, but the record is logged
        assert_eq!(write(&keys, &clock, &k, 4).await.unwrap(), None);
        // Recovery skips keys older than the window.
        keys.record(
            1,
            &KeyRecord {
                key: "old".into(),
                ..rec
            },
            clock.now_ns() - 600 * SEC,
        );
        assert_eq!(keys.len(), 1);
    }

    #[tokio::test]
    async fn memory_is_bounded_by_max_keys() {
        let (keys, clock) = keys(3);
        for i in 0..10 {
            write(&keys, &clock, &key(&format!("k{i}"), "b"), 1)
                .await
                .unwrap();
            clock.advance(SEC);
        }
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.evicted(), 7);
        // The newest survive, the oldest were forgotten.
        assert_eq!(
            write(&keys, &clock, &key("k9", "b"), 1).await.unwrap(),
            None
        );
        assert_eq!(
            write(&keys, &clock, &key("k0", "b"), 1).await.unwrap(),
            Some(1)
        );
    }

    #[tokio::test]
    async fn saved_keys_load_into_a_new_map() {
        let tmp = tempfile::tempdir().unwrap();
        let (keys, clock) = keys(100);
        write(&keys, &clock, &key("a", "body"), 3).await.unwrap();
        clock.advance(500 * SEC);
        write(&keys, &clock, &key("b", "body"), 2).await.unwrap();
        keys.persist(tmp.path()).unwrap();

        let fresh = Keys::new(Duration::from_secs(600), 100, clock.clone());
        assert_eq!(fresh.load(tmp.path()), 2);
        assert_eq!(
            write(&fresh, &clock, &key("a", "body"), 3).await.unwrap(),
            None
        );
        // "a" is 600 s old now and expires on load; "b" still replays.
        clock.advance(100 * SEC);
        let fresh = Keys::new(Duration::from_secs(600), 100, clock.clone());
        fresh.load(tmp.path());
        assert_eq!(fresh.len(), 1);
        assert_eq!(
            write(&fresh, &clock, &key("b", "body"), 2).await.unwrap(),
            None
        );

        std::fs::write(tmp.path().join(KEYS_FILE), b"{ not json").unwrap();
        assert_eq!(fresh.load(tmp.path()), 0);
        assert!(IdempotencyKey::new("", &[]).is_err());
        assert!(IdempotencyKey::new("x".repeat(MAX_KEY_BYTES + 1), &[]).is_err());
    }
}
