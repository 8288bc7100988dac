//! The state a cube keeps for `count(DISTINCT x)` over an integer column:
//! the group's distinct values, sorted, as Rice-coded gaps ([`super::gaps`]).
//! Dashboard ids (users, sessions) are sparse within each group of a cube
//! (a few hundred users of millions in an hour or a region), where that
//! takes a few bytes a value; a roaring bitmap, measured on the abtest
//! dashboard, took about 16
//! (a container per value) and merged thousands of them into one 10x
//! slower than sorting. Merging appends a state's values to its group's
//! list, sorted and deduplicated once read; from 512 values on (`HASHED_FROM`)
//! the group keeps a hash set instead, which states decode into (counting
//! tens of thousands of values that way is 2.4x faster than sorting them),
//! and a state sorts only the distinct values. DataFusion's own state (the
//! list of distinct values) is kept for other types.
//!
//! A scan returns a part's states as ordinals ([`super::ordinals`]), which a
//! group keeps in a list and, from a share of the dictionary on
//! ([`bits_from`]) and its second state, in a bitset: setting a bit is
//! cheaper than a hash-set insert. Ids merged as ids (another partition's
//! states, ids past a full dictionary) are looked up among the group's
//! ordinals when it is counted, so a value is counted once whichever way
//! it came.
//!
//! Signed values are mapped to `u64` with the sign bit flipped, which keeps
//! them distinct and in order.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Int64Array, LargeBinaryArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::common::{HashSet, Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

use super::gaps;
use super::ordinals::{self, Ordinals};

/// Whether a distinct count over `t` keeps sorted values.
pub fn kept_as_values(t: &DataType) -> bool {
    t.is_integer()
}

/// `count(DISTINCT x)` of integers, with a sorted-values state.
#[derive(Debug)]
pub struct DistinctValues {
    signature: Signature,
    /// The measure's ordinals, which states in the scan's form use.
    ordinals: Arc<Ordinals>,
    /// Whether its own states are in the scan's form (a query's partial
    /// aggregation) rather than ids (a part's).
    scanned: bool,
}

impl DistinctValues {
    /// A cube measure's distinct count, merging states in the scan's form
    /// with `ordinals` ([`super::ordinals`]); its states are ids.
    pub fn new(ordinals: Arc<Ordinals>) -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
            ordinals,
            scanned: false,
        }
    }

    /// The same count, whose states are in the scan's form: what a query
    /// merging a scan's states in several partitions passes on.
    pub fn scanned(ordinals: Arc<Ordinals>) -> Self {
        Self {
            scanned: true,
            ..Self::new(ordinals)
        }
    }

    fn coding(&self) -> Coding {
        Coding {
            ordinals: self.ordinals.clone(),
            scanned: self.scanned,
        }
    }

    fn state_type(&self) -> DataType {
        match self.scanned {
            true => DataType::LargeBinary,
            false => DataType::Binary,
        }
    }
}

impl PartialEq for DistinctValues {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.ordinals, &other.ordinals) && self.scanned == other.scanned
    }
}

impl Eq for DistinctValues {}

impl std::hash::Hash for DistinctValues {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.ordinals).hash(state);
        self.scanned.hash(state)
    }
}

const NAME: &str = "cube_distinct_count";

impl AggregateUDFImpl for DistinctValues {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "values"),
            self.state_type(),
            true,
        ))])
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(One(Values::default(), self.coding())))
    }

    fn groups_accumulator_supported(&self, _: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(Groups {
            groups: vec![],
            held: 0,
            coding: self.coding(),
        }))
    }

    fn default_value(&self, _: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }
}

/// Calls `f(row, key)` for each non-NULL value of `values`.
fn keys(values: &ArrayRef, mut f: impl FnMut(usize, u64)) -> Result<()> {
    if values.data_type() == &DataType::UInt64 {
        let a = values.as_primitive::<UInt64Type>();
        for (row, v) in a.iter().enumerate() {
            if let Some(v) = v {
                f(row, v);
            }
        }
        return Ok(());
    }
    if !values.data_type().is_integer() {
        return exec_err!("{NAME}: not an integer column: {}", values.data_type());
    }
    let a = cast(values, &DataType::Int64)?;
    for (row, v) in a.as_primitive::<Int64Type>().iter().enumerate() {
        if let Some(v) = v {
            f(row, (v as u64) ^ (1 << 63));
        }
    }
    Ok(())
}

