//! [`Db`]: the storage engine's front door. Opening one takes the data
//! directory's lock, loads the catalog and manifests, replays the WAL (and
//! rebuilds the idempotency keys from it), and starts the background task;
//! writes go through the WAL and are in the memstore when acknowledged with
//! [`Ack::Durable`], or shortly after with [`Ack::Memory`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use arrow::array::RecordBatch;
use bytes::Bytes;
use fs2::FileExt;
use futures::StreamExt;
use kiln_wal::{Applier, SyncPolicy, Wal, WalOptions};

use crate::background;
use crate::budget::{self, MemoryBudget};
use crate::catalog::{CatalogFile, Registry, SharedRegistry};
use crate::clock::{Clock, SystemClock};
use crate::codec;
use crate::config::{StorageConfig, WalSync};
use crate::cpu::CpuPool;
use crate::cube::CubeBuilder;
use crate::error::{Error, Result};
use crate::idempotency::{Begin, Done, IdempotencyKey, Keys};
use crate::manifest::{Manifest, Reaper, Segment, table_prefix};
use crate::schema::{ColumnDef, TableDef, conform, split_by_day};
use crate::segment;
use crate::store::Store;
use crate::table::{Commit, Table};

/// Counters of the storage engine (exported as metrics by the server).
#[derive(Debug, Default)]
pub struct StorageMetrics {
    pub rows_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub flushes: AtomicU64,
    /// Duration of each flush (freeze, sort, encode, write, manifest swap).
    pub flush_duration: kiln_wal::LatencyHistogram,
    /// Rows written by flushes (each row once, when it leaves memory).
    pub rows_flushed: AtomicU64,
    pub compactions: AtomicU64,
    /// Duration of each compaction (read, merge, encode, write, commit).
    pub compaction_duration: kiln_wal::LatencyHistogram,
    /// Rows rewritten by compactions.
    pub rows_compacted: AtomicU64,
    /// Cube parts a compaction made by merging its inputs' parts
    /// ([`crate::CubeBuilder::merge`]) rather than from the merged rows.
    pub parts_merged: AtomicU64,
    /// Writes that waited because their table's flushes fell behind
    /// ([`crate::pace`]), and how long they waited together.
    pub writes_paced: AtomicU64,
    pub pace_micros: AtomicU64,
}

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ack {
    /// After the WAL fsync (under `--wal-sync=always`) and the memstore
    /// apply: the rows survive a crash and the next query sees them.
    #[default]
    Durable,
    /// Once the record is validated and queued for the WAL's commit thread:
    /// the rows are visible within one group commit and durable after the
    /// next fsync; a crash before it loses them (a graceful close does not).
    Memory,
}

impl Ack {
    pub fn as_str(self) -> &'static str {
        match self {
            Ack::Durable => "durable",
            Ack::Memory => "memory",
        }
    }
}

/// Options of [`Db::write_with`].
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub ack: Ack,
    /// A retry with the same key (same table, within
    /// `--idempotency-window`) is answered without writing again.
    pub idempotency_key: Option<IdempotencyKey>,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub rows: usize,
    /// How the write that stored the rows was acknowledged.
    pub ack: Ack,
    /// True if the idempotency key had been used already: nothing was
    /// written now, `rows` and `ack` are the first write's.
    pub replayed: bool,
}

/// How a new table is declared.
#[derive(Debug, Clone)]
pub struct CreateTable {
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub time_column: Option<String>,
    pub sort_key: Vec<String>,
    pub if_not_exists: bool,
}

