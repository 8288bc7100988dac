use std::sync::Arc;

use arrow::array::{
    BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::DataType;

use super::*;
use crate::schema::{ColumnDef, ColumnType, NANOS_PER_DAY, TableDef, view_schema};

fn def() -> TableDef {
    let c = |name: &str, ty, nullable| ColumnDef {
        name: name.into(),
        ty,
        nullable,
    };
    TableDef::new(
        1,
        "t",
        vec![
            c("ts", ColumnType::Timestamp, false),
            c("s", ColumnType::Varchar, true),
            c("f", ColumnType::Double, true),
            c("b", ColumnType::Boolean, true),
            c("i", ColumnType::Bigint, true),
        ],
        None,
        &[],
    )
    .unwrap()
}

fn batch(def: &TableDef, day: i64, start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    RecordBatch::try_new(
        def.arrow_schema(),
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                ids.iter().map(|i| day * NANOS_PER_DAY + i),
            )),
            Arc::new(StringArray::from_iter(
                ids.iter().map(|i| (i % 3 != 0).then(|| format!("s{i}"))),
            )),
            Arc::new(Float64Array::from_iter(
                ids.iter().map(|i| (i % 4 != 0).then_some(*i as f64 / 2.0)),
            )),
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|i| (i % 5 != 0).then_some(i % 2 == 0)),
            )),
            Arc::new(Int64Array::from_iter(
                ids.iter().map(|i| (i % 7 != 0).then_some(*i)),
            )),
        ],
    )
    .unwrap()
}

fn all_rows(def: &TableDef, snap: &TableSnapshot) -> RecordBatch {
    concat_batches(&def.arrow_schema(), &snap.mem_batches()).unwrap()
}

#[test]
fn snapshots_see_every_applied_row_with_nulls_and_strings() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    let mut expected = vec![];
    for k in 0..10 {
        let b = batch(&def, 100, k * 10, 10);
        mem.apply(k as u64 + 1, &b, 0);
        expected.push(b);
        // Each snapshot equals everything applied so far, in order.
        let got = all_rows(&def, &mem.snapshot());
        assert_eq!(got, concat_batches(&def.arrow_schema(), &expected).unwrap());
    }
    // Ten snapshots of ten rows each: the batches merged as a binary
    // counter (10, 20, 20+10, 40, ... 80+20), not one per snapshot.
    let sizes: Vec<usize> = mem.snapshot().active[0]
        .1
        .iter()
        .map(|b| b.rows())
        .collect();
    assert_eq!(sizes, [80, 20]);
    assert!(mem.bytes() > 0);
}

#[test]
fn large_batches_and_what_is_derived_from_them_outlive_snapshots() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    let mut seq = 0;
    let mut write = |rows: i64| {
        seq += 1;
        mem.apply(seq, &batch(&def, 100, seq as i64 * 1000, rows), 0);
    };
    write(64);
    let first = mem.snapshot().active[0].1[0].clone();
    let made = first.derived((7, 1), || first.rows() * 2);
    assert_eq!(*made, 128);
    // Smaller writes read after it leave the first batch as it is, with
    // its derived value: not made again.
    for _ in 0..5 {
        write(10);
        let batches = mem.snapshot().active[0].1.clone();
        assert!(Arc::ptr_eq(&batches[0], &first));
        assert!(batches.len() <= 4, "{} batches", batches.len());
        let again = batches[0].derived((7, 1), || unreachable!("kept"));
        assert!(Arc::ptr_eq(&again, &made));
    }
    assert_eq!(first.derived_keys(), [(7, 1)]);
    // A key of another type or value makes its own.
    assert_eq!(*first.derived((7, 2), || "other"), "other");
    assert_eq!(*first.derived((7, 1), || 5u8), 5);
    // Within a bound: keys (7, _) kept are (7, 1) and (7, 2), so a third
    // is refused at a bound of two and made at three; a kept one is found.
    let sevens = |k: &DerivedKey| k.0 == 7;
    assert!(first.derived_within((7, 3), || 1u8, sevens, 2).is_none());
    assert_eq!(
        first.derived_within((7, 2), || "new", sevens, 2).as_deref(),
        Some(&"other")
    );
    assert_eq!(
        first.derived_within((7, 3), || 1u8, sevens, 3).as_deref(),
        Some(&1)
    );
    assert_eq!(first.derived_keys().len(), 3);
    // Once the rows after it outgrow it, they merge with it into one batch.
    write(64);
    let batches = mem.snapshot().active[0].1.clone();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].rows(), 64 + 50 + 64);
    assert!(!Arc::ptr_eq(&batches[0], &first));
}

