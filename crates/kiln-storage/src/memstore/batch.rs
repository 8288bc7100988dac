//! [`MemBatch`]: an immutable in-memory batch, and what upper layers derive
//! from its rows and keep with it.
//!
//! Derived values (a cube's states over the rows) are made once per batch
//! and read by every query until the rows are flushed. The memstore merges
//! batches as it goes: an active buffer's batches merge like a binary
//! counter, a freeze concatenates a day's batches, a packing concatenates
//! small days. Made again from every row of the merged batch, a freeze's
//! values would cost a whole day's rows per cube at once, with the queries
//! that need them waiting. So a merged batch inherits its inputs' values
//! with the rows each was derived from ([`MemBatch::merged`]). The deriving
//! layer makes its own value from those and from the rows they leave out
//! ([`MemBatch::inherited`]), then lets them go
//! ([`MemBatch::drop_inherited`]). What is inherited stays counted in the
//! memstore's bytes until it is let go or the batch leaves.

use std::any::Any;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::compute::cast;
use arrow::datatypes::DataType;
use parking_lot::Mutex;

use crate::schema::view_schema;

/// An immutable in-memory batch (table schema, strings as `Utf8`) and its
/// query form, made on first read and kept: strings as `Utf8View`, which
/// DataFusion compares and groups faster. Made once per batch, not once per
/// query: casting at every scan was half the CPU of point lookups over
/// unflushed rows. The views share the string bytes; the 16 bytes per
/// string value they add are charged to the batch ([`Self::charge`]), so
/// the memstore's bytes count them while the batch is in it.
pub struct MemBatch {
    pub batch: RecordBatch,
    viewed: OnceLock<RecordBatch>,
    derived: Mutex<Derived>,
    /// The memstore's count of bytes held, which takes what is charged to
    /// this batch while it is in the memstore ([`Self::charge`]).
    held: Arc<AtomicUsize>,
}

/// What upper layers derived from a batch's rows, and its count.
#[derive(Default)]
struct Derived {
    /// The values, by key ([`MemBatch::derived`]).
    values: Vec<Value>,
    /// The values of the batches this one was merged from, each with the
    /// rows of this batch it was derived from; the ranges do not overlap.
    inherited: Vec<Inherited>,
    /// Bytes charged to the batch and counted in the memstore's bytes.
    charged: usize,
    /// Whether the batch has left the memstore: nothing more is counted.
    released: bool,
}

/// A value kept with a batch.
#[derive(Clone)]
struct Value {
    key: DerivedKey,
    value: Arc<dyn Any + Send + Sync>,
    /// Bytes charged for it ([`MemBatch::charge_derived`]): none until it
    /// is made.
    bytes: usize,
    /// Whether a batch merged from this one inherits it, once charged.
    passed_on: bool,
}

/// An input's values, and the rows of the merged batch they cover.
#[derive(Clone)]
struct Inherited {
    rows: Range<usize>,
    values: Vec<Value>,
}

/// A key of [`MemBatch::derived`]: the deriving layer's own (a cube's id
/// and the dimensions read).
pub type DerivedKey = (u64, u64);

impl std::fmt::Debug for MemBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let derived = self.derived.lock();
        f.debug_struct("MemBatch")
            .field("rows", &self.batch.num_rows())
            .field("derived", &derived.values.len())
            .field("inherited", &derived.inherited.len())
            .finish()
    }
}

impl MemBatch {
    /// A batch whose charges count in `held` ([`Self::charge`]).
    pub(crate) fn new(batch: RecordBatch, held: Arc<AtomicUsize>) -> Self {
        Self {
            batch,
            viewed: OnceLock::new(),
            derived: Mutex::default(),
            held,
        }
    }

