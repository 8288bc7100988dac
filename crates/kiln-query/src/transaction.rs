//! [`Transaction`]: the writes of an explicit transaction (`BEGIN ...
//! COMMIT`), held until COMMIT.
//!
//! Why: BI tools and drivers wrap writes in transactions (pgjdbc with
//! autocommit off, psycopg by default, SQLAlchemy always) and rely on
//! ROLLBACK discarding them, and on an error meaning nothing was written.
//! Kiln's write is atomic per table (one WAL record), so a transaction's
//! INSERTs and COPYs are checked at once (a bad row fails its statement)
//! and staged here, then written as one atomic write at COMMIT; ROLLBACK
//! drops them. A transaction writes to one table: a second table would
//! need a write spanning two WAL records, which a crash could split, so it
//! is refused (0A000) rather than half-applied. Staged rows are not seen by
//! the transaction's own queries (there is no read-your-writes before
//! COMMIT), and they are bounded by `limit` bytes.
//!
//! Above the error module only: it holds rows, and knows nothing of
//! sessions or protocols.

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// One open transaction's staged writes. Shared by the statements of the
/// transaction; COMMIT takes them, ROLLBACK drops them.
#[derive(Debug)]
pub struct Transaction {
    limit: usize,
    staged: Mutex<Staged>,
}

#[derive(Debug, Default, Clone)]
struct Mark {
    table: Option<String>,
    batches: usize,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Staged {
    table: Option<String>,
    batches: Vec<RecordBatch>,
    bytes: usize,
    /// Savepoints, oldest first: a name and what was staged when it was set.
    savepoints: Vec<(String, Mark)>,
}

impl Staged {
    fn position(&self, name: &str) -> Result<usize> {
        self.savepoints
            .iter()
            .rposition(|(n, _)| n == name)
            .ok_or_else(|| Error::NoSavepoint(name.to_string()))
    }
}

/// What COMMIT writes: one table's rows.
#[derive(Debug)]
pub struct Writes {
    pub table: String,
    pub batches: Vec<RecordBatch>,
}

impl Transaction {
    /// A transaction that may stage at most `limit` bytes of rows.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            staged: Mutex::new(Staged::default()),
        }
    }

    /// Stages `batch`, rows already checked against `table`. Refuses (and
    /// stages nothing) a second table or rows past the limit.
    pub fn stage(&self, table: &str, batch: RecordBatch) -> Result<()> {
        let mut s = self.staged.lock();
        if let Some(t) = &s.table
            && t != table
        {
            return Err(Error::Unsupported(format!(
                "a transaction writes to one table: this one already wrote to \"{t}\"; \
                 commit it before writing to \"{table}\""
            )));
        }
        let bytes = batch.get_array_memory_size();
        if s.bytes + bytes > self.limit {
            return Err(Error::LimitExceeded(format!(
                "a transaction stages at most --max-body-bytes ({} bytes) of rows until COMMIT; \
                 commit in smaller transactions",
                self.limit
            )));
        }
        s.table.get_or_insert_with(|| table.to_string());
        s.bytes += bytes;
        if batch.num_rows() > 0 {
            s.batches.push(batch);
        }
        Ok(())
    }

    /// Takes what COMMIT must write (None: nothing staged), leaving the
    /// transaction empty.
    pub fn take(&self) -> Option<Writes> {
        let s = std::mem::take(&mut *self.staged.lock());
        let table = s.table?;
        (!s.batches.is_empty()).then_some(Writes {
            table,
            batches: s.batches,
        })
    }

    /// `SAVEPOINT name`: marks what is staged now.
    pub fn savepoint(&self, name: &str) {
        let mut s = self.staged.lock();
        let mark = Mark {
            table: s.table.clone(),
            batches: s.batches.len(),
            bytes: s.bytes,
        };
        s.savepoints.push((name.to_string(), mark));
    }

    /// `RELEASE SAVEPOINT name`: forgets it and every later savepoint,
    /// keeping what they staged.
    pub fn release(&self, name: &str) -> Result<()> {
        let mut s = self.staged.lock();
        let i = s.position(name)?;
        s.savepoints.truncate(i);
        Ok(())
    }

    /// `ROLLBACK TO SAVEPOINT name`: drops what was staged since it (it
    /// stays set; later ones are forgotten).
    pub fn rollback_to(&self, name: &str) -> Result<()> {
        let mut s = self.staged.lock();
        let i = s.position(name)?;
        let mark = s.savepoints[i].1.clone();
        s.savepoints.truncate(i + 1);
        s.batches.truncate(mark.batches);
        s.bytes = mark.bytes;
        s.table = mark.table;
        Ok(())
    }

    /// Rows staged so far.
    pub fn rows(&self) -> usize {
        self.staged
            .lock()
            .batches
            .iter()
            .map(|b| b.num_rows())
            .sum()
    }
}

#[cfg(test)]
mod tests;