/// Appends the values coded in `bytes` ([`super::gaps`]).
pub(super) fn decode(bytes: &[u8], out: &mut Vec<u64>) -> Result<()> {
    gaps::decode_with(bytes, |v| out.push(v))
}

/// How a state column's states are coded.
#[derive(Clone, Copy)]
enum Form {
    /// Ids (a part's, as its builder aggregates them): [`decode`].
    Ids,
    /// Ordinals and ids (a scan's, and a query's partial states):
    /// [`ordinals::split`].
    Ordinals {
        /// A group's ordinals go to a bitset from this many on.
        bits_from: usize,
        /// Every ordinal is below this ([`Ordinals::given`]).
        given: usize,
    },
}

/// Each non-NULL state of a state column, with its row and form.
fn states(
    states: &ArrayRef,
    ordinals: &Ordinals,
    mut f: impl FnMut(usize, &[u8], Form) -> Result<()>,
) -> Result<()> {
    if states.data_type() == &DataType::LargeBinary {
        let given = ordinals.given();
        let form = Form::Ordinals {
            bits_from: bits_from(given),
            given,
        };
        for (row, b) in states.as_binary::<i64>().iter().enumerate() {
            if let Some(b) = b {
                f(row, b, form)?;
            }
        }
        return Ok(());
    }
    for (row, b) in states.as_binary::<i32>().iter().enumerate() {
        if let Some(b) = b {
            f(row, b, Form::Ids)?;
        }
    }
    Ok(())
}

/// A group's ordinals go to a bitset (one bit per ordinal given, `given`)
/// from this many on: where the bitset takes no more than the hash set
/// of as many ids would ([`BYTES_PER_VALUE`] each).
fn bits_from(given: usize) -> usize {
    (given / (8 * BYTES_PER_VALUE)).max(HASHED_FROM)
}

/// Lists of ordinals shorter than this are counted by sorting them.
const SORTED_BELOW: usize = 64;

