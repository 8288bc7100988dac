//! WAL record payloads: a version byte, the table id, and the rows as one
//! Arrow IPC stream (schema + one batch), so replay needs nothing else.
//!
//! Version 2 (written now) adds, between the table id and the rows, the
//! record's wall-clock time and the write's idempotency key if it had one,
//! so that recovery can rebuild the key map without decoding any rows:
//! ```text
//! u8  version = 2
//! u64 table id                       (little endian, as all integers)
//! i64 written at, ns since the epoch (the database's `Clock`)
//! u16 key length (0: no key)
//! [key bytes, u64 body fingerprint, u64 rows, u8 ack (0 durable, 1 memory)]
//! Arrow IPC stream
//! ```
//! Version 1 (table id, then the rows) is still read: a WAL written by an
//! older Kiln replays unchanged, without time or key.

use arrow::array::RecordBatch;
use arrow::ipc::writer::StreamWriter;
use bytes::{BufMut, Bytes, BytesMut};

use crate::db::Ack;
use crate::error::{Error, Result};

const V1: u8 = 1;
const V2: u8 = 2;

/// The idempotency key of a logged write and what its writer was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRecord {
    pub key: String,
    pub fingerprint: u64,
    pub rows: u64,
    pub ack: Ack,
}

/// Everything in a payload but the rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub table_id: u64,
    /// `None` for version 1 records.
    pub written_at_ns: Option<i64>,
    pub key: Option<KeyRecord>,
}

/// Encodes one write of `table_id` made at `written_at_ns`.
pub(crate) fn encode(
    table_id: u64,
    written_at_ns: i64,
    key: Option<&KeyRecord>,
    batch: &RecordBatch,
) -> Result<Bytes> {
    let key_len = key.map_or(0, |k| k.key.len());
    let key_len = u16::try_from(key_len)
        .map_err(|_| Error::data(format!("idempotency key of {key_len} bytes is too long")))?;
    let mut buf =
        BytesMut::with_capacity(64 + key_len as usize + batch.get_array_memory_size()).writer();
    let head = buf.get_mut();
    head.put_u8(V2);
    head.put_u64_le(table_id);
    head.put_i64_le(written_at_ns);
    head.put_u16_le(key_len);
    if let Some(k) = key {
        head.put_slice(k.key.as_bytes());
        head.put_u64_le(k.fingerprint);
        head.put_u64_le(k.rows);
        head.put_u8(match k.ack {
            Ack::Durable => 0,
            Ack::Memory => 1,
        });
    }
    let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(buf.into_inner().freeze())
}

/// Decodes the header of a payload written by [`encode`] (or by version 1)
/// and returns it with the offset where the Arrow IPC stream starts.
pub(crate) fn decode_header(payload: &[u8]) -> Result<(Header, usize)> {
    let mut r = Reader {
        buf: payload,
        at: 0,
    };
    let version = r.u8()?;
    let table_id = r.u64()?;
    match version {
        V1 => Ok((
            Header {
                table_id,
                written_at_ns: None,
                key: None,
            },
            r.at,
        )),
        V2 => {
            let written_at_ns = r.u64()? as i64;
            let key_len = r.u16()? as usize;
            let key = if key_len == 0 {
                None
            } else {
                let key = std::str::from_utf8(r.take(key_len)?)
                    .map_err(|_| Error::data("WAL payload: idempotency key is not UTF-8"))?
                    .to_string();
                let fingerprint = r.u64()?;
                let rows = r.u64()?;
                let ack = match r.u8()? {
                    0 => Ack::Durable,
                    1 => Ack::Memory,
                    other => return Err(Error::data(format!("WAL payload: unknown ack {other}"))),
                };
                Some(KeyRecord {
                    key,
                    fingerprint,
                    rows,
                    ack,
                })
            };
            let header = Header {
                table_id,
                written_at_ns: Some(written_at_ns),
                key,
            };
            Ok((header, r.at))
        }
        other => Err(Error::data(format!(
            "unknown WAL payload version {other} (this Kiln reads 1 and 2)"
        ))),
    }
}

/// Decodes a whole payload: header and rows.
pub(crate) fn decode(payload: &Bytes) -> Result<(Header, RecordBatch)> {
    let (header, at) = decode_header(payload)?;
    // Written uncompressed: the rows take no more than the record itself.
    let batch = crate::ipc::decode(payload.slice(at..), payload.len())
        .map_err(|e| Error::data(format!("WAL payload: {e}")))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::data("WAL payload without rows"))?;
    Ok((header, batch))
}

/// Bounds-checked little-endian reads.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| {
            Error::data(format!(
                "WAL payload of {} bytes ends inside its header (at byte {})",
                self.buf.len(),
                self.at
            ))
        })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Decodes a WAL record payload as recovery does and returns its row
/// count: the entry point of the WAL payload fuzz target.
pub fn decode_payload(payload: &Bytes) -> Result<usize> {
    decode(payload).map(|(_, rows)| rows.num_rows())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap()
    }

    #[test]
    fn v2_round_trips_with_and_without_key() {
        let key = KeyRecord {
            key: "req-42".into(),
            fingerprint: 0xdead_beef_0000_0001,
            rows: 3,
            ack: Ack::Memory,
        };
        let p = encode(7, -5, Some(&key), &batch()).unwrap();
        let (h, b) = decode(&p).unwrap();
        assert_eq!(h.table_id, 7);
        assert_eq!(h.written_at_ns, Some(-5));
        assert_eq!(h.key, Some(key));
        assert_eq!(b, batch());

        let p = encode(8, 1_000, None, &batch()).unwrap();
        let (h, at) = decode_header(&p).unwrap();
        assert_eq!((h.table_id, h.written_at_ns, h.key), (8, Some(1_000), None));
        assert_eq!(at, 1 + 8 + 8 + 2);
    }

    #[test]
    fn v1_payloads_still_decode() {
        let mut v1 = vec![V1];
        v1.extend_from_slice(&9u64.to_le_bytes());
        let mut w = StreamWriter::try_new(Vec::new(), &batch().schema()).unwrap();
        w.write(&batch()).unwrap();
        w.finish().unwrap();
        v1.extend_from_slice(&w.into_inner().unwrap());
        let (h, b) = decode(&Bytes::from(v1)).unwrap();
        assert_eq!((h.table_id, h.written_at_ns, h.key), (9, None, None));
        assert_eq!(b.num_rows(), 3);
    }

    #[test]
    fn damaged_headers_are_errors_not_panics() {
        let p = encode(
            1,
            0,
            Some(&KeyRecord {
                key: "k".into(),
                fingerprint: 1,
                rows: 3,
                ack: Ack::Durable,
            }),
            &batch(),
        )
        .unwrap();
        for cut in [0, 5, 12, 19, 21, 30] {
            let err = decode_header(&p[..cut]).unwrap_err().to_string();
            assert!(err.contains("ends inside its header"), "{cut}: {err}");
        }
        let mut bad = p.to_vec();
        bad[0] = 3;
        let err = decode_header(&bad).unwrap_err().to_string();
        assert!(err.contains("unknown WAL payload version 3"), "{err}");
    }
}
