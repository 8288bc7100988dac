//! Writing generated data to files, with parallel generation.
//!
//! Generation is CPU-bound and embarrassingly parallel (each batch depends
//! only on `(seed, i)`), but files must contain batches in order so the bytes
//! are independent of the thread count. [`par_for_each_batch`] runs a small
//! pool of scoped worker threads that claim batch indices, and the calling
//! thread re-orders results and hands them to the sink (the file writer)
//! strictly in index order. A bounded look-ahead window keeps memory flat
//! even if one worker stalls.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, mpsc};

use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::{AbTestGen, abtest_schema};
use crate::error::Error;

/// Timestamp format for text outputs: RFC 3339 without offset and with
/// nanoseconds, e.g. `2026-11-01T00:00:00.123456789`, which arrow's CSV and
/// JSON readers parse back into `Timestamp(Nanosecond, None)`.
const TEXT_TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.9f";

/// Output file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFormat {
    /// Parquet, zstd-compressed, with page-level statistics.
    Parquet,
    /// CSV with a header row.
    Csv,
    /// Newline-delimited JSON, one object per row (NULLs omitted).
    Ndjson,
}

impl OutFormat {
    /// Format from the file extension: `.parquet`, `.csv`, or
    /// `.ndjson` / `.jsonl` / `.json` (case-insensitive).
    pub fn from_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" => Some(Self::Parquet),
            "csv" => Some(Self::Csv),
            "ndjson" | "jsonl" | "json" => Some(Self::Ndjson),
            _ => None,
        }
    }
}

/// Generates all batches of `generator` on `threads` threads and passes them
/// to `sink` in batch order on the calling thread. The sequence seen by
/// `sink` is identical for every thread count. Stops at the first error.
pub fn par_for_each_batch(
    generator: &AbTestGen,
    threads: usize,
    sink: &mut dyn FnMut(RecordBatch) -> Result<(), Error>,
) -> Result<(), Error> {
    let total = generator.num_batches();
    let threads = threads.clamp(1, total.max(1));
    if threads == 1 {
        return generator.batches().try_for_each(sink);
    }
    // Workers may run at most `window` batches ahead of the sink.
    let window = threads * 2;
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let delivered = Mutex::new(0usize);
    let progressed = Condvar::new();

    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<(usize, RecordBatch)>(threads);
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop, delivered, progressed) = (&next, &stop, &delivered, &progressed);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    {
                        let mut done = delivered.lock().unwrap();
                        while i >= *done + window && !stop.load(Ordering::Relaxed) {
                            done = progressed.wait(done).unwrap();
                        }
                    }
                    if stop.load(Ordering::Relaxed) || tx.send((i, generator.batch(i))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);

        let mut pending = BTreeMap::new();
        let mut want = 0usize;
        let mut result = Ok(());
        'recv: for (i, batch) in rx.iter() {
            pending.insert(i, batch);
            while let Some(batch) = pending.remove(&want) {
                if let Err(e) = sink(batch) {
                    result = Err(e);
                    break 'recv;
                }
                want += 1;
                *delivered.lock().unwrap() = want;
                progressed.notify_all();
            }
        }
        if result.is_err() {
            // Release workers blocked on the window or on a full channel.
            let _guard = delivered.lock().unwrap();
            stop.store(true, Ordering::Relaxed);
            progressed.notify_all();
        }
        drop(rx);
        result
    })
}

/// Writes the generated data to `path` (created or truncated), generating
/// batches in parallel on all cores but writing them in order. Parquet uses
/// zstd and page statistics; CSV has a header row; CSV/NDJSON timestamps are
/// `2026-11-01T00:00:00.123456789`-style strings. `progress` is called with
/// the number of rows written so far after each batch. Returns the row count.
pub fn write_file(
    generator: &AbTestGen,
    path: &Path,
    format: OutFormat,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, Error> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut written = 0u64;
    let mut count = |rows: usize, progress: &mut dyn FnMut(u64)| {
        written += rows as u64;
        progress(written);
    };
    match format {
        OutFormat::Parquet => {
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .set_statistics_enabled(EnabledStatistics::Page)
                .build();
            let mut writer = ArrowWriter::try_new(file, abtest_schema(), Some(props))?;
            par_for_each_batch(generator, threads, &mut |batch| {
                writer.write(&batch)?;
                count(batch.num_rows(), progress);
                Ok(())
            })?;
            writer.into_inner()?.flush()?;
        }
        OutFormat::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .with_timestamp_format(TEXT_TIMESTAMP_FORMAT.to_string())
                .build(file);
            par_for_each_batch(generator, threads, &mut |batch| {
                writer.write(&batch)?;
                count(batch.num_rows(), progress);
                Ok(())
            })?;
            writer.into_inner().flush()?;
        }
        OutFormat::Ndjson => {
            let mut writer = arrow::json::WriterBuilder::new()
                .with_timestamp_format(TEXT_TIMESTAMP_FORMAT.to_string())
                .build::<_, arrow::json::writer::LineDelimited>(file);
            par_for_each_batch(generator, threads, &mut |batch| {
                writer.write(&batch)?;
                count(batch.num_rows(), progress);
                Ok(())
            })?;
            writer.finish()?;
            writer.into_inner().flush()?;
        }
    }
    Ok(written)
}
