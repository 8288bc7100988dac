//! PostgreSQL's functions in `FROM`, and its `user`, rewritten right after
//! parsing as DataFusion plans them:
//! - a scalar function in `FROM` (`string_to_array(x, ',') s`) is a
//!   relation of one row whose one column is named by the alias, else by
//!   the function: it becomes `(SELECT f(...) AS s) AS s`. DataFusion looks
//!   for a table of that name ("table 'string_to_array' does not exist");
//! - a series in `FROM` with an alias and no column list
//!   (`generate_series(1, 3) AS i`) names its one column by the alias, as
//!   PostgreSQL does, where DataFusion calls it `value`;
//! - `user`, unquoted, is PostgreSQL's `current_user` (a reserved word, so
//!   a column of that name must be quoted there). Kiln rewrites it only in
//!   a query reading no named table, since event tables often have a
//!   `user` column and a query reading one means it.
//!
//! - `information_schema.columns` becomes `(SELECT ...,
//!   ordinal_position+1 AS ordinal_position, ...,
//!   kiln_pg_udt_name(data_type) AS udt_name, ... FROM
//!   information_schema.columns) AS columns` (its alias kept): DataFusion counts positions from 0 where PostgreSQL counts
//!   from 1, and lacks `udt_name`, `udt_schema`, `udt_catalog`,
//!   `is_identity` and `is_generated`, which Grafana's and other tools'
//!   column pickers and Metabase's sync read;
//! - `information_schema.table_constraints`, `key_column_usage`,
//!   `referential_constraints` and `constraint_column_usage`, which
//!   DataFusion does not have, are empty relations with PostgreSQL's
//!   columns: Kiln tables have no keys or constraints to list, and tools
//!   join them to find primary keys (Metabase's sync).
//!
//! - `CAST(format('%I.%I', schema, table) AS regclass)`, a relation's OID
//!   from its two names (Metabase's field sync), becomes the lookup of
//!   that pair in `pg_class` as a correlated aggregate subquery, which
//!   the planner decorrelates; datafusion-postgres resolves a name to an
//!   OID only when it is a literal, and would cast this text to a number.
//!   A pair naming no relation gives NULL (PostgreSQL fails).
//!
//! - `pg_stat_activity`, unqualified, is `pg_catalog.pg_stat_activity`:
//!   PostgreSQL looks in `pg_catalog` first, and datafusion-postgres's
//!   parser qualifies only the catalog tables it has, not those Kiln's
//!   server adds ([`PG_CATALOG_ADDED`]).
//!
//! Grafana's editors resolve the search path with the first three
//! (`string_to_array(current_setting('search_path'), ',') s`,
//! `generate_series(...) AS i`, `CASE WHEN ... THEN user`).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    DataType, Expr, FunctionArguments, Ident, ObjectName, ObjectNamePart, Query, SetExpr,
    Statement, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Kiln's function for `udt_name` from `data_type` (in `functions`).
pub const UDT_NAME: &str = "kiln_pg_udt_name";

/// DataFusion's `information_schema.columns`, in its order, as
/// PostgreSQL's: positions from 1.
const DF_COLUMNS: &[(&str, &str)] = &[
    ("table_catalog", "table_catalog"),
    ("table_schema", "table_schema"),
    ("table_name", "table_name"),
    ("column_name", "column_name"),
    ("ordinal_position", "ordinal_position + 1"),
    ("column_default", "column_default"),
    ("is_nullable", "is_nullable"),
    ("data_type", "data_type"),
    ("character_maximum_length", "character_maximum_length"),
    ("character_octet_length", "character_octet_length"),
    ("numeric_precision", "numeric_precision"),
    ("numeric_precision_radix", "numeric_precision_radix"),
    ("numeric_scale", "numeric_scale"),
    ("datetime_precision", "datetime_precision"),
    ("interval_type", "interval_type"),
];

/// Columns of PostgreSQL's `information_schema.columns` that DataFusion's
/// lacks, with their values for a Kiln column.
const PG_COLUMNS: &[(&str, &str)] = &[
    ("udt_catalog", "table_catalog"),
    ("udt_schema", "'pg_catalog'"),
    ("udt_name", "kiln_pg_udt_name(data_type)"),
    ("is_identity", "'NO'"),
    ("is_generated", "'NEVER'"),
];

/// information_schema's constraint views (none in DataFusion) and their
/// columns as PostgreSQL has them; all are text but the positions.
const CONSTRAINT_VIEWS: &[(&str, &[&str])] = &[
    (
        "table_constraints",
        &[
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "table_catalog",
            "table_schema",
            "table_name",
            "constraint_type",
            "is_deferrable",
            "initially_deferred",
            "enforced",
            "nulls_distinct",
        ],
    ),
    (
        "key_column_usage",
        &[
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "table_catalog",
            "table_schema",
            "table_name",
            "column_name",
            "ordinal_position:INT",
            "position_in_unique_constraint:INT",
        ],
    ),
    (
        "referential_constraints",
        &[
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
            "unique_constraint_catalog",
            "unique_constraint_schema",
            "unique_constraint_name",
            "match_option",
            "update_rule",
            "delete_rule",
        ],
    ),
    (
        "constraint_column_usage",
        &[
            "table_catalog",
            "table_schema",
            "table_name",
            "column_name",
            "constraint_catalog",
            "constraint_schema",
            "constraint_name",
        ],
    ),
];

