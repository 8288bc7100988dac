//! WAL record payloads: a version byte, the table id, and the rows as one
//! Arrow IPC stream (schema + one batch), so replay needs nothing else.

use std::io::Cursor;

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};

const VERSION: u8 = 1;

/// Encodes one write of `table_id`.
pub fn encode(table_id: u64, batch: &RecordBatch) -> Result<Bytes> {
    let mut buf = BytesMut::with_capacity(64 + batch.get_array_memory_size()).writer();
    buf.get_mut().put_u8(VERSION);
    buf.get_mut().put_u64_le(table_id);
    let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(buf.into_inner().freeze())
}

/// Decodes a payload written by [`encode`].
pub fn decode(payload: &Bytes) -> Result<(u64, RecordBatch)> {
    if payload.len() < 9 || payload[0] != VERSION {
        return Err(Error::data("unknown WAL payload version"));
    }
    let table_id = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
    let mut reader = StreamReader::try_new(Cursor::new(payload.slice(9..)), None)?;
    let batch = reader
        .next()
        .ok_or_else(|| Error::data("WAL payload without rows"))??;
    Ok((table_id, batch))
}
