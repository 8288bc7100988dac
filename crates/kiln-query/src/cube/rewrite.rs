//! The optimizer rule that answers an aggregate from a cube.
//!
//! An `Aggregate` over one Kiln table (through filters, projections and
//! aliases) is answered from a cube when each of its parts derives from
//! the cube's dimensions:
//! - a group key, a filter conjunct, or an aggregate's `FILTER` condition
//!   that is a dimension's expression, or an expression of dimensions and
//!   constants (`region = 'eu'`, `upper(region)`), or a function of a
//!   dimension's time bucket ([`super::grain`]): `date_trunc` to a unit
//!   made of whole buckets of the dimension's (day from hour), `CAST(ts AS
//!   DATE)`, `extract(hour FROM ts)`, `date_bin` or `time_bucket` with a
//!   stride of whole buckets, each also of the timestamp shifted by whole
//!   buckets (weeks from Sunday from days);
//! - a range on the raw time column (`ts >= a`, `ts <= b`, `ts BETWEEN a
//!   AND b`, with literals or parameters) when a dimension truncates that
//!   column: whole buckets come from the cube, the edges from raw rows
//!   ([`super::scan`]); a range of days (`CAST(ts AS DATE) BETWEEN a AND
//!   b`) too, also when its filter derives, so that only its parts are
//!   read;
//! - an aggregate equal to a measure (function, arguments, DISTINCT), or
//!   over `CASE WHEN c THEN x END` where the measure is over `x` and `c`
//!   derives (it becomes a `FILTER`).
//!
//! The aggregate is then replaced by the same aggregate merging the
//! measures' states over a [`CubeScan`], renamed to the original's output.
//! Among the cubes that can answer, the one with the fewest part rows wins.
//! The rule runs first among the optimizer rules, before DataFusion splits
//! a `count(DISTINCT)` into two aggregates.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, Result, ScalarValue, TableReference};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::expr::{AggregateFunction, Case, Cast};
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Expr, ExprSchemable, Extension, Filter, LogicalPlan, Operator,
    Projection, lit,
};
use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

use super::Cubes;
use super::grain::{grain, unshifted};
use super::plan::{CubePlan, unqualify};
use super::scan::{CubeScan, Limit, TimeRange};
use super::unit::Unit;
use crate::scan::KilnTable;

/// The rule (module docs).
#[derive(Debug)]
pub struct CubeRewrite {
    cubes: Arc<Cubes>,
}

impl CubeRewrite {
    pub fn new(cubes: Arc<Cubes>) -> Self {
        Self { cubes }
    }
}

impl OptimizerRule for CubeRewrite {
    fn name(&self) -> &str {
        "cube_rewrite"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(agg) = &plan else {
            return Ok(Transformed::no(plan));
        };
        if !crate::options::cubes_enabled(config.options().as_ref()) {
            return Ok(Transformed::no(plan));
        }
        // Most aggregates read tables without cubes: nothing more is done
        // for them than finding their table.
        let Some(table) = Source::table(&agg.input) else {
            return Ok(Transformed::no(plan));
        };
        let mut candidates = self.cubes.candidates(table.table());
        if candidates.is_empty() {
            return Ok(Transformed::no(plan));
        }
        let Some(source) = Source::find(&agg.input) else {
            return Ok(Transformed::no(plan));
        };
        candidates.sort_by_key(|(_, rows)| *rows);
        let mut misses = vec![];
        for (cube, _) in candidates {
            match answer(agg, &source, &cube) {
                Ok(plan) => return Ok(Transformed::yes(plan)),
                Err(why) => misses.push(format!("cube {}: {why}", cube.def.name)),
            }
        }
        self.cubes.record_misses(misses);
        Ok(Transformed::no(plan))
    }
}

/// The table an aggregate reads and what lies between them.
struct Source {
    table: KilnTable,
    /// The table's (unqualified, view) schema, to simplify expressions.
    schema: Arc<DFSchema>,
    /// Each column of the aggregate's input as an expression of table columns.
    columns: HashMap<String, Expr>,
    /// Filter conjuncts over table columns.
    filters: Vec<Expr>,
}

