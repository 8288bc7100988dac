//! Kiln's benchmark tooling: a deterministic data generator ([`r#gen`]) and
//! load drivers that act like common load tools ([`load`]):
//! closed-loop query clients printing JMeter-style tables and a
//! YCSB-style write load reporting latency per second.
//!
//! `gen` is a reserved keyword in Rust 2024, so the module is declared as
//! `r#gen`; the commonly used items are re-exported at the crate root so
//! callers rarely need the raw identifier.

mod error;
pub mod r#gen;
pub mod load;

pub use error::{Error, Result};
pub use r#gen::{ABTEST_DDL, AbTestGen, OutFormat, abtest_schema, par_for_each_batch, write_file};
