//! Recovery: reading every intact record back after a restart.
//!
//! Why the torn-tail rule: a crash can leave the last group half written.
//! Such damage can only sit at the very end of the newest file, and nothing
//! valid can follow it, so it is cut off silently (and the file truncated, so
//! the cut is stable). Damage anywhere else means the medium or some other
//! writer lost acknowledged data; that must not be papered over, so it is an
//! `Error::Corrupt` unless the operator opted into `skip_corrupt`.
//!
//! Resync under `skip_corrupt` is deliberately simple: a frame whose length
//! is plausible but whose CRC (or seq order) is wrong is skipped as one frame;
//! a frame whose length is implausible or runs past the end of the file makes
//! the rest of that file unreadable, so the rest of the file is skipped.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::Seq;
use crate::error::{Error, Result, io_err};
use crate::format::{HEADER_LEN, Header, MAX_RECORD_BYTES, frame_crc, list_segments};
use crate::options::WalOptions;

/// Seqs of consecutive records are close together; a candidate frame whose
/// seq jumps further than this past the last good one is not believed when
/// looking for valid data behind a damaged tail.
const MAX_SEQ_JUMP: u64 = 1 << 32;

/// One damaged region that recovery skipped (only with `skip_corrupt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// Segment file holding the damage.
    pub file: PathBuf,
    /// Byte offset of the damaged frame's header within `file`.
    pub offset: u64,
    /// What was wrong, for logs.
    pub reason: String,
}

/// What [`crate::Wal::recover`] found.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// Every intact record, in strictly increasing seq order.
    pub records: Vec<(Seq, Bytes)>,
    /// Damage that was skipped; always empty unless `skip_corrupt`.
    pub skipped: Vec<CorruptRecord>,
    /// The torn tail that was cut off: the last file and the offset it was
    /// truncated to.
    pub truncated_tail: Option<(PathBuf, u64)>,
}

impl Recovered {
    /// Highest recovered seq, if any record was recovered.
    pub fn last_seq(&self) -> Option<Seq> {
        self.records.last().map(|(s, _)| *s)
    }

    /// The `next_seq` to pass to [`crate::Wal::start`]: last seq + 1, or 1.
    pub fn next_seq(&self) -> Seq {
        self.last_seq().map_or(1, |s| s + 1)
    }
}

/// Why a frame could not be read.
enum Problem {
    /// Fewer than 16 non-zero bytes left.
    ShortHeader,
    /// Length field larger than [`MAX_RECORD_BYTES`].
    BadLength(u32),
    /// Length field runs past the end of the file.
    ShortPayload(u32),
    /// CRC does not match; the frame itself is well delimited.
    Crc { frame_len: usize },
    /// CRC matches but the seq does not increase.
    SeqOrder { seq: Seq, frame_len: usize },
}

impl Problem {
    fn reason(&self, prev: Seq, remaining: usize) -> String {
        match self {
            Problem::ShortHeader => format!("short frame header ({remaining} bytes left)"),
            Problem::BadLength(len) => format!("implausible payload length {len}"),
            Problem::ShortPayload(len) => {
                format!("payload length {len} runs past end of file ({remaining} bytes left)")
            }
            Problem::Crc { .. } => "CRC mismatch".to_string(),
            Problem::SeqOrder { seq, .. } => {
                format!("seq {seq} does not increase (previous seq {prev})")
            }
        }
    }
}

/// How a segment scan ended.
enum ScanEnd {
    Clean,
    Torn(u64),
}

pub(crate) fn recover(dir: &Path, opts: &WalOptions) -> Result<Recovered> {
    fs::create_dir_all(dir).map_err(|e| io_err(format!("creating {}", dir.display()), e))?;
    let segments = list_segments(dir)?;
    let mut out = Recovered::default();
    let mut prev: Seq = 0;
    for (i, (first_seq, path)) in segments.iter().enumerate() {
        let is_last = i + 1 == segments.len();
        let data = Bytes::from(
            fs::read(path).map_err(|e| io_err(format!("reading {}", path.display()), e))?,
        );
        let mut scan = Scan {
            path,
            first_seq: *first_seq,
            data: &data,
            is_last,
            skip_corrupt: opts.skip_corrupt,
            prev: &mut prev,
            out: &mut out,
        };
        if let ScanEnd::Torn(offset) = scan.run()? {
            truncate(path, offset)?;
            tracing::warn!(file = %path.display(), offset, "truncated torn WAL tail");
            out.truncated_tail = Some((path.clone(), offset));
        }
    }
    Ok(out)
}

