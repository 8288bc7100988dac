//! Literals lifted out of a query's filters, so that queries which differ
//! only in them share one kept plan.
//!
//! Why: BI tools send a dashboard's queries with their values written in
//! (the simple protocol, HTTP): every refresh, every viewer and every date
//! range is new text, so each was parsed, optimized and planned afresh,
//! while the executions of a prepared statement share a generic plan. As
//! SQL Server's simple parameterization does, a literal compared with an
//! expression in a `WHERE` or `HAVING` clause (`=`, `<>`, `<`, `<=`, `>`,
//! `>=`, `BETWEEN`, `IN` lists) becomes a placeholder: the query's text
//! with placeholders is its [`Shape`]'s key, and the literals are the
//! values its executions bind, as a prepared statement's would be. A shape
//! is planned from its second query on: a query whose shape never comes
//! again is planned as written, at the cost of one lookup.
//!
//! Only filters of the query itself, its CTEs and derived tables are
//! looked at: a literal in a select list, a grouping, an ordering or a
//! function's arguments (`date_trunc('day', ts)`) stays, since it decides
//! the plan, its labels or its cube. A value takes the type the plan
//! infers for its placeholder only where that changes nothing: a number
//! compared with a number that converts there and back unchanged
//! (`int_col = 1.5` keeps its literal, as it compares as a fraction), a
//! string that converts (DataFusion converts the literal the same way).
//! Otherwise the query is planned as written.
//!
//! A string the query gives a type (`TIMESTAMP '...'`, `DATE '...'`,
//! `CAST('...' AS TIMESTAMP)`, `'...'::date`, in parentheses or not), as
//! BI tools write time ranges, is lifted too: otherwise every new range
//! would be a new shape, planned afresh. It binds as the planner makes it:
//! the string as its type, then as the placeholder's type where the
//! comparison converts it there (a `DATE` against a `TIMESTAMP` column);
//! where the comparison would convert the column instead, the query is
//! planned as written. Only types whose meaning depends on nothing else
//! are lifted (`TIMESTAMP` without a time zone, `DATE`).
//!
//! A typed string shifted by a written interval (`CAST('...' AS
//! TIMESTAMP) - INTERVAL '1 day'`, `DATE '...' + INTERVAL '7 days'`), as
//! dashboards write a range relative to its end, is lifted as well: the
//! string becomes a placeholder inside a cast to the same type, and binds
//! as text, which the cast converts when the plan runs, as the planner
//! converted the literal. The interval stays: it is part of the shape.
//!
//! Superset writes a time filter on a PostgreSQL database as a string
//! parsed by a template, `TO_TIMESTAMP('...', 'YYYY-MM-DD HH24:MI:SS.US')`
//! (or `TO_DATE`): the string (the call's first argument) is lifted, the
//! templates stay. Its placeholder, an argument no comparison types, takes
//! the type the string had, text, so the call parses the same string when
//! the plan runs.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::type_coercion::binary::comparison_coercion;
use datafusion::logical_expr::{Expr as PlanExpr, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, CastKind, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArguments, Query, SetExpr, Statement, TableFactor, TimezoneInfo, TypedString,
    UnaryOperator, Value,
};
use kiln_storage::{Db, Table};

use crate::shape::patterns;

/// A literal lifted out of a query, as it was written.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// A number, with its sign.
    Number(String),
    /// A quoted string.
    String(String),
    /// A quoted string given a type, with the type the planner makes of it
    /// (module docs).
    Typed(String, DataType),
}

/// Replaces the literals of `stmt`'s filters by placeholders `$1..$n`, in
/// the order met, and returns them; none if `stmt` is not a query.
pub fn lift(stmt: &mut Statement) -> Vec<Literal> {
    let mut lifted = Vec::new();
    if let Statement::Query(q) = stmt {
        query(q, &mut lifted);
    }
    lifted
}

fn query(q: &mut Query, out: &mut Vec<Literal>) {
    if let Some(with) = &mut q.with {
        for cte in &mut with.cte_tables {
            query(&mut cte.query, out);
        }
    }
    set_expr(&mut q.body, out);
}