/// `pg_catalog` tables Kiln's server adds to datafusion-postgres's catalog,
/// in lower case: named bare, they are qualified (module docs).
pub const PG_CATALOG_ADDED: &[&str] = &["pg_stat_activity"];

/// Table functions whose rows have one column (named `value`).
const SERIES: &[&str] = &["generate_series", "range"];

/// Whether `lower` (SQL text in lower case) may hold something [`rewrite`]
/// rewrites: the word `user` (not `user_id`), a series, `udt_name`, or a
/// call right after `FROM` or `JOIN`, a table of [`PG_CATALOG_ADDED`].
/// Lets a protocol skip parsing the text a second time.
pub fn may_rewrite(lower: &str) -> bool {
    let call_after = |keyword: &str| {
        lower.match_indices(keyword).any(|(at, _)| {
            let rest = lower[at + keyword.len()..].trim_start();
            let name = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            name > 0 && rest[name..].trim_start().starts_with('(')
        })
    };
    let word = |w: &str| {
        let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        lower.match_indices(w).any(|(at, _)| {
            !part(lower[..at].chars().next_back()) && !part(lower[at + w.len()..].chars().next())
        })
    };
    word("user")
        || lower.contains("information_schema")
        || lower.contains("regclass")
        || PG_CATALOG_ADDED.iter().any(|t| lower.contains(t))
        || SERIES.iter().any(|s| lower.contains(s))
        || call_after("from ")
        || call_after("join ")
}

/// Rewrites `stmt` (module docs); `is_table_function` says whether a name
/// (lower case) is a table function. Returns whether it rewrote anything.
pub fn rewrite(stmt: &mut Statement, is_table_function: &dyn Fn(&str) -> bool) -> bool {
    let mut v = Relations {
        is_table_function,
        reads_tables: Vec::new(),
        rewrote: false,
    };
    let _ = stmt.visit(&mut v);
    v.rewrote
}

struct Relations<'a> {
    is_table_function: &'a dyn Fn(&str) -> bool,
    /// For each query being visited, innermost last: whether it reads a
    /// named table.
    reads_tables: Vec<bool>,
    rewrote: bool,
}

/// The table `name` names in information_schema, in lower case, as a
/// query writes it; the rewrite's own reference (`information_schema.
/// "columns"`, the schema bare and the table quoted) is not one, so the
/// visit of the relation it puts in place stops there.
fn information_schema_table(name: &ObjectName) -> Option<String> {
    // Every table of every query passes here: no allocation but a match.
    let mut parts = name.0.iter().rev().map(|p| p.as_ident());
    let (Some(Some(table)), Some(Some(schema))) = (parts.next(), parts.next()) else {
        return None;
    };
    (schema.value.eq_ignore_ascii_case("information_schema")
        && !(schema.quote_style.is_none() && table.quote_style.is_some()))
    .then(|| table.value.to_ascii_lowercase())
}

/// The query of an empty relation with `columns` (`name` or
/// `name:TYPE`, text by default).
fn empty_relation(columns: &[&str]) -> String {
    let list: Vec<String> = columns
        .iter()
        .map(|c| {
            let (name, ty) = c.split_once(':').unwrap_or((c, "TEXT"));
            format!("CAST(NULL AS {ty}) AS {name}")
        })
        .collect();
    format!("SELECT {} WHERE false", list.join(", "))
}

/// `expr` as a lookup in `pg_class` if it is `CAST(format('%I.%I', schema,
/// table) AS regclass)` (module docs).
fn regclass_of_names(expr: &Expr) -> Option<Expr> {
    let Expr::Cast {
        expr: inner,
        data_type,
        ..
    } = expr
    else {
        return None;
    };
    // Every cast of every query passes here: the type's name is rendered
    // only for the two spellings of regclass.
    let regclass = match data_type {
        DataType::Regclass => true,
        DataType::Custom(name, _) => name.to_string().eq_ignore_ascii_case("pg_catalog.regclass"),
        _ => false,
    };
    if !regclass {
        return None;
    }
    let Expr::Function(f) = inner.as_ref() else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("format") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<String> = list.args.iter().map(ToString::to_string).collect();
    let [pattern, schema, table] = args.as_slice() else {
        return None;
    };
    if pattern != "'%I.%I'" {
        return None;
    }
    // Aliases no query of a client uses, so the names' own references
    // stay the outer query's.
    let sql = format!(
        "SELECT (SELECT max(kiln_regclass_c.oid) FROM pg_catalog.pg_class AS kiln_regclass_c \
         JOIN pg_catalog.pg_namespace AS kiln_regclass_n \
         ON kiln_regclass_c.relnamespace = kiln_regclass_n.oid \
         WHERE kiln_regclass_n.nspname = {schema} AND kiln_regclass_c.relname = {table})"
    );
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, &sql).ok()?;
    let Some(Statement::Query(q)) = stmts.pop() else {
        return None;
    };
    let SetExpr::Select(select) = *q.body else {
        return None;
    };
    match select.projection.into_iter().next()? {
        datafusion::sql::sqlparser::ast::SelectItem::UnnamedExpr(e) => Some(e),
        _ => None,
    }
}