fn truncate(path: &Path, offset: u64) -> Result<()> {
    let ctx = || format!("truncating {} to {offset}", path.display());
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_err(ctx(), e))?;
    f.set_len(offset).map_err(|e| io_err(ctx(), e))?;
    f.sync_all().map_err(|e| io_err(ctx(), e))
}

struct Scan<'a> {
    path: &'a Path,
    first_seq: Seq,
    data: &'a Bytes,
    is_last: bool,
    skip_corrupt: bool,
    prev: &'a mut Seq,
    out: &'a mut Recovered,
}

impl Scan<'_> {
    fn run(&mut self) -> Result<ScanEnd> {
        let data = self.data;
        let mut off = 0usize;
        while off < data.len() {
            let (problem, remaining) = match self.read_frame(off) {
                Ok(None) => return Ok(ScanEnd::Clean),
                Ok(Some(frame_len)) => {
                    off += frame_len;
                    continue;
                }
                Err(p) => (p, data.len() - off),
            };
            let may_be_torn = !matches!(problem, Problem::SeqOrder { .. });
            if self.is_last && may_be_torn && !self.valid_frame_after(off + 1) {
                return Ok(ScanEnd::Torn(off as u64));
            }
            let reason = problem.reason(*self.prev, remaining);
            if !self.skip_corrupt {
                return Err(Error::Corrupt {
                    file: self.path.to_path_buf(),
                    offset: off as u64,
                    reason,
                });
            }
            tracing::warn!(file = %self.path.display(), offset = off, %reason, "skipping corrupt WAL data");
            self.out.skipped.push(CorruptRecord {
                file: self.path.to_path_buf(),
                offset: off as u64,
                reason,
            });
            match problem {
                Problem::Crc { frame_len } | Problem::SeqOrder { frame_len, .. } => {
                    off += frame_len
                }
                // The frame boundary is lost: the rest of this file is unreadable.
                _ => return Ok(ScanEnd::Clean),
            }
        }
        Ok(ScanEnd::Clean)
    }

    /// Reads the frame at `off`: `Ok(None)` at an end marker, `Ok(Some(len))`
    /// after recording a good frame of `len` bytes.
    fn read_frame(&mut self, off: usize) -> std::result::Result<Option<usize>, Problem> {
        let rest = &self.data[off..];
        if rest.len() < HEADER_LEN {
            if rest.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            return Err(Problem::ShortHeader);
        }
        let h = Header::decode(rest);
        if h.is_end_marker() {
            return Ok(None);
        }
        let len = h.len as usize;
        if len > MAX_RECORD_BYTES {
            return Err(Problem::BadLength(h.len));
        }
        if len > rest.len() - HEADER_LEN {
            return Err(Problem::ShortPayload(h.len));
        }
        let frame_len = HEADER_LEN + len;
        let payload = &rest[HEADER_LEN..frame_len];
        if frame_crc(h.seq, payload) != h.crc {
            return Err(Problem::Crc { frame_len });
        }
        if h.seq <= *self.prev || h.seq < self.first_seq {
            return Err(Problem::SeqOrder {
                seq: h.seq,
                frame_len,
            });
        }
        let start = off + HEADER_LEN;
        self.out
            .records
            .push((h.seq, self.data.slice(start..start + len)));
        *self.prev = h.seq;
        Ok(Some(frame_len))
    }

    /// Whether any byte offset at or after `from` starts a frame that would
    /// be accepted (plausible length, later seq, matching CRC). Decides
    /// between "torn tail" (nothing valid follows) and "corruption".
    fn valid_frame_after(&self, from: usize) -> bool {
        let data = &self.data[..];
        let prev = *self.prev;
        let mut o = from;
        while o + HEADER_LEN <= data.len() {
            let h = Header::decode(&data[o..]);
            let len = h.len as usize;
            if h.seq > prev
                && h.seq - prev <= MAX_SEQ_JUMP
                && len <= MAX_RECORD_BYTES
                && len <= data.len() - o - HEADER_LEN
                && frame_crc(h.seq, &data[o + HEADER_LEN..o + HEADER_LEN + len]) == h.crc
            {
                return true;
            }
            o += 1;
        }
        false
    }
}
