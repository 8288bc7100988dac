//! `kiln gen abtest`: deterministic A/B experiment events to a file.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use kiln_bench::{AbTestGen, OutFormat, write_file};

use super::BoxError;
use crate::config::GenArgs;

pub fn run(args: GenArgs) -> Result<(), BoxError> {
    let format = OutFormat::from_path(&args.out).ok_or_else(|| {
        format!(
            "{}: use a .parquet, .csv or .ndjson file name",
            args.out.display()
        )
    })?;
    let generator = AbTestGen::new(args.rows, args.seed);
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(args.rows);
        bar.set_style(
            ProgressStyle::with_template("[{bar:40}] {pos}/{len} rows {per_sec} eta {eta}")
                .expect("template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let started = std::time::Instant::now();
    let rows = write_file(&generator, &args.out, format, &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote {rows} rows to {} in {secs:.2}s ({:.0} rows/s)",
        args.out.display(),
        rows as f64 / secs.max(1e-9)
    );
    Ok(())
}
