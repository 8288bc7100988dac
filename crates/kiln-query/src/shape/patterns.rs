//! Regular expressions (`x ~ '...'`, `~*`, `!~`, `!~*`, `SIMILAR TO`, and
//! the pattern and flags of `regexp_like`, `regexp_match`,
//! `regexp_replace`, `regexp_count`, `regexp_instr`) compiled before they
//! run: literals right after parsing ([`check`]), parameters' values when
//! they are bound ([`check_bound`]). A pattern that does not compile is
//! refused as bad input ([`Error::InvalidRegex`], SQLSTATE 2201B) naming
//! the pattern, the byte where it goes wrong, why, and the parameter it
//! came from.
//!
//! Why: Arrow's and DataFusion's regular expression kernels report a
//! pattern that does not compile as a computation error, which carries
//! only text; it reached the client as an internal error (500, XX000), as
//! if `WHERE url ~ '('` were a bug in the server. Patterns are compiled as
//! those kernels compile them (flags as a `(?flags)` prefix, `g` meaning
//! "every match" to `regexp_replace`), with the same size limit.
//! DataFusion matches a `SIMILAR TO` pattern as a regular expression, so
//! it is compiled as one here too. A parameter is checked on the plan with
//! placeholders, as every door binds them (prepared statements' custom and
//! generic plans, HTTP `params`). Any other pattern (read from a column,
//! computed) is checked as it runs ([`crate::rules::checked_patterns`]).

use std::borrow::Cow;
use std::ops::ControlFlow;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::{Expr as PlanExpr, LogicalPlan, Operator};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Statement,
    Value, Visit, Visitor,
};
use regex_automata::nfa::thompson::{self, WhichCaptures};

use crate::error::{Error, Result};

/// Refuses `stmt` if a regular expression literal in it does not compile.
pub fn check(stmt: &Statement) -> Result<()> {
    match stmt.visit(&mut Patterns) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(e),
    }
}

struct Patterns;

impl Visitor for Patterns {
    type Break = Error;

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Error> {
        let (pattern, flags) = match expr {
            Expr::BinaryOp { op, right, .. } => match op {
                BinaryOperator::PGRegexMatch | BinaryOperator::PGRegexNotMatch => {
                    (text(right), Some(Cow::Borrowed("")))
                }
                BinaryOperator::PGRegexIMatch | BinaryOperator::PGRegexNotIMatch => {
                    (text(right), Some(Cow::Borrowed("i")))
                }
                _ => return ControlFlow::Continue(()),
            },
            // DataFusion matches SIMILAR TO's pattern as a regular
            // expression.
            Expr::SimilarTo { pattern, .. } => (text(pattern), Some(Cow::Borrowed(""))),
            Expr::Function(f) => match function_pattern(f) {
                Some(found) => found,
                None => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        match (pattern, flags) {
            (Some(pattern), Some(flags)) => match compile(pattern, &flags, "") {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            },
            _ => ControlFlow::Continue(()),
        }
    }
}

/// Where a regular expression function's flags are, after its subject
/// (0) and pattern (1); None for other functions.
fn flags_at(name: &str) -> Option<usize> {
    match name {
        "regexp_like" | "regexp_match" => Some(2),
        "regexp_replace" | "regexp_count" => Some(3),
        "regexp_instr" => Some(4),
        _ => None,
    }
}

/// Flags as the kernels take them: `regexp_replace` reads `g` itself (every
/// match); None where another function is given `g`, which it refuses
/// with its own message.
pub(crate) fn usable_flags<'a>(function: &str, flags: &'a str) -> Option<Cow<'a, str>> {
    match (function, flags.contains('g')) {
        ("regexp_replace", true) => Some(Cow::Owned(flags.replace('g', ""))),
        (_, true) => None,
        (_, false) => Some(Cow::Borrowed(flags)),
    }
}

/// A regular expression function's pattern and flags (`None` where either
/// is not a literal; no flags is `""`).
fn function_pattern(f: &Function) -> Option<(Option<&str>, Option<Cow<'_, str>>)> {
    let name = f.name.0.last()?.as_ident()?.value.to_ascii_lowercase();
    let flags_at = flags_at(&name)?;
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let arg = |i: usize| match list.args.get(i) {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => Some(text(e)),
        Some(_) => Some(None),
        None => None,
    };
    let pattern = arg(1)?;
    let flags = match arg(flags_at) {
        None => Some(Cow::Borrowed("")),
        Some(None) => None,
        Some(Some(flags)) => usable_flags(&name, flags),
    };
    Some((pattern, flags))
}

/// A string literal's text, in parentheses or cast (`'...'::text`) or not.
fn text(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Some(s),
            Value::DollarQuotedString(d) => Some(&d.value),
            _ => None,
        },
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => text(inner),
        _ => None,
    }
}

