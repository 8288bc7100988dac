//! Every page of a Parquet file checked before any is decoded.
//!
//! Why: the Parquet reader allocates each page at the size its header
//! declares once inflated (up to 2 GiB a page), and for GZIP, Brotli and
//! the deprecated LZ4 framing it inflates a page whole, whatever size the
//! header declares. A few kilobytes of deflated zeros become gigabytes. So
//! the page headers are read first (a small Thrift compact-protocol
//! reader: the `parquet` crate keeps its own private), their declared
//! sizes are summed against the limit, and a page of a codec that does
//! not stop at the declared size is inflated once into nothing, stopping
//! one byte past it, to refuse it before the reader inflates it whole.
//! The work this takes is bounded by the declared sizes; memory by a
//! codec's buffers.

use std::io::{self, Read};

use parquet::basic::Compression;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::reader::ChunkReader;

use super::{Refused, malformed};

/// How deep a page header's Thrift values may nest.
const DEPTH: u8 = 16;

/// Checks every page of every column chunk of `meta`, and returns the sum
/// of the pages' declared sizes once inflated. Refuses the file as soon as
/// that sum passes `max_bytes`, or a page would inflate past its declared
/// size.
pub(super) fn check<R: ChunkReader>(
    input: &R,
    meta: &ParquetMetaData,
    max_bytes: usize,
) -> Result<u64, Refused> {
    let mut declared = 0u64;
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for chunk in rg.columns() {
            let column = chunk.column_path().string();
            let at = |e: &dyn std::fmt::Display| {
                malformed(format_args!("column '{column}' in row group {g}: {e}"))
            };
            for page in chunk_pages(input, chunk).map_err(|e| at(&e))? {
                let page = page.map_err(|e| at(&e))?;
                declared = declared.saturating_add(page.inflated);
                if declared > max_bytes as u64 {
                    return Err(Refused::TooLarge { bytes: declared });
                }
                if let Some(codec) = page.past_declared {
                    return Err(at(&format_args!(
                        "a {codec} page inflates past the {} bytes its header declares",
                        page.inflated
                    )));
                }
            }
        }
    }
    Ok(declared)
}

/// One page as checked.
struct Checked {
    /// Its declared size once inflated.
    inflated: u64,
    /// Its codec's name, when it inflates to more than that.
    past_declared: Option<&'static str>,
}

/// The pages of one column chunk, read in turn from its byte range.
fn chunk_pages<R: ChunkReader>(
    input: &R,
    chunk: &ColumnChunkMetaData,
) -> io::Result<impl Iterator<Item = io::Result<Checked>>> {
    let start = chunk
        .dictionary_page_offset()
        .unwrap_or(chunk.data_page_offset());
    let (Ok(start), Ok(len)) = (u64::try_from(start), u64::try_from(chunk.compressed_size()))
    else {
        return Err(io::Error::other("negative offset or size"));
    };
    if start.checked_add(len).is_none_or(|end| end > input.len()) {
        return Err(io::Error::other(
            "the column chunk lies past the end of the file",
        ));
    }
    let reader = input.get_read(start).map_err(io::Error::other)?.take(len);
    let codec = chunk.compression();
    let mut reader = Some(reader);
    Ok(std::iter::from_fn(move || {
        let r = reader.as_mut()?;
        if r.limit() == 0 {
            return None;
        }
        let page = next_page(r, codec);
        if page.is_err() {
            reader = None;
        }
        Some(page)
    }))
}

/// Reads one page header and checks the page after it, leaving `r` at the
/// next header.
fn next_page<R: Read>(r: &mut io::Take<R>, codec: Compression) -> io::Result<Checked> {
    let header = Header::read(&mut Thrift(&mut *r))?;
    let (Ok(inflated), Ok(compressed)) = (
        u64::try_from(header.inflated),
        u64::try_from(header.compressed),
    ) else {
        return Err(io::Error::other("a page header declares a negative size"));
    };
    if compressed > r.limit() {
        return Err(io::Error::other(
            "a page runs past the end of its column chunk",
        ));
    }
    let mut body = r.take(compressed);
    let past_declared = match (unbounded(codec), header.levels) {
        (None, _) | (Some(_), Levels::Uncompressed) => None,
        (Some(name), Levels::Compressed(levels)) => {
            let levels = u64::try_from(levels).unwrap_or(u64::MAX);
            io::copy(&mut (&mut body).take(levels), &mut io::sink())?;
            inflates_past(&mut body, codec, inflated.saturating_sub(levels)).then_some(name)
        }
    };
    io::copy(&mut body, &mut io::sink())?;
    if body.limit() > 0 {
        return Err(io::Error::other("a page is cut short"));
    }
    Ok(Checked {
        inflated,
        past_declared,
    })
}

/// The name of `codec` if the Parquet reader inflates its pages whole,
/// whatever their declared size. LZ4 (deprecated) is read as Hadoop blocks
/// into the declared size, falling back to an LZ4 frame, which is not
/// bounded.
fn unbounded(codec: Compression) -> Option<&'static str> {
    match codec {
        Compression::GZIP(_) => Some("GZIP"),
        Compression::BROTLI(_) => Some("Brotli"),
        Compression::LZ4 => Some("LZ4"),
        _ => None,
    }
}

