//! PostgreSQL's `EXPLAIN` options, planned as DataFusion plans its own
//! `EXPLAIN`.
//!
//! Why: DataFusion's planner, given a parsed `EXPLAIN (FORMAT JSON) ...`,
//! ignores the options list and answers in its default format without a
//! word, and fails on `EXPLAIN FORMAT JSON ...` with an internal error.
//! Such a statement becomes DataFusion's own `EXPLAIN`, its options read
//! by DataFusion ([`ExplainStatementOptions::from_utility_options`]), with
//! PostgreSQL's format names: `JSON` is DataFusion's `pgjson` (PostgreSQL's
//! layout of a plan as JSON), `TEXT` its `indent`.

use std::str::FromStr;

use datafusion::common::format::{ExplainFormat, ExplainStatementOptions};
use datafusion::sql::parser::{ExplainStatement, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    AnalyzeFormat, AnalyzeFormatKind, DescribeAlias, Expr, Ident, Statement, UtilityOption,
};

use crate::error::Result;

/// `stmt` as DataFusion plans it: a PostgreSQL `EXPLAIN` as DataFusion's,
/// anything else as it is.
pub fn statement(stmt: Statement) -> Result<DfStatement> {
    let Statement::Explain {
        describe_alias: DescribeAlias::Explain,
        analyze,
        verbose,
        query_plan: false,
        estimate: false,
        statement,
        format,
        options,
    } = stmt
    else {
        return Ok(DfStatement::Statement(Box::new(stmt)));
    };
    let options = match options {
        Some(list) => {
            let list: Vec<UtilityOption> = list.into_iter().map(pg_format).collect();
            ExplainStatementOptions::from_utility_options(&list)?
        }
        None => ExplainStatementOptions {
            analyze,
            verbose,
            format: format
                .map(|f| ExplainFormat::from_str(&name(f)))
                .transpose()?,
            ..Default::default()
        },
    };
    Ok(DfStatement::Explain(ExplainStatement {
        options,
        statement: Box::new(DfStatement::Statement(statement)),
    }))
}

/// A `FORMAT` option with PostgreSQL's name made DataFusion's.
fn pg_format(mut option: UtilityOption) -> UtilityOption {
    if option.name.value.eq_ignore_ascii_case("format")
        && let Some(Expr::Identifier(ident)) = &option.arg
    {
        let named = datafusion_name(&ident.value).unwrap_or(&ident.value);
        option.arg = Some(Expr::Identifier(Ident::new(named)));
    }
    option
}

/// The DataFusion name of a format keyword.
fn name(format: AnalyzeFormatKind) -> String {
    let (AnalyzeFormatKind::Keyword(f) | AnalyzeFormatKind::Assignment(f)) = format;
    let keyword = match f {
        AnalyzeFormat::TRADITIONAL => "indent".to_string(),
        f => f.to_string(),
    };
    datafusion_name(&keyword).unwrap_or(&keyword).to_string()
}

/// PostgreSQL's name of a format, as DataFusion names it.
fn datafusion_name(format: &str) -> Option<&'static str> {
    match format.to_ascii_lowercase().as_str() {
        "json" => Some("pgjson"),
        "text" => Some("indent"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
