//! Typed planning errors: the tables and functions a statement names,
//! read from it so a failed plan can say which one is missing.

use std::ops::ControlFlow;

use datafusion::common::TableReference;
use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{self, visit_expressions};

use super::Engine;
use crate::error::Error;

impl Engine {
    /// The error of planning a statement that uses `names`, typed: one
    /// that names a table that does not exist (not a table function) fails
    /// with that table ([`kiln_storage::Error::TableNotFound`]), one that
    /// failed to plan while calling a function no registry has, with that
    /// function ([`Error::UndefinedFunction`]), whatever DataFusion's message.
    pub fn planning_error(&self, names: &Names, e: DataFusionError) -> Error {
        let state = self.ctx.state();
        let missing = names.tables.iter().find(|r| {
            let r = (*r)
                .clone()
                .resolve(crate::session::CATALOG, crate::session::SCHEMA);
            // The planner's own resolution, information_schema included.
            !state.table_functions().contains_key(r.table.as_ref())
                && state
                    .schema_for_ref(r.clone())
                    .map_or(true, |s| !s.table_exist(&r.table))
        });
        if let Some(name) = missing {
            return kiln_storage::Error::TableNotFound(name.to_string()).into();
        }
        let unknown = names.functions.iter().find(|f| {
            !(state.scalar_functions().contains_key(*f)
                || state.aggregate_functions().contains_key(*f)
                || state.window_functions().contains_key(*f)
                || state.table_functions().contains_key(*f))
        });
        match unknown {
            Some(f) if matches!(e.find_root(), DataFusionError::Plan(_)) => {
                Error::UndefinedFunction(f.clone())
            }
            _ => e.into(),
        }
    }

    /// The tables (table functions and CTEs included) and functions `stmt`
    /// names.
    pub fn names(&self, stmt: &DfStatement) -> Names {
        let tables = self
            .ctx
            .state()
            .resolve_table_references(stmt)
            .unwrap_or_default();
        let mut functions = vec![];
        let inner = match stmt {
            DfStatement::Statement(s) => Some(s.as_ref()),
            DfStatement::Explain(e) => match e.statement.as_ref() {
                DfStatement::Statement(s) => Some(s.as_ref()),
                _ => None,
            },
            _ => None,
        };
        if let Some(s) = inner {
            let _ = visit_expressions(s, |e| {
                if let ast::Expr::Function(f) = e
                    && let Some(name) = f.name.0.last().and_then(|p| p.as_ident())
                {
                    let name = match name.quote_style {
                        Some(_) => name.value.clone(),
                        None => name.value.to_lowercase(),
                    };
                    if !functions.contains(&name) {
                        functions.push(name);
                    }
                }
                ControlFlow::<()>::Continue(())
            });
        }
        Names { tables, functions }
    }
}

/// The tables and functions a statement names ([`Engine::names`]).
#[derive(Debug, Default)]
pub struct Names {
    pub tables: Vec<TableReference>,
    /// Function names as they are looked up (unquoted ones lower-cased).
    pub functions: Vec<String>,
}