/// `pattern` as DataFusion's and Arrow's kernels compile it: its flags
/// but `g` (every match, to `regexp_replace`) as a `(?flags)` prefix.
pub(crate) fn with_flags(pattern: &str, flags: &str) -> String {
    let inline = flags.replace('g', "");
    match inline.is_empty() {
        true => pattern.to_string(),
        false => format!("(?{inline}){pattern}"),
    }
}

/// Refuses the values bound to `plan`'s placeholders where one is the
/// pattern or the flags of a regular expression and it does not compile;
/// `value` gives a placeholder's value by its id (`$1`). Literals were
/// checked at parse ([`check`]) and are not compiled again.
pub fn check_bound<'v>(
    plan: &LogicalPlan,
    value: &dyn Fn(&str) -> Option<&'v ScalarValue>,
) -> Result<()> {
    let mut refused = Ok(());
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                Ok(match check_bound_expr(e, value) {
                    Ok(()) => TreeNodeRecursion::Continue,
                    Err(e) => {
                        refused = Err(e);
                        TreeNodeRecursion::Stop
                    }
                })
            })
        })
    })?;
    refused
}

/// Whether a placeholder of `plan` is a regular expression's pattern or
/// flags (through casts): only then has [`check_bound`] anything to
/// check. Kept plans work this out once, not at every execution.
pub fn binds_patterns(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                found |= regex_args(e).is_some_and(|a| {
                    placeholder(a.pattern) || matches!(a.flags, Flags::Arg(f) if placeholder(f))
                });
                Ok(match found {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })
        })
    });
    found
}

/// Whether `e` is a placeholder, cast or not ([`bound`] reads its value).
fn placeholder(e: &PlanExpr) -> bool {
    match e {
        PlanExpr::Placeholder(_) => true,
        PlanExpr::Cast(c) => placeholder(&c.expr),
        PlanExpr::TryCast(c) => placeholder(&c.expr),
        _ => false,
    }
}

/// The value of the parameter `$n` in `params` (positional, from `$1`).
pub fn positional<'v>(params: &'v [ScalarValue]) -> impl Fn(&str) -> Option<&'v ScalarValue> {
    |id| {
        params.get(
            id.strip_prefix('$')?
                .parse::<usize>()
                .ok()?
                .checked_sub(1)?,
        )
    }
}

/// The value of the parameter `$n` or `$name` in `params`.
pub fn bound_values<'v>(params: &'v ParamValues) -> impl Fn(&str) -> Option<&'v ScalarValue> {
    move |id| {
        let id = id.strip_prefix('$')?;
        match params {
            ParamValues::List(list) => list.get(id.parse::<usize>().ok()?.checked_sub(1)?),
            ParamValues::Map(map) => map.get(id),
        }
        .map(|v| &v.value)
    }
}

/// A regular expression's arguments in a plan: its pattern, its flags,
/// and the function that reads them (`""` for the operators).
pub(crate) struct RegexArgs<'e> {
    pub pattern: &'e PlanExpr,
    pub flags: Flags<'e>,
    pub function: &'e str,
}

/// A regular expression's flags: set by its operator, or an argument.
pub(crate) enum Flags<'e> {
    Fixed(&'static str),
    Arg(&'e PlanExpr),
}

/// `e`'s [`RegexArgs`] if `e` matches a regular expression (`~`, `~*`,
/// `!~`, `!~*`, `SIMILAR TO`, a `regexp_*` function); not its children's.
pub(crate) fn regex_args(e: &PlanExpr) -> Option<RegexArgs<'_>> {
    let (pattern, flags, function) = match e {
        PlanExpr::BinaryExpr(b) => match b.op {
            Operator::RegexMatch | Operator::RegexNotMatch => (&*b.right, Flags::Fixed(""), ""),
            Operator::RegexIMatch | Operator::RegexNotIMatch => (&*b.right, Flags::Fixed("i"), ""),
            _ => return None,
        },
        PlanExpr::SimilarTo(like) => {
            let flags = if like.case_insensitive { "i" } else { "" };
            (&*like.pattern, Flags::Fixed(flags), "")
        }
        PlanExpr::ScalarFunction(f) => {
            let name = f.name();
            let pattern = f.args.get(1)?;
            let flags = f
                .args
                .get(flags_at(name)?)
                .map_or(Flags::Fixed(""), Flags::Arg);
            (pattern, flags, name)
        }
        _ => return None,
    };
    Some(RegexArgs {
        pattern,
        flags,
        function,
    })
}

/// [`check_bound`] for one expression (not its children).
fn check_bound_expr<'e, 'v: 'e>(
    e: &'e PlanExpr,
    value: &dyn Fn(&str) -> Option<&'v ScalarValue>,
) -> Result<()> {
    let Some(args) = regex_args(e) else {
        return Ok(());
    };
    let flags = match args.flags {
        Flags::Fixed(flags) => Bound::Text(flags, None),
        Flags::Arg(e) => bound(e, value),
    };
    let (Bound::Text(pattern, p), Bound::Text(flags, q)) = (bound(args.pattern, value), flags)
    else {
        return Ok(());
    };
    let from = match (p, q) {
        // Literals alone were checked at parse.
        (None, None) => return Ok(()),
        (Some(p), Some(q)) if p != q => format!(" (parameters {p}, {q})"),
        (Some(p), _) | (None, Some(p)) => format!(" (parameter {p})"),
    };
    match usable_flags(args.function, flags) {
        Some(flags) => compile(pattern, &flags, &from),
        None => Ok(()),
    }
}

