//! Large constants copied into rows, given to a batch's rows a slice at
//! a time.
//!
//! Why: a projection copies a constant value into every row of each batch.
//! `SELECT '<300,000 characters>' AS c, x FROM t` fills 8,192 rows, 2.3
//! GiB, per batch. Arrow allocates that at once, outside any memory
//! accounting, and a string column's 32-bit offsets overflow past 2 GiB:
//! the query failed with an internal error (a panic, "offset overflow")
//! after allocating gigabytes. An expression giving such a constant to
//! many rows (`CASE WHEN x > 0 THEN '<...>' END`, `x || '<...>'`, a
//! prepared statement's parameter, the same in an aggregate's argument or
//! group key, a sort key) did the same.
//!
//! [`SizedLiterals`] puts a [`CopiesExec`] below each node (a projection,
//! filter, aggregate over raw rows, sort, join, repartition) whose string
//! or binary expressions copy into rows a constant of at least
//! [`LARGE_FROM`] bytes or a parameter. That node measures them as the
//! plan runs and cuts the batches so that their copies take at most
//! [`SLICE_BYTES`]: the answer is the same, in smaller batches, and the
//! memory it takes outside the query's accounting is bounded. A view
//! type's value is kept once for all rows, and is not counted. The rule
//! runs first, so that DataFusion does not merge such a projection into
//! the scan below it (a scan reads whole batches), and last, over the
//! nodes added in between; the table leaves a filter that builds strings
//! from a large constant above its scan for the same reason.
//!
//! A window function holds the rows of its frames and evaluates its
//! arguments over all of them at once: smaller batches would only be
//! gathered again. Below a window copying such constants the node counts
//! rows instead ([`Copies::Capped`]), and stops the query with a clear
//! error before the copies would take more than [`WINDOW_BYTES`]. (A hash
//! join holds its build side's rows too, but DataFusion computes its keys
//! in a projection below it, which is sliced, and the join holds them in
//! the query's accounted memory.)
//!
//! Nodes above gather rows again into batches of the session's size (a
//! hash repartition coalesces what it sends each partition, a join builds
//! its output): [`SmallBatches`] runs such a plan under a batch size whose
//! copies fit in [`SLICE_BYTES`] ([`SmallBatchesExec`] at its root).
//!
//! DataFusion computes a select list below the sort of `ORDER BY`, so
//! `SELECT x, '<...>' FROM t ORDER BY x LIMIT 2` would copy the constant
//! into every row read, and the sort would keep those copies. [`SortFirst`]
//! moves such a projection above its sort when every sort key is one of
//! the projection's plain columns: the rows are sorted (and cut to the
//! limit) first, and only the rows kept get the constant. It runs before
//! the dynamic filters of top-k sorts are pushed to the scans, so the
//! rebuilt sort's filter is the one pushed.

#[cfg(test)]
mod tests;

mod copies;
mod small_batches;

use std::sync::Arc;

use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::projection::update_expr;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode};
use datafusion::physical_plan::projection::{ProjectionExec, make_with_child};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, replace_children_if_necessary,
};

pub use copies::{Copies, CopiesExec, SLICE_BYTES, WINDOW_BYTES, slice_rows};
pub use small_batches::SmallBatchesExec;

use crate::functions::LARGE_FROM;
use crate::functions::value_bytes as bytes;

/// Puts a [`CopiesExec`] below each node whose expressions copy large
/// constants or parameters into rows (module docs).
#[derive(Debug, Default)]
pub struct SizedLiterals;

