//! Printing statement results as a table, CSV or JSON.

use std::io::Write;

use kiln_query::Output;

use crate::commands::BoxError;
use crate::config::OutputFormat;

pub fn print(out: &mut impl Write, res: &Output, format: OutputFormat) -> Result<(), BoxError> {
    match res {
        Output::Command { tag, .. } => {
            if format == OutputFormat::Table {
                writeln!(out, "{tag}")?;
            }
        }
        Output::Rows { schema, batches } => match format {
            OutputFormat::Table => {
                let opts = arrow::util::display::FormatOptions::default().with_null("NULL");
                if batches.is_empty() {
                    let empty = arrow::array::RecordBatch::new_empty(schema.clone());
                    writeln!(
                        out,
                        "{}",
                        arrow::util::pretty::pretty_format_batches_with_options(&[empty], &opts)?
                    )?;
                } else {
                    writeln!(
                        out,
                        "{}",
                        arrow::util::pretty::pretty_format_batches_with_options(batches, &opts)?
                    )?;
                }
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                writeln!(out, "({rows} row{})", if rows == 1 { "" } else { "s" })?;
            }
            OutputFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut *out);
                if batches.is_empty() {
                    w.write(&arrow::array::RecordBatch::new_empty(schema.clone()))?;
                }
                for b in batches {
                    w.write(b)?;
                }
            }
            OutputFormat::Json => {
                let mut w = arrow::json::ArrayWriter::new(&mut *out);
                for b in batches {
                    w.write(b)?;
                }
                w.finish()?;
                drop(w);
                writeln!(out)?;
            }
        },
    }
    Ok(())
}
