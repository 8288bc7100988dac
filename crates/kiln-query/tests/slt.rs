//! Runs every `tests/slt/*.slt` file against a fresh database.
//!
//! Besides SQL, the files may use three harness commands, so each answer
//! can be checked from memory, from Parquet segments, after compaction and
//! after a restart: `statement ok` followed by `FLUSH`, `COMPACT` or `RESTART`.

use std::path::{Path, PathBuf};

use arrow::array::Array;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use async_trait::async_trait;
use kiln_query::{Engine, Output};
use kiln_storage::{Db, StorageConfig};
use sqllogictest::{DBOutput, DefaultColumnType};

struct KilnSlt {
    dir: PathBuf,
    engine: Option<Engine>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SltError(String);

async fn open(dir: &Path) -> Engine {
    let mut config = StorageConfig::for_dir(dir);
    config.compaction_min_segments = 2;
    // Only `COMPACT` compacts: a background round between a `FLUSH` and
    // it would change how many partitions it reports.
    config.compaction = false;
    kiln_storage::testing::use_test_store(&mut config);
    Engine::new(Db::open(config).await.expect("open db")).expect("engine")
}

#[async_trait]
impl sqllogictest::AsyncDB for KilnSlt {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let engine = self.engine.as_ref().expect("open");
        let err = |e: &dyn std::fmt::Display| SltError(e.to_string());
        match sql.trim().trim_end_matches(';') {
            "FLUSH" => {
                engine.db().flush_all().await.map_err(|e| err(&e))?;
                return Ok(DBOutput::StatementComplete(0));
            }
            "COMPACT" => {
                let n = engine.db().compact_all().await.map_err(|e| err(&e))?;
                return Ok(DBOutput::StatementComplete(n as u64));
            }
            "RESTART" => {
                let old = self.engine.take().expect("open");
                old.db().close().await.map_err(|e| err(&e))?;
                drop(old);
                self.engine = Some(open(&self.dir).await);
                return Ok(DBOutput::StatementComplete(0));
            }
            _ => {}
        }
        let mut outputs = engine.execute(sql).await.map_err(|e| err(&e))?;
        match outputs.pop() {
            Some(Output::Rows { schema, batches }) => {
                let opts = FormatOptions::default().with_null("NULL");
                let mut rows = vec![];
                for b in &batches {
                    let fmts: Vec<_> = b
                        .columns()
                        .iter()
                        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).expect("formatter"))
                        .collect();
                    for r in 0..b.num_rows() {
                        rows.push(
                            fmts.iter()
                                .zip(b.columns())
                                .map(|(f, c)| {
                                    let s = f.value(r).to_string();
                                    if s.is_empty() && !c.is_null(r) {
                                        "(empty)".to_string()
                                    } else {
                                        s
                                    }
                                })
                                .collect(),
                        );
                    }
                }
                Ok(DBOutput::Rows {
                    types: vec![DefaultColumnType::Any; schema.fields().len()],
                    rows,
                })
            }
            Some(Output::Command { rows, .. }) => Ok(DBOutput::StatementComplete(rows)),
            None => Ok(DBOutput::StatementComplete(0)),
        }
    }

    async fn shutdown(&mut self) {
        if let Some(e) = self.engine.take() {
            let _ = e.db().close().await;
        }
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut failures = vec![];
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "slt"))
    {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut runner = sqllogictest::Runner::new(move || {
            let dir = dir.clone();
            async move {
                Ok::<_, SltError>(KilnSlt {
                    engine: Some(open(&dir).await),
                    dir,
                })
            }
        });
        if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}:\n{e}", file.display()));
        }
        runner.shutdown_async().await;
    }
    assert!(
        failures.is_empty(),
        "{} file(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
