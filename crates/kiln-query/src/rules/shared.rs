//! Common table expressions referenced more than once are computed once.
//!
//! Why: DataFusion inlines a CTE at each reference, so a query that joins a
//! CTE with an aggregate of itself (retention's `user_days`, joined with
//! the cohort computed from it) scans and groups the same rows twice; in
//! the dashboard workload that was a third of each retention query
//! (docs/benchmark-history.md). [`SharedSubplans`], an analyzer rule, wraps each
//! reference of an expensive CTE (one with a grouping, join, window or
//! DISTINCT) that appears more than once in a [`Shared`] node. The node
//! keeps the optimizer from pushing filters, columns or limits into it, so
//! every copy stays the same plan; [`QueryPlanner`] turns the copies of a
//! plan into [`SharedExec`]s over one [`exec::SharedSource`]. The first copy
//! to run computes the rows; the others read them.

mod exec;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, Result};
use datafusion::execution::context::QueryPlanner as DfQueryPlanner;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Extension, LogicalPlan, SubqueryAlias, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use datafusion::prelude::Expr;
use parking_lot::Mutex;

pub use exec::SharedExec;

/// Analyzer rule: the CTE references to compute once (module docs).
#[derive(Debug, Default)]
pub struct SharedSubplans;

impl AnalyzerRule for SharedSubplans {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Each expensive plan under a SubqueryAlias, and how often it occurs.
        let mut seen: Vec<(LogicalPlan, usize)> = vec![];
        plan.apply(|node| {
            if let LogicalPlan::SubqueryAlias(a) = node
                && worth_sharing(&a.input)
            {
                match seen.iter_mut().find(|(p, _)| p == a.input.as_ref()) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((a.input.as_ref().clone(), 1)),
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let repeated: Vec<LogicalPlan> = seen
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(p, _)| p)
            .collect();
        if repeated.is_empty() {
            return Ok(plan);
        }
        // Top-down, so a repeated CTE inside another one is shared as part
        // of the outer one, not on its own.
        plan.transform_down(|node| {
            let LogicalPlan::SubqueryAlias(a) = &node else {
                return Ok(Transformed::no(node));
            };
            let Some(id) = repeated.iter().position(|p| p == a.input.as_ref()) else {
                return Ok(Transformed::no(node));
            };
            let shared = LogicalPlan::Extension(Extension {
                node: Arc::new(Shared {
                    id,
                    input: a.input.as_ref().clone(),
                }),
            });
            let alias = SubqueryAlias::try_new(Arc::new(shared), a.alias.clone())?;
            Ok(Transformed::new(
                LogicalPlan::SubqueryAlias(alias),
                true,
                TreeNodeRecursion::Jump,
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "shared_subplans"
    }
}

/// Worth computing once: it groups, joins, windows or removes duplicates.
/// And safe to: nothing volatile (two references of `random()` differ)
/// and nothing correlated (a reference to an outer query, or a subquery,
/// which DataFusion must still decorrelate in place).
fn worth_sharing(plan: &LogicalPlan) -> bool {
    let (mut expensive, mut unsafe_) = (false, false);
    let _ = plan.apply_with_subqueries(|p| {
        expensive |= matches!(
            p,
            LogicalPlan::Aggregate(_)
                | LogicalPlan::Join(_)
                | LogicalPlan::Window(_)
                | LogicalPlan::Distinct(_)
        );
        unsafe_ |= matches!(p, LogicalPlan::Subquery(_))
            || p.expressions()
                .iter()
                .any(|e| e.is_volatile() || e.contains_outer());
        Ok(match unsafe_ {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    expensive && !unsafe_
}

/// One reference of a CTE computed once per query; copies with the same
/// `id` in one plan share their rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct Shared {
    id: usize,
    input: LogicalPlan,
}

impl UserDefinedLogicalNodeCore for Shared {
    fn name(&self) -> &str {
        "Shared"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Shared: id={}", self.id)
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        Ok(Self {
            id: self.id,
            input: inputs.swap_remove(0),
        })
    }
}

/// DataFusion's planner, plus [`Shared`] nodes: the copies of one plan get
/// one [`exec::SharedSource`] (a fresh map per plan planned). Copies are
/// matched by their whole node, not only the id: a filter that names no
/// column (`$2 = 'x'`) can still be pushed into one copy, which then needs
/// its own rows. Other node kinds go to `others` (cube scans).
#[derive(Default)]
pub struct QueryPlanner {
    pub others: Vec<Arc<dyn ExtensionPlanner + Send + Sync>>,
}

impl fmt::Debug for QueryPlanner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryPlanner")
            .field("others", &self.others.len())
            .finish()
    }
}

#[async_trait]
impl DfQueryPlanner for QueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut planners: Vec<Arc<dyn ExtensionPlanner + Send + Sync>> =
            vec![Arc::new(SharedPlanner::default())];
        planners.extend(self.others.iter().cloned());
        let planner = DefaultPhysicalPlanner::with_extension_planners(planners);
        let checked = super::arithmetic::checked_time(logical_plan)?;
        let plan = checked.as_ref().unwrap_or(logical_plan);
        planner.create_physical_plan(plan, session_state).await
    }
}

#[derive(Default)]
struct SharedPlanner {
    sources: Mutex<HashMap<Shared, Arc<exec::SharedSource>>>,
}

#[async_trait]
impl ExtensionPlanner for SharedPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(shared) = node.as_any().downcast_ref::<Shared>() else {
            return Ok(None);
        };
        let source = self
            .sources
            .lock()
            .entry(shared.clone())
            .or_insert_with(|| Arc::new(exec::SharedSource::new(shared.id)))
            .clone();
        Ok(Some(Arc::new(SharedExec::new(
            source,
            physical_inputs[0].clone(),
        ))))
    }
}
