//! Background work: flushing memstores to Parquet segments, compacting
//! small segments, merging frozen buffers' batches and packing small
//! in-memory batches of many days, building the cube parts segments lack,
//! and deleting WAL files whose rows are all persisted.
//!
//! One task does it all, so flushes across tables are naturally staggered:
//! at most one runs at a time, with `flush_gap` between starts. Writers and
//! queries never wait for it; each step swaps one pointer at its end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures::StreamExt;
use object_store::path::Path;

use crate::cpu::URGENT;
use crate::db::Inner;
use crate::error::Result;
use crate::failpoints::{
    COMPACTION_AFTER_COMMIT, COMPACTION_AFTER_SEGMENT, FLUSH_AFTER_SEGMENTS, failpoint,
};
use crate::manifest::Segment;
use crate::schema::split_by_day;
use crate::segment;
use crate::table::{Commit, Table};

/// Segments of one table whose missing cube parts one round builds, so a
/// new cube over a large table does not hold up flushes.
const PARTS_PER_ROUND: usize = 4;

/// Most segments one compaction merges: it holds the table's manifest lock
/// while it reads them, and the table's flushes wait for it.
const MAX_MERGED: usize = 1024;

/// Longest pause between two failed rounds.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs until shutdown is signalled. After a failed round (a full disk, an
/// object store that is down) the pause doubles, up to [`MAX_BACKOFF`], so
/// a failing store is not hammered; the first round that succeeds resets it.
pub(crate) async fn run(inner: Arc<Inner>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut pause = inner.config.background_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
        match round(&inner).await {
            Ok(()) => {
                pause = inner.config.background_interval;
                if inner.background_failure.lock().take().is_some() {
                    tracing::warn!("background flush/compaction works again");
                }
            }
            Err(e) => {
                pause = (pause * 2).min(MAX_BACKOFF.max(inner.config.background_interval));
                tracing::error!(error = %e, retry_in = ?pause, "background flush/compaction failed; will retry");
                *inner.background_failure.lock() = Some(e.to_string());
            }
        }
    }
}

/// One pass: flush what is due, compact one partition per table, merge
/// frozen buffers' batches and pack small in-memory batches, build missing
/// cube parts, trim the WAL.
pub(crate) async fn round(inner: &Inner) -> Result<()> {
    let now = inner.clock.now_ns();
    let urgent_from = inner.config.flush_bytes.as_usize().saturating_mul(URGENT);
    let behind = (inner.registry.load().by_id.values()).any(|t| t.mem.bytes() >= urgent_from);
    inner.cpu.urgency().set(behind);
    let mut due: Vec<Arc<Table>> = inner
        .registry
        .load()
        .by_id
        .values()
        .filter(|t| {
            let age = t
                .mem
                .oldest_unflushed()
                .map_or(0, |(_, at)| now.saturating_sub(at));
            t.mem.bytes() >= inner.config.flush_bytes.as_usize()
                || (age > 0 && age as u128 >= inner.config.flush_age.as_nanos())
        })
        .cloned()
        .collect();
    due.sort_by_key(|t| std::cmp::Reverse(t.mem.bytes()));
    for (i, t) in due.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(inner.config.flush_gap).await;
        }
        flush_table(inner, t).await?;
    }
    if inner.config.compaction {
        let tables: Vec<_> = inner.registry.load().by_id.values().cloned().collect();
        for t in tables {
            compact_table(inner, &t).await?;
        }
    }
    let tables: Vec<_> = inner.registry.load().by_id.values().cloned().collect();
    for t in &tables {
        // Concatenating up to a memstore's rows is CPU work: off the
        // runtime's workers, which serve writes and queries.
        let (table, limit) = (t.clone(), inner.config.segment_pack_rows);
        let pack = move || (table.mem.merge_frozen(), table.mem.pack_small(limit));
        let pack = move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(pack));
        match inner.cpu.run(pack).await {
            Ok((0, 0)) => {}
            Ok((merged, packed)) => tracing::debug!(
                table = t.name(),
                merged,
                packed,
                "merged frozen batches, packed small in-memory batches"
            ),
            Err(_) => {
                tracing::error!(
                    table = t.name(),
                    "merging or packing in-memory batches panicked"
                )
            }
        }
    }
    for t in tables {
        inner.build_missing_parts(&t, PARTS_PER_ROUND).await?;
    }
    trim_wal(inner)
}