impl Source {
    /// The Kiln table under filters, projections and aliases, if any.
    fn table(plan: &LogicalPlan) -> Option<KilnTable> {
        match plan {
            LogicalPlan::TableScan(scan) if scan.fetch.is_none() => {
                let provider = source_as_provider(&scan.source).ok()?;
                provider.downcast_ref::<KilnTable>().cloned()
            }
            LogicalPlan::Filter(Filter { input, .. })
            | LogicalPlan::Projection(Projection { input, .. }) => Source::table(input),
            LogicalPlan::SubqueryAlias(a) => Source::table(&a.input),
            _ => None,
        }
    }

    /// Walks filters, projections and aliases down to a Kiln table scan.
    fn find(plan: &LogicalPlan) -> Option<Source> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                if scan.fetch.is_some() {
                    return None;
                }
                let provider = source_as_provider(&scan.source).ok()?;
                let table = provider.downcast_ref::<KilnTable>()?.clone();
                let schema = Arc::new(DFSchema::try_from(provider.schema().as_ref().clone()).ok()?);
                let columns = scan
                    .projected_schema
                    .fields()
                    .iter()
                    .map(|f| (f.name().clone(), Expr::Column(Column::from_name(f.name()))))
                    .collect();
                let mut source = Source {
                    table,
                    schema,
                    columns,
                    filters: vec![],
                };
                for f in &scan.filters {
                    let f = source.resolve(f)?;
                    source.filters.extend(split_conjunction_owned(f));
                }
                Some(source)
            }
            LogicalPlan::Filter(Filter {
                predicate, input, ..
            }) => {
                let mut source = Source::find(input)?;
                let p = source.resolve(predicate)?;
                source.filters.extend(split_conjunction_owned(p));
                Some(source)
            }
            LogicalPlan::Projection(Projection {
                expr,
                input,
                schema,
                ..
            }) => {
                let mut source = Source::find(input)?;
                let mut columns = HashMap::new();
                for (e, f) in expr.iter().zip(schema.fields()) {
                    columns.insert(f.name().clone(), source.resolve(e)?);
                }
                source.columns = columns;
                Some(source)
            }
            LogicalPlan::SubqueryAlias(a) => Source::find(&a.input),
            _ => None,
        }
    }

    /// `e` (over the input's columns) as a simplified expression of table columns.
    fn resolve(&self, e: &Expr) -> Option<Expr> {
        let mut missing = false;
        let e = e
            .clone()
            .transform_up(|e| {
                Ok(match e {
                    Expr::Column(c) => match self.columns.get(&c.name) {
                        Some(x) => Transformed::yes(x.clone()),
                        None => {
                            missing = true;
                            Transformed::no(Expr::Column(c))
                        }
                    },
                    Expr::Alias(a) => Transformed::yes(*a.expr),
                    e => Transformed::no(e),
                })
            })
            .ok()?
            .data;
        if missing || has_subquery(&e) {
            return None;
        }
        let ctx = SimplifyContext::builder()
            .with_schema(self.schema.clone())
            .build();
        ExprSimplifier::new(ctx).simplify(unqualify(e)).ok()
    }
}

/// `dimension = value` (either side), the value without columns and not
/// volatile (one value for every row): a key of [`CubeScan`].
fn key(e: &Expr) -> Option<(String, Expr)> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = e
    else {
        return None;
    };
    let ((Expr::Column(c), v) | (v, Expr::Column(c))) = (left.as_ref(), right.as_ref()) else {
        return None;
    };
    (v.column_refs().is_empty() && !v.is_volatile()).then(|| (c.name.clone(), v.clone()))
}

fn has_subquery(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::OuterReferenceColumn(..)
        ))
    })
    .unwrap_or(true)
}

/// The cube's dimensions as the rule matches them.
struct Dimensions<'a> {
    cube: &'a CubePlan,
    /// The table's schema, which the expressions derived are over.
    schema: &'a DFSchema,
    qualifier: TableReference,
}

