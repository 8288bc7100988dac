//! Physical plans of constant prepared statements, built once and
//! re-executed.
//!
//! Why: planning is most of a trivial query's cost. In a profile of
//! pgbench's prepared `SELECT 1` the logical optimizer took 16% of the
//! server's CPU, physical planning 32% and the session-state snapshots 10%;
//! executing the plan took 4%. A statement that reads no table, takes no
//! parameter and calls only immutable functions returns the same rows every
//! time, so its physical plan and task context are kept here, keyed by SQL
//! text and shared by every connection, and each Execute re-runs the plan
//! after DataFusion's `reset_plan_states`. Connection pools' health checks
//! (`SELECT 1`) are such statements.
//!
//! Plans that read a table are planned per Execute: a scan pins the data
//! snapshot of its planning time, and the data changes between executions.

use std::sync::Arc;

use dashmap::DashMap;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;

/// At most this many statements are kept; later ones are planned per
/// Execute.
const MAX_PLANS: usize = 1024;

/// A physical plan and the task context it runs with.
pub(super) type Runnable = (Arc<dyn ExecutionPlan>, Arc<TaskContext>);

/// Constant statements' plans by SQL text (sharded: no global lock), each
/// with the session settings it was planned under: a `SET` replaces the
/// session's settings object, and the plan is made again.
#[derive(Default)]
pub(super) struct ConstantPlans {
    plans: DashMap<String, (Runnable, Arc<ConfigOptions>)>,
}

impl ConstantPlans {
    /// A fresh copy of the plan kept for `sql` under `settings` (the
    /// session's now), ready to execute.
    pub(super) fn get(&self, sql: &str, settings: &Arc<ConfigOptions>) -> Result<Option<Runnable>> {
        let Some(entry) = self.plans.get(sql) else {
            return Ok(None);
        };
        let ((plan, task), planned_under) = entry.value();
        if !Arc::ptr_eq(planned_under, settings) {
            return Ok(None);
        }
        let (plan, task) = (plan.clone(), task.clone());
        drop(entry);
        Ok(Some((reset_plan_states(plan)?, task)))
    }

    /// Keeps `physical`, the plan of `logical` under `settings`, if
    /// `logical` is constant.
    pub(super) fn offer(
        &self,
        sql: &str,
        logical: &LogicalPlan,
        (physical, task): &Runnable,
        settings: &Arc<ConfigOptions>,
    ) {
        let room = self.plans.len() < MAX_PLANS || self.plans.contains_key(sql);
        if room && is_constant(logical) {
            self.plans.insert(
                sql.to_string(),
                ((physical.clone(), task.clone()), settings.clone()),
            );
        }
    }
}

/// True if `plan` reads no table, has no parameter and calls no function
/// whose result may change between calls (`now()`, `random()`), so every
/// execution returns the same rows. Only plain relational nodes qualify.
pub(super) fn is_constant(plan: &LogicalPlan) -> bool {
    let mut constant = true;
    let _ = plan.apply_with_subqueries(|node| {
        let relational = matches!(
            node,
            LogicalPlan::Projection(_)
                | LogicalPlan::Filter(_)
                | LogicalPlan::EmptyRelation(_)
                | LogicalPlan::Values(_)
                | LogicalPlan::Limit(_)
                | LogicalPlan::Sort(_)
                | LogicalPlan::Union(_)
                | LogicalPlan::SubqueryAlias(_)
                | LogicalPlan::Aggregate(_)
                | LogicalPlan::Distinct(_)
                | LogicalPlan::Join(_)
                | LogicalPlan::Window(_)
                | LogicalPlan::Subquery(_)
        );
        constant &= relational;
        if !constant {
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                constant &= match e {
                    Expr::Placeholder(_) | Expr::ScalarVariable(..) => false,
                    Expr::ScalarFunction(f) => {
                        f.func.signature().volatility == Volatility::Immutable
                    }
                    _ => true,
                };
                Ok(if constant {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            })
        })
    });
    constant
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    #[tokio::test]
    async fn a_kept_plan_is_reused_until_a_setting_changes() {
        let ctx = SessionContext::new();
        let settings = || ctx.state_ref().read().config().options().clone();
        let plans = ConstantPlans::default();
        let logical = ctx.state().create_logical_plan("SELECT 1").await.unwrap();
        let physical = ctx.state().create_physical_plan(&logical).await.unwrap();
        plans.offer(
            "SELECT 1",
            &logical,
            &(physical, ctx.task_ctx()),
            &settings(),
        );
        assert!(plans.get("SELECT 1", &settings()).unwrap().is_some());
        assert!(plans.get("SELECT 2", &settings()).unwrap().is_none());
        ctx.sql("SET datafusion.execution.time_zone = '+02:00'")
            .await
            .unwrap();
        assert!(plans.get("SELECT 1", &settings()).unwrap().is_none());
    }

    async fn constant(sql: &str) -> bool {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT)").await.unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        is_constant(&plan)
    }

    #[tokio::test]
    async fn only_plans_with_the_same_rows_every_time_are_constant() {
        for sql in [
            "SELECT 1",
            "SELECT 1 AS one, 'a' || 'b' AS s",
            "SELECT abs(-2), upper('x')",
            "VALUES (1), (2)",
            "SELECT x FROM (VALUES (1), (2)) AS v(x) WHERE x > 1 ORDER BY x LIMIT 1",
        ] {
            assert!(constant(sql).await, "{sql}");
        }
        for sql in [
            "SELECT a FROM t",
            "SELECT 1 WHERE EXISTS (SELECT 1 FROM t)",
            "SELECT (SELECT max(a) FROM t)",
            "SELECT now()",
            "SELECT random()",
            "SELECT 1 + $1",
            "EXPLAIN ANALYZE SELECT 1",
        ] {
            assert!(!constant(sql).await, "{sql}");
        }
    }
}