    /// `batch`, the rows of `inputs` in their order (and possibly rows
    /// after them), inheriting what was derived from each input and passed
    /// on ([`Self::derived`]; module docs). An input that kept no such value
    /// passes on what it inherited. What is inherited is charged to the new
    /// batch; the caller releases the inputs ([`Self::release`]).
    pub(crate) fn merged<'a>(
        batch: RecordBatch,
        inputs: impl IntoIterator<Item = &'a MemBatch>,
        held: Arc<AtomicUsize>,
    ) -> Self {
        let mut inherited = vec![];
        let mut at = 0;
        for input in inputs {
            let derived = input.derived.lock();
            let own: Vec<Value> = derived
                .values
                .iter()
                .filter(|v| v.passed_on && v.bytes > 0)
                .cloned()
                .collect();
            match own.is_empty() {
                false => inherited.push(Inherited {
                    rows: at..at + input.rows(),
                    values: own,
                }),
                true => inherited.extend(derived.inherited.iter().map(|i| Inherited {
                    rows: i.rows.start + at..i.rows.end + at,
                    values: i.values.clone(),
                })),
            }
            at += input.rows();
        }
        debug_assert!(at <= batch.num_rows(), "inputs are rows of the batch");
        let bytes = inherited
            .iter()
            .flat_map(|i| &i.values)
            .map(|v| v.bytes)
            .sum();
        held.fetch_add(bytes, Ordering::Relaxed);
        Self {
            batch,
            viewed: OnceLock::new(),
            derived: Mutex::new(Derived {
                inherited,
                charged: bytes,
                ..Derived::default()
            }),
            held,
        }
    }

    pub fn rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// The keys of the values kept with this batch.
    pub fn derived_keys(&self) -> Vec<DerivedKey> {
        let derived = self.derived.lock();
        derived.values.iter().map(|v| v.key).collect()
    }

    /// Counts `bytes` that something kept with this batch holds in the
    /// memstore's bytes, so its flush threshold and limit see them, until
    /// the batch leaves the memstore: its rows flushed, or merged into a
    /// larger batch. Once it has left, nothing is counted: its values go
    /// when the last query reading it ends.
    pub fn charge(&self, bytes: usize) {
        let mut derived = self.derived.lock();
        if !derived.released {
            derived.charged += bytes;
            self.held.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// [`Self::charge`] for the value kept under `key`, once made: a
    /// charged value passes to a batch merged from this one, with its
    /// charge, if it was made by [`Self::derived`].
    pub fn charge_derived(&self, key: DerivedKey, bytes: usize) {
        let mut derived = self.derived.lock();
        if derived.released {
            return;
        }
        derived.charged += bytes;
        self.held.fetch_add(bytes, Ordering::Relaxed);
        if let Some(v) = derived.values.iter_mut().find(|v| v.key == key) {
            v.bytes += bytes;
        }
    }

    /// Bytes charged to this batch ([`Self::charge`]); counted in the
    /// memstore's bytes while the batch is in the memstore.
    pub fn charged(&self) -> usize {
        self.derived.lock().charged
    }

    /// The batch leaves the memstore: what was charged to it is no longer
    /// counted ([`Self::charge`]). Idempotent; a batch dropped without it
    /// (a packing given up) releases itself.
    pub(crate) fn release(&self) {
        let mut derived = self.derived.lock();
        if !derived.released {
            derived.released = true;
            self.held.fetch_sub(derived.charged, Ordering::Relaxed);
        }
    }

    /// The value kept with this batch under `key`, made by `make` on first
    /// use. It lives as long as the batch (until its rows are flushed, or
    /// merged into a larger batch, which inherits it once charged:
    /// [`Self::charge_derived`], [`Self::inherited`]). Its memory counts in
    /// the memstore's bytes once the deriving layer charges it.
    pub fn derived<T: Any + Send + Sync>(
        &self,
        key: DerivedKey,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        self.keep(key, make, |_| false, 1, true)
            .expect("no key counts against the bound")
    }

    /// [`Self::derived`], except that a new value is made only while fewer
    /// than `most` of the keys kept are `counted`: None otherwise. The
    /// check and the keeping are one step, so queries racing to add values
    /// cannot pass the bound together; `make` runs under the batch's lock,
    /// so it must not call back into the batch ([`Self::charge`],
    /// [`Self::viewed`]). Such values are made from others (a rollup of a
    /// cube's states) and are not passed on to merged batches.
    pub fn derived_within<T: Any + Send + Sync>(
        &self,
        key: DerivedKey,
        make: impl FnOnce() -> T,
        counted: impl Fn(&DerivedKey) -> bool,
        most: usize,
    ) -> Option<Arc<T>> {
        self.keep(key, make, counted, most, false)
    }

    fn keep<T: Any + Send + Sync>(
        &self,
        key: DerivedKey,
        make: impl FnOnce() -> T,
        counted: impl Fn(&DerivedKey) -> bool,
        most: usize,
        passed_on: bool,
    ) -> Option<Arc<T>> {
        let mut guard = self.derived.lock();
        let values = &mut guard.values;
        if let Some(v) = values.iter().find(|v| v.key == key)
            && let Ok(v) = v.value.clone().downcast::<T>()
        {
            return Some(v);
        }
        values.retain(|v| v.key != key);
        if values.iter().filter(|v| counted(&v.key)).count() >= most {
            return None;
        }
        let v = Arc::new(make());
        values.push(Value {
            key,
            value: v.clone(),
            bytes: 0,
            passed_on,
        });
        Some(v)
    }

    /// The values inherited under `key` ([`Self::merged`]), each with the
    /// rows of this batch it was derived from, in row order; rows not in
    /// any range have none.
    pub fn inherited(&self, key: DerivedKey) -> Vec<(Range<usize>, Arc<dyn Any + Send + Sync>)> {
        let derived = self.derived.lock();
        let mut out: Vec<_> = derived
            .inherited
            .iter()
            .filter_map(|i| {
                let v = i.values.iter().find(|v| v.key == key)?;
                Some((i.rows.clone(), v.value.clone()))
            })
            .collect();
        out.sort_by_key(|(rows, _)| rows.start);
        out
    }

    /// Lets go of the value kept under `key` ([`Self::derived`]), once the
    /// deriving layer knows it will not be read again: its bytes are no
    /// longer counted. A query holding it keeps it until it ends.
    pub fn forget(&self, key: DerivedKey) {
        let mut derived = self.derived.lock();
        let freed = remove_key(&mut derived.values, key);
        self.uncharge(&mut derived, freed);
    }

    /// Lets go of the values inherited under `key`, once the deriving layer
    /// has made its own: their bytes are no longer counted.
    pub fn drop_inherited(&self, key: DerivedKey) {
        let mut derived = self.derived.lock();
        let freed = (derived.inherited.iter_mut())
            .map(|i| remove_key(&mut i.values, key))
            .sum();
        derived.inherited.retain(|i| !i.values.is_empty());
        self.uncharge(&mut derived, freed);
    }

    /// Takes `freed` bytes of values let go off the batch's charge and
    /// the memstore's count, unless the batch was released already.
    fn uncharge(&self, derived: &mut Derived, freed: usize) {
        if !derived.released {
            derived.charged -= freed;
            self.held.fetch_sub(freed, Ordering::Relaxed);
        }
    }

    /// The batch with its `Utf8` columns as `Utf8View` ([`view_schema`]),
    /// its views charged to the batch ([`Self::charge`]).
    pub fn viewed(&self) -> &RecordBatch {
        self.viewed.get_or_init(|| {
            let viewed = view_strings(&self.batch);
            self.charge(views_bytes(&self.batch));
            viewed
        })
    }
}

/// Removes the values kept under `key`; the bytes charged for them.
fn remove_key(values: &mut Vec<Value>, key: DerivedKey) -> usize {
    let mut freed = 0;
    values.retain(|v| match v.key == key {
        true => {
            freed += v.bytes;
            false
        }
        false => true,
    });
    freed
}

impl Drop for MemBatch {
    fn drop(&mut self) {
        self.release();
    }
}

/// Bytes [`view_strings`] adds to `batch`: a 16-byte view per value of a
/// `Utf8` column (the strings and validity are shared).
fn views_bytes(batch: &RecordBatch) -> usize {
    let strings = batch.columns().iter();
    let strings = strings.filter(|c| c.data_type() == &DataType::Utf8);
    strings.map(|c| c.len() * std::mem::size_of::<u128>()).sum()
}

/// `batch` with its `Utf8` columns as `Utf8View` (the string bytes are
/// shared, not copied).
pub fn view_strings(batch: &RecordBatch) -> RecordBatch {
    let schema = view_schema(batch.schema_ref());
    let cols = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| match c.data_type() == f.data_type() {
            true => c.clone(),
            false => cast(c, f.data_type()).expect("Utf8 casts to Utf8View"),
        })
        .collect();
    RecordBatch::try_new(schema, cols).expect("same columns, viewed")
}
