//! Named crash points in flush, compaction and manifest commits.
//!
//! Why: each of these steps writes files in an order that recovery relies
//! on (segments, then the manifest version that names them, then the
//! in-memory swap, then the deletion of what was replaced). A crash can stop
//! the process between any two of them, and a restart must still find every
//! acknowledged row exactly once and no stray segment file. Built with the
//! `failpoints` feature, these points can be told at run time (with the
//! `fail` crate: `fail::cfg(name, "panic")` or `"return"`) to panic or to
//! fail there, so tests can stop a commit at each boundary and reopen the
//! directory (see `tests/crash_points.rs`). Without the feature they compile
//! to no code.
//!
//! `return` makes the point fail with an I/O error that goes through the
//! same error handling as a real failure at that spot; `panic` stands for a
//! crash: nothing after the point runs, not even error handling.

/// In a flush: every segment Parquet file is written durably, the manifest
/// version naming them is not written yet. Accepts `return` and `panic`.
pub const FLUSH_AFTER_SEGMENTS: &str = "flush::after_segments";

/// In every manifest commit (flush, compaction, bulk load): the new version
/// file is written durably, older version files are not deleted yet and the
/// new version is not swapped in memory. Accepts `return` and `panic`.
pub const MANIFEST_AFTER_WRITE: &str = "manifest::after_write";

/// In a compaction: the merged segment is written durably, the manifest
/// version replacing the small segments with it is not written yet.
/// Accepts `return` and `panic`.
pub const COMPACTION_AFTER_SEGMENT: &str = "compaction::after_segment";

/// In a compaction: the new manifest version is written and swapped in, the
/// replaced segments are not yet marked for deletion. Accepts `panic` only
/// (nothing can fail there).
pub const COMPACTION_AFTER_COMMIT: &str = "compaction::after_commit";

/// The error a point configured with `return` (or `return(message)`) fails with.
#[cfg(feature = "failpoints")]
pub(crate) fn injected(point: &str, message: Option<String>) -> crate::Error {
    let message = message.unwrap_or_else(|| "injected failure".into());
    crate::Error::io(
        format!("at failpoint {point}"),
        std::io::Error::other(message),
    )
}

/// `failpoint!(NAME)` may panic there (`panic` only); `failpoint!(NAME,
/// error)` may also make the enclosing function (or async block), which
/// returns `Result<_, Error>`, return [`injected`]'s error (`return`).
#[cfg(feature = "failpoints")]
macro_rules! failpoint {
    ($name:expr) => {
        fail::fail_point!($name)
    };
    ($name:expr, error) => {
        fail::fail_point!($name, |message| Err($crate::failpoints::injected(
            $name, message
        )))
    };
}

/// Without the `failpoints` feature a point generates no code (its name is
/// still checked to be a `&str`).
#[cfg(not(feature = "failpoints"))]
macro_rules! failpoint {
    ($name:expr) => {{
        let _: &str = $name;
    }};
    ($name:expr, error) => {{
        let _: &str = $name;
    }};
}

pub(crate) use failpoint;