/// Whether `body`, compressed with `codec`, inflates to more than `bound`
/// bytes. Input the codec cannot decode is left for the reader to report.
fn inflates_past<R: Read>(body: R, codec: Compression, bound: u64) -> bool {
    let limit = bound.saturating_add(1);
    let mut sink = io::sink();
    let out = match codec {
        Compression::GZIP(_) => io::copy(
            &mut flate2::read::MultiGzDecoder::new(body).take(limit),
            &mut sink,
        ),
        Compression::BROTLI(_) => io::copy(
            &mut brotli::Decompressor::new(body, 4096).take(limit),
            &mut sink,
        ),
        Compression::LZ4 => io::copy(
            &mut lz4_flex::frame::FrameDecoder::new(body).take(limit),
            &mut sink,
        ),
        _ => Ok(0),
    };
    out.is_ok_and(|n| n > bound)
}

/// Where a page's compressed bytes start.
enum Levels {
    /// The whole page is compressed, or its first `n` bytes are levels
    /// stored plain and the rest is compressed (data pages v2).
    Compressed(i64),
    /// Nothing in it is compressed (a data page v2 marked so).
    Uncompressed,
}

/// The fields of a page header that size it.
struct Header {
    inflated: i32,
    compressed: i32,
    levels: Levels,
}

impl Header {
    /// `PageHeader`: 2 `uncompressed_page_size`, 3 `compressed_page_size`,
    /// 8 `data_page_header_v2`; the rest is skipped.
    fn read<R: Read>(t: &mut Thrift<R>) -> io::Result<Self> {
        let mut h = Header {
            inflated: -1,
            compressed: -1,
            levels: Levels::Compressed(0),
        };
        t.each_field(|t, id, ty| {
            match (id, ty) {
                (2, I32) => h.inflated = t.int32()?,
                (3, I32) => h.compressed = t.int32()?,
                (8, STRUCT) => h.levels = Self::v2(t)?,
                _ => t.skip(ty, 1)?,
            }
            Ok(())
        })?;
        Ok(h)
    }

    /// `DataPageHeaderV2`: 5 and 6 the definition and repetition levels'
    /// lengths, 7 `is_compressed` (true when absent).
    fn v2<R: Read>(t: &mut Thrift<R>) -> io::Result<Levels> {
        let (mut levels, mut compressed) = (0i64, true);
        t.each_field(|t, id, ty| {
            match (id, ty) {
                (5 | 6, I32) => levels = levels.saturating_add(i64::from(t.int32()?).max(0)),
                (7, TRUE | FALSE) => compressed = ty == TRUE,
                _ => t.skip(ty, 2)?,
            }
            Ok(())
        })?;
        Ok(if compressed {
            Levels::Compressed(levels)
        } else {
            Levels::Uncompressed
        })
    }
}

// Thrift compact protocol type codes.
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// A Thrift compact-protocol reader of just what page headers need.
struct Thrift<R>(R);

impl<R: Read> Thrift<R> {
    fn byte(&mut self) -> io::Result<u8> {
        let mut b = [0u8];
        self.0.read_exact(&mut b)?;
        Ok(b[0])
    }

    fn varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(io::Error::other("a page header holds a malformed integer"))
    }

    fn int(&mut self) -> io::Result<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn int32(&mut self) -> io::Result<i32> {
        i32::try_from(self.int()?)
            .map_err(|_| io::Error::other("a page header holds an out-of-range integer"))
    }

    /// Calls `f` with each field's id and type of the struct that starts
    /// here, through its end.
    fn each_field(
        &mut self,
        mut f: impl FnMut(&mut Self, i16, u8) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut id = 0i16;
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            id = match b >> 4 {
                0 => i16::try_from(self.int()?).unwrap_or(-1),
                delta => id.saturating_add(i16::from(delta)),
            };
            f(self, id, b & 0x0f)?;
        }
    }

    /// Skips one value of type `ty`, `depth` values deep.
    fn skip(&mut self, ty: u8, depth: u8) -> io::Result<()> {
        if depth > DEPTH {
            return Err(io::Error::other("a page header nests too deeply"));
        }
        match ty {
            TRUE | FALSE => Ok(()),
            BYTE => self.byte().map(drop),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.bytes(8),
            BINARY => {
                let n = self.varint()?;
                self.bytes(n)
            }
            LIST | SET => {
                let b = self.byte()?;
                let n = match b >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                // A boolean in a list takes a byte.
                let ty = match b & 0x0f {
                    TRUE | FALSE => BYTE,
                    ty => ty,
                };
                (0..n).try_for_each(|_| self.skip(ty, depth + 1))
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                let bool_byte = |ty| if ty == TRUE || ty == FALSE { BYTE } else { ty };
                let (k, v) = (bool_byte(kv >> 4), bool_byte(kv & 0x0f));
                (0..n).try_for_each(|_| {
                    self.skip(k, depth + 1)?;
                    self.skip(v, depth + 1)
                })
            }
            STRUCT => self.each_field(|t, _, ty| t.skip(ty, depth + 1)),
            _ => Err(io::Error::other(
                "a page header holds an unknown Thrift type",
            )),
        }
    }

    fn bytes(&mut self, n: u64) -> io::Result<()> {
        let got = io::copy(&mut (&mut self.0).take(n), &mut io::sink())?;
        if got < n {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