fn set_expr(body: &mut SetExpr, out: &mut Vec<Literal>) {
    match body {
        SetExpr::Select(s) => {
            for t in &mut s.from {
                table(&mut t.relation, out);
                for j in &mut t.joins {
                    table(&mut j.relation, out);
                }
            }
            if let Some(w) = &mut s.selection {
                filter(w, out);
            }
            if let Some(h) = &mut s.having {
                filter(h, out);
            }
        }
        SetExpr::Query(q) => query(q, out),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left, out);
            set_expr(right, out);
        }
        _ => {}
    }
}

fn table(t: &mut TableFactor, out: &mut Vec<Literal>) {
    if let TableFactor::Derived { subquery, .. } = t {
        query(subquery, out);
    }
}

/// Lifts the literals of the comparisons `e` combines with AND, OR, NOT.
fn filter(e: &mut Expr, out: &mut Vec<Literal>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And | BinaryOperator::Or,
            right,
        } => {
            filter(left, out);
            filter(right, out);
        }
        Expr::Nested(inner)
        | Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: inner,
        } => filter(inner, out),
        Expr::BinaryOp { left, op, right } if is_comparison(op) => {
            if !is_value(left) {
                replace(right, out);
            } else if !is_value(right) {
                replace(left, out);
            }
        }
        Expr::Between {
            expr, low, high, ..
        } if !is_value(expr) => {
            replace(low, out);
            replace(high, out);
        }
        Expr::InList { expr, list, .. } if !is_value(expr) => {
            for item in list {
                replace(item, out);
            }
        }
        _ => {}
    }
}

fn is_comparison(op: &BinaryOperator) -> bool {
    use BinaryOperator as B;
    matches!(op, B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq)
}

fn is_value(e: &Expr) -> bool {
    matches!(e, Expr::Value(_)) || literal(e).is_some() || parsed(e).is_some()
}

/// The string `e` parses, if it is `to_timestamp` or `to_date` of a
/// quoted string with quoted templates (module docs).
fn parsed(e: &Expr) -> Option<&Expr> {
    let Expr::Function(Function {
        name,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(list),
        filter: None,
        null_treatment: None,
        over: None,
        within_group,
        ..
    }) = e
    else {
        return None;
    };
    let [ast::ObjectNamePart::Identifier(name)] = name.0.as_slice() else {
        return None;
    };
    let known = ["to_timestamp", "to_date"];
    if name.quote_style.is_some()
        || !known.iter().any(|k| name.value.eq_ignore_ascii_case(k))
        || !within_group.is_empty()
        || list.duplicate_treatment.is_some()
        || !list.clauses.is_empty()
    {
        return None;
    }
    fn string(a: &FunctionArg) -> Option<&Expr> {
        match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e @ Expr::Value(v))) => {
                matches!(v.value, Value::SingleQuotedString(_)).then_some(e)
            }
            _ => None,
        }
    }
    let (first, templates) = list.args.split_first()?;
    if !templates.iter().all(|t| string(t).is_some()) {
        return None;
    }
    string(first)
}

/// [`parsed`]'s string, to replace.
fn parsed_mut(e: &mut Expr) -> Option<&mut Expr> {
    parsed(e)?;
    let Expr::Function(Function {
        args: FunctionArguments::List(list),
        ..
    }) = e
    else {
        return None;
    };
    match list.args.first_mut()? {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
        _ => None,
    }
}

/// `e` as a liftable literal: a number (signed) or a quoted string.
fn literal(e: &Expr) -> Option<Literal> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, false) => Some(Literal::Number(n.clone())),
            Value::SingleQuotedString(s) => Some(Literal::String(s.clone())),
            _ => None,
        },
        Expr::UnaryOp {
            op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
            expr,
        } => match literal(expr)? {
            Literal::Number(n) if *op == UnaryOperator::Minus => {
                Some(Literal::Number(format!("-{n}")))
            }
            Literal::Number(n) => Some(Literal::Number(n)),
            _ => None,
        },
        Expr::Nested(inner) => literal(inner),
        Expr::TypedString(_) | Expr::Cast { .. } => {
            let (s, _, data_type) = time_string(e)?;
            Some(Literal::Typed(s.to_string(), data_type))
        }
        _ => None,
    }
}