thread_local! {
    /// Zeroed between uses; grows to one bit per ordinal counted (at most
    /// [`ordinals::MAX_ORDINALS`] bits, 512 KiB) and is kept by the thread.
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Bitsets of counted groups, all zero, for the thread's next groups
    /// (at most [`CLEAN_KEPT`], each at most 512 KiB as above).
    static CLEAN: std::cell::RefCell<Vec<Vec<u64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Zeroed bitsets a thread keeps. Why keep any: a group's bitset has a bit
/// per ordinal given (128 KiB for a million users), and zeroing a fresh one
/// cost as much as counting it (5% of the server's CPU on the abtest
/// dashboard). Counting a group it is done with zeroes its bitset in the
/// same pass ([`OrdinalSet::into_count`]), which leaves it warm for the next.
const CLEAN_KEPT: usize = 4;

/// A bitset of `words` zero words: a kept one if the thread has any.
fn zeroed(words: usize) -> Vec<u64> {
    match CLEAN.with_borrow_mut(Vec::pop) {
        Some(mut bits) => {
            bits.resize(words, 0);
            bits
        }
        None => vec![0; words],
    }
}

/// How many zeroed bitsets this thread keeps.
#[cfg(test)]
pub(super) fn clean_kept() -> usize {
    CLEAN.with_borrow(Vec::len)
}

/// Keeps `bits`, which must be all zero, for the thread's next group.
fn recycle(bits: Vec<u64>) {
    debug_assert!(bits.iter().all(|&w| w == 0));
    CLEAN.with_borrow_mut(|kept| {
        if kept.len() < CLEAN_KEPT {
            kept.push(bits);
        }
    })
}

/// Sets each ordinal's bit in `bits`, grown first to a bit per ordinal
/// given (`given`: every ordinal is below it, [`ordinals::split`]). One
/// pass with the bitset's bounds held in registers: this loop is most of
/// what merging a dashboard's distinct counts costs.
fn set_all(bits: &mut Vec<u64>, given: usize, ordinals: impl Iterator<Item = u32>) {
    let words = given.div_ceil(64);
    if bits.len() < words {
        bits.resize(words, 0);
    }
    let bits = bits.as_mut_slice();
    for o in ordinals {
        bits[(o >> 6) as usize] |= 1 << (o & 63);
    }
}

/// One group's ordinals: a list until [`bits_from`] (or while it holds
/// one state), then a bitset.
#[derive(Debug, Default)]
struct OrdinalSet {
    list: Vec<u32>,
    bits: Vec<u64>,
}

impl OrdinalSet {
    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.bits.is_empty()
    }

    /// Adds a state's ordinals ([`ordinals::split`]: each below `given`).
    /// They are copied onto the list while it stays below `bits_from`,
    /// and always when they are the group's first: a group merged from
    /// one state (a day's users, read from one part) is counted from its
    /// list, in one pass when sorted as rollups' states are
    /// ([`Self::count`]), and only a group merged from several pays for a
    /// bitset, from the second state on.
    fn extend(&mut self, ords: &[u8], bits_from: usize, given: usize) {
        if self.bits.is_empty() {
            if self.list.is_empty() || self.list.len() + ords.len() / 4 < bits_from {
                self.list.extend(ordinals::values(ords));
                return;
            }
            // One bit per ordinal given so far.
            self.bits = zeroed(given.div_ceil(64));
            let list = std::mem::take(&mut self.list);
            set_all(&mut self.bits, given, list.into_iter());
        }
        set_all(&mut self.bits, given, ordinals::values(ords));
    }

    /// The distinct ordinals (the list sorted and deduplicated); a bitset
    /// is zeroed as it is read and kept for the thread's next group.
    fn into_distinct(mut self) -> Vec<u32> {
        if self.bits.is_empty() {
            self.sorted();
            return self.list;
        }
        let mut out = vec![];
        for (w, word) in self.bits.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                out.push((w as u32) << 6 | bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        recycle(self.bits);
        out
    }

    /// [`Self::count`] of a set no longer needed: its bitset is zeroed
    /// as it is counted and kept for the thread's next group.
    fn into_count(mut self) -> usize {
        if self.bits.is_empty() {
            return self.count();
        }
        let mut n = 0;
        for w in &mut self.bits {
            n += w.count_ones() as usize;
            *w = 0;
        }
        recycle(self.bits);
        n
    }

    fn count(&mut self) -> usize {
        if !self.bits.is_empty() {
            return self.bits.iter().map(|w| w.count_ones() as usize).sum();
        }
        if self.list.len() < SORTED_BELOW || self.list.is_sorted_by(|a, b| a < b) {
            return self.sorted().len();
        }
        // Bits set in the thread's scratch bitset and cleared again: one
        // pass over the list, where sorting it takes a dozen.
        SCRATCH.with_borrow_mut(|bits| {
            let words = self.list.iter().fold(0, |m, &o| m.max(o)) as usize / 64 + 1;
            if bits.len() < words {
                bits.resize(words, 0);
            }
            let mut n = 0;
            for &o in &self.list {
                let (w, b) = ((o >> 6) as usize, 1u64 << (o & 63));
                n += usize::from(bits[w] & b == 0);
                bits[w] |= b;
            }
            for &o in &self.list {
                bits[(o >> 6) as usize] = 0;
            }
            n
        })
    }

    /// The list, sorted and deduplicated.
    fn sorted(&mut self) -> &[u32] {
        if !self.list.is_sorted_by(|a, b| a < b) {
            self.list.sort_unstable();
            self.list.dedup();
        }
        &self.list
    }

    fn contains(&mut self, o: u32) -> bool {
        match self.bits.is_empty() {
            true => self.sorted().binary_search(&o).is_ok(),
            false => self
                .bits
                .get((o >> 6) as usize)
                .is_some_and(|w| w & (1 << (o & 63)) != 0),
        }
    }

    fn bytes(&self) -> usize {
        self.list.capacity() * 4 + self.bits.capacity() * 8
    }
}

/// From this many values on, a group's distinct values are found with a
/// hash set (its seed random per process) rather than by sorting them all.
const HASHED_FROM: usize = 512;

/// One group's values: few are appended to a list, sorted and
/// deduplicated once read; from [`HASHED_FROM`] on they go to a hash set,
/// which keeps each once as it comes (no list grows with repeats).
#[derive(Debug, Default)]
struct Values {
    /// Sorted and distinct when `sorted`; empty once `set` is.
    values: Vec<u64>,
    sorted: bool,
    set: Option<HashSet<u64>>,
    /// Ordinals merged from a scan's states; the values above are then
    /// ids merged otherwise, some of which may have an ordinal too.
    ordinals: OrdinalSet,
}

/// Bytes [`Values`] may take per value appended: a list's growth slack, or
/// a hash set's slots and control bytes at its load factor.
const BYTES_PER_VALUE: usize = 16;

impl Values {
    /// The distinct values, sorted (what a state keeps).
    fn get(&mut self) -> &[u64] {
        if let Some(set) = self.set.take() {
            self.values = set.into_iter().collect();
            self.sorted = false;
        }
        if !self.sorted {
            self.values.sort_unstable();
            self.values.dedup();
            self.sorted = true;
        }
        &self.values
    }

    /// The distinct values, sorted, ordinals made ids again.
    fn ids(&mut self, ordinals: &Ordinals) -> Result<&[u64]> {
        if !self.ordinals.is_empty() {
            let held = std::mem::take(&mut self.ordinals).into_distinct();
            ordinals.ids(held, |id| self.push(id))?;
        }
        Ok(self.get())
    }

    /// How many distinct values (what a count answers): a hash set's are
    /// counted without sorting; ids are looked up among the ordinals.
    fn count(&mut self, ordinals: &Ordinals) -> usize {
        self.ids_beyond(ordinals) + self.ordinals.count()
    }

    /// [`Self::count`] of a group no longer needed
    /// ([`OrdinalSet::into_count`]).
    fn into_count(mut self, ordinals: &Ordinals) -> usize {
        self.ids_beyond(ordinals) + std::mem::take(&mut self.ordinals).into_count()
    }

    /// How many ids merged as ids no held ordinal stands for.
    fn ids_beyond(&mut self, ordinals: &Ordinals) -> usize {
        let ids = match &self.set {
            Some(set) => set.len(),
            None => self.get().len(),
        };
        if ids == 0 || self.ordinals.is_empty() {
            return ids;
        }
        let mut more = 0;
        let held = &mut self.ordinals;
        let ids: Box<dyn Iterator<Item = u64>> = match &self.set {
            Some(set) => Box::new(set.iter().copied()),
            None => Box::new(self.values.iter().copied()),
        };
        ordinals.lookup(ids, |_, o| {
            if o.is_none_or(|o| !held.contains(o)) {
                more += 1;
            }
        });
        more
    }

    /// How many values are held (repeats too, until hashed).
    fn held(&self) -> usize {
        self.values.len() + self.set.as_ref().map_or(0, |s| s.len())
    }

    /// What the group holds, in values' worth of bytes ([`BYTES_PER_VALUE`]).
    fn held_units(&self) -> usize {
        self.held() + self.ordinals.bytes().div_ceil(BYTES_PER_VALUE)
    }

    /// Moves a long list into a hash set.
    fn hash_if_long(&mut self) {
        if self.set.is_none() && self.values.len() >= HASHED_FROM {
            let mut set = HashSet::with_capacity(self.values.len());
            set.extend(self.values.drain(..));
            self.values = vec![];
            self.set = Some(set);
        }
    }

    fn push(&mut self, v: u64) {
        match &mut self.set {
            Some(set) => {
                set.insert(v);
            }
            None => {
                self.values.push(v);
                self.sorted = false;
                self.hash_if_long();
            }
        }
    }

    fn merge(&mut self, state: &[u8], form: Form) -> Result<()> {
        if let Form::Ordinals { bits_from, given } = form {
            let (ords, ids) = ordinals::split(state, given)?;
            self.ordinals.extend(ords, bits_from, given);
            for c in ids.chunks_exact(8) {
                self.push(u64::from_le_bytes(c.try_into().expect("8 bytes")));
            }
            return Ok(());
        }
        match &mut self.set {
            Some(set) => gaps::decode_with(state, |v| {
                set.insert(v);
            }),
            None => {
                self.sorted = false;
                decode(state, &mut self.values)?;
                self.hash_if_long();
                Ok(())
            }
        }
    }
}

/// How a count's own states are coded (the measure's ordinals, and
/// whether in the scan's form: [`DistinctValues::scanned`]).
#[derive(Debug)]
struct Coding {
    ordinals: Arc<Ordinals>,
    scanned: bool,
}

impl Coding {
    /// `values`' state, taking what it holds.
    fn state(&self, values: &mut Values) -> Result<Vec<u8>> {
        if !self.scanned {
            return Ok(gaps::encode(values.ids(&self.ordinals)?));
        }
        let held = std::mem::take(&mut values.ordinals).into_distinct();
        let mut out = vec![];
        ordinals::state(&held, values.get(), &mut out);
        Ok(out)
    }

    fn array(&self, states: Vec<Vec<u8>>) -> ArrayRef {
        match self.scanned {
            true => Arc::new(LargeBinaryArray::from_iter_values(states)),
            false => Arc::new(BinaryArray::from_iter_values(states)),
        }
    }
}

#[derive(Debug)]
struct One(Values, Coding);

impl Accumulator for One {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        keys(&values[0], |_, k| self.0.push(k))
    }

    fn merge_batch(&mut self, s: &[ArrayRef]) -> Result<()> {
        states(&s[0], &self.1.ordinals, |_, b, form| self.0.merge(b, form))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let state = self.1.state(&mut self.0)?;
        Ok(vec![match self.1.scanned {
            true => ScalarValue::LargeBinary(Some(state)),
            false => ScalarValue::Binary(Some(state)),
        }])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(
            self.0.count(&self.1.ordinals) as i64
        )))
    }

    fn size(&self) -> usize {
        let set = self
            .0
            .set
            .as_ref()
            .map_or(0, |s| s.capacity() * BYTES_PER_VALUE);
        std::mem::size_of::<Self>() + self.0.values.capacity() * 8 + set + self.0.ordinals.bytes()
    }
}