/// What a pattern or flags argument is when its parameters are bound.
enum Bound<'e> {
    /// Text: a literal's, or the value of the parameter named.
    Text(&'e str, Option<&'e str>),
    /// Anything else: a column, a NULL, a call; left to the kernels.
    Other,
}

/// `e` as [`Bound`]: a text literal, or a placeholder whose value is text,
/// through casts (which leave text as it is).
fn bound<'e, 'v: 'e>(
    e: &'e PlanExpr,
    value: &dyn Fn(&str) -> Option<&'v ScalarValue>,
) -> Bound<'e> {
    let text = |v: &'e ScalarValue| match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.as_str()),
        _ => None,
    };
    match e {
        PlanExpr::Literal(v, _) => text(v).map_or(Bound::Other, |t| Bound::Text(t, None)),
        PlanExpr::Placeholder(p) => value(&p.id)
            .and_then(text)
            .map_or(Bound::Other, |t| Bound::Text(t, Some(p.id.as_str()))),
        PlanExpr::Cast(c) => bound(&c.expr, value),
        PlanExpr::TryCast(c) => bound(&c.expr, value),
        _ => Bound::Other,
    }
}

/// Whether `e` is written out, so checked before it runs: a text literal
/// ([`check`]) or a parameter ([`check_bound`]), cast or not. Anything else
/// is checked as it runs ([`crate::rules::checked_patterns`]).
pub(crate) fn written(e: &PlanExpr) -> bool {
    match e {
        PlanExpr::Literal(v, _) => matches!(
            v,
            ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_) | ScalarValue::Utf8View(_)
        ),
        PlanExpr::Placeholder(_) => true,
        PlanExpr::Cast(c) => written(&c.expr),
        PlanExpr::TryCast(c) => written(&c.expr),
        _ => false,
    }
}

/// The regex crate's limit on one pattern's compiled size (its
/// `RegexBuilder::size_limit` default), which the kernels use.
const SIZE_LIMIT: usize = 10 << 20;

/// Compiles `pattern` as the kernels do ([`with_flags`]; `flags` hold no
/// `g` here), as far as it can fail: parsed as `regex` parses it, then its
/// forward and reverse NFAs (those `regex` builds for a pattern, under
/// [`SIZE_LIMIT`]). The rest of its compilation (prefilters, DFAs) falls
/// back rather than fails, and costs several times as much. `from`
/// follows the pattern in the error (the parameters it came from).
pub(crate) fn compile(pattern: &str, flags: &str, from: &str) -> Result<()> {
    let full = with_flags(pattern, flags);
    let why = match regex_syntax::Parser::new().parse(&full) {
        Ok(hir) => match unfit(&hir) {
            None => return Ok(()),
            Some(why) => why,
        },
        Err(regex_syntax::Error::Parse(e)) => at(flags, e.span().start.offset, e.kind()),
        Err(regex_syntax::Error::Translate(e)) => at(flags, e.span().start.offset, e.kind()),
        Err(_) => "it does not compile".to_string(),
    };
    Err(Error::InvalidRegex(format!(
        "invalid regular expression '{pattern}'{}{from}: {why}",
        match flags.is_empty() {
            true => String::new(),
            false => format!(" with flags '{flags}'"),
        }
    )))
}

/// Why `hir`'s NFAs, built as `regex` builds them, do not fit; None
/// where they do.
fn unfit(hir: &regex_syntax::hir::Hir) -> Option<String> {
    let config = thompson::Config::new()
        .nfa_size_limit(Some(SIZE_LIMIT))
        .shrink(false);
    let forward = config.clone().which_captures(WhichCaptures::All);
    let reverse = config.which_captures(WhichCaptures::None).reverse(true);
    let e = [forward, reverse].into_iter().find_map(|config| {
        thompson::Compiler::new()
            .configure(config)
            .build_from_hir(hir)
            .err()
    })?;
    Some(match e.size_limit() {
        Some(limit) => format!("it compiles to more than the {limit}-byte limit on one pattern"),
        None => format!("it does not compile: {e}"),
    })
}

/// Why a pattern fails, where (a byte offset in the pattern as written,
/// not counting the flags' prefix).
fn at(flags: &str, offset: usize, kind: &dyn std::fmt::Display) -> String {
    let prefix = match flags.is_empty() {
        true => 0,
        false => flags.len() + 3,
    };
    match offset.checked_sub(prefix) {
        Some(offset) => format!("{kind} at byte {offset}"),
        None => format!("{kind} (in its flags)"),
    }
}

#[cfg(test)]
mod tests;
