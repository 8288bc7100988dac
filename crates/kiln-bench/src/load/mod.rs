//! Load drivers against a running `kiln serve`, shaped like common load
//! tools: closed-loop query clients printing JMeter's table (one row per
//! client level) and a YCSB-style write load with per-second latencies.

pub mod http;
pub mod query;
pub mod stats;
pub mod workload;
pub mod write;

pub use query::{Progress, Protocol, QueryLevel, QueryLoad};
pub use stats::{LevelReport, level_table};
pub use workload::{Call, CallGen, DASHBOARD, Query, workload};
pub use write::{BodyFormat, WINDOW_DAYS, WriteLoad, WriteReport};