/// The type DataFusion's planner gives a value of SQL type `t`, for the
/// types whose meaning depends on no setting: `TIMESTAMP` (nanoseconds,
/// no time zone) and `DATE`.
fn typed(t: &ast::DataType) -> Option<DataType> {
    match t {
        ast::DataType::Timestamp(
            None | Some(9),
            TimezoneInfo::None | TimezoneInfo::WithoutTimeZone,
        ) => Some(DataType::Timestamp(TimeUnit::Nanosecond, None)),
        ast::DataType::Date => Some(DataType::Date32),
        _ => None,
    }
}

/// Makes `e`, if a liftable literal, the next placeholder; the string of
/// a time parsed from one ([`parsed`]) or shifted by an interval
/// ([`shifted_mut`]) too.
fn replace(e: &mut Expr, out: &mut Vec<Literal>) {
    let e = match parsed_mut(e) {
        Some(string) => string,
        None => e,
    };
    if let Some(l) = literal(e) {
        out.push(l);
        *e = placeholder(out.len());
    } else if let Some(time) = shifted_mut(e)
        && let Some((value, data_type, _)) = time_string(time)
    {
        out.push(Literal::String(value.to_string()));
        *time = Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(placeholder(out.len())),
            data_type: data_type.clone(),
            array: false,
            format: None,
        };
    }
}

/// The `n`th placeholder, `$n`.
fn placeholder(n: usize) -> Expr {
    Expr::Value(Value::Placeholder(format!("${n}")).into())
}

/// `e` without the parentheses around it.
fn unnested(mut e: &Expr) -> &Expr {
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    e
}

/// A string the query gives a type [`typed`] lifts (`TIMESTAMP '...'`,
/// `CAST('...' AS DATE)`, `'...'::timestamp`): the string, the type as
/// written and the type the planner makes of it.
fn time_string(e: &Expr) -> Option<(&str, &ast::DataType, DataType)> {
    let (value, data_type) = match unnested(e) {
        Expr::TypedString(TypedString {
            data_type, value, ..
        }) => (&value.value, data_type),
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            array: false,
            format: None,
        } => match unnested(expr) {
            Expr::Value(v) => (&v.value, data_type),
            _ => return None,
        },
        _ => return None,
    };
    match value {
        Value::SingleQuotedString(s) => Some((s, data_type, typed(data_type)?)),
        _ => None,
    }
}

/// In a time shifted by a written interval (`TIMESTAMP '...' - INTERVAL
/// '1 day'`, `CAST('...' AS DATE) + INTERVAL '7 days'`, in parentheses or
/// not), the typed string ([`time_string`]), to replace: its string
/// becomes a placeholder inside a cast to the same type, bound as text,
/// so the plan converts it as the query did (module docs).
fn shifted_mut(e: &mut Expr) -> Option<&mut Expr> {
    let Expr::BinaryOp { left, op, right } = e else {
        return match e {
            Expr::Nested(inner) => shifted_mut(inner),
            _ => None,
        };
    };
    let is_interval = |e: &Expr| {
        matches!(unnested(e), Expr::Interval(i) if matches!(i.value.as_ref(),
            Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_))))
    };
    match op {
        BinaryOperator::Plus | BinaryOperator::Minus
            if is_interval(right) && time_string(left).is_some() =>
        {
            Some(left)
        }
        BinaryOperator::Plus if is_interval(left) && time_string(right).is_some() => Some(right),
        _ => None,
    }
}

/// A query's plan with placeholders for its lifted literals.
#[derive(Debug)]
pub struct Shape {
    pub logical: LogicalPlan,
    /// The type inferred for each placeholder, `$1` first.
    pub types: Vec<DataType>,
    /// The tables it reads, as they were when it was planned.
    tables: Vec<Arc<Table>>,
    /// Whether a placeholder is a regular expression's pattern or flags
    /// ([`patterns::binds_patterns`]): values bound to it are compiled
    /// first.
    pub patterns: bool,
}

