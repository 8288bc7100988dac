//! Queries run through the kept plan of their shape
//! ([`crate::plan_cache::literals`]): the part of planning the simple
//! protocol and HTTP share with prepared statements; and texts run
//! through the shape their template learned
//! ([`crate::plan_cache::texts`]), unparsed.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Engine, Query, Streamed};
use crate::error::Result;
use crate::plan_cache::{Door, Kept, Shape, Template, TextHit, cast_param};
use crate::session::{apply_settings, settings_key};
use crate::shape::labels::Labels;
use crate::shape::patterns;

/// What a door gives a statement's run so that, if it runs through a
/// kept shape, its text's template learns that shape
/// ([`crate::plan_cache::texts`]).
pub struct Learn<'a> {
    pub template: &'a Template<'a>,
    /// The statement's PostgreSQL column labels, kept for its hits.
    pub labels: Option<Labels>,
}

impl Engine {
    /// `text`'s template as `door` reads it, if texts may skip parsing
    /// ([`crate::plan_cache::texts`]): with its values written in, or
    /// `with_params` (sent apart, for its `$1`, `$2`...).
    pub fn template<'a>(
        &self,
        door: Door,
        text: &'a str,
        with_params: bool,
    ) -> Option<Template<'a>> {
        if !self.plans.lifts_literals() || self.check_size(text).is_err() {
            return None;
        }
        match with_params {
            true => Template::with_params(door, text),
            false => Template::of(door, text),
        }
    }

    /// What `template`'s text runs as, if its template was learned.
    pub fn text_hit(&self, template: &Template) -> Option<TextHit> {
        self.plans.texts().get(template)
    }

    /// Runs a text through the shape its template learned, with `params`
    /// if it was sent with them, else with its own literals; None where
    /// that shape is no longer kept, the text's values do not bind as its
    /// literals or `params` are not as many as its placeholders: the text
    /// is then to be parsed and run.
    pub async fn run_text(
        &self,
        query: &Query,
        hit: &TextHit,
        params: &[ScalarValue],
    ) -> Result<Option<Streamed>> {
        if query.transaction().is_some() {
            return Ok(None);
        }
        let shape = {
            let settings = query.settings();
            match self
                .plans
                .shape(&settings_key(&hit.learned.shape, &settings))
            {
                Kept::Shape(shape) => shape,
                _ => return Ok(None),
            }
        };
        let values = match params.is_empty() {
            true => shape.bind(&hit.literals),
            false => bind_params(&shape, params)?,
        };
        let Some(values) = values else {
            return Ok(None);
        };
        self.plans.ran_unparsed();
        let run = self.run_kept(query, &hit.learned.shape, &shape, values);
        self.guarded(query, run).await.map(Some)
    }

    /// Runs a query through the kept plan of its shape
    /// ([`crate::plan_cache::literals`]): its text with `params` (HTTP's
    /// `params`), or else with the literals of its filters lifted into
    /// placeholders. None where it is to be planned as written: a
    /// statement other than a query or in a transaction, nothing to bind,
    /// or a shape that cannot be kept or bound. Shapes are kept by text
    /// and the session's options, and planned with those.
    pub(super) async fn run_shape(
        &self,
        stmt: &DfStatement,
        params: &[ScalarValue],
        query: &Query,
        learn: Option<Learn<'_>>,
    ) -> Result<Option<Streamed>> {
        let DfStatement::Statement(s) = stmt else {
            return Ok(None);
        };
        if !matches!(**s, Statement::Query(_))
            || query.transaction().is_some()
            || !self.plans.lifts_literals()
        {
            return Ok(None);
        }
        let mut shaped = (**s).clone();
        let literals = match params.is_empty() {
            true => crate::plan_cache::lift(&mut shaped),
            false => vec![],
        };
        let n = params.len().max(literals.len());
        if n == 0 {
            return Ok(None);
        }
        // Apart from prepared statements' texts: NUL ends a PostgreSQL string.
        let text = format!("\0{shaped}");
        let settings = query.settings();
        let key = settings_key(&text, &settings).into_owned();
        let shape = match self.plans.shape(&key) {
            Kept::New | Kept::AsWritten => return Ok(None),
            Kept::Shape(shape) => shape,
            Kept::Seen => {
                let mut state = self.ctx.state();
                apply_settings(state.config_mut().options_mut(), &settings)?;
                let stmt = DfStatement::Statement(Box::new(shaped));
                let planned = self
                    .executor
                    .plan(super::plans_apart(query), async move {
                        state.statement_to_plan(stmt).await
                    })
                    .await?;
                let shape = planned.ok().and_then(|plan| Shape::new(plan, &literals, n));
                match self.plans.keep_shape(key.clone(), shape) {
                    Some(shape) => shape,
                    None => return Ok(None),
                }
            }
        };
        let values = match params.is_empty() {
            true => match shape.bind(&literals) {
                Some(values) => {
                    if let Some(learn) = learn {
                        self.plans
                            .texts()
                            .learn(learn.template, &text, &literals, learn.labels);
                    }
                    values
                }
                None => return Ok(None),
            },
            false => match bind_params(&shape, params)? {
                Some(values) => {
                    if let Some(learn) = learn {
                        self.plans
                            .texts()
                            .learn(learn.template, &text, &[], learn.labels);
                    }
                    values
                }
                None => return Ok(None),
            },
        };
        self.run_kept(query, &text, &shape, values).await.map(Some)
    }

    /// Runs the kept shape of `text` with `values`, as `query`'s user.
    async fn run_kept(
        &self,
        query: &Query,
        text: &str,
        shape: &Arc<Shape>,
        values: Vec<ScalarValue>,
    ) -> Result<Streamed> {
        self.authorize_plan(query, &shape.logical)?;
        let stream = self
            .run_kept_plan(query, text, &shape.logical, &shape.types, &values)
            .await?;
        Ok(Streamed::Rows {
            schema: stream.schema(),
            stream,
        })
    }

    /// Starts `sql`'s kept plan ([`crate::plan_cache::PlanCache::execute`])
    /// with `params`. A long statement's (re)planning runs on the
    /// execution runtime ([`super::plans_apart`]), so the query's deadline
    /// and cancel stop the wait for it as they stop its first planning.
    pub(super) async fn run_kept_plan(
        &self,
        query: &Query,
        sql: &str,
        logical: &LogicalPlan,
        types: &[DataType],
        params: &[ScalarValue],
    ) -> Result<SendableRecordBatchStream> {
        // Boxed, both ways: planning futures are large, and inline they
        // would grow every caller's.
        if !super::plans_apart(query) {
            let started = self
                .plans
                .execute(&self.ctx, query, sql, logical, types, params);
            return Ok(Box::pin(started).await?);
        }
        let (plans, ctx, query) = (self.plans.clone(), self.ctx.clone(), query.clone());
        let (sql, logical) = (sql.to_string(), logical.clone());
        let (types, params) = (types.to_vec(), params.to_vec());
        let work = Box::pin(async move {
            plans
                .execute(&ctx, &query, &sql, &logical, &types, &params)
                .await
        });
        let started = Box::pin(self.executor.plan(true, work)).await?;
        Ok(started?)
    }
}

/// `params` cast to the types of `shape`'s placeholders; None unless they
/// are as many (the text is then planned as written, which names what is
/// missing).
fn bind_params(shape: &Shape, params: &[ScalarValue]) -> Result<Option<Vec<ScalarValue>>> {
    if params.len() != shape.types.len() {
        return Ok(None);
    }
    let values = params
        .iter()
        .zip(&shape.types)
        .enumerate()
        .map(|(i, (v, t))| cast_param(i, v, t))
        .collect::<datafusion::common::Result<Vec<_>>>()?;
    if shape.patterns {
        patterns::check_bound(&shape.logical, &patterns::positional(params))?;
    }
    Ok(Some(values))
}
