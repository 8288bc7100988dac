//! On-disk format: segment file names and record frames.
//!
//! Why this shape: a frame is `u32 LE payload_len | u32 LE crc32c(seq_le ++
//! payload) | u64 LE seq | payload`. Covering the seq with the CRC means a
//! frame copied or replayed at the wrong place is detected; naming segment
//! files `{first_seq:020}.wal` makes lexical order equal seq order and lets
//! `remove_through` bound a closed file's last seq by the next file's name
//! without reading it. A header of 16 zero bytes (what preallocation leaves)
//! marks the end of a file; seq 0 is never assigned, so it cannot be a record.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::Seq;
use crate::error::{Result, io_err};

/// Size of a frame header in bytes.
pub(crate) const HEADER_LEN: usize = 16;

/// Largest payload a frame may carry; recovery treats larger lengths as damage.
pub const MAX_RECORD_BYTES: usize = 1 << 30;

/// File name of the segment whose first record has `first_seq`.
pub(crate) fn segment_file_name(first_seq: Seq) -> String {
    format!("{first_seq:020}.wal")
}

/// Inverse of [`segment_file_name`]; `None` for files that are not segments.
pub(crate) fn parse_segment_name(name: &str) -> Option<Seq> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// CRC stored in a frame: crc32c over the little-endian seq, then the payload.
pub(crate) fn frame_crc(seq: Seq, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&seq.to_le_bytes()), payload)
}

/// Appends one encoded frame to `buf`.
pub(crate) fn encode_frame(buf: &mut Vec<u8>, seq: Seq, payload: &[u8]) {
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&frame_crc(seq, payload).to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub len: u32,
    pub crc: u32,
    pub seq: Seq,
}

impl Header {
    /// Decodes the first [`HEADER_LEN`] bytes of `data` (caller checks the length).
    pub(crate) fn decode(data: &[u8]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
        Header {
            len: u32_at(0),
            crc: u32_at(4),
            seq: u64::from_le_bytes(data[8..16].try_into().expect("8 bytes")),
        }
    }

    /// The all-zero header that marks the end of a (preallocated) file.
    pub(crate) fn is_end_marker(&self) -> bool {
        self.len == 0 && self.crc == 0 && self.seq == 0
    }
}

/// Segment files in `dir`, sorted by first seq.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<(Seq, PathBuf)>> {
    let entries = fs::read_dir(dir).map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        if let Some(seq) = name.to_str().and_then(parse_segment_name) {
            out.push((seq, entry.path()));
        }
    }
    out.sort_by_key(|(seq, _)| *seq);
    Ok(out)
}

/// Fsyncs a directory so that file creations and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| io_err(format!("opening dir {}", dir.display()), e))?;
    d.sync_all()
        .map_err(|e| io_err(format!("fsyncing dir {}", dir.display()), e))
}
