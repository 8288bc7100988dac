//! PostgreSQL's default labels for unnamed result columns.
//!
//! Why: DataFusion names an unnamed select-list term by its text
//! (`count(*)`, `Utf8("x")`, `date_trunc(Utf8("day"),t.ts)`), PostgreSQL
//! by a rule of its own (`FigureColname`): a function call by the
//! function's name (`count`, `date_trunc`), a cast by its operand or else
//! its type (`'1'::int` is `int4`), `CASE` by `case`, anything else
//! `?column?`. Drivers and BI tools key result columns by these labels
//! (pandas columns, Grafana series names, ORM attributes), so the
//! PostgreSQL protocols report them.
//!
//! Only the wire labels change: the plan keeps DataFusion's names, which
//! are unique, where PostgreSQL's need not be (`SELECT count(a),
//! count(b)` is two columns named `count`). HTTP keeps DataFusion's
//! names.

use datafusion::sql::sqlparser::ast::{
    AccessExpr, DataType, Expr, Ident, ObjectNamePart, Query, SelectItem, SetExpr, Statement,
    TrimWhereField,
};

/// PostgreSQL's label for a column it cannot name.
pub const NO_NAME: &str = "?column?";

/// The labels of a statement's result columns where PostgreSQL's differ
/// from DataFusion's: `head[i]` for column `i`, `tail[j]` for column
/// `n - tail.len() + j` of `n` (the terms after a `*`, whose width only
/// the plan knows).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    head: Vec<Option<String>>,
    tail: Vec<Option<String>>,
}

impl Labels {
    /// `names` (a result's column names) with the labels put in.
    pub fn apply(&self, names: &mut [String]) {
        let len = names.len();
        if self.head.len() + self.tail.len() > len {
            return;
        }
        for (name, label) in names.iter_mut().zip(&self.head) {
            if let Some(label) = label {
                name.clone_from(label);
            }
        }
        for (name, label) in names[len - self.tail.len()..].iter_mut().zip(&self.tail) {
            if let Some(label) = label {
                name.clone_from(label);
            }
        }
    }
}

/// The labels of `stmt`'s result where PostgreSQL's differ from
/// DataFusion's; `None` when none do (a statement that is no query, or
/// whose terms are all columns or named with `AS`).
pub fn labels(stmt: &Statement) -> Option<Labels> {
    let Statement::Query(query) = stmt else {
        return None;
    };
    let items = select_list(query)?;
    let mut labels = Labels::default();
    let mut after_star = false;
    for item in items {
        let label = match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                after_star = true;
                labels.tail.clear();
                continue;
            }
            SelectItem::UnnamedExpr(Expr::Identifier(_) | Expr::CompoundIdentifier(_)) => None,
            SelectItem::UnnamedExpr(e) => Some(label(e)),
            // Kiln's own label for a repeated unnamed term
            // (`shape::postgres`), which PostgreSQL names like any other.
            SelectItem::ExprWithAlias { expr, alias } if is_repeat_label(alias) => {
                Some(label(expr))
            }
            SelectItem::ExprWithAlias { .. } | SelectItem::ExprWithAliases { .. } => None,
        };
        match after_star {
            false => labels.head.push(label),
            true => labels.tail.push(label),
        }
    }
    let any = |l: &[Option<String>]| l.iter().any(Option::is_some);
    (any(&labels.head) || any(&labels.tail)).then_some(labels)
}

/// Whether `alias` is the label `shape::postgres` gives a repeated
/// unnamed term, `"?column?N"`.
fn is_repeat_label(alias: &Ident) -> bool {
    alias.quote_style == Some('"')
        && alias
            .value
            .strip_prefix(NO_NAME)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The select list whose terms name a query's columns: the first one of a
/// set operation, as in PostgreSQL.
fn select_list(query: &Query) -> Option<&[SelectItem]> {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => return Some(&select.projection),
            SetExpr::Query(q) => body = q.body.as_ref(),
            SetExpr::SetOperation { left, .. } => body = left.as_ref(),
            _ => return None,
        }
    }
}