impl Dimensions<'_> {
    fn column(&self, i: usize) -> Expr {
        Expr::Column(Column::new(
            Some(self.qualifier.clone()),
            self.cube.def.dimensions[i].name.clone(),
        ))
    }

    /// `e` (over table columns) as an expression of dimension columns.
    fn derive(&self, e: &Expr) -> Option<Expr> {
        if let Some(i) = self.cube.dimensions.iter().position(|d| d == e) {
            return Some(self.column(i));
        }
        // A function of the time bucket: of the dimension instead. Each
        // may shift the timestamp by fixed lengths; the function then reads
        // the dimension shifted by the difference.
        if let Some((grain, ts)) = grain(e, self.schema) {
            let (base, shift) = unshifted(ts, self.schema);
            for (i, d) in self.cube.dimensions.iter().enumerate() {
                let Some((finer, darg)) = date_trunc(d) else {
                    continue;
                };
                let (dbase, dshift) = unshifted(darg, self.schema);
                let delta = shift - dshift;
                if dbase != base || !grain.over(finer, delta) {
                    continue;
                }
                let dimension = match i64::try_from(delta) {
                    Ok(0) => self.column(i),
                    Ok(ns) => self.column(i) + lit(ScalarValue::new_interval_mdn(0, 0, ns)),
                    Err(_) => continue,
                };
                // The timestamp may lie deep in the form (`floor(extract(
                // epoch FROM ts) / 60)`); nothing under it is visited.
                let out = e.clone().transform_down(|c| {
                    Ok(match &c == ts {
                        true => Transformed::new(dimension.clone(), true, TreeNodeRecursion::Jump),
                        false => Transformed::no(c),
                    })
                });
                return out.ok().map(|t| t.data);
            }
        }
        match e {
            Expr::Column(_) | Expr::AggregateFunction(_) | Expr::WindowFunction(_) => None,
            Expr::Literal(..) | Expr::Placeholder(_) => Some(e.clone()),
            e if has_subquery(e) || e.is_volatile() => None,
            e => {
                let mut ok = true;
                let out = e
                    .clone()
                    .map_children(|c| {
                        Ok(match self.derive(&c) {
                            Some(d) => Transformed::yes(d),
                            None => {
                                ok = false;
                                Transformed::no(c)
                            }
                        })
                    })
                    .ok()?
                    .data;
                ok.then_some(out)
            }
        }
    }

    /// The finest dimension truncating column `name`: (index, unit).
    fn time_dimension(&self, name: &str) -> Option<(usize, Unit)> {
        self.cube
            .dimensions
            .iter()
            .enumerate()
            .filter_map(|(i, d)| match date_trunc(d) {
                Some((unit, Expr::Column(c))) if c.name == name => Some((i, unit)),
                _ => None,
            })
            .min_by_key(|(_, u)| *u)
    }
}

/// `date_trunc('unit', arg)` as (unit, arg).
fn date_trunc(e: &Expr) -> Option<(Unit, &Expr)> {
    let Expr::ScalarFunction(f) = e else {
        return None;
    };
    if f.name() != "date_trunc" || f.args.len() != 2 {
        return None;
    }
    let unit = match &f.args[0] {
        Expr::Literal(ScalarValue::Utf8(Some(u)), _)
        | Expr::Literal(ScalarValue::Utf8View(Some(u)), _)
        | Expr::Literal(ScalarValue::LargeUtf8(Some(u)), _) => Unit::parse(u)?,
        _ => return None,
    };
    Some((unit, &f.args[1]))
}

