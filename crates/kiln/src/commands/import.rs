//! `kiln import`: bulk-load files, each one atomically, with a progress bar on a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use kiln_query::ingest::{Format, import_file};
use kiln_storage::Db;

use super::BoxError;
use crate::config::ImportArgs;

pub async fn run(args: ImportArgs) -> Result<(), BoxError> {
    let forced = match &args.format {
        Some(f) => Some(
            Format::parse(f)
                .ok_or_else(|| format!("unknown format '{f}' (csv, ndjson, parquet)"))?,
        ),
        None => None,
    };
    let db = Db::open(args.storage).await?;
    let result = async {
        let mut total = 0;
        let started = std::time::Instant::now();
        for path in &args.files {
            let format = forced.or_else(|| Format::from_path(path)).ok_or_else(|| {
                format!(
                    "{}: cannot tell the format from the extension; pass --format",
                    path.display()
                )
            })?;
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            let bar = if std::io::stderr().is_terminal() {
                let bar = ProgressBar::new(size);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                    )
                    .expect("valid template"),
                );
                bar.set_message(path.display().to_string());
                bar
            } else {
                ProgressBar::hidden()
            };
            let rows =
                import_file(&db, &args.table, path, format, &|n| bar.set_position(n)).await?;
            bar.finish_and_clear();
            total += rows;
            eprintln!("{}: {rows} rows", path.display());
        }
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "imported {total} rows in {secs:.2}s ({:.0} rows/s)",
            total as f64 / secs.max(1e-9)
        );
        Ok::<_, BoxError>(())
    }
    .await;
    let closed = db.close().await;
    result?;
    Ok(closed?)
}