/// `factor` replaced by the one relation of `FROM` in `sql`, a query.
fn replace_with(factor: &mut TableFactor, sql: &str) -> bool {
    let relation = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .ok()
        .and_then(|mut stmts| match stmts.pop() {
            Some(Statement::Query(q)) => match *q.body {
                SetExpr::Select(mut select) => select.from.pop().map(|t| t.relation),
                _ => None,
            },
            _ => None,
        });
    match relation {
        Some(relation) => {
            *factor = relation;
            true
        }
        None => false,
    }
}

/// Whether `body` reads a named table in its own `FROM`s (not in
/// subqueries of its expressions).
fn reads_tables(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(select) => select.from.iter().any(|t| {
            std::iter::once(&t.relation)
                .chain(t.joins.iter().map(|j| &j.relation))
                .any(names_a_table)
        }),
        SetExpr::Query(q) => reads_tables(&q.body),
        SetExpr::SetOperation { left, right, .. } => reads_tables(left) || reads_tables(right),
        _ => false,
    }
}

fn names_a_table(t: &TableFactor) -> bool {
    match t {
        TableFactor::Table { args, .. } => args.is_none(),
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => {
            names_a_table(&table_with_joins.relation)
                || table_with_joins
                    .joins
                    .iter()
                    .any(|j| names_a_table(&j.relation))
        }
        _ => false,
    }
}

impl VisitorMut for Relations<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.reads_tables.push(reads_tables(&query.body));
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.reads_tables.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name, args: None, ..
        } = factor
            && let [ObjectNamePart::Identifier(table)] = name.0.as_slice()
            && PG_CATALOG_ADDED
                .iter()
                .any(|t| table.value.eq_ignore_ascii_case(t))
        {
            name.0
                .insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
            self.rewrote = true;
            return ControlFlow::Continue(());
        }
        if let TableFactor::Table {
            name,
            args: None,
            alias,
            ..
        } = factor
            && let Some(table) = information_schema_table(name)
        {
            let alias = alias
                .as_ref()
                .map_or_else(|| table.clone(), |a| a.name.to_string());
            let sql = if table == "columns" {
                let columns: Vec<String> = DF_COLUMNS
                    .iter()
                    .chain(PG_COLUMNS)
                    .map(|(name, value)| match name == value {
                        true => name.to_string(),
                        false => format!("{value} AS {name}"),
                    })
                    .collect();
                format!(
                    "SELECT * FROM (SELECT {} FROM information_schema.\"columns\") AS {alias}",
                    columns.join(", ")
                )
            } else if let Some((_, columns)) = CONSTRAINT_VIEWS.iter().find(|(v, _)| *v == table) {
                format!("SELECT * FROM ({}) AS {alias}", empty_relation(columns))
            } else {
                return ControlFlow::Continue(());
            };
            self.rewrote |= replace_with(factor, &sql);
            return ControlFlow::Continue(());
        }
        let TableFactor::Table {
            name,
            args: Some(args),
            alias,
            ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        let Some(function) = name.0.last().and_then(|p| p.as_ident()) else {
            return ControlFlow::Continue(());
        };
        let function = function.value.to_lowercase();
        if (self.is_table_function)(&function) {
            if SERIES.contains(&function.as_str())
                && let Some(alias) = alias
                && alias.columns.is_empty()
            {
                alias
                    .columns
                    .push(TableAliasColumnDef::from_name(alias.name.value.clone()));
                self.rewrote = true;
            }
            return ControlFlow::Continue(());
        }
        let call = format!(
            "{name}({})",
            args.args
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let alias = match alias {
            Some(a) => a.name.clone(),
            None => Ident::with_quote('"', function),
        };
        let sql = format!("SELECT * FROM (SELECT {call} AS {alias}) AS {alias}");
        self.rewrote |= replace_with(factor, &sql);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(lookup) = regclass_of_names(expr) {
            *expr = lookup;
            self.rewrote = true;
            return ControlFlow::Continue(());
        }
        // The parser reads a bare `user` as a call without parentheses,
        // which DataFusion plans as a column of that name; `session_user`
        // is what `current_user` becomes in datafusion-postgres's rules.
        if let Expr::Function(f) = expr
            && matches!(f.args, FunctionArguments::None)
            && let [ObjectNamePart::Identifier(id)] = f.name.0.as_mut_slice()
            && id.quote_style.is_none()
            && id.value.eq_ignore_ascii_case("user")
            && self.reads_tables.last() == Some(&false)
        {
            *id = Ident::new("session_user");
            self.rewrote = true;
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests;
