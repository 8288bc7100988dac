//! Arrow IPC streams from outside (HTTP write bodies, WAL records read
//! back), read with every declared size checked first.
//!
//! Why a check before decoding: an IPC message states its metadata and
//! body lengths, its buffers' offsets and lengths, and a compressed buffer
//! the size it inflates to; a reader that trusts them allocates what a
//! 4 KB body claims (2 GiB each, or petabytes: an abort, not an error).
//! Here every length must fit in the bytes actually received and every
//! inflated size within the limit, and the batches are then decoded from
//! the body in place (arrow's push decoder, which never allocates ahead
//! of the bytes it has). Arrow's decoder can still panic on inconsistent
//! input the checks do not cover (found by the fuzz targets); a panic is
//! caught and reported as malformed input.

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::{MessageHeader, root_as_message};
use bytes::Bytes;

const CONTINUATION: [u8; 4] = [0xff; 4];

/// Decodes an Arrow IPC stream whose compressed buffers inflate to at most
/// `max_bytes` in all.
pub fn decode(body: Bytes, max_bytes: usize) -> Result<Vec<RecordBatch>, String> {
    check(&body, max_bytes).map_err(|e| format!("Arrow IPC stream: {e}"))?;
    let decoded = std::panic::catch_unwind(|| {
        let at = |e| format!("Arrow IPC stream: {e}");
        let mut decoder = StreamDecoder::new();
        let mut buffer = Buffer::from(body);
        let mut batches = vec![];
        while !buffer.is_empty() {
            match decoder.decode(&mut buffer).map_err(at)? {
                Some(b) => batches.push(b),
                None => break,
            }
        }
        decoder.finish().map_err(at)?;
        Ok(batches)
    });
    decoded.unwrap_or_else(|_| Err("Arrow IPC stream: malformed (inconsistent buffers)".into()))
}

/// Walks the stream's messages, checking each declared length against the
/// bytes left and the inflated sizes against `max_bytes`.
fn check(body: &[u8], max_bytes: usize) -> Result<(), String> {
    let mut at = 0usize;
    let mut inflated = 0u64;
    while at < body.len() {
        let mut word = read_u32(body, at)?;
        if word.to_le_bytes() == CONTINUATION {
            at += 4;
            word = read_u32(body, at)?;
        }
        at += 4;
        let meta_len = word as usize;
        if meta_len == 0 {
            return Ok(());
        }
        let left = body.len() - at;
        if meta_len > left {
            return Err(format!(
                "message at byte {} declares {meta_len} bytes of metadata, {left} remain",
                at - 4
            ));
        }
        let message = root_as_message(&body[at..at + meta_len])
            .map_err(|e| format!("bad message at byte {}: {e}", at - 4))?;
        at += meta_len;
        let left = body.len() - at;
        let body_len = usize::try_from(message.bodyLength()).unwrap_or(usize::MAX);
        if body_len > left {
            return Err(format!(
                "message at byte {at} declares a {body_len}-byte body, {left} remain"
            ));
        }
        let batch = match message.header_type() {
            MessageHeader::RecordBatch => message.header_as_record_batch(),
            MessageHeader::DictionaryBatch => {
                message.header_as_dictionary_batch().and_then(|d| d.data())
            }
            _ => None,
        };
        if let Some(batch) = batch {
            let compressed = batch.compression().is_some();
            for buf in batch.buffers().iter().flatten() {
                let (offset, len) = (buf.offset(), buf.length());
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                let end = usize::try_from(len).ok().and_then(|l| start.checked_add(l));
                if end.is_none_or(|end| end > body_len) {
                    return Err(format!(
                        "message at byte {at} has a buffer at {offset}+{len}, past its {body_len}-byte body"
                    ));
                }
                if !compressed || len < 8 {
                    continue;
                }
                let declared = i64::from_le_bytes(
                    body[at + start..at + start + 8]
                        .try_into()
                        .expect("8 bytes"),
                );
                // -1: stored uncompressed, as long as it is.
                inflated += u64::try_from(declared).unwrap_or(len as u64);
                if inflated > max_bytes as u64 {
                    return Err(format!(
                        "compressed buffers inflate to more than the {max_bytes}-byte limit"
                    ));
                }
            }
        }
        at += body_len;
    }
    Ok(())
}

fn read_u32(body: &[u8], at: usize) -> Result<u32, String> {
    body.get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| format!("stream ends inside a message header at byte {at}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;

    fn stream() -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let mut w = StreamWriter::try_new(vec![], &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        w.into_inner().unwrap()
    }

    #[test]
    fn a_valid_stream_decodes() {
        let batches = decode(stream().into(), 1 << 20).unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
    }

    #[test]
    fn a_claimed_length_beyond_the_body_is_refused_before_allocating() {
        let mut body = CONTINUATION.to_vec();
        body.extend_from_slice(&(2u32 << 30).to_le_bytes());
        body.extend_from_slice(&[0u8; 4096]);
        let e = decode(body.into(), 1 << 20).unwrap_err();
        assert!(e.contains("declares 2147483648 bytes of metadata"), "{e}");
    }

    #[test]
    fn a_truncated_stream_is_an_error() {
        let mut body = stream();
        body.truncate(body.len() - 20);
        assert!(decode(body.into(), 1 << 20).is_err());
    }
}
