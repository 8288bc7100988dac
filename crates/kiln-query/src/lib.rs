//! Kiln's SQL layer on DataFusion.
//!
//! [`Engine`] owns one DataFusion session, built once and shared by every
//! query; Kiln tables appear in it through [`KilnTable`], which scans a
//! pinned snapshot of segments plus memstore rows, pruned by the query's
//! filters. DDL (`CREATE TABLE`, `DROP TABLE`) is Kiln's own; everything
//! else, including `INSERT`, `EXPLAIN` and information_schema, is DataFusion.

mod ddl;
mod dedup;
mod engine;
mod error;
pub mod functions;
pub mod import;
pub mod partials;
mod provider;
pub mod pruning;
pub mod queries;
pub mod reuse;
pub mod segment_cache;
mod session;
pub mod shared;
pub mod system;
mod time_predicates;

pub use engine::{Engine, Output, Streamed, query_state};
pub use error::{Error, Result};
pub use partials::PartialCache;
pub use provider::KilnTable;
pub use queries::{
    QueryHandle, QueryInfo, QueryLimits, QueryRegistry, Status as QueryStatus, Stop,
};
pub use reuse::{PlanCache, PlanCacheMode};
pub use segment_cache::SegmentCache;
pub use session::{CATALOG, SCHEMA, build_session};