/// Deletes WAL files whose every record is persisted in segments.
pub(crate) fn trim_wal(inner: &Inner) -> Result<()> {
    let applied = inner.last_applied.load(Ordering::Acquire);
    let needed = inner
        .registry
        .load()
        .by_id
        .values()
        .filter_map(|t| t.mem.wal_needed_from())
        .min();
    let through = needed.map_or(applied, |n| n.saturating_sub(1).min(applied));
    if through > 0 {
        if inner.wal.removable_through(through) > 0 {
            // Those files may hold the only copy of live idempotency keys.
            inner.keys.persist(&inner.config.data_dir)?;
        }
        inner.wal.remove_through(through)?;
    }
    Ok(())
}

/// Writes a table's memstore as segments and swaps them in.
pub(crate) async fn flush_table(inner: &Inner, table: &Table) -> Result<()> {
    let mut doubt = table.manifest_lock.lock().await;
    table.settle(&inner.store, &mut doubt).await?;
    let set = table.mem.begin_flush();
    if set.chunks.is_empty() {
        table.mem.abort_flush();
        return Ok(());
    }
    let started = Instant::now();
    let mut written = vec![];
    let wrote: Result<()> = async {
        let mut by_day: BTreeMap<i32, Vec<_>> = BTreeMap::new();
        for c in &set.chunks {
            for b in &c.batches {
                let parts = match c.days.first == c.days.last {
                    true => vec![(c.days.first, b.batch.clone())],
                    false => split_by_day(&b.batch, table.def.time_column)?,
                };
                for (day, part) in parts {
                    by_day.entry(day).or_default().push(part);
                }
            }
        }
        // A flush of many days' rows writes their segments side by side,
        // one per core, as an import does: one after the other, a core
        // waited while each segment was encoded and made durable. Every
        // write is awaited, so a failure leaves none running, and the
        // segments written are retired below.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let pack = inner.config.segment_pack_rows;
        let writes: Vec<Result<_>> = futures::stream::iter(segment::pack_days(by_day, pack))
            .map(|(day, batches)| inner.write_segment(table, day, batches, &[]))
            .buffered(cores)
            .collect()
            .await;
        let mut failed = None;
        for w in writes {
            match w {
                Ok(s) => written.push(s),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        failpoint!(FLUSH_AFTER_SEGMENTS, error);
        Ok(())
    }
    .await;
    if let Err(e) = wrote {
        table.mem.abort_flush();
        written.iter().for_each(|s| s.retire());
        return Err(e);
    }
    let rows: u64 = written.iter().map(|s| s.meta.rows).sum();
    let segments = written.len();
    let next = table
        .mem
        .manifest()
        .next(written.clone(), &[], set.through_seq);
    let commit = Commit {
        next,
        flushed: Some(set),
        settled: Box::new(move |ok| {
            if !ok {
                written.iter().for_each(|s| s.retire());
            }
        }),
    };
    // A commit left in doubt keeps its files and its rows in memory until
    // it is settled (see `Table::commit`).
    table.commit(&inner.store, &mut doubt, commit).await?;
    inner.metrics.flushes.fetch_add(1, Ordering::Relaxed);
    inner
        .metrics
        .rows_flushed
        .fetch_add(rows, Ordering::Relaxed);
    inner.metrics.flush_duration.record(started.elapsed());
    tracing::info!(table = table.name(), rows, segments, elapsed = ?started.elapsed(), "flushed");
    Ok(())
}

/// Merges small segments of `table`, if there are enough: first those of
/// one day (at least `compaction_min_segments` under half the target size,
/// up to the target), else a run of thin segments in time order (as
/// many, under `segment_pack_rows` rows together).
pub(crate) async fn compact_table(inner: &Inner, table: &Table) -> Result<bool> {
    let mut doubt = table.manifest_lock.lock().await;
    table.settle(&inner.store, &mut doubt).await?;
    let current = table.mem.manifest();
    let target = inner.config.compaction_target_bytes.bytes();
    let min_segments = inner.config.compaction_min_segments.max(2);
    let thin = inner.config.segment_pack_rows as u64;
    let Some((day, picked)) = same_day(&current.segments, target, min_segments)
        .or_else(|| thin_run(&current.segments, thin, min_segments))
    else {
        return Ok(false);
    };
    let started = Instant::now();
    let mut batches = vec![];
    for s in &picked {
        batches.extend(segment::read(&inner.cpu, &inner.store, &s.meta.path).await?);
    }
    let merged = inner.write_segment(table, day, batches, &picked).await?;
    let written: Result<()> = async {
        failpoint!(COMPACTION_AFTER_SEGMENT, error);
        Ok(())
    }
    .await;
    if let Err(e) = written {
        merged.retire();
        return Err(e);
    }
    let next = current.next(vec![merged.clone()], &picked, current.flushed_seq);
    let inputs = picked.len();
    let rows = merged.meta.rows;
    let commit = Commit {
        next,
        flushed: None,
        settled: Box::new(move |ok| {
            if ok {
                failpoint!(COMPACTION_AFTER_COMMIT);
                picked.iter().for_each(|s| s.retire());
            } else {
                merged.retire();
            }
        }),
    };
    table.commit(&inner.store, &mut doubt, commit).await?;
    inner.metrics.compactions.fetch_add(1, Ordering::Relaxed);
    inner
        .metrics
        .rows_compacted
        .fetch_add(rows, Ordering::Relaxed);
    inner.metrics.compaction_duration.record(started.elapsed());
    tracing::info!(table = table.name(), day, merged = inputs, rows, elapsed = ?started.elapsed(), "compacted");
    Ok(true)
}

/// The first day with `min_segments` segments under half of `target`, and
/// its smallest ones up to `target` (at least two, at most [`MAX_MERGED`]).
fn same_day(
    segments: &[Arc<Segment>],
    target: u64,
    min_segments: usize,
) -> Option<(i32, Vec<Arc<Segment>>)> {
    let mut by_day: BTreeMap<i32, Vec<Arc<Segment>>> = BTreeMap::new();
    for s in segments.iter().filter(|s| s.meta.bytes < target / 2) {
        by_day.entry(s.meta.day).or_default().push(s.clone());
    }
    let (day, mut small) = by_day.into_iter().find(|(_, v)| v.len() >= min_segments)?;
    small.sort_by_key(|s| s.meta.bytes);
    let mut picked = vec![];
    let mut total = 0;
    for s in small {
        if (picked.len() >= 2 && total + s.meta.bytes > target) || picked.len() == MAX_MERGED {
            break;
        }
        total += s.meta.bytes;
        picked.push(s);
    }
    Some((day, picked))
}

/// The first run, in time order, of at least `min_segments` thin segments
/// (of fewer than `limit` rows) holding together at most `limit` rows (and
/// at most [`MAX_MERGED`] of them), and its first day: the rule
/// [`segment::pack_days`] follows at flush. Thin segments of many days
/// (each day's few rows flushed on its own, or a backfill written a file a
/// day) so become one; a full day's segment between two is left out of
/// the run, not merged.
fn thin_run(
    segments: &[Arc<Segment>],
    limit: u64,
    min_segments: usize,
) -> Option<(i32, Vec<Arc<Segment>>)> {
    let mut thin: Vec<_> = segments.iter().filter(|s| s.meta.rows < limit).collect();
    thin.sort_by_key(|s| (s.meta.min_time, s.meta.max_time));
    let mut run: Vec<Arc<Segment>> = vec![];
    let mut total = 0;
    for s in thin {
        if run.len() == MAX_MERGED {
            break;
        }
        if total + s.meta.rows > limit {
            if run.len() >= min_segments {
                break;
            }
            (run, total) = (vec![], 0);
        }
        total += s.meta.rows;
        run.push(s.clone());
    }
    let day = run.iter().map(|s| s.meta.day).min()?;
    (run.len() >= min_segments).then_some((day, run))
}

/// Deletes objects no manifest refers to: leftovers of a crash mid-flush,
/// mid-compaction or mid-import (temporary files too), and the files of
/// dropped tables. In a shared store only those older than
/// `--orphan-grace`.
pub(crate) async fn remove_orphans(inner: &Inner) -> Result<usize> {
    let registry = inner.registry.load();
    let now = chrono::DateTime::from_timestamp_nanos(inner.clock.now_ns());
    let grace = chrono::Duration::from_std(inner.config.object_store.orphan_grace)
        .unwrap_or(chrono::Duration::MAX);
    let mut removed = 0;
    for object in inner.store.list_meta(&Path::from("tables")).await? {
        if inner.store.is_shared() && now - object.last_modified < grace {
            continue;
        }
        let path = object.location;
        let mut parts = path.parts();
        parts.next();
        let id: Option<u64> = parts.next().and_then(|p| p.as_ref().parse().ok());
        let keep = match id.and_then(|id| registry.by_id.get(&id)) {
            None => false,
            // A temporary file of a write a crash interrupted.
            Some(_) if path.as_ref().ends_with(".tmp") => false,
            Some(t) => {
                !path.as_ref().ends_with(".parquet")
                    || t.segments().iter().any(|s| {
                        s.meta.path == path.as_ref()
                            || s.parts().iter().any(|p| p.meta.path == path.as_ref())
                    })
            }
        };
        if !keep {
            inner.store.delete(&path).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests;