impl PhysicalOptimizerRule for SizedLiterals {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            // Measured as it runs: a parameter's size is known only then,
            // and an input's batches may be larger than the session's.
            let constants = copied_constants(&node)?;
            let done = node.children().iter().all(|c| c.is::<CopiesExec>());
            if constants.is_empty() || done {
                return Ok(Transformed::no(node));
            }
            let copies = match window_functions(&node)? {
                Some(functions) => Copies::Capped { functions },
                None => Copies::Sliced,
            };
            let children = node
                .children()
                .into_iter()
                .map(|c| {
                    let c = CopiesExec::new(c.clone(), constants.clone(), copies.clone());
                    Arc::new(c) as _
                })
                .collect();
            Ok(Transformed::yes(replace_children_if_necessary(
                node, children,
            )?))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "sized_literals"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The constants `node` copies into rows of its inputs' batches: those
/// [`gather`] finds in its expressions (a projection's, a filter's
/// predicate, sort keys, join or partitioning keys, an aggregate's over raw
/// rows, a window function's arguments and keys), each read against the
/// first input whose schema it fits.
fn copied_constants(node: &Arc<dyn ExecutionPlan>) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
    // An aggregate over partial states evaluates no expression over its
    // input's rows.
    let states = node
        .downcast_ref::<AggregateExec>()
        .is_some_and(|a| a.mode().input_mode() != AggregateInputMode::Raw);
    if states || node.is::<CopiesExec>() {
        return Ok(vec![]);
    }
    let inputs: Vec<SchemaRef> = node.children().iter().map(|c| c.schema()).collect();
    let mut found = vec![];
    node.apply_expressions(&mut |e| {
        for input in &inputs {
            let mut here = vec![];
            if gather(e, input, true, &mut here).is_ok() {
                // Once each: a top-k sort's filter holds its keys again.
                for c in here {
                    if !found.iter().any(|f| Arc::ptr_eq(f, &c)) {
                        found.push(c);
                    }
                }
                break;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// For a window node, the window functions whose arguments (or partition
/// or order keys) copy constants into rows, as an error names them (each cut to
/// [`NAME_CHARS`] characters); `None` for other nodes.
fn window_functions(node: &Arc<dyn ExecutionPlan>) -> Result<Option<String>> {
    let functions = if let Some(w) = node.downcast_ref::<BoundedWindowAggExec>() {
        w.window_expr()
    } else if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        w.window_expr()
    } else {
        return Ok(None);
    };
    let input = node.children()[0].schema();
    let mut names = vec![];
    for f in functions {
        let mut found = vec![];
        let all = f.all_expressions();
        for e in all
            .args
            .iter()
            .chain(&all.partition_by_exprs)
            .chain(&all.order_by_exprs)
        {
            gather(e, &input, true, &mut found)?;
        }
        if !found.is_empty() {
            let name = f.name();
            names.push(match name.char_indices().nth(NAME_CHARS) {
                Some((at, _)) => format!("{}...", &name[..at]),
                None => name.to_string(),
            });
        }
    }
    Ok(Some(names.join(", ")))
}

/// The characters of a window function's name an error shows: its
/// arguments' constants may be megabytes long.
const NAME_CHARS: usize = 60;

/// Adds to `found` each [`constant`] in `e` that is copied into rows: in an
/// expression computing a string or binary column (of any type: a view
/// array built row by row copies each value), or `e` itself when it is the
/// `root` of a node's expression, which the node expands to a column (a
/// view array keeps one copy that every row's view points to). A constant
/// only compared (`s = $1`) is not copied.
fn gather(
    e: &Arc<dyn PhysicalExpr>,
    input: &Schema,
    root: bool,
    found: &mut Vec<Arc<dyn PhysicalExpr>>,
) -> Result<()> {
    let t = e.data_type(input)?;
    if constant(e) {
        if root && copies(&t) {
            found.push(e.clone());
        }
    } else if copies(&t) || matches!(t, DataType::Utf8View | DataType::BinaryView) {
        e.apply(|e| {
            if constant(e) {
                found.push(e.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    } else {
        for child in e.children() {
            gather(child, input, false, found)?;
        }
    }
    Ok(())
}

/// An optimizer rule to run, in order.
type Rule = Arc<dyn PhysicalOptimizerRule + Send + Sync>;

/// `rules` with [`SizedLiterals`] first, so that the nodes copying
/// constants are not merged into a scan (which reads whole batches) before
/// it runs again at the end over the nodes the others added, with
/// [`SortFirst`] before the pushing of top-k sorts' dynamic filters
/// (`FilterPushdown(Post)`), or last if there is none, and with
/// [`SmallBatches`] at the very end.
pub fn with_sized_literals(mut rules: Vec<Rule>) -> Vec<Rule> {
    let at = rules
        .iter()
        .position(|r| r.name() == "FilterPushdown(Post)")
        .unwrap_or(rules.len());
    rules.insert(at, Arc::new(SortFirst));
    rules.insert(0, Arc::new(SizedLiterals));
    rules.push(Arc::new(SizedLiterals));
    rules.push(Arc::new(SmallBatches));
    rules
}

/// Puts a [`SmallBatchesExec`] at the root of a plan that copies large
/// constants or parameters into rows (module docs).
#[derive(Debug, Default)]
pub struct SmallBatches;

impl PhysicalOptimizerRule for SmallBatches {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        SmallBatchesExec::over(plan)
    }

    fn name(&self) -> &str {
        "small_batches"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Moves a projection that adds a large constant or a parameter above the
/// sort over it (module docs).
#[derive(Debug, Default)]
pub struct SortFirst;

impl PhysicalOptimizerRule for SortFirst {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match sorted_first(&node)? {
                Some(rebuilt) => Transformed::yes(rebuilt),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "sort_first"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `node`, a sort over a projection that copies constants into each row
/// ([`copied_constants`]), as the projection over the sort of the projection's input,
/// if every sort key is a plain column of that projection (an expression
/// computed again above the sort could differ, as `random()` does) and the
/// result keeps the sort's order.
fn sorted_first(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(sort) = node.downcast_ref::<SortExec>() else {
        return Ok(None);
    };
    let Some(p) = sort.input().downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    if copied_constants(sort.input())?.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(sort.expr().len());
    for key in sort.expr().iter() {
        let plain = key.expr.exists(|e| {
            Ok(e.downcast_ref::<Column>().is_none_or(|c| {
                p.expr()
                    .get(c.index())
                    .is_some_and(|e| e.expr.is::<Column>())
            }))
        })?;
        let Some(expr) = update_expr(&key.expr, p.expr(), true)?.filter(|_| plain) else {
            return Ok(None);
        };
        keys.push(PhysicalSortExpr {
            expr,
            options: key.options,
        });
    }
    let Some(keys) = LexOrdering::new(keys) else {
        return Ok(None);
    };
    // The rows are sorted whole: the slices made for the projection go
    // above the sort with it (the last run of [`SizedLiterals`]).
    let input = match p.input().downcast_ref::<CopiesExec>() {
        Some(sliced) => sliced.input().clone(),
        None => p.input().clone(),
    };
    let sorted = SortExec::new(keys, input)
        .with_fetch(sort.fetch())
        .with_preserve_partitioning(sort.preserve_partitioning());
    let lifted = make_with_child(p, &(Arc::new(sorted) as _))?;
    let kept = lifted
        .equivalence_properties()
        .ordering_satisfy(sort.expr().clone())?;
    Ok(kept.then_some(lifted))
}

/// Whether a column of type `t` expanded from one value copies it into
/// each row (a view array keeps one copy that every row's view points to).
fn copies(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary
    )
}

/// Whether `e` gives one value to every row that may be large: a string or
/// binary constant of at least [`LARGE_FROM`] bytes, or a function of no
/// argument (a prepared statement's parameter in a kept plan, whose value
/// is known only as it runs).
fn constant(e: &Arc<dyn PhysicalExpr>) -> bool {
    let large = e
        .downcast_ref::<Literal>()
        .and_then(|l| bytes(l.value()))
        .is_some_and(|b| b >= LARGE_FROM);
    let nullary = e
        .downcast_ref::<ScalarFunctionExpr>()
        .is_some_and(|f| f.args().is_empty());
    large || nullary
}