impl Shape {
    /// The shape of `logical`, planned with `n` placeholders, the values
    /// of `lifted` if any; none unless every placeholder's type is known
    /// and nothing else in the plan is a placeholder. A type is inferred,
    /// or, for a quoted string no comparison types (an argument of
    /// `to_timestamp`), the string's own: text.
    pub fn new(logical: LogicalPlan, lifted: &[Literal], n: usize) -> Option<Self> {
        let mut inferred = logical.get_parameter_types().ok()?;
        if inferred.len() != n {
            return None;
        }
        let mut untyped = HashMap::new();
        for (i, l) in lifted.iter().enumerate() {
            let id = format!("${}", i + 1);
            if let (Some(None), Literal::String(_)) = (inferred.get(&id), l) {
                untyped.insert(id.clone(), DataType::Utf8);
                inferred.insert(id, Some(DataType::Utf8));
            }
        }
        let logical = match untyped.is_empty() {
            true => logical,
            false => typed_placeholders(logical, &untyped)?,
        };
        let types = (1..=n)
            .map(|i| inferred.get(&format!("${i}")).cloned().flatten())
            .collect::<Option<Vec<_>>>()?;
        let tables = super::tables(&logical);
        Some(Self {
            patterns: patterns::binds_patterns(&logical),
            logical,
            types,
            tables,
        })
    }

    /// Whether the tables it reads are still the ones it was planned on.
    pub fn is_current(&self, db: &Db) -> bool {
        self.tables
            .iter()
            .all(|t| db.table(t.name()).is_some_and(|now| Arc::ptr_eq(&now, t)))
    }

    /// `literals` as the values of its placeholders; none where one would
    /// not compare as the literal it was (module docs).
    pub fn bind(&self, literals: &[Literal]) -> Option<Vec<ScalarValue>> {
        literals
            .iter()
            .zip(&self.types)
            .map(|(l, t)| value(l, t))
            .collect()
    }
}

/// `logical` with each placeholder named in `types` given that type.
fn typed_placeholders(
    logical: LogicalPlan,
    types: &HashMap<String, DataType>,
) -> Option<LogicalPlan> {
    let typed = logical.transform_up_with_subqueries(|plan| {
        plan.map_expressions(|e| {
            e.transform_up(|e| match e {
                PlanExpr::Placeholder(Placeholder { id, field: None })
                    if types.contains_key(&id) =>
                {
                    let field = arrow::datatypes::Field::new("", types[&id].clone(), true);
                    let p = Placeholder::new_with_field(id, Some(Arc::new(field)));
                    Ok(Transformed::yes(PlanExpr::Placeholder(p)))
                }
                e => Ok(Transformed::no(e)),
            })
        })
    });
    typed.ok().map(|t| t.data)
}

/// `literal` as a value of `to`, if it is the same value there.
fn value(literal: &Literal, to: &DataType) -> Option<ScalarValue> {
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = |v: &ScalarValue, t: &DataType| {
        let array = v.to_array().ok()?;
        let out = cast_with_options(&array, t, &strict).ok()?;
        ScalarValue::try_from_array(&out, 0).ok()
    };
    match literal {
        Literal::String(s) => cast(&ScalarValue::Utf8(Some(s.clone())), to),
        Literal::Typed(s, t) => {
            // The comparison converts the value, not the column, to `to`.
            if comparison_coercion(to, t).as_ref() != Some(to) {
                return None;
            }
            let v = cast(&ScalarValue::Utf8(Some(s.clone())), t)?;
            match t == to {
                true => Some(v),
                false => cast(&v, to),
            }
        }
        Literal::Number(n) => {
            if !to.is_numeric() {
                return None;
            }
            // As the planner reads a number: an integer is an i64 (one
            // past it is not a float), anything else a finite f64.
            let v = if n.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                ScalarValue::Int64(Some(n.parse().ok()?))
            } else {
                match n.parse::<f64>() {
                    Ok(f) if f.is_finite() => ScalarValue::Float64(Some(f)),
                    _ => return None,
                }
            };
            let there = cast(&v, to)?;
            (cast(&there, &v.data_type())? == v).then_some(there)
        }
    }
}

#[cfg(test)]
mod tests;
