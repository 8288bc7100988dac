//! Queries run through the kept plan of their shape
//! ([`crate::plan_cache::literals`]): the part of planning the simple
//! protocol and HTTP share with prepared statements.

use datafusion::common::ScalarValue;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Engine, Query, Streamed};
use crate::error::Result;
use crate::plan_cache::{Kept, Shape, cast_param};
use crate::session::{apply_settings, settings_key};

impl Engine {
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
                let planned = state
                    .statement_to_plan(DfStatement::Statement(Box::new(shaped)))
                    .await;
                let shape = planned.ok().and_then(|plan| Shape::new(plan, n));
                match self.plans.keep_shape(key.clone(), shape) {
                    Some(shape) => shape,
                    None => return Ok(None),
                }
            }
        };
        let values = match params.is_empty() {
            true => match shape.bind(&literals) {
                Some(values) => values,
                None => return Ok(None),
            },
            false => params
                .iter()
                .zip(&shape.types)
                .enumerate()
                .map(|(i, (v, t))| cast_param(i, v, t))
                .collect::<datafusion::common::Result<Vec<_>>>()?,
        };
        self.authorize_plan(query, &shape.logical)?;
        let stream = self
            .plans
            .execute(
                &self.ctx,
                query,
                &text,
                &shape.logical,
                &shape.types,
                &values,
            )
            .await?;
        Ok(Some(Streamed::Rows {
            schema: stream.schema(),
            stream,
        }))
    }
}
