//! `kiln debug write-load`: concurrent single-row writers that print each
//! acknowledged id, so a crash test can kill the process at any moment and
//! check that every acknowledged row survived exactly once.

use std::io::Write;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use kiln_query::Engine;
use kiln_storage::{Db, NANOS_PER_DAY};

use super::BoxError;
use crate::config::WriteLoadArgs;

pub const TABLE_DDL: &str = "CREATE TABLE IF NOT EXISTS crash (ts TIMESTAMP NOT NULL, writer BIGINT NOT NULL, id BIGINT NOT NULL, payload VARCHAR)";

pub async fn write_load(args: WriteLoadArgs) -> Result<(), BoxError> {
    let db = Db::open(args.storage).await?;
    Engine::new(db.clone())?.execute(TABLE_DDL).await?;
    let schema = db
        .table("crash")
        .ok_or("crash table missing")?
        .schema
        .clone();
    let ts_type = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let input = Arc::new(Schema::new(vec![
        Field::new("ts", ts_type, false),
        Field::new("writer", DataType::Int64, false),
        Field::new("id", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, true),
    ]));
    let _ = schema;
    let mut tasks = vec![];
    for w in 0..args.writers {
        let (db, input) = (db.clone(), input.clone());
        let (writes, batch, base) = (args.writes, args.batch, args.id_base);
        tasks.push(tokio::spawn(async move {
            let day0 = 20_000 * NANOS_PER_DAY;
            for i in 0..writes {
                let ids: Vec<i64> = (0..batch)
                    .map(|k| base + w as i64 * 1_000_000_000 + (i * batch + k) as i64)
                    .collect();
                // Spread rows over three days so several partitions flush.
                let ts: Vec<i64> = ids
                    .iter()
                    .map(|id| day0 + (id % 3) * NANOS_PER_DAY + id % 1000)
                    .collect();
                let payload: Vec<String> = ids
                    .iter()
                    .map(|id| format!("payload-{id}-{}", "x".repeat((*id % 50) as usize)))
                    .collect();
                let rb = RecordBatch::try_new(
                    input.clone(),
                    vec![
                        Arc::new(TimestampNanosecondArray::from(ts)),
                        Arc::new(Int64Array::from(vec![w as i64; ids.len()])),
                        Arc::new(Int64Array::from(ids.clone())),
                        Arc::new(StringArray::from(payload)),
                    ],
                )?;
                db.write("crash", &[rb]).await?;
                let mut out = std::io::stdout().lock();
                for id in ids {
                    writeln!(out, "ack {id}")?;
                }
                out.flush()?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    db.close().await?;
    Ok(())
}