#[test]
fn what_is_charged_to_a_batch_counts_until_the_batch_leaves_the_memstore() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    mem.apply(1, &batch(&def, 100, 1000, 64), 0);
    let first = mem.snapshot().active[0].1[0].clone();
    let rows = mem.bytes();
    first.charge(1000);
    assert_eq!(mem.bytes(), rows + 1000);
    // Merged into a larger batch, it has left: its charge is no longer
    // counted, nor is a later one (a query that read it before).
    mem.apply(2, &batch(&def, 100, 2000, 64), 0);
    let rows = mem.bytes() - 1000;
    let merged = mem.snapshot().active[0].1.clone();
    assert_eq!(merged.len(), 1);
    assert_eq!(mem.bytes(), rows);
    first.charge(50);
    assert_eq!(mem.bytes(), rows);
    // A freeze keeps the buffer's batches as they are, with their charges.
    merged[0].charge(300);
    assert_eq!(mem.bytes(), rows + 300);
    let set = mem.begin_flush();
    assert!(Arc::ptr_eq(&set.chunks[0].batches[0], &merged[0]));
    assert_eq!(mem.bytes(), rows + 300);
    // A flushed batch leaves with its rows.
    set.chunks[0].batches[0].charge(200);
    assert_eq!(mem.bytes(), rows + 500);
    flushed(&mem, &set);
    assert_eq!(mem.bytes(), 0);
}

#[test]
fn a_merged_batch_inherits_what_was_derived_from_its_inputs_with_its_charge() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    // Bytes of the rows written (one day: counted as one part at insert).
    let mut rows = 0;
    let mut seq = 0;
    let mut write = |n: i64| {
        seq += 1;
        let b = batch(&def, 100, seq as i64 * 1000, n);
        rows += crate::segment::batch_bytes(&b);
        mem.apply(seq, &b, 0);
        (mem.snapshot().active[0].1.clone(), rows)
    };
    let (first, _) = write(64);
    let first = first[0].clone();
    let states = first.derived((7, 1), || "states");
    first.charge_derived((7, 1), 1000);
    // Not passed on: bounded (made from others), or not made yet.
    first
        .derived_within((7, 2), || "rollup", |_| false, 1)
        .unwrap();
    first.charge_derived((7, 2), 300);
    first.derived((7, 3), || "making");
    let (merged, rows) = write(64);
    assert_eq!(merged.len(), 1);
    let inherited = merged[0].inherited((7, 1));
    assert_eq!(inherited.len(), 1);
    assert_eq!(inherited[0].0, 0..64);
    let got = inherited[0].1.clone().downcast::<&str>().unwrap();
    assert!(Arc::ptr_eq(&got, &states));
    assert!(merged[0].inherited((7, 2)).is_empty());
    assert!(merged[0].inherited((7, 3)).is_empty());
    assert!(merged[0].derived_keys().is_empty());
    // The inherited value's charge moved with it; the rest left with the
    // first batch.
    assert_eq!(merged[0].charged(), 1000);
    assert_eq!(mem.bytes(), rows + 1000);
    // A batch that made nothing of its own passes on what it inherited,
    // where its rows sit in the next merge.
    let (again, rows) = write(128);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].inherited((7, 1))[0].0, 0..64);
    assert_eq!(mem.bytes(), rows + 1000);
    // Once it makes its own, it lets the inherited go, and passes on its own.
    again[0].derived((7, 1), || "own");
    again[0].charge_derived((7, 1), 400);
    again[0].drop_inherited((7, 1));
    assert!(again[0].inherited((7, 1)).is_empty());
    assert_eq!(again[0].charged(), 400);
    assert_eq!(mem.bytes(), rows + 400);
    // A value forgotten takes its charge with it; the others stay.
    again[0]
        .derived_within((7, 9), || "stale", |_| false, 1)
        .unwrap();
    again[0].charge_derived((7, 9), 50);
    assert_eq!(mem.bytes(), rows + 450);
    again[0].forget((7, 9));
    assert_eq!(again[0].derived_keys(), [(7, 1)]);
    assert_eq!(again[0].charged(), 400);
    assert_eq!(mem.bytes(), rows + 400);
    // A freeze copies nothing: the batch is frozen as it is.
    let set = mem.begin_flush();
    assert_eq!(set.chunks[0].batches.len(), 1);
    assert!(Arc::ptr_eq(&set.chunks[0].batches[0], &again[0]));
    assert_eq!(mem.bytes(), rows + 400);
    flushed(&mem, &set);
    assert_eq!(mem.bytes(), 0);
    // A merged batch dropped without leaving the memstore (a packing
    // given up) takes its charge with it.
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let input = MemBatch::new(batch(&def, 1, 0, 8), held.clone());
    input.derived((1, 1), || 1u8);
    input.charge_derived((1, 1), 10);
    let merged = MemBatch::merged(input.batch.clone(), [&input], held.clone());
    assert_eq!(held.load(std::sync::atomic::Ordering::Relaxed), 20);
    input.release();
    drop(merged);
    assert_eq!(held.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// Publishes version 1 as if `set` were flushed to it (no segments).
fn flushed(mem: &MemStore, set: &FlushSet) {
    let manifest = Manifest {
        version: 1,
        flushed_seq: set.through_seq,
        segments: vec![],
    };
    mem.publish(manifest, Some(set));
}

#[test]
fn freezing_and_flushing_keep_every_row_exactly_once() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 2048);
    let mut n = 0;
    for k in 0..40 {
        // Two days per write: split across partitions.
        let mut b = batch(&def, 100, k * 20, 10);
        b = concat_batches(&def.arrow_schema(), &[b, batch(&def, 101, k * 20 + 10, 10)]).unwrap();
        mem.apply(k as u64 + 1, &b, 0);
        n += 20;
    }
    let snap = mem.snapshot();
    assert!(
        !snap.version.frozen.is_empty(),
        "freeze size passed, batches should be frozen"
    );
    assert_eq!(all_rows(&def, &snap).num_rows(), n);

    let set = mem.begin_flush();
    assert_eq!(set.through_seq, 40);
    assert_eq!(mem.wal_needed_from(), Some(1));
    // Rows written during the flush stay in memory.
    mem.apply(41, &batch(&def, 100, 10_000, 5), 0);
    let before = mem.bytes();
    mem.publish(
        Manifest {
            version: 1,
            flushed_seq: set.through_seq,
            segments: vec![],
        },
        Some(&set),
    );
    assert!(mem.bytes() < before);
    let rows = all_rows(&def, &mem.snapshot());
    assert_eq!(
        rows.num_rows(),
        5,
        "flushed rows left memory in the same swap"
    );
    assert_eq!(mem.wal_needed_from(), Some(41));
    assert_eq!(mem.manifest().flushed_seq, 40);
}