/// Longest a write waits for flushes to make room in memory.
pub const MEMSTORE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) struct Inner {
    pub config: StorageConfig,
    pub store: Store,
    pub registry: SharedRegistry,
    pub wal: Wal,
    pub keys: Arc<Keys>,
    pub clock: Arc<dyn Clock>,
    pub reaper: Reaper,
    pub metrics: Arc<StorageMetrics>,
    pub last_applied: Arc<AtomicU64>,
    catalog: tokio::sync::Mutex<CatalogFile>,
    shutdown: tokio::sync::watch::Sender<bool>,
    background: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The data directory lock, released by `close`.
    lock: parking_lot::Mutex<Option<std::fs::File>>,
    /// Why the last background round (flush, compaction) failed, until one
    /// succeeds.
    pub background_failure: parking_lot::Mutex<Option<String>>,
    /// Where flushes, compactions and cube builds sort, encode and decode.
    pub cpu: CpuPool,
    /// Computes cube parts, once the query layer installed it.
    pub cube_builder: std::sync::OnceLock<Arc<dyn CubeBuilder>>,
    /// What writes in flight may take together (`--write-memory-limit`).
    write_budget: MemoryBudget,
    /// Parts that failed to build (segment path, cube id), and when: not
    /// tried again for `PART_RETRY_AFTER` (a store outage passes; a part
    /// that cannot be built is not rebuilt every round).
    pub failed_parts:
        parking_lot::Mutex<std::collections::HashMap<(String, u64), std::time::Instant>>,
}

impl Inner {
    /// Sorts, encodes (with the configured compression) and durably writes
    /// one segment of `table`'s partition `day`, with its cube parts; not
    /// visible until a manifest refers to it. The parts are computed from
    /// the sorted rows, or merged from those of `inputs` (the segments a
    /// compaction merges into this one), while the segment is encoded and
    /// written, so a flush with cubes waits for the longer of the two, not
    /// for both. If the segment fails, its parts' files go when nothing
    /// holds them.
    pub(crate) async fn write_segment(
        &self,
        table: &Table,
        day: i32,
        batches: Vec<RecordBatch>,
        inputs: &[Arc<Segment>],
    ) -> Result<Arc<Segment>> {
        let c = self.config.segment_compression;
        // A compaction's inputs are each sorted already.
        let order = match inputs {
            [] => segment::Order::Any,
            _ => segment::Order::Runs,
        };
        let rows = segment::sort(&self.cpu, &table.def, &table.schema, batches, order).await?;
        let path = segment::new_path(&table.def, day);
        let cubes = table.cubes();
        let (meta, parts) = tokio::join!(
            segment::put(
                &self.cpu,
                &self.store,
                &table.def,
                path.clone(),
                day,
                &rows,
                c
            ),
            self.build_parts(table, &path, &rows, &cubes, inputs),
        );
        match meta {
            Ok(meta) => Ok(Segment::with_parts(meta, parts, &self.reaper)),
            Err(e) => {
                parts.iter().for_each(|p| p.retire());
                Err(e)
            }
        }
    }
}

/// An open Kiln database. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("data_dir", &self.inner.config.data_dir)
            .finish()
    }
}

/// Applies committed WAL records to the memstores and their idempotency
/// keys to the key map, in sequence order.
struct MemApplier {
    registry: SharedRegistry,
    keys: Arc<Keys>,
    clock: Arc<dyn Clock>,
    last_applied: Arc<AtomicU64>,
}

impl Applier for MemApplier {
    fn apply(&self, seq: u64, payload: &Bytes) {
        match codec::decode(payload) {
            Ok((head, batch)) => {
                record_key(&self.keys, &head);
                if let Some(t) = self.registry.load().by_id.get(&head.table_id) {
                    t.mem.apply(seq, &batch, self.clock.now_ns());
                }
            }
            Err(e) => tracing::error!(seq, error = %e, "undecodable WAL record"),
        }
        self.last_applied.store(seq, Ordering::Release);
    }
}

/// Remembers the idempotency key a WAL record carries, if any. Done before
/// `last_applied` moves past the record, so the key is in the map before the
/// record can be flushed and its WAL file deleted (which saves the map).
fn record_key(keys: &Keys, head: &codec::Header) {
    if let (Some(k), Some(at)) = (&head.key, head.written_at_ns) {
        keys.record(head.table_id, k, at);
    }
}

impl Db {
    /// Opens (creating if needed) the database in `config.data_dir`.
    pub async fn open(config: StorageConfig) -> Result<Db> {
        Self::open_with_clock(config, Arc::new(SystemClock)).await
    }

    /// Opens with an injected clock (tests).
    pub async fn open_with_clock(config: StorageConfig, clock: Arc<dyn Clock>) -> Result<Db> {
        Self::open_on(config, clock, None).await
    }

