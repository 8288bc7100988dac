//! Kiln's SQL layer on DataFusion.
//!
//! [`Engine`] is the one door: every statement of every protocol is
//! registered, admitted and run through it, on one DataFusion session built
//! once and shared by every query. Kiln tables appear in it through
//! [`KilnTable`], which scans a pinned snapshot of segments plus memstore
//! rows, pruned by the query's filters. DDL (`CREATE TABLE`, `DROP TABLE`)
//! is Kiln's own; everything else, including `INSERT`, `EXPLAIN` and
//! information_schema, is DataFusion.
//!
//! Modules, in layer order, highest first (each uses only those below it;
//! `tests/layers.rs` checks it):
//! - [`engine`]: the door: parse, DDL or plan, admission, guarded rows;
//! - [`plan_cache`] (custom and generic plans of prepared statements),
//!   [`ddl`] (Kiln's DDL), [`ingest`] (bodies, COPY data and files into rows);
//! - [`session`]: the DataFusion session, its rules and catalog, and each
//!   query's share of the cores;
//! - [`rules`] (optimizer rules) and [`system`] (`system.*` tables);
//! - [`cube`]: cubes (aggregating indexes): their plans, the rule that
//!   answers aggregates from them, their scans and part builder;
//! - [`scan`]: the table provider and its execution nodes;
//! - [`cache`]: decoded segments and partial aggregates, in [`cache::ByteLru`];
//! - [`config`] ([`QueryConfig`], one clap group for every query setting);
//! - [`admission`]: the query registry (slots, deadlines, cancel);
//! - [`pruning`] (min/max statistics against filters) and [`functions`]
//!   (Kiln's SQL functions);
//! - [`shape`] (how deep a statement may nest, how long its lists may be;
//!   long chains balanced; PostgreSQL syntax rewritten as DataFusion plans it);
//! - [`transaction`] (an explicit transaction's writes, staged until COMMIT),
//!   [`files`] (which server files SQL may touch) and [`auth`] (users,
//!   their privileges and tokens; SCRAM);
//! - leaves: [`options`] (Kiln's session options, `kiln.*`, and the
//!   session's user), [`memory`] (the execution memory pool, a share per
//!   query, the heap counted at the allocator),
//!   [`executor`] (the runtime heavy queries execute on), [`chunks`]
//!   (results cut into pieces of bounded size before they become text),
//!   [`displayable`] (dates and times no door can print, refused as rows
//!   leave) and [`error`].

pub mod admission;
pub mod auth;
pub mod cache;
pub mod chunks;
pub mod config;
pub mod cube;
pub mod ddl;
pub mod displayable;
pub mod engine;
pub mod error;
pub mod executor;
pub mod files;
pub mod functions;
pub mod ingest;
pub mod memory;
pub mod options;
pub mod plan_cache;
pub mod pruning;
pub mod rules;
pub mod scan;
pub mod session;
pub mod shape;
pub mod system;
pub mod transaction;

pub use admission::{
    Begin, QueryHandle, QueryInfo, QueryLimits, QueryRegistry, Status as QueryStatus, Stop,
};
pub use cache::{Caches, PartialCache, SegmentCache};
pub use config::{PlanCacheMode, QueryConfig};
pub use engine::{Engine, Names, Origin, Output, OwnStatement, Query, Streamed};
pub use error::{Error, ErrorKind, Result};
pub use executor::Executor;
pub use plan_cache::{PlanCache, PlanCounts};
pub use scan::KilnTable;
pub use session::{CATALOG, SCHEMA, build_session, query_state};
pub use transaction::Transaction;
