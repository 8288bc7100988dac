//! Which segments a compaction picks, on manifests built in memory: a
//! day's small segments first, else a run of thin ones in time order, each
//! run bounded in rows and in files.

use std::time::Duration;

use super::*;
use crate::manifest::{ColumnStats, Reaper, SegmentMeta};
use crate::store::Store;

const DAY: i64 = crate::NANOS_PER_DAY;

/// A segment of `rows` rows over days `first..=last`.
fn segment(reaper: &Reaper, first: i32, last: i32, rows: u64) -> Arc<Segment> {
    let meta = SegmentMeta {
        path: format!(
            "tables/1/{first}-{last}-{rows}-{}.parquet",
            uuid::Uuid::new_v4()
        ),
        day: first,
        rows,
        bytes: 10 * rows,
        min_time: i64::from(first) * DAY,
        max_time: i64::from(last) * DAY + 1,
        columns: vec![ColumnStats::default()],
    };
    Segment::new(meta, reaper)
}

fn reaper() -> (tempfile::TempDir, Reaper) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::local(tmp.path().to_path_buf()).unwrap();
    (tmp, Reaper::start(store, Duration::from_secs(3600)))
}

fn spans(picked: &[Arc<Segment>]) -> Vec<(i32, u64)> {
    picked.iter().map(|s| (s.meta.day, s.meta.rows)).collect()
}

#[tokio::test]
async fn a_run_of_thin_segments_skips_full_ones_and_stops_at_the_limit() {
    let (_tmp, r) = reaper();
    let segments = vec![
        segment(&r, 9, 9, 40),
        segment(&r, 1, 1, 30),
        segment(&r, 2, 4, 50),
        segment(&r, 5, 5, 1_000), // full: not thin
        segment(&r, 6, 6, 10),
        segment(&r, 7, 8, 20),
    ];
    // 30 + 50 + 10 = 90 rows; the next (20) would pass 100.
    let (day, picked) = thin_run(&segments, 100, 2).unwrap();
    assert_eq!((day, spans(&picked)), (1, vec![(1, 30), (2, 50), (6, 10)]));
    // A run shorter than the minimum is passed over for the next one.
    let (day, picked) = thin_run(&segments, 100, 4).unwrap_or_default();
    assert_eq!((day, spans(&picked)), (0, vec![]));
    // 30 + 50 passes 60: the run starts again at 50, and 50 + 10 + 20 does.
    let (day, picked) = thin_run(&segments, 60, 2).unwrap();
    assert_eq!((day, spans(&picked)), (2, vec![(2, 50), (6, 10)]));
    assert!(thin_run(&segments, 0, 2).is_none(), "0: nothing is thin");
}

#[tokio::test]
async fn a_compaction_merges_at_most_max_merged_segments() {
    let (_tmp, r) = reaper();
    let many: Vec<_> = (0..MAX_MERGED as i32 + 10)
        .map(|d| segment(&r, d, d, 1))
        .collect();
    let (_, picked) = thin_run(&many, 1 << 20, 2).unwrap();
    assert_eq!(picked.len(), MAX_MERGED);
    assert_eq!(picked[0].meta.day, 0, "the oldest first");
    let one_day: Vec<_> = (0..MAX_MERGED + 10).map(|_| segment(&r, 3, 3, 1)).collect();
    let (day, picked) = same_day(&one_day, 1 << 30, 4).unwrap();
    assert_eq!((day, picked.len()), (3, MAX_MERGED));
}

#[tokio::test]
async fn a_days_small_segments_go_first() {
    let (_tmp, r) = reaper();
    let segments = vec![
        segment(&r, 1, 1, 10),
        segment(&r, 2, 2, 10),
        segment(&r, 2, 2, 20),
    ];
    let (day, picked) = same_day(&segments, 1 << 20, 2).unwrap();
    assert_eq!((day, spans(&picked)), (2, vec![(2, 10), (2, 20)]));
}