    /// Opens on the given store instead of the one `--storage` names
    /// (tests: a store that injects faults).
    pub async fn open_on(
        config: StorageConfig,
        clock: Arc<dyn Clock>,
        store: Option<Store>,
    ) -> Result<Db> {
        let dir = config.data_dir.clone();
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let lock = lock_dir(&dir)?;
        let store = match store {
            Some(s) => s,
            None => Store::open(&config).await?,
        };
        let reaper = Reaper::start(store.clone(), config.segment_delete_delay);
        let catalog = CatalogFile::load(&store).await?;
        let mut registry = Registry::default();
        for def in &catalog.tables {
            let manifest = Manifest::load(&store, def.id, &reaper).await?;
            let cubes = catalog.cubes_of(def.id);
            cubes::forget_dropped_parts(&manifest, &cubes);
            registry = registry.with(Table::new(
                def.clone(),
                manifest,
                config.memstore_freeze_bytes.as_usize(),
                cubes,
            ));
        }
        let registry: SharedRegistry = Arc::new(ArcSwap::from_pointee(registry));

        let wal_dir = dir.join("wal");
        let wal_opts = wal_options(&config);
        let recovered = Wal::recover(&wal_dir, &wal_opts)?;
        if let Some((file, offset)) = &recovered.truncated_tail {
            tracing::warn!(file = %file.display(), offset, "WAL ended in a torn record; truncated it");
        }
        let keys = Arc::new(Keys::new(
            config.idempotency_window,
            config.idempotency_max_keys,
            clock.clone(),
        ));
        let saved_keys = keys.load(&dir);
        let applier = MemApplier {
            registry: registry.clone(),
            keys: keys.clone(),
            clock: clock.clone(),
            last_applied: Default::default(),
        };
        let mut last_seq = 0;
        let mut replayed = 0;
        for (seq, payload) in &recovered.records {
            last_seq = *seq;
            let (head, _) = codec::decode_header(payload)?;
            let reg = registry.load();
            match reg.by_id.get(&head.table_id) {
                Some(t) if *seq > t.mem.manifest().flushed_seq => {
                    applier.apply(*seq, payload);
                    replayed += 1;
                }
                // Flushed rows are in segments, but their keys are only here.
                _ => record_key(&keys, &head),
            }
        }
        let flushed = registry
            .load()
            .by_id
            .values()
            .map(|t| t.mem.manifest().flushed_seq)
            .max();
        let next_seq = last_seq.max(flushed.unwrap_or(0)) + 1;
        applier.last_applied.store(next_seq - 1, Ordering::Release);
        tracing::info!(replayed, next_seq, saved_keys, idempotency_keys = keys.len(), dir = %dir.display(), storage = store.location(), "database opened");
        let last_applied = applier.last_applied.clone();
        let wal = Wal::start(&wal_dir, wal_opts, next_seq, Arc::new(applier))?;

        let (shutdown, rx) = tokio::sync::watch::channel(false);
        let write_memory = config.write_memory_limit.as_usize();
        let inner = Arc::new(Inner {
            config,
            store,
            registry,
            wal,
            keys,
            clock,
            reaper,
            metrics: Default::default(),
            last_applied,
            catalog: tokio::sync::Mutex::new(catalog),
            shutdown,
            background: parking_lot::Mutex::new(None),
            lock: parking_lot::Mutex::new(Some(lock)),
            background_failure: parking_lot::Mutex::new(None),
            cpu: Default::default(),
            cube_builder: Default::default(),
            write_budget: MemoryBudget::new(write_memory),
            failed_parts: Default::default(),
        });
        background::remove_orphans(&inner).await?;
        let task = tokio::spawn(background::run(inner.clone(), rx));
        *inner.background.lock() = Some(task);
        Ok(Db { inner })
    }

    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The memory writes in flight share (`--write-memory-limit`).
    pub fn write_budget(&self) -> &MemoryBudget {
        &self.inner.write_budget
    }

    pub fn metrics(&self) -> &StorageMetrics {
        &self.inner.metrics
    }

    pub fn wal_stats(&self) -> kiln_wal::WalStats {
        self.inner.wal.stats()
    }

