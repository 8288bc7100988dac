//! Spill files read on the thread that merges them.
//!
//! Why: DataFusion reads its spill files through `tokio::fs`, which runs
//! every `read` on the runtime's blocking pool. Under a few hundred
//! spilling queries that is a few hundred blocking threads, each keeping
//! allocator pages of its own resident, beyond what the memory pool
//! governs. A plain cap on that pool queues every reader behind the others.
//! Spill files are written moments before they are read, by the same
//! operators, with plain `write` calls on the execution worker; their pages
//! are nearly always still in the page cache, so a plain `read` on the
//! worker costs about what the write did, and needs no thread at all.
//!
//! [`InlineSpillReads`] is a DataFusion [`TempFileFactory`]: files are made,
//! placed, counted against the spill quota and written by DataFusion's own
//! [`DiskManager`]; only reading is replaced.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::spill_file::{SpillFile, SpillWriter, TempFileFactory};
use futures::Stream;

/// Bytes read from a spill file at a time (DataFusion reads 128 KiB too).
pub const READ_CHUNK: usize = 128 << 10;

/// Spill files from `files`, read without a blocking thread.
#[derive(Debug)]
pub struct InlineSpillReads {
    files: Arc<DiskManager>,
}

impl InlineSpillReads {
    /// Spill files made by `files` (its directories and quota).
    pub fn new(files: DiskManager) -> Self {
        Self {
            files: Arc::new(files),
        }
    }
}

impl TempFileFactory for InlineSpillReads {
    fn create_temp_file(&self, description: &str) -> Result<Arc<dyn SpillFile>> {
        Ok(Arc::new(InlineRead(
            self.files.create_tmp_file(description)?,
        )))
    }
}

/// A spill file whose reads run where its stream is polled.
struct InlineRead(Arc<dyn SpillFile>);

impl SpillFile for InlineRead {
    fn path(&self) -> Option<&Path> {
        self.0.path()
    }

    fn size(&self) -> Option<u64> {
        self.0.size()
    }

    fn read_stream(&self) -> Result<Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>> {
        let Some(path) = self.0.path() else {
            return self.0.read_stream();
        };
        let file = File::open(path)?;
        Ok(Box::pin(futures::stream::unfold(
            Some(file),
            |file| async move {
                let mut file = file?;
                match read_chunk(&mut file) {
                    Ok(chunk) if chunk.is_empty() => None,
                    Ok(chunk) => Some((Ok(chunk), Some(file))),
                    Err(e) => Some((Err(DataFusionError::IoError(e)), None)),
                }
            },
        )))
    }

    fn open_writer(&self) -> Result<Box<dyn SpillWriter>> {
        self.0.open_writer()
    }
}

/// Up to [`READ_CHUNK`] bytes from `file` (fewer only at its end).
fn read_chunk(file: &mut File) -> std::io::Result<Bytes> {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests;
