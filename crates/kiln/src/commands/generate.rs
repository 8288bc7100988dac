//! `kiln gen abtest`: deterministic A/B experiment events to a file, or
//! streamed into a running server (`--load`).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use kiln_bench::{AbTestGen, OutFormat, write_file};

use super::BoxError;
use crate::config::GenArgs;

fn progress_bar(rows: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(rows);
    bar.set_style(
        ProgressStyle::with_template("[{bar:40}] {pos}/{len} rows {per_sec} eta {eta}")
            .expect("template"),
    );
    bar
}

pub async fn run(args: GenArgs) -> Result<(), BoxError> {
    let generator = AbTestGen::new(args.rows, args.seed);
    let bar = progress_bar(args.rows);
    let started = std::time::Instant::now();
    let (rows, dest) = match (&args.out, &args.load) {
        (_, Some(url)) => {
            let rows =
                kiln_bench::load::write::load_generated(&generator, url, args.parallel, &|n| {
                    bar.set_position(n)
                })
                .await?;
            (rows, format!("table abtest at {url}"))
        }
        (Some(out), None) => {
            let format = OutFormat::from_path(out).ok_or_else(|| {
                format!(
                    "{}: use a .parquet, .csv or .ndjson file name",
                    out.display()
                )
            })?;
            let (g, o, b) = (generator.clone(), out.clone(), bar.clone());
            let rows = tokio::task::spawn_blocking(move || {
                write_file(&g, &o, format, &mut |n| b.set_position(n))
            })
            .await??;
            (rows, out.display().to_string())
        }
        (None, None) => return Err("give --out FILE or --load http://HOST:PORT".into()),
    };
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote {rows} rows to {dest} in {secs:.2}s ({:.0} rows/s)",
        rows as f64 / secs.max(1e-9)
    );
    Ok(())
}