/// Each group's values, how many values all hold (for `size`), and how
/// states are coded.
struct Groups {
    groups: Vec<Values>,
    held: usize,
    coding: Coding,
}

impl Groups {
    fn grow(&mut self, total: usize) {
        if self.groups.len() < total {
            self.groups.resize_with(total, Values::default);
        }
    }

    fn take(&mut self, emit_to: EmitTo) -> Vec<Values> {
        let groups = emit_to.take_needed(&mut self.groups);
        self.held = self.groups.iter().map(Values::held_units).sum();
        groups
    }
}

impl GroupsAccumulator for Groups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.grow(total_num_groups);
        let pass = |row: usize| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        let mut added = 0;
        let groups = &mut self.groups;
        keys(&values[0], |row, k| {
            if pass(row) {
                groups[group_indices[row]].push(k);
                added += 1;
            }
        })?;
        self.held += added;
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.grow(total_num_groups);
        let mut added = 0;
        let groups = &mut self.groups;
        states(&values[0], &self.coding.ordinals, |row, b, form| {
            // A coded id takes a byte or more, an ordinal four.
            added += match form {
                Form::Ids => b.len(),
                Form::Ordinals { .. } => b.len() / 4,
            };
            groups[group_indices[row]].merge(b, form)
        })?;
        self.held += added;
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let groups = self.take(emit_to);
        let ordinals = &self.coding.ordinals;
        Ok(Arc::new(Int64Array::from_iter_values(
            groups.into_iter().map(|g| g.into_count(ordinals) as i64),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let groups = self.take(emit_to);
        let states = groups
            .into_iter()
            .map(|mut g| self.coding.state(&mut g))
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![self.coding.array(states)])
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let mut rows = vec![None; values[0].len()];
        let pass = |row: usize| opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        keys(&values[0], |row, k| {
            if pass(row) {
                rows[row] = Some(k);
            }
        })?;
        let states = rows
            .iter()
            .map(|k| {
                let mut values = Values::default();
                k.iter().for_each(|k| values.push(*k));
                self.coding.state(&mut values)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![self.coding.array(states)])
    }

    fn size(&self) -> usize {
        // Per value held (merged states count their coded bytes).
        self.held * BYTES_PER_VALUE + self.groups.capacity() * std::mem::size_of::<Values>()
    }
}