/// PostgreSQL's label for an unnamed term.
fn label(e: &Expr) -> String {
    name(e).map_or_else(|| NO_NAME.to_string(), |(name, _)| name)
}

/// How sure a name is, as PostgreSQL ranks them: a weak one (`case`, a
/// cast's type) gives way to a strong one found further in.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Strength {
    Weak,
    Strong,
}

/// The name PostgreSQL gives `e`, if any, and how strong it is.
fn name(e: &Expr) -> Option<(String, Strength)> {
    use Strength::{Strong, Weak};
    let strong = |s: &str| Some((s.to_string(), Strong));
    match e {
        Expr::Identifier(id) => Some((ident(id), Strong)),
        Expr::CompoundIdentifier(ids) => ids.last().map(|id| (ident(id), Strong)),
        Expr::CompoundFieldAccess { root, access_chain } => match access_chain.last() {
            Some(AccessExpr::Dot(Expr::Identifier(id))) => Some((ident(id), Strong)),
            _ => name(root),
        },
        Expr::Nested(inner) | Expr::Collate { expr: inner, .. } => name(inner),
        Expr::Function(f) => match f.name.0.last() {
            Some(ObjectNamePart::Identifier(id)) => Some((ident(id), Strong)),
            _ => None,
        },
        Expr::Cast {
            expr, data_type, ..
        } => match name(expr) {
            Some(named @ (_, Strong)) => Some(named),
            _ => Some((type_name(data_type), Weak)),
        },
        Expr::TypedString(typed) => Some((type_name(&typed.data_type), Weak)),
        Expr::Interval(_) => Some(("interval".into(), Weak)),
        Expr::Case { else_result, .. } => match else_result.as_deref().and_then(name) {
            Some(named @ (_, Strong)) => Some(named),
            _ => Some(("case".into(), Weak)),
        },
        Expr::Exists { .. } => strong("exists"),
        Expr::Subquery(q) => match select_list(q)?.first()? {
            SelectItem::ExprWithAlias { alias, .. } => Some((ident(alias), Strong)),
            SelectItem::UnnamedExpr(e) => Some((label(e), Strong)),
            _ => None,
        },
        Expr::Array(_) => strong("array"),
        Expr::Tuple(_) => strong("row"),
        Expr::AtTimeZone { .. } => strong("timezone"),
        Expr::Extract { .. } => strong("extract"),
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        Expr::Position { .. } => strong("position"),
        Expr::Substring { .. } => strong("substring"),
        Expr::Overlay { .. } => strong("overlay"),
        Expr::Trim { trim_where, .. } => strong(match trim_where {
            Some(TrimWhereField::Leading) => "ltrim",
            Some(TrimWhereField::Trailing) => "rtrim",
            Some(TrimWhereField::Both) | None => "btrim",
        }),
        _ => None,
    }
}

/// An identifier as PostgreSQL resolves it: folded to lower case unless
/// quoted.
fn ident(id: &Ident) -> String {
    match id.quote_style {
        Some(_) => id.value.clone(),
        None => id.value.to_lowercase(),
    }
}

/// The name PostgreSQL labels a cast to `data_type` with: its internal
/// type name (`int4` for `INT`, `float8` for `DOUBLE PRECISION`), without
/// modifiers or array bounds.
fn type_name(data_type: &DataType) -> String {
    let text = data_type.to_string().to_lowercase();
    let base = text
        .split(['(', '['])
        .next()
        .unwrap_or_default()
        .trim()
        .trim_end_matches(" unsigned");
    let internal = match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "double" | "float" | "float8" => "float8",
        "boolean" | "bool" => "bool",
        "character varying" | "varchar" | "string" => "varchar",
        "character" | "char" | "bpchar" => "bpchar",
        "decimal" | "numeric" | "dec" => "numeric",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "timestamptz" | "timestamp with time zone" => "timestamptz",
        "time" | "time without time zone" => "time",
        "timetz" | "time with time zone" => "timetz",
        other => return other.rsplit('.').next().unwrap_or(other).to_string(),
    };
    internal.to_string()
}

#[cfg(test)]
mod tests;