/// The limits a filter sets on a column's instants, each (lower?, limit):
/// `column op v` for a nanosecond timestamp column, or `CAST(column AS
/// DATE) op v` (a day: `<=` is before the next day), where `op` is `>=`,
/// `>`, `<`, `<=` or `=` and `v` a value of the compared type computed when
/// the query runs: a literal, a parameter, or an expression of those
/// (`CAST($3 AS TIMESTAMP) - INTERVAL '1 day'`).
fn time_limits(e: &Expr, schema: &DFSchema) -> Option<(String, Vec<(bool, Limit)>)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return None;
    };
    let is_value = |v: &Expr| !(v.any_column_refs() || v.is_volatile() || has_subquery(v));
    let (lhs, op, v) = match (left.as_ref(), right.as_ref()) {
        (lhs, v) if is_value(v) => (lhs, *op, v),
        (v, lhs) if is_value(v) => (lhs, op.swap()?, v),
        _ => return None,
    };
    let (column, of) = match lhs {
        Expr::Column(c) => (c, DataType::Timestamp(TimeUnit::Nanosecond, None)),
        Expr::Cast(Cast { expr, field }) if field.data_type() == &DataType::Date32 => {
            match expr.as_ref() {
                Expr::Column(c) => (c, DataType::Date32),
                _ => return None,
            }
        }
        _ => return None,
    };
    if v.get_type(schema).ok()? != of {
        return None;
    }
    let v = v.clone();
    let limits = match op {
        Operator::GtEq => vec![(true, Limit::at(v))],
        Operator::Gt => vec![(true, Limit::after(v))],
        Operator::Lt => vec![(false, Limit::at(v))],
        Operator::LtEq => vec![(false, Limit::after(v))],
        Operator::Eq => vec![(true, Limit::at(v.clone())), (false, Limit::after(v))],
        _ => return None,
    };
    Some((column.name.clone(), limits))
}

/// The plan answering `agg` from `cube`, or why it cannot.
fn answer(
    agg: &Aggregate,
    source: &Source,
    cube: &Arc<CubePlan>,
) -> std::result::Result<LogicalPlan, String> {
    if agg
        .group_expr
        .iter()
        .any(|g| matches!(g, Expr::GroupingSet(_)))
    {
        return Err("GROUPING SETS, CUBE and ROLLUP are not answered from cubes".into());
    }
    let dims = Dimensions {
        cube,
        schema: &source.schema,
        qualifier: TableReference::bare(cube.def.name.clone()),
    };
    let unknown = |what: &str, e: &Expr| format!("{what} {e} is not derived from its dimensions");
    let mut groups = vec![];
    for (g, (_, field)) in agg.group_expr.iter().zip(agg.schema.iter()) {
        let base = source.resolve(g).ok_or_else(|| unknown("group key", g))?;
        let derived = dims
            .derive(&base)
            .ok_or_else(|| unknown("group key", &base))?;
        // Named as the original: two keys derived from one dimension
        // (`CAST(ts AS DATE)` and `date_trunc('day', ts)`) can otherwise
        // share a name (a cast is named as what it casts).
        groups.push(derived.alias(field.name()));
    }
    let mut filters = vec![];
    let mut keys = vec![];
    let mut range: Option<TimeRange> = None;
    for f in &source.filters {
        let derived = dims.derive(f);
        let limits = time_limits(f, &source.schema).and_then(|(col, limits)| {
            let (i, unit) = dims.time_dimension(&col)?;
            // Segments' time statistics are of the table's time column.
            let def = &source.table.table().def;
            let time = &def.columns[def.time_column].name;
            let nanos = DataType::Timestamp(TimeUnit::Nanosecond, None);
            let field = source.schema.field_with_unqualified_name(&col).ok()?;
            (&col == time && field.data_type() == &nanos).then_some((col, i, unit, limits))
        });
        // A filter derived from the dimensions (`CAST(ts AS DATE) >= d`
        // from days) stays a filter of part rows; its limits, if any, also
        // narrow the parts read to the range's.
        if let Some(d) = derived {
            keys.extend(key(&d));
            filters.push(d);
        } else if limits.is_none() {
            return Err(unknown("filter", f));
        }
        let Some((column, i, unit, limits)) = limits else {
            continue;
        };
        let r = range.get_or_insert_with(|| TimeRange {
            dimension: cube.def.dimensions[i].name.clone(),
            unit,
            column: column.clone(),
            lower: vec![],
            upper: vec![],
        });
        if r.column != column {
            return Err(format!("filter {f}: ranges on two time columns"));
        }
        for (lower, limit) in limits {
            match lower {
                true => r.lower.push(limit),
                false => r.upper.push(limit),
            }
        }
    }
    let mut aggregates = vec![];
    for a in &agg.aggr_expr {
        aggregates.push(measure(a, source, &dims)?);
    }
    // The dimensions the answer reads: parts are merged to those first.
    let mut used = vec![false; cube.def.dimensions.len()];
    let mut read = |name: &str| {
        if let Some(i) = cube.def.dimensions.iter().position(|d| d.name == name) {
            used[i] = true;
        }
    };
    for e in groups.iter().chain(&filters).chain(&aggregates) {
        e.column_refs().iter().for_each(|c| read(&c.name));
    }
    if let Some(r) = &range {
        read(&r.dimension);
    }
    let scan = CubeScan::new(
        cube.clone(),
        source.table.clone(),
        source.filters.clone(),
        filters,
        keys,
        range,
        used,
    )
    .map_err(|e| e.to_string())?;
    let plan = LogicalPlan::Extension(Extension {
        node: Arc::new(scan),
    });
    let new = Aggregate::try_new(Arc::new(plan), groups, aggregates).map_err(|e| e.to_string())?;
    let new = LogicalPlan::Aggregate(new);
    // The original's output names and qualifiers, so the plan above is unchanged.
    let renamed: Vec<Expr> = new
        .schema()
        .columns()
        .into_iter()
        .zip(agg.schema.iter())
        .map(|(c, (q, f))| Expr::Column(c).alias_qualified(q.cloned(), f.name()))
        .collect();
    Projection::try_new(renamed, Arc::new(new))
        .map(LogicalPlan::Projection)
        .map_err(|e| e.to_string())
}

