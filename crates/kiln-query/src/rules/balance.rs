//! Long AND and OR chains kept balanced through logical optimization.
//!
//! Why: DataFusion's filter pushdown splits a predicate into its AND terms
//! and joins them back left-deep, so a 10,000-term filter (as ORMs and BI
//! tools write) comes out of the optimizer 10,000 levels deep however it
//! went in. Over such a chain each physical node asks its subtree for its
//! type, so planning alone is quadratic: 2,000 terms took 4 s, 10,000
//! about two minutes. Both operators are associative; this rule, last in
//! each optimizer pass, rebuilds every chain deeper than a few dozen
//! levels as a balanced tree of the same terms in the same order. It runs
//! first among the analyzer rules too, since type coercion is quadratic
//! over a left-deep chain as well, and a prepared statement's plan reaches
//! the analyzer as the SQL planner built it.

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::{AnalyzerRule, ApplyOrder, OptimizerConfig, OptimizerRule};

use crate::shape::{REBALANCE_DEPTH, Split, balanced, flatten};

#[derive(Debug, Default)]
pub struct BalanceChains;

impl OptimizerRule for BalanceChains {
    fn name(&self) -> &str {
        "kiln_balance_chains"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.map_expressions(|e| e.transform_down(|e| Ok(rebalance(e))))
    }
}

impl AnalyzerRule for BalanceChains {
    fn name(&self) -> &str {
        "kiln_balance_chains"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            p.map_expressions(|e| e.transform_down(|e| Ok(rebalance(e))))
        })
        .map(|t| t.data)
    }
}

/// `e` rebalanced if it is the root of a deep AND or OR chain.
fn rebalance(e: Expr) -> Transformed<Expr> {
    let op = match &e {
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => b.op,
        _ => return Transformed::no(e),
    };
    if left_spine(&e, op) <= REBALANCE_DEPTH {
        return Transformed::no(e);
    }
    let terms = flatten(e, |e| match e {
        Expr::BinaryExpr(b) if b.op == op => Split::Node(*b.left, *b.right),
        term => Split::Term(term),
    });
    Transformed::yes(balanced(terms, |l, r| {
        Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r)))
    }))
}

/// How many `op` nodes lie along the left edge from `e` down.
fn left_spine(mut e: &Expr, op: Operator) -> usize {
    let mut n = 0;
    while let Expr::BinaryExpr(b) = e
        && b.op == op
    {
        n += 1;
        e = &b.left;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    fn depth(e: &Expr) -> usize {
        match e {
            Expr::BinaryExpr(b) => 1 + depth(&b.left).max(depth(&b.right)),
            _ => 0,
        }
    }

    #[test]
    fn a_left_deep_conjunction_becomes_balanced_with_its_terms_in_order() {
        let terms: Vec<Expr> = (0..1000).map(|i| col("x").not_eq(lit(i))).collect();
        let chain = terms.clone().into_iter().reduce(Expr::and).unwrap();
        assert_eq!(depth(&chain), 1000);
        let out = rebalance(chain);
        assert!(out.transformed);
        assert!(depth(&out.data) <= 11, "{}", depth(&out.data));
        let back = datafusion::logical_expr::utils::split_conjunction(&out.data);
        assert_eq!(back.into_iter().cloned().collect::<Vec<_>>(), terms);
    }

    #[test]
    fn short_chains_and_other_operators_are_left_alone() {
        let short = (0..10)
            .map(|i| col("x").eq(lit(i)))
            .reduce(Expr::or)
            .unwrap();
        assert!(!rebalance(short).transformed);
        let sum = (0..100).map(|_| col("x")).reduce(|a, b| a + b).unwrap();
        assert!(!rebalance(sum).transformed);
    }
}