#[test]
fn a_failed_flush_keeps_rows_needed_for_recovery() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 20);
    mem.apply(7, &batch(&def, 100, 0, 10), 0);
    let _set = mem.begin_flush();
    mem.abort_flush();
    assert_eq!(mem.wal_needed_from(), Some(7));
    assert_eq!(all_rows(&def, &mem.snapshot()).num_rows(), 10);
}

/// Every in-memory batch of `snap` in its query form, frozen ones first.
fn viewed_of(snap: &TableSnapshot) -> Vec<RecordBatch> {
    let all = snap.mem_by_days().into_iter();
    all.map(|(_, b)| b.viewed().clone()).collect()
}

#[test]
fn query_form_has_string_views_and_is_made_once_per_batch() {
    let def = def();
    // A small freeze size: the first batches are frozen, the last stay active.
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 2048);
    for k in 0..20 {
        mem.apply(k + 1, &batch(&def, 100, k as i64 * 10, 10), 0);
    }
    mem.apply(21, &batch(&def, 100, 1_000, 1), 0);
    let first = mem.snapshot();
    assert!(!first.version.frozen.is_empty() && !first.active.is_empty());
    let viewed = viewed_of(&first);
    let plain = first.mem_batches();
    assert_eq!(viewed.len(), plain.len());
    for (v, p) in viewed.iter().zip(&plain) {
        assert_eq!(v.schema().field(1).data_type(), &DataType::Utf8View);
        assert_eq!(v.schema(), view_schema(p.schema_ref()));
        let back = cast(v.column(1), &DataType::Utf8).unwrap();
        assert_eq!(&back, p.column(1));
        assert_eq!(v.column(0), p.column(0));
    }
    // A later snapshot reuses the same views, frozen and active alike.
    let again = viewed_of(&mem.snapshot());
    assert_eq!(again.len(), viewed.len());
    for (a, b) in again.iter().zip(&viewed) {
        assert!(Arc::ptr_eq(a.column(1), b.column(1)));
    }
}

