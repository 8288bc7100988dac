//! Ordinals: dense numbers for the values of an integer distinct count,
//! so that merging a query's states sets bits instead of hashing ids.
//!
//! Why: a dashboard's distinct counts merge many states (a chart counting
//! 25,000 users over a week merged 67,000 ids, each a hash-set insert, most
//! of the server's time under load). Ids are sparse (scrambled 40-bit user
//! ids), so they cannot index a bitset; their ordinals (0, 1, 2, ... in
//! the order first seen) can.
//!
//! Ordinals live in memory only, one dictionary per cube measure: parts are
//! given theirs when first decoded into the part cache ([`super::Cubes`]),
//! and states computed at query time (the memstore, segments without a
//! part) when the scan returns them. Nothing is written: parts keep ids
//! ([`super::distinct`]), and after a restart ordinals are assigned again as
//! parts are read. An id keeps its ordinal for the life of the process, so
//! any two states agree on it. A dictionary holds at most [`MAX_ORDINALS`]
//! ids; ids past that stay ids in the scan's states (`extras` below), which
//! the accumulator counts by looking them up, so answers stay exact.
//!
//! The scan's form of a state (`LargeBinary`, so the accumulator tells it
//! from a part's `Binary` ids): the number of ordinals `n` (u32), `n`
//! ordinals (u32), then the ids without one (u64), all little-endian.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, LargeBinaryBuilder};
use datafusion::common::{HashMap, Result, exec_err};
use parking_lot::RwLock;

/// At most this many ids get ordinals in one dictionary (20-35 bytes each
/// held: the map, and the list back to ids).
pub const MAX_ORDINALS: usize = 1 << 22;

/// One cube measure's ids and their ordinals (module docs).
#[derive(Debug)]
pub struct Ordinals {
    inner: RwLock<Inner>,
    /// At most this many ids get ordinals.
    max: usize,
    /// Ordinals given and bytes held, set under the write lock, so that a
    /// query's merge reads them without taking the lock.
    given: AtomicUsize,
    bytes: AtomicUsize,
}

impl Default for Ordinals {
    fn default() -> Self {
        Self::with_max(MAX_ORDINALS)
    }
}

#[derive(Debug, Default)]
struct Inner {
    of: HashMap<u64, u32>,
    /// Ids by ordinal.
    ids: Vec<u64>,
}

impl Ordinals {
    /// A dictionary giving at most `max` ids ordinals.
    pub fn with_max(max: usize) -> Self {
        Self {
            inner: RwLock::default(),
            max: max.min(u32::MAX as usize),
            given: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Ordinals given so far: a bitset of them has this many bits, and
    /// every ordinal in a state already returned is below it.
    pub fn given(&self) -> usize {
        self.given.load(Ordering::Acquire)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Each id's ordinal, given to ids without one while there is room
    /// (`None` for an id left without). Ids seen before need only the read
    /// lock, so queries over the memstore's states rarely wait.
    fn assign(&self, ids: &[u64]) -> Vec<Option<u32>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut missing = false;
        self.lookup(ids.iter().copied(), |_, o| {
            missing |= o.is_none();
            out.push(o);
        });
        if !missing {
            return out;
        }
        let mut inner = self.inner.write();
        let Inner { of, ids: by } = &mut *inner;
        for (id, o) in ids.iter().zip(&mut out).filter(|(_, o)| o.is_none()) {
            *o = match of.get(id) {
                Some(o) => Some(*o),
                None if by.len() < self.max => {
                    let next = by.len() as u32;
                    of.insert(*id, next);
                    by.push(*id);
                    Some(next)
                }
                None => None,
            };
        }
        self.bytes
            .store(of.capacity() * 13 + by.capacity() * 8, Ordering::Relaxed);
        self.given.store(by.len(), Ordering::Release);
        out
    }

    /// Calls `f` with each id's ordinal, if it has one.
    pub fn lookup(&self, ids: impl IntoIterator<Item = u64>, mut f: impl FnMut(u64, Option<u32>)) {
        let inner = self.inner.read();
        for id in ids {
            f(id, inner.of.get(&id).copied());
        }
    }

    /// Calls `f` with the id of each ordinal; an error for one never given.
    pub fn ids(
        &self,
        ordinals: impl IntoIterator<Item = u32>,
        mut f: impl FnMut(u64),
    ) -> Result<()> {
        let inner = self.inner.read();
        for o in ordinals {
            match inner.ids.get(o as usize) {
                Some(id) => f(*id),
                None => return exec_err!("cube ordinals: ordinal {o} was never given"),
            }
        }
        Ok(())
    }

    /// A column of states coded as ids (`Binary`, [`super::distinct`]) in
    /// the scan's form (module docs), ordinals given to new ids.
    pub fn encode(&self, states: &ArrayRef) -> Result<ArrayRef> {
        let states = states.as_binary::<i32>();
        let mut ids = vec![];
        let mut ends = Vec::with_capacity(states.len());
        for s in states.iter() {
            if let Some(s) = s {
                super::distinct::decode(s, &mut ids)?;
            }
            ends.push(ids.len());
        }
        let assigned = self.assign(&ids);
        let mut out = LargeBinaryBuilder::with_capacity(states.len(), ids.len() * 4 + 4);
        let (mut bytes, mut given, mut without) = (vec![], vec![], vec![]);
        let mut start = 0;
        for (row, &end) in ends.iter().enumerate() {
            if states.is_null(row) {
                out.append_null();
                continue;
            }
            let (ids, ordinals) = (&ids[start..end], &assigned[start..end]);
            start = end;
            given.clear();
            given.extend(ordinals.iter().flatten());
            without.clear();
            without.extend(
                (ids.iter().zip(ordinals))
                    .filter(|(_, o)| o.is_none())
                    .map(|(id, _)| id),
            );
            bytes.clear();
            state(&given, &without, &mut bytes);
            out.append_value(&bytes);
        }
        Ok(Arc::new(out.finish()))
    }
}

/// Appends a state in the scan's form holding `ordinals` and `ids`.
pub fn state(ordinals: &[u32], ids: &[u64], out: &mut Vec<u8>) {
    out.reserve(4 + ordinals.len() * 4 + ids.len() * 8);
    out.extend_from_slice(&(ordinals.len() as u32).to_le_bytes());
    for o in ordinals {
        out.extend_from_slice(&o.to_le_bytes());
    }
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
}

/// A state in the scan's form split into its ordinals (little-endian
/// `u32`s, each checked below `given`, [`Ordinals::given`]) and its ids
/// (little-endian `u64`s): an error for a cut state or an ordinal never
/// given, so a bad state cannot make a bitset grow past the dictionary.
pub fn split(state: &[u8], given: usize) -> Result<(&[u8], &[u8])> {
    let Some((n, rest)) = state.split_first_chunk::<4>() else {
        return exec_err!("cube ordinals: a state of {} bytes", state.len());
    };
    let n = u32::from_le_bytes(*n) as usize;
    if rest.len() < n * 4 || !(rest.len() - n * 4).is_multiple_of(8) {
        return exec_err!("cube ordinals: corrupt state ({} bytes)", state.len());
    }
    let (ords, ids) = rest.split_at(n * 4);
    // One pass for the largest, which the compiler vectorizes.
    let max = values(ords).fold(0, u32::max);
    if n > 0 && max as usize >= given {
        return exec_err!("cube ordinals: ordinal {max} was never given");
    }
    Ok((ords, ids))
}

/// The little-endian `u32`s of `bytes` (a multiple of 4 long).
pub fn values(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}
