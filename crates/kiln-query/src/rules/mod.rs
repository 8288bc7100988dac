//! Kiln's planner rules, each an extension DataFusion's session calls:
//! - [`balance`]: long AND/OR chains kept balanced (a logical optimizer
//!   rule, last in each pass);
//! - [`shared`]: CTEs referenced more than once computed once (an analyzer
//!   rule and a query planner);
//! - [`time_predicates`]: time predicates on the bare time column (a
//!   logical optimizer rule);
//! - [`arithmetic`]: integer overflow and a float divided by zero fail as
//!   in PostgreSQL (an analyzer rule after type coercion);
//! - [`pg_types`]: `information_schema.columns.data_type` in PostgreSQL's
//!   type names (an analyzer rule);
//! - [`mark_subqueries`]: uncorrelated `IN` and `EXISTS` subqueries in
//!   select lists and sorts answered through mark joins (an analyzer rule);
//! - [`int_casts`]: a float cast to an integer rounds, as in PostgreSQL
//!   (an analyzer rule after type coercion);
//! - [`checked_patterns`]: a regular expression's pattern read from a
//!   column or computed is checked as it runs, so one that does not
//!   compile is bad input (an analyzer rule after type coercion);
//! - [`single_row`]: a correlated scalar subquery without an aggregate
//!   gives its one row's value, as in PostgreSQL (an analyzer rule);
//! - [`dedup`]: repeats dropped before a group-by that ignores them (a
//!   physical optimizer rule);
//! - [`partials`]: partial aggregates kept per held segment (a physical
//!   optimizer rule over [`crate::scan`]'s nodes);
//! - [`sized_literals`]: batches cut to the rows a node can copy its large
//!   constants into, such plans run in batches that fit, rows sorted
//!   before they get them, and windows capped (physical optimizer rules
//!   and their nodes);
//! - [`file_sinks`]: a query written to a CSV or JSON file reaches its
//!   writer in pieces of bounded size (a physical optimizer rule and its
//!   node).
//!
//! Each can be read, tested and removed on its own: the session lists them
//! ([`crate::session::build_session`]); none imports another but
//! [`partials`], which sees through [`dedup`]'s node.

pub mod arithmetic;
pub mod balance;
pub mod checked_patterns;
pub mod dedup;
pub mod file_sinks;
pub mod int_casts;
pub mod mark_subqueries;
pub mod partials;
pub mod pg_types;
pub mod shared;
pub mod single_row;
pub mod sized_literals;
pub mod time_predicates;
