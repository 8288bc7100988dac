//! Regular expressions written as literals (`x ~ '...'`, `~*`, `!~`,
//! `!~*`, `SIMILAR TO`, and the pattern of `regexp_like`, `regexp_match`,
//! `regexp_replace`, `regexp_count`, `regexp_instr`), compiled right after
//! parsing, so a pattern that does not compile is refused as bad input
//! ([`Error::InvalidRegex`], SQLSTATE 2201B) naming the pattern, the byte
//! where it goes wrong and why.
//!
//! Why: Arrow's and DataFusion's regular expression kernels report a
//! pattern that does not compile as a computation error, which carries
//! only text; it reached the client as an internal error (500, XX000), as
//! if `WHERE url ~ '('` were a bug in the server. Patterns are compiled as
//! those kernels compile them (flags as a `(?flags)` prefix, `g` meaning
//! "every match" to `regexp_replace`), with the same size limit. A pattern
//! that is not a literal (a column, a parameter) is compiled where it is
//! used, as before. DataFusion matches a `SIMILAR TO` pattern as a
//! regular expression, so it is compiled as one here too.

use std::borrow::Cow;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Statement,
    Value, Visit, Visitor,
};

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
            (Some(pattern), Some(flags)) => match compile(pattern, &flags) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            },
            _ => ControlFlow::Continue(()),
        }
    }
}

/// A regular expression function's pattern and flags (`None` where either
/// is not a literal; no flags is `""`). Flags other functions refuse
/// (`g`) are left to them.
fn function_pattern(f: &Function) -> Option<(Option<&str>, Option<Cow<'_, str>>)> {
    let name = f.name.0.last()?.as_ident()?.value.to_ascii_lowercase();
    let flags_at = match name.as_str() {
        "regexp_like" | "regexp_match" => 2,
        "regexp_replace" | "regexp_count" => 3,
        "regexp_instr" => 4,
        _ => return None,
    };
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
        Some(Some(flags)) if name == "regexp_replace" => Some(Cow::Owned(flags.replace('g', ""))),
        Some(Some(flags)) if flags.contains('g') => None,
        Some(Some(flags)) => Some(Cow::Borrowed(flags)),
    };
    Some((pattern, flags))
}

/// A string literal's text.
fn text(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => Some(s),
            Value::DollarQuotedString(d) => Some(&d.value),
            _ => None,
        },
        Expr::Nested(inner) => text(inner),
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

/// Compiles `pattern` as the kernels do ([`with_flags`]; `flags` hold no
/// `g` here).
fn compile(pattern: &str, flags: &str) -> Result<()> {
    let full = with_flags(pattern, flags);
    let why = match regex::Regex::new(&full) {
        Ok(_) => return Ok(()),
        Err(regex::Error::CompiledTooBig(limit)) => {
            format!("it compiles to more than the {limit}-byte limit on one pattern")
        }
        Err(_) => match regex_syntax::Parser::new().parse(&full) {
            Err(regex_syntax::Error::Parse(e)) => at(flags, e.span().start.offset, e.kind()),
            Err(regex_syntax::Error::Translate(e)) => at(flags, e.span().start.offset, e.kind()),
            _ => "it does not compile".to_string(),
        },
    };
    Err(Error::InvalidRegex(format!(
        "invalid regular expression '{pattern}'{}: {why}",
        match flags.is_empty() {
            true => String::new(),
            false => format!(" with flags '{flags}'"),
        }
    )))
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