/// The merge of the measure answering aggregate `a`, with its filter.
fn measure(a: &Expr, source: &Source, dims: &Dimensions) -> std::result::Result<Expr, String> {
    let Expr::AggregateFunction(f) = a.clone().unalias_nested().data else {
        return Err(format!("{a} is not a plain aggregate"));
    };
    let mut args = f
        .params
        .args
        .iter()
        .map(|x| source.resolve(x))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("aggregate {a} reads columns the cube cannot see"))?;
    let mut conditions = vec![];
    if let Some(c) = &f.params.filter {
        conditions.push(source.resolve(c).ok_or_else(|| format!("filter of {a}"))?);
    }
    // `agg(CASE WHEN c THEN x END)` is `agg(x) FILTER (WHERE c)`.
    if let [
        Expr::Case(Case {
            expr: None,
            when_then_expr,
            else_expr,
        }),
    ] = args.as_slice()
        && let [(when, then)] = when_then_expr.as_slice()
        && else_expr
            .as_deref()
            .is_none_or(|e| matches!(e, Expr::Literal(v, _) if v.is_null()))
    {
        conditions.push(when.as_ref().clone());
        args = vec![then.as_ref().clone()];
    }
    let order: Vec<_> = f
        .params
        .order_by
        .iter()
        .map(|s| {
            source.resolve(&s.expr).map(|e| {
                let mut s = s.clone();
                s.expr = e;
                s
            })
        })
        .collect::<Option<_>>()
        .ok_or_else(|| format!("ORDER BY of {a}"))?;
    let count_star = |x: &[Expr]| matches!(x, [Expr::Literal(v, _)] if !v.is_null());
    let found = dims.cube.measures.iter().find(|m| {
        let e = &m.expr;
        e.func.name() == f.func.name()
            && e.params.distinct == f.params.distinct
            && e.params.order_by == order
            && (e.params.args == args
                || (f.func.name() == "count" && count_star(&e.params.args) && count_star(&args)))
    });
    let Some(m) = found else {
        return Err(format!("no measure is {a}"));
    };
    let filter = conditions
        .into_iter()
        .map(|c| {
            dims.derive(&c).ok_or_else(|| {
                format!("the condition {c} of {a} is not derived from its dimensions")
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?
        .into_iter()
        .reduce(Expr::and);
    let states = m
        .states
        .iter()
        .map(|s| Expr::Column(Column::new(Some(dims.qualifier.clone()), s.clone())))
        .collect();
    Ok(Expr::AggregateFunction(AggregateFunction::new_udf(
        m.merge.clone(),
        states,
        false,
        filter.map(Box::new),
        vec![],
        None,
    )))
}