#[test]
fn a_buffer_read_after_every_write_holds_each_row_once() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    let mut expected = vec![];
    for k in 0..200 {
        let b = batch(&def, 100, k * 50, 50);
        mem.apply(k as u64 + 1, &b, 0);
        expected.push(b);
        mem.snapshot();
    }
    // The rows a snapshot has published leave the buffer's vectors: they
    // are held in its batches only (before, the vectors kept every row
    // too, twice the bytes appended).
    let held = mem.state.lock().active[&100].held_bytes();
    let appended = mem.bytes();
    assert!(
        held < appended * 5 / 4,
        "{held} bytes held for {appended} appended"
    );
    let all = concat_batches(&def.arrow_schema(), &expected).unwrap();
    assert_eq!(all_rows(&def, &mem.snapshot()), all);
    // Frozen, the buffer's rows are its batches, in order.
    let set = mem.begin_flush();
    assert_eq!(set.chunks.len(), 1);
    let frozen: Vec<_> = set.chunks[0]
        .batches
        .iter()
        .map(|b| b.batch.clone())
        .collect();
    assert_eq!(concat_batches(&def.arrow_schema(), &frozen).unwrap(), all);
}

/// `n` rows from `start` without a NULL in any column.
fn dense(def: &TableDef, day: i64, start: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n).collect();
    RecordBatch::try_new(
        def.arrow_schema(),
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                ids.iter().map(|i| day * NANOS_PER_DAY + i),
            )),
            Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("dense string {i}")),
            )),
            Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|i| *i as f64),
            )),
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|i| Some(i % 2 == 1)),
            )),
            Arc::new(Int64Array::from_iter_values(ids.iter().copied())),
        ],
    )
    .unwrap()
}

#[test]
fn rows_stay_whole_however_appends_snapshots_and_freezes_interleave() {
    let def = def();
    // A freeze every few dozen writes.
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 8192);
    let mut expected = vec![];
    let mut x = 0x9e37_79b9_u64;
    let mut next = |m: u64| {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 33) % m
    };
    let mut start = 0;
    for seq in 1..=400 {
        // Writes with and without NULLs, of 1 to 40 rows; a NULL may come
        // after rows without any in the same unread stretch.
        let n = next(40) as i64 + 1;
        let b = match next(3) {
            0 => dense(&def, 100, start, n),
            _ => batch(&def, 100, start, n),
        };
        start += n;
        mem.apply(seq, &b, 0);
        expected.push(b);
        if next(4) == 0 {
            let got = all_rows(&def, &mem.snapshot());
            assert_eq!(
                got,
                concat_batches(&def.arrow_schema(), &expected).unwrap(),
                "after write {seq}"
            );
        }
    }
    let snap = mem.snapshot();
    assert!(snap.version.frozen.len() > 2, "freezes happened");
    let all = concat_batches(&def.arrow_schema(), &expected).unwrap();
    assert_eq!(all_rows(&def, &snap), all);
    let set = mem.begin_flush();
    let flushed = set.chunks.iter().flat_map(|c| &c.batches);
    let flushed: Vec<_> = flushed.map(|b| b.batch.clone()).collect();
    assert_eq!(concat_batches(&def.arrow_schema(), &flushed).unwrap(), all);
}

#[test]
fn a_batchs_string_views_count_while_it_is_in_the_memstore() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    mem.apply(1, &batch(&def, 100, 0, 300), 0);
    let b = mem.snapshot().active[0].1[0].clone();
    let rows = mem.bytes();
    // One string column: a 16-byte view per value, NULLs included.
    b.viewed();
    assert_eq!(mem.bytes(), rows + 300 * 16);
    assert_eq!(b.charged(), 300 * 16);
    // Made once, charged once.
    b.viewed();
    assert_eq!(mem.bytes(), rows + 300 * 16);
    // Flushed, the batch leaves with its views.
    flushed(&mem, &mem.begin_flush());
    assert_eq!(mem.bytes(), 0);
}

