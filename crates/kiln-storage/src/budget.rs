//! The memory writes in flight may take together (`--write-memory-limit`).
//!
//! Why: one write's rows may take up to 1 GiB once cast to the table's
//! types, however small its body (a dictionary's one value may stand for
//! every row), and while it is written they exist several times over:
//! cast, joined into one batch, encoded for the WAL, copied into the
//! memstore ([`COPIES`]). Each write is bounded on its own; without a
//! bound on all of them together, a few such writes at once take more
//! memory than the machine has. So a write first reserves what its rows
//! will take ([`footprint`]) times [`COPIES`], and waits, first come first
//! served, while the writes in flight hold the budget; after [`WAIT`] it
//! is refused with [`Error::WritesFull`] (503, retry). A write larger than
//! the whole budget waits for the others and then runs alone.
//! Reservations are in KiB, so a budget up to 4 TiB fits a semaphore.
//!
//! [`MemoryBudget`] is the mechanism alone; the server bounds the request
//! bodies it holds with one too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Schema};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};

/// How many times a write's rows are held while it is written.
pub const COPIES: u64 = 4;

/// How long a write waits for the budget before it is refused.
pub const WAIT: Duration = Duration::from_secs(30);

/// What a value the footprint cannot see into is counted as, per row: a
/// column filled with NULLs, a `Null` column.
const WIDE: u64 = 8;

/// Bytes that holders reserve before they allocate and give back when
/// done, waiting first come first served while others hold them.
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    /// All of it, in KiB.
    kib: u32,
    /// Reservations that found it spent and waited.
    waits: AtomicU64,
}

/// A reservation, given back when dropped.
#[derive(Debug)]
pub struct Reserved {
    permit: OwnedSemaphorePermit,
}

impl Reserved {
    /// The bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * 1024
    }

    /// Takes `other` into this reservation.
    pub fn merge(&mut self, other: Reserved) {
        self.permit.merge(other.permit);
    }

    /// Gives back all but `bytes` of the reservation (rounded up to KiB).
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = usize::try_from(bytes.div_ceil(1024)).unwrap_or(usize::MAX);
        let excess = self.permit.num_permits().saturating_sub(keep);
        drop(self.permit.split(excess));
    }
}

/// A reservation of `need` bytes found `limit` held by others for as
/// long as it could wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    pub need: u64,
    pub limit: u64,
}

impl MemoryBudget {
    /// A budget of `bytes` (1 KiB at least).
    pub fn new(bytes: usize) -> Self {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        Self {
            permits: Arc::new(Semaphore::new(kib as usize)),
            kib,
            waits: AtomicU64::new(0),
        }
    }

    /// All of the budget, in bytes.
    pub fn limit_bytes(&self) -> u64 {
        u64::from(self.kib) * 1024
    }

    /// What holders hold of it, in bytes.
    pub fn reserved_bytes(&self) -> u64 {
        let free = self.permits.available_permits() as u64;
        u64::from(self.kib).saturating_sub(free) * 1024
    }

    /// How many reservations found it spent and waited (or were refused).
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` (all of the budget at most), waiting up to `wait`
    /// while others hold it.
    pub async fn reserve(
        &self,
        bytes: u64,
        wait: Duration,
    ) -> std::result::Result<Reserved, Spent> {
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.kib);
        if let Ok(permit) = self.permits.clone().try_acquire_many_owned(kib) {
            return Ok(Reserved { permit });
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        let acquire = self.permits.clone().acquire_many_owned(kib);
        match tokio::time::timeout(wait, acquire).await {
            Ok(Ok(permit)) => Ok(Reserved { permit }),
            // The semaphore is never closed; a timeout is the only failure.
            Ok(Err(_)) | Err(_) => Err(Spent {
                need: bytes,
                limit: self.limit_bytes(),
            }),
        }
    }

    /// Reserves what a write's rows take while written ([`COPIES`] times
    /// `footprint`), waiting up to [`WAIT`]; [`Error::WritesFull`] after.
    pub(crate) async fn reserve_write(&self, footprint: u64) -> Result<Reserved> {
        self.reserve(footprint.saturating_mul(COPIES), WAIT)
            .await
            .map_err(|Spent { need, limit }| Error::WritesFull { need, limit })
    }
}

/// What `batch` will take once cast to `table`'s types: a dictionary's
/// values counted for each row that refers to them, a column the batch
/// lacks (filled with NULLs) as [`WIDE`] bytes a row.
pub fn footprint(batch: &RecordBatch, table: &Schema) -> u64 {
    let rows = batch.num_rows() as u64;
    let absent = table.fields().len().saturating_sub(batch.num_columns()) as u64;
    let mut total = absent.saturating_mul(rows).saturating_mul(WIDE);
    for column in batch.columns() {
        let bytes = match column.data_type() {
            DataType::Dictionary(..) => dictionary_bytes(column),
            DataType::Null => rows.saturating_mul(WIDE),
            _ => column.get_array_memory_size() as u64,
        };
        total = total.saturating_add(bytes);
    }
    total
}

/// A dictionary column once its values are copied out per row: each
/// row's value, plus [`WIDE`] bytes a row of offsets and validity.
fn dictionary_bytes(column: &ArrayRef) -> u64 {
    let Some(d) = column.as_any_dictionary_opt() else {
        return column.get_array_memory_size() as u64;
    };
    let each = value_bytes(d.values());
    let keys = d.normalized_keys();
    let values: u64 = keys
        .iter()
        .map(|&k| each.get(k).copied().unwrap_or(0))
        .fold(0, u64::saturating_add);
    values.saturating_add((keys.len() as u64).saturating_mul(WIDE))
}

/// Each value's bytes: a string's or binary's length; otherwise an even
/// share of the values' memory.
fn value_bytes(values: &ArrayRef) -> Vec<u64> {
    let lengths = |offsets: Vec<usize>| offsets.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    match values.data_type() {
        DataType::Utf8 => lengths(offsets(values.as_string::<i32>().value_offsets())),
        DataType::LargeUtf8 => lengths(offsets(values.as_string::<i64>().value_offsets())),
        DataType::Binary => lengths(offsets(values.as_binary::<i32>().value_offsets())),
        DataType::LargeBinary => lengths(offsets(values.as_binary::<i64>().value_offsets())),
        DataType::Utf8View => view_lengths(values.as_string_view().views()),
        DataType::BinaryView => view_lengths(values.as_binary_view().views()),
        _ => {
            let n = values.len().max(1) as u64;
            vec![values.get_array_memory_size() as u64 / n; values.len()]
        }
    }
}

fn offsets<O: arrow::datatypes::ArrowNativeType>(o: &[O]) -> Vec<usize> {
    o.iter().map(|v| v.as_usize()).collect()
}

/// A view's low 32 bits are its length.
fn view_lengths(views: &[u128]) -> Vec<u64> {
    views.iter().map(|v| u64::from(*v as u32)).collect()
}

#[cfg(test)]
mod tests;
