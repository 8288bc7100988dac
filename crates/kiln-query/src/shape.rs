//! How deep a statement's expressions may nest, checked right after
//! parsing, before anything recurses over them.
//!
//! Why: planning, optimizing, evaluating, printing and even dropping an
//! expression recurse over its tree, so one 4 KB `SELECT 1+1+...+1` is a
//! tree thousands of levels deep and used to overflow the stack and kill
//! the process. The parser builds left-deep chains in a loop (its own
//! recursion limit stops only parentheses and subqueries), so the depth is
//! checked here: past [`QueryConfig::max_expression_depth`] a statement is
//! refused with [`Error::TooComplex`] (SQLSTATE 54001). Long AND and OR
//! chains, which ORMs and BI filters generate by the thousand, are not
//! refused: both operators are associative, so a long chain is rebuilt as
//! a balanced tree of the same terms in the same order (10,000 terms nest
//! 14 deep) before the check.
//!
//! [`QueryConfig::max_expression_depth`]: crate::config::QueryConfig::max_expression_depth

use std::ops::ControlFlow;

pub mod explain;
pub mod first;
pub mod labels;
pub mod order;
pub mod patterns;
pub mod postgres;
pub mod relations;
pub mod width;

use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Statement, VisitMut, VisitorMut};
use datafusion::sql::sqlparser::parser::ParserError;

use crate::error::{Error, Result};

/// A chain of one operator nesting deeper than this is rebalanced.
pub(crate) const REBALANCE_DEPTH: usize = 32;

/// A parser error on `sql` as Kiln's error: nesting past the parser's own
/// limit (parentheses, subqueries, prefix operators) is
/// [`Error::TooComplex`] like any other; the rest are syntax errors with
/// the position they name in `sql`.
pub fn parse_error(e: ParserError, sql: &str) -> Error {
    match e {
        ParserError::RecursionLimitExceeded => Error::TooComplex(
            "statement too complex: parentheses, subqueries or prefix operators nest too deep"
                .into(),
        ),
        ParserError::ParserError(message) | ParserError::TokenizerError(message) => {
            let position = location(&message).and_then(|(l, c)| char_position(sql, l, c));
            Error::Syntax { message, position }
        }
    }
}

/// The line and column a parser message ends with. The parser reports
/// where it stopped only in its message, as `... at Line: L, Column: C`.
fn location(message: &str) -> Option<(usize, usize)> {
    let at = message.rfind(" at Line: ")?;
    let (line, column) = message[at + " at Line: ".len()..].split_once(", Column: ")?;
    Some((line.parse().ok()?, column.trim_end().parse().ok()?))
}

/// Line `line`, column `column` (both from 1, in characters) of `sql` as
/// a character position from 1; none past the text's end, or without a
/// text.
fn char_position(sql: &str, line: usize, column: usize) -> Option<usize> {
    if sql.is_empty() || line == 0 || column == 0 {
        return None;
    }
    let mut before = 0;
    for (i, text) in sql.split('\n').enumerate() {
        if i + 1 == line {
            let chars = text.chars().count();
            return (column <= chars + 1).then_some(before + column);
        }
        before += text.chars().count() + 1;
    }
    None
}

/// Rebalances long AND/OR chains of `stmt`, then refuses it if an
/// expression still nests deeper than `max_depth`.
pub fn check(stmt: &mut Statement, max_depth: usize) -> Result<()> {
    let mut shape = Shape {
        depth: 0,
        max_depth,
    };
    match stmt.visit(&mut shape) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(Error::TooComplex(format!(
            "statement too complex: an expression nests more than {max_depth} levels deep \
             (--max-expression-depth); long AND/OR chains are fine, long chains of other \
             operators are not"
        ))),
    }
}

struct Shape {
    depth: usize,
    max_depth: usize,
}

impl VisitorMut for Shape {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::BinaryOp {
            op: op @ (BinaryOperator::And | BinaryOperator::Or),
            ..
        } = expr
        {
            let op = op.clone();
            if left_spine(expr, &op) > REBALANCE_DEPTH {
                rebalance(expr, op);
            }
        }
        self.depth += 1;
        if self.depth > self.max_depth {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &mut Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

/// How many `op` nodes lie along the left edge from `expr` down.
fn left_spine(mut expr: &Expr, op: &BinaryOperator) -> usize {
    let mut n = 0;
    while let Expr::BinaryOp { left, op: o, .. } = expr
        && o == op
    {
        n += 1;
        expr = left;
    }
    n
}

/// Rebuilds the `op` chain rooted at `expr` as a balanced tree of the same
/// terms in the same order. Iterative: the chain may be thousands deep.
fn rebalance(expr: &mut Expr, op: BinaryOperator) {
    let placeholder = || Expr::Value(datafusion::sql::sqlparser::ast::Value::Null.into());
    let root = std::mem::replace(expr, placeholder());
    let terms = flatten(root, |e| match e {
        Expr::BinaryOp { left, op: o, right } if o == op => Split::Node(*left, *right),
        term => Split::Term(term),
    });
    *expr = balanced(terms, |left, right| Expr::BinaryOp {
        left: Box::new(left),
        op: op.clone(),
        right: Box::new(right),
    });
}

/// One step of taking a chain apart: a node of the chain, opened into its
/// two operands, or a term.
pub(crate) enum Split<T> {
    Node(T, T),
    Term(T),
}

/// The terms of a chain, left to right: `split` opens a node of the chain
/// into its two operands, or gives back a term. Iterative, so a chain
/// thousands deep is taken apart without recursion (dropping it whole
/// would recurse too).
pub(crate) fn flatten<T>(root: T, split: impl Fn(T) -> Split<T>) -> Vec<T> {
    let mut terms = vec![];
    let mut todo = vec![root];
    // Right operands are pushed first so terms come out left to right.
    while let Some(e) = todo.pop() {
        match split(e) {
            Split::Node(left, right) => {
                todo.push(right);
                todo.push(left);
            }
            Split::Term(term) => terms.push(term),
        }
    }
    terms
}

/// `terms` joined left to right by `join` as a tree of depth log2(terms).
pub(crate) fn balanced<T>(mut terms: Vec<T>, join: impl Fn(T, T) -> T) -> T {
    while terms.len() > 1 {
        let mut next = Vec::with_capacity(terms.len().div_ceil(2));
        let mut it = terms.into_iter();
        while let Some(left) = it.next() {
            next.push(match it.next() {
                Some(right) => join(left, right),
                None => left,
            });
        }
        terms = next;
    }
    terms.pop().expect("a chain has terms")
}

#[cfg(test)]
mod tests;