    /// Why the database is degraded now, if it is: writes failing (a full
    /// or failing disk under the WAL) or flushes failing (rows stay in
    /// memory and the WAL until they succeed). Both heal by themselves when
    /// the cause is gone; `None` when all is well.
    pub fn degraded(&self) -> Option<String> {
        let wal = self
            .inner
            .wal
            .degraded()
            .map(|e| format!("writes failing: {e}"));
        let flush =
            (self.inner.background_failure.lock().clone()).map(|e| format!("flushes failing: {e}"));
        match (wal, flush) {
            (Some(w), Some(f)) => Some(format!("{w}; {f}")),
            (w, f) => w.or(f),
        }
    }

    /// The table of that name, lock-free.
    pub fn table(&self, name: &str) -> Option<Arc<Table>> {
        self.inner.registry.load().by_name.get(name).cloned()
    }

    /// All tables, by name.
    pub fn tables(&self) -> Vec<Arc<Table>> {
        self.inner
            .registry
            .load()
            .by_name
            .values()
            .cloned()
            .collect()
    }

    /// Creates a table; durable in the catalog when this returns.
    pub async fn create_table(&self, req: CreateTable) -> Result<Arc<Table>> {
        let mut catalog = self.inner.catalog.lock().await;
        if let Some(t) = self.table(&req.name) {
            return if req.if_not_exists {
                Ok(t)
            } else {
                Err(Error::TableExists(req.name))
            };
        }
        let def = TableDef::new(
            catalog.next_table_id,
            &req.name,
            req.columns,
            req.time_column.as_deref(),
            &req.sort_key,
        )?;
        catalog.next_table_id += 1;
        catalog.tables.push(def.clone());
        if let Err(e) = catalog.save(&self.inner.store).await {
            catalog.tables.pop();
            return Err(e);
        }
        let table = Table::new(
            def,
            Manifest::default(),
            self.inner.config.memstore_freeze_bytes.as_usize(),
            vec![],
        );
        self.inner.registry.rcu(|r| r.with(table.clone()));
        Ok(table)
    }

    /// Drops a table; gone from the catalog when this returns. Its files are
    /// deleted once no running query uses them.
    pub async fn drop_table(&self, name: &str, if_exists: bool) -> Result<bool> {
        let mut catalog = self.inner.catalog.lock().await;
        let Some(table) = self.table(name) else {
            return if if_exists {
                Ok(false)
            } else {
                Err(Error::TableNotFound(name.into()))
            };
        };
        let old = std::mem::take(&mut catalog.tables);
        catalog.tables = old
            .iter()
            .filter(|d| d.id != table.def.id)
            .cloned()
            .collect();
        let old_cubes = catalog.cubes.clone();
        catalog.cubes.retain(|c| c.table_id != table.def.id);
        if let Err(e) = catalog.save(&self.inner.store).await {
            catalog.tables = old;
            catalog.cubes = old_cubes;
            return Err(e);
        }
        self.inner.registry.rcu(|r| r.without(name));
        table.mark_dropped();
        let store = self.inner.store.clone();
        let prefix = table_prefix(table.def.id).clone().join("manifest");
        tokio::spawn(async move {
            for p in store.list(&prefix).await.unwrap_or_default() {
                let _ = store.delete(&p).await;
            }
        });
        Ok(true)
    }

    /// Writes rows atomically: validated, logged in the WAL (fsynced under
    /// `--wal-sync=always`) and applied to the memstore when this returns,
    /// so the next query sees them. Returns the number of rows.
    pub async fn write(&self, table: &str, batches: &[RecordBatch]) -> Result<usize> {
        let w = self
            .write_with(table, batches, WriteOptions::default())
            .await?;
        Ok(w.rows)
    }