#[test]
fn a_new_days_buffer_has_room_for_its_rows_not_for_another_days_freeze() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 256 << 10);
    // Day 100 streams until it freezes: about 10,000 rows.
    let mut k = 0;
    while mem.snapshot().version.frozen.is_empty() {
        mem.apply(k + 1, &dense(&def, 100, k as i64 * 500, 500), 0);
        k += 1;
    }
    let frozen = mem.snapshot().version.frozen[0].rows();
    assert!(frozen >= 5_000, "{frozen}");
    // One row for each of 200 other days: each buffer holds about a row.
    for day in 0..200 {
        mem.apply(k + 1 + day, &dense(&def, 1_000 + day as i64, 0, 1), 0);
    }
    let st = mem.state.lock();
    for day in 1_000..1_200 {
        let held = st.active[&day].held_bytes();
        assert!(held < 1024, "day {day}: {held} bytes held for one row");
    }
    drop(st);
    // The frozen day's next buffer has room for another frozen batch.
    mem.apply(k + 1_000, &dense(&def, 100, 0, 1), 0);
    let held = mem.state.lock().active[&100].held_bytes();
    assert!(held >= frozen * 8 * 4, "{held} bytes for {frozen} rows");
}

/// The times of every in-memory row of `mem`, sorted.
fn times(def: &TableDef, mem: &MemStore) -> Vec<i64> {
    use arrow::array::AsArray;
    use arrow::datatypes::TimestampNanosecondType;
    let rows = all_rows(def, &mem.snapshot());
    let ts = rows.column(0).as_primitive::<TimestampNanosecondType>();
    let mut times = ts.values().to_vec();
    times.sort_unstable();
    times
}

/// A memstore holding three rows on each of `days` days from day 1,000,
/// each day written twice and read between (two batches per buffer), the
/// first `frozen` days frozen by a flush begun and aborted.
fn thin_days(def: &TableDef, days: i64, frozen: i64) -> MemStore {
    let mem = MemStore::new(def, def.arrow_schema(), Manifest::default(), 1 << 20);
    let mut seq = 0;
    for day in 0..days {
        for (start, n) in [(0, 2), (2, 1)] {
            seq += 1;
            mem.apply(seq, &batch(def, 1_000 + day, start, n), 0);
            mem.snapshot();
        }
        if day + 1 == frozen {
            mem.begin_flush();
            mem.abort_flush();
        }
    }
    mem
}

#[test]
fn small_batches_of_many_days_are_packed_with_every_row_kept() {
    let def = def();
    let mem = thin_days(&def, 100, 10);
    let (rows, bytes) = (times(&def, &mem), mem.bytes());
    assert_eq!(rows.len(), 300);
    // Two batches a day, frozen or not: a freeze copies nothing.
    assert_eq!(mem.snapshot().mem_by_days().len(), 100 * 2);
    assert_eq!(mem.pack_small(crate::segment::ROW_GROUP_ROWS), 100);
    let snap = mem.snapshot();
    let packed = snap.mem_by_days();
    assert_eq!(packed.len(), 1, "{packed:?}");
    assert_eq!(
        packed[0].0,
        Days {
            first: 1_000,
            last: 1_099
        }
    );
    assert!(snap.active.is_empty());
    assert_eq!(times(&def, &mem), rows);
    assert_eq!(mem.bytes(), bytes, "rows counted as before");
    // Rows written afterwards go to active buffers again.
    mem.apply(1_000, &batch(&def, 1_005, 10, 1), 0);
    assert_eq!(mem.snapshot().mem_by_days().len(), 2);
    // Everything leaves memory with the next flush.
    let set = mem.begin_flush();
    flushed(&mem, &set);
    assert_eq!(mem.bytes(), 0);
    assert!(mem.snapshot().mem_by_days().is_empty());
}

#[test]
fn packed_batches_hold_at_most_the_limit_in_day_order() {
    let def = def();
    let mem = thin_days(&def, 100, 0);
    let rows = times(&def, &mem);
    // Three rows a day: eight days to a packed batch of 25 rows at most.
    assert_eq!(mem.pack_small(25), 100);
    let mut packed = mem.snapshot().mem_by_days();
    packed.sort_by_key(|(d, _)| *d);
    let days: Vec<_> = packed
        .iter()
        .map(|(d, b)| (d.first, d.last, b.rows()))
        .collect();
    let mut want: Vec<_> = (0..12)
        .map(|k| (1_000 + 8 * k, 1_007 + 8 * k, 24))
        .collect();
    want.push((1_096, 1_099, 12));
    assert_eq!(days, want);
    assert_eq!(times(&def, &mem), rows);
    // Fewer small batches than PACK_MIN_SMALL are left alone.
    assert_eq!(mem.pack_small(25), 0);
    // A limit of 0 packs nothing.
    let mem = thin_days(&def, 100, 0);
    assert_eq!(mem.pack_small(0), 0);
    assert_eq!(mem.snapshot().mem_by_days().len(), 200);
}

