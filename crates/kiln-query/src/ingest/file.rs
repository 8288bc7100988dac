//! `kiln import`: one file into a table, all or nothing.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use arrow::datatypes::SchemaRef;

use super::{Decoded, Format, decode_csv, decode_ndjson};
use crate::error::{Error, Result};

/// Decodes `path` for a table of schema `table`. Rows are checked against
/// the table (NOT NULL, casts) when written; this only parses.
pub fn decode(
    path: &Path,
    format: Format,
    table: &SchemaRef,
    progress: &dyn Fn(u64),
) -> Result<Decoded> {
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| Error::Io {
        context: format!("opening {name}"),
        source: e,
    })?;
    let len = file.metadata().map_or(u64::MAX, |m| m.len());
    let reader = Progress {
        inner: file,
        read: 0,
        report: progress,
    };
    let res = match format {
        Format::Csv => decode_csv(reader, len, table, None),
        Format::Ndjson => decode_ndjson(reader, len, table, None),
        Format::Parquet => File::open(path)
            .map_err(|e| e.to_string())
            .and_then(|f| super::parquet::decode(f, table, usize::MAX).map_err(|e| e.to_string())),
        Format::ArrowStream => {
            let mut body = vec![];
            let mut reader = reader;
            match reader.read_to_end(&mut body) {
                Ok(_) => {
                    super::decode(body.into(), Format::ArrowStream, table, &Default::default())
                        .map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            }
        }
    };
    res.map_err(|msg| Error::Import { file: name, msg })
}

/// Counts bytes read, for a progress bar.
struct Progress<'a, R> {
    inner: R,
    read: u64,
    report: &'a dyn Fn(u64),
}

impl<R: Read> Read for Progress<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        (self.report)(self.read);
        Ok(n)
    }
}

/// Imports one file into `table` atomically. Returns rows written.
pub async fn import_file(
    db: &kiln_storage::Db,
    table: &str,
    path: &Path,
    format: Format,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<usize> {
    let t = db
        .table(table)
        .ok_or_else(|| kiln_storage::Error::TableNotFound(table.into()))?;
    let (p, schema) = (path.to_path_buf(), t.schema.clone());
    let decoded = tokio::task::block_in_place(|| decode(&p, format, &schema, progress))?;
    db.load(table, &decoded.batches)
        .await
        .map_err(|e| match e.bad_row() {
            Some((row, msg)) => Error::Import {
                file: path.display().to_string(),
                msg: format!("line {}: {msg}", decoded.line_of(row)),
            },
            None => e.into(),
        })
}