    /// Writes rows atomically, acknowledged as `opts.ack` says, at most once
    /// per idempotency key (see the `idempotency` module for the exact
    /// guarantees).
    ///
    /// Every check (unknown table, row validation, key reuse with another
    /// body: [`Error::IdempotencyConflict`]) is done before anything is
    /// queued, so it is reported here whatever the ack. With
    /// [`Ack::Memory`], `Ok` means queued: a later WAL failure loses the
    /// rows (logged) instead of failing this call. A write to a table whose
    /// flushes fall behind first waits a moment ([`crate::pace`]). When rows
    /// waiting to be flushed fill `--memstore-max-bytes`, it waits for room
    /// ([`Error::MemstoreFull`] after [`MEMSTORE_WAIT`]). Before that, it
    /// reserves what its rows take while they are written from
    /// `--write-memory-limit`, waiting while writes in flight hold it
    /// ([`Error::WritesFull`] after [`budget::WAIT`]).
    pub async fn write_with(
        &self,
        table: &str,
        batches: &[RecordBatch],
        opts: WriteOptions,
    ) -> Result<Written> {
        let t = self
            .table(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        self.pace(&t).await;
        let footprint = batches
            .iter()
            .map(|b| budget::footprint(b, &t.schema))
            .fold(0, u64::saturating_add);
        let _reserved = self.inner.write_budget.reserve_write(footprint).await?;
        self.room_in_memory().await?;
        let mut claim = match &opts.idempotency_key {
            None => None,
            Some(key) => match self.inner.keys.begin(t.def.id, key).await? {
                Begin::Replay(d) => {
                    return Ok(Written {
                        rows: d.rows as usize,
                        ack: d.ack,
                        replayed: true,
                    });
                }
                Begin::Fresh(claim) => Some(claim),
            },
        };
        let written = |rows| Written {
            rows,
            ack: opts.ack,
            replayed: false,
        };
        // On an error return the claim is dropped unsettled: key forgotten.
        let Some(batch) = self.conform_rows(&t, batches)? else {
            return Ok(written(0));
        };
        let rows = batch.num_rows();
        let at_ns = self.inner.clock.now_ns();
        let key = opts.idempotency_key.map(|k| codec::KeyRecord {
            key: k.key().to_string(),
            fingerprint: k.fingerprint(),
            rows: rows as u64,
            ack: opts.ack,
        });
        let payload = codec::encode(t.def.id, at_ns, key.as_ref(), &batch)?;
        let bytes = payload.len() as u64;
        let done = key.map(|k| Done {
            fingerprint: k.fingerprint,
            rows: k.rows,
            ack: k.ack,
            at_ns,
        });
        let logged = match opts.ack {
            Ack::Durable => {
                // `append` queues the record when first polled, which the
                // `.await` does at once: from here on, if this future is
                // dropped (client gone), the record will be written and the
                // key must be remembered.
                if let (Some(c), Some(d)) = (claim.as_mut(), done) {
                    c.settle_done(d);
                }
                self.inner.wal.append(payload).await.map(drop)
            }
            // May wait for room in the queue (nothing queued yet): settle after.
            Ack::Memory => {
                let queued = self.inner.wal.append_nowait(payload).await;
                if let (Some(c), Some(d), Ok(())) = (claim.as_mut(), done, &queued) {
                    c.settle_done(d);
                }
                queued
            }
        };
        if let Err(e) = logged {
            if let Some(c) = claim.as_mut() {
                c.settle_forgotten();
            }
            return Err(e.into());
        }
        drop(claim);
        self.inner
            .metrics
            .rows_written
            .fetch_add(rows as u64, Ordering::Relaxed);
        self.inner
            .metrics
            .bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(written(rows))
    }

    /// Checks rows for `table` as [`Db::write`] would, writing nothing:
    /// the rows conformed to the table as one batch (None if empty).
    pub fn check_rows(&self, table: &str, batches: &[RecordBatch]) -> Result<Option<RecordBatch>> {
        let t = self
            .table(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        self.conform_rows(&t, batches)
    }

    /// Validates and conforms rows for `t` into one batch (None if empty).
    fn conform_rows(&self, t: &Table, batches: &[RecordBatch]) -> Result<Option<RecordBatch>> {
        let mut out = Vec::with_capacity(batches.len());
        let mut offset = 0;
        for b in batches {
            out.push(conform(
                &t.def,
                &t.schema,
                b,
                offset,
                self.inner.config.max_row_bytes.as_usize(),
            )?);
            offset += b.num_rows();
        }
        if offset == 0 {
            return Ok(None);
        }
        let batch = if out.len() == 1 {
            out.pop().expect("one")
        } else {
            arrow::compute::concat_batches(&t.schema, &out)?
        };
        Ok(Some(batch))
    }

    /// Bulk load: writes rows straight into Parquet segments and commits them
    /// with one manifest swap, bypassing the WAL. All or nothing: when this
    /// returns Ok every row is durable and visible; on error none is.
    pub async fn load(&self, table: &str, batches: &[RecordBatch]) -> Result<usize> {
        let t = self
            .table(table)
            .ok_or_else(|| Error::TableNotFound(table.into()))?;
        let mut by_day: BTreeMap<i32, Vec<RecordBatch>> = BTreeMap::new();
        let mut offset = 0;
        for b in batches {
            let b = conform(
                &t.def,
                &t.schema,
                b,
                offset,
                self.inner.config.max_row_bytes.as_usize(),
            )?;
            offset += b.num_rows();
            for (day, part) in split_by_day(&b, t.def.time_column)? {
                by_day.entry(day).or_default().push(part);
            }
        }
        if offset == 0 {
            return Ok(0);
        }
        let mut doubt = t.manifest_lock.lock().await;
        t.settle(&self.inner.store, &mut doubt).await?;
        let mut written = vec![];
        let wrote: Result<()> = async {
            // Partitions are sorted and encoded in parallel, one per core.
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            let pack = self.inner.config.segment_pack_rows;
            let mut writes = futures::stream::iter(segment::pack_days(by_day, pack))
                .map(|(day, parts)| self.inner.write_segment(&t, day, parts, &[]))
                .buffer_unordered(cores);
            while let Some(meta) = writes.next().await {
                written.push(meta?);
            }
            Ok(())
        }
        .await;
        if let Err(e) = wrote {
            written.iter().for_each(|s| s.retire());
            return Err(e);
        }
        let current = t.mem.manifest();
        let next = current.next(written.clone(), &[], current.flushed_seq);
        let commit = Commit {
            next,
            flushed: None,
            settled: Box::new(move |ok| {
                if !ok {
                    written.iter().for_each(|s| s.retire());
                }
            }),
        };
        // An import whose commit is left in doubt is settled by the next
        // change of the table's manifest: it may become visible then.
        t.commit(&self.inner.store, &mut doubt, commit).await?;
        self.inner
            .metrics
            .rows_written
            .fetch_add(offset as u64, Ordering::Relaxed);
        Ok(offset)
    }

    /// Flushes every table's memstore to segments now (and trims the WAL).
    pub async fn flush_all(&self) -> Result<()> {
        for t in self.tables() {
            background::flush_table(&self.inner, &t).await?;
        }
        background::trim_wal(&self.inner)
    }

    /// Compacts every partition that qualifies, until none does.
    pub async fn compact_all(&self) -> Result<usize> {
        let mut n = 0;
        for t in self.tables() {
            while background::compact_table(&self.inner, &t).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Stops background work, flushes if configured, syncs and closes the WAL,
    /// and releases the data directory. Writes after this fail.
    pub async fn close(&self) -> Result<()> {
        let _ = self.inner.shutdown.send(true);
        let task = self.inner.background.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        if self.inner.config.flush_on_close {
            self.flush_all().await?;
        }
        self.inner.wal.close()?;
        self.inner.store.close().await;
        self.inner.lock.lock().take();
        Ok(())
    }
}

mod admit;
mod cubes;
pub use cubes::CreateCube;

fn wal_options(c: &StorageConfig) -> WalOptions {
    WalOptions {
        sync: match c.wal_sync {
            WalSync::Always => SyncPolicy::Always,
            WalSync::Interval => SyncPolicy::Interval(c.wal_sync_interval),
        },
        linger: c.wal_linger,
        max_batch_bytes: c.wal_max_batch_bytes.as_usize(),
        segment_bytes: c.wal_segment_bytes.bytes(),
        max_queued_bytes: c.wal_max_queued_bytes.as_usize(),
        skip_corrupt: c.wal_skip_corrupt,
        ..WalOptions::default()
    }
}

fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    f.try_lock_exclusive().map_err(|_| Error::Locked {
        dir: dir.to_path_buf(),
        lock: path,
    })?;
    Ok(f)
}
