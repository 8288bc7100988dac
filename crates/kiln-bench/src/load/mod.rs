//! Load drivers against a running `kiln serve`, shaped like the tools of
//! the field reports: closed-loop query clients printing JMeter's table
//! (seeds/000) and a YCSB-style write load with per-second latencies
//! (seeds/003).

pub mod query;
pub mod stats;
pub mod workload;
pub mod write;

pub use query::{Progress, Protocol, QueryLoad};
pub use stats::{LevelReport, level_table};
pub use workload::{Call, CallGen, DASHBOARD, Query, workload};
pub use write::{BodyFormat, WriteLoad, WriteReport};
