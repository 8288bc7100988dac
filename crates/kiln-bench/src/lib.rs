//! Kiln's benchmark tooling: deterministic data generators and load drivers.
//!
//! `gen` is a reserved keyword in Rust 2024, so the module is declared as
//! `r#gen`; the commonly used items are re-exported at the crate root so
//! callers rarely need the raw identifier.

pub mod r#gen;

pub use r#gen::{
    ABTEST_DDL, AbTestGen, GenError, OutFormat, abtest_schema, par_for_each_batch, write_file,
};