#[test]
fn a_table_with_few_small_batches_is_left_alone() {
    let def = def();
    let mem = thin_days(&def, PACK_MIN_SMALL as i64 / 2 - 1, 0);
    let before = mem.snapshot().mem_by_days().len();
    assert_eq!(mem.pack_small(crate::segment::ROW_GROUP_ROWS), 0);
    assert_eq!(mem.snapshot().mem_by_days().len(), before);
    assert!(!mem.snapshot().active.is_empty(), "nothing frozen");
}

#[test]
fn a_packing_that_a_flush_began_during_is_dropped() {
    let def = def();
    let mem = thin_days(&def, 100, 0);
    let rows = times(&def, &mem);
    let runs = mem.small_runs(crate::segment::ROW_GROUP_ROWS).unwrap();
    let set = mem.begin_flush();
    assert_eq!(mem.swap_packed(runs), 0);
    assert_eq!(mem.snapshot().mem_by_days().len(), 100 * 2);
    assert_eq!(times(&def, &mem), rows);
    // The flush takes every row once; none is left behind or doubled.
    let flushed_rows: usize = set.chunks.iter().map(|c| c.rows()).sum();
    assert_eq!(flushed_rows, 300);
    flushed(&mem, &set);
    assert!(mem.snapshot().mem_by_days().is_empty());
    assert_eq!(mem.bytes(), 0);
    // Nothing is picked while a flush is under way.
    let mem = thin_days(&def, 100, 0);
    let _set = mem.begin_flush();
    assert!(mem.small_runs(crate::segment::ROW_GROUP_ROWS).is_none());
}

#[test]
fn day_ranges_span_whole_days_without_overflow() {
    assert_eq!(
        Days::one(1).time_range(),
        (NANOS_PER_DAY, 2 * NANOS_PER_DAY - 1)
    );
    let last = (i64::MAX / NANOS_PER_DAY) as i32;
    let first = (i64::MIN / NANOS_PER_DAY) as i32 - 1;
    let all = Days { first, last };
    assert_eq!(all.time_range(), (i64::MIN, i64::MAX));
}

#[test]
fn a_frozen_buffers_batches_are_merged_into_one_outside_the_freeze() {
    let def = def();
    let mem = MemStore::new(&def, def.arrow_schema(), Manifest::default(), 1 << 30);
    // Read after each write: batches of halving size, the first with a
    // value derived from it.
    for (seq, n) in [(1, 64), (2, 32), (3, 16)] {
        mem.apply(seq, &batch(&def, 100, seq as i64 * 1000, n), 0);
        mem.snapshot();
    }
    let first = mem.snapshot().active[0].1[0].clone();
    first.derived((7, 1), || "states");
    first.charge_derived((7, 1), 500);
    let (rows, bytes) = (all_rows(&def, &mem.snapshot()), mem.bytes());
    let set = mem.begin_flush();
    mem.abort_flush();
    assert_eq!(set.chunks[0].batches.len(), 3, "the freeze copied nothing");
    drop(set);
    assert_eq!(mem.merge_frozen(), 3);
    let snap = mem.snapshot();
    assert_eq!(snap.version.frozen.len(), 1);
    let merged = &snap.version.frozen[0].batches;
    assert_eq!(merged.len(), 1);
    assert_eq!(all_rows(&def, &snap), rows, "same rows, same order");
    assert_eq!(merged[0].inherited((7, 1))[0].0, 0..64);
    assert_eq!(mem.bytes(), bytes, "the charge moved with the states");
    assert_eq!(mem.merge_frozen(), 0, "nothing left to merge");
    // Not during a flush, which took the batches.
    mem.apply(4, &batch(&def, 101, 0, 8), 0);
    mem.snapshot();
    mem.apply(5, &batch(&def, 101, 8, 4), 0);
    let set = mem.begin_flush();
    assert_eq!(mem.merge_frozen(), 0);
    flushed(&mem, &set);
    assert_eq!(mem.bytes(), 0);
}
