//! Statements Kiln recognises from their first words, before any SQL
//! parser sees them: account statements (so no other parser sees a
//! password) and cube statements (which no SQL parser knows). Every
//! protocol asks [`OwnStatement::parse`] first.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::physical_plan::memory::MemoryStream;
use kiln_storage::{CreateCube, CubeDef, Db};

use super::{Engine, Query, Streamed};
use crate::auth::{Access, Account};
use crate::cube::Cubes;
use crate::cube::statement::{self, CubeStatement};
use crate::error::{Error, Result};

/// A statement of Kiln's own syntax.
#[derive(Debug)]
pub enum OwnStatement {
    Account(Account),
    Cube(CubeStatement),
}

impl OwnStatement {
    /// Whether `sql` starts like one (its first two words; no tokenizer).
    pub fn is_own_text(sql: &str) -> bool {
        crate::auth::statement::is_account_text(sql) || statement::is_cube_text(sql)
    }

    /// `sql` as one of them; `None` when it is not one (it is then for
    /// the SQL parser).
    pub fn parse(sql: &str) -> Option<Result<OwnStatement>> {
        if let Some(a) = crate::auth::statement::parse(sql) {
            return Some(a.map(OwnStatement::Account));
        }
        statement::parse(sql).map(|c| c.map(OwnStatement::Cube))
    }

    /// Its command tag (`CREATE CUBE`, `GRANT`, `SHOW`).
    pub fn tag(&self) -> &'static str {
        match self {
            OwnStatement::Account(a) => a.tag(),
            OwnStatement::Cube(c) => c.tag(),
        }
    }

    /// Whether it changes anything (all but the `SHOW`s).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            OwnStatement::Account(Account::ShowUsers | Account::ShowTokens)
                | OwnStatement::Cube(CubeStatement::Show)
        )
    }

    /// The columns of the rows it returns, if any.
    pub fn result_schema(&self) -> Option<SchemaRef> {
        match self {
            OwnStatement::Account(a) => crate::auth::result_schema(a),
            OwnStatement::Cube(CubeStatement::Show) => Some(crate::system::cubes::schema()),
            OwnStatement::Cube(_) => None,
        }
    }
}

impl Engine {
    /// `sql` as one of Kiln's own statements; `None` when it is not one.
    /// Text longer than `--max-statement-bytes` is refused before it is
    /// tokenized, as any other statement is.
    pub fn own_statement(&self, sql: &str) -> Option<Result<OwnStatement>> {
        if !OwnStatement::is_own_text(sql) {
            return None;
        }
        if let Err(e) = self.check_size(sql) {
            return Some(Err(e));
        }
        OwnStatement::parse(sql)
    }

    /// Runs one of Kiln's own statements as `query`'s user.
    pub async fn run_own(&self, query: &Query, stmt: OwnStatement) -> Result<Streamed> {
        match stmt {
            OwnStatement::Account(a) => self.run_account(query, a).await,
            OwnStatement::Cube(c) => self.guarded(query, self.run_cube(query, c)).await,
        }
    }

    async fn run_cube(&self, query: &Query, stmt: CubeStatement) -> Result<Streamed> {
        let tag = stmt.tag();
        if stmt != CubeStatement::Show {
            self.authorize(query.user(), Access::Admin(tag))?;
        }
        match stmt {
            CubeStatement::Show => {
                let batch = crate::system::cubes::batch(&self.db, &self.cubes)?;
                let schema = batch.schema();
                let stream = MemoryStream::try_new(vec![batch], schema.clone(), None)?;
                return Ok(Streamed::Rows {
                    schema,
                    stream: Box::pin(stream),
                });
            }
            CubeStatement::Create {
                name,
                table,
                dimensions,
                measures,
                if_not_exists,
            } => {
                let t = self
                    .db
                    .table(&table)
                    .ok_or_else(|| kiln_storage::Error::TableNotFound(table.clone()))?;
                let names: Vec<&String> = dimensions
                    .iter()
                    .chain(&measures)
                    .map(|c| &c.name)
                    .collect();
                if let Some(n) = names
                    .iter()
                    .find(|n| names.iter().filter(|m| m == n).count() > 1)
                {
                    return Err(Error::Sql(format!(
                        "cube '{name}': two of its columns are named {n}; give one an alias (AS ...)"
                    )));
                }
                let probe = Arc::new(CubeDef {
                    id: 0,
                    name: name.clone(),
                    table_id: t.def.id,
                    dimensions: dimensions.clone(),
                    measures: measures.clone(),
                });
                if self.db.cube(&name).is_none() {
                    self.cubes.check(&t, probe).await?;
                }
                let created = self
                    .db
                    .create_cube(CreateCube {
                        name,
                        table,
                        dimensions,
                        measures,
                        if_not_exists,
                    })
                    .await?;
                if let Some(def) = created {
                    self.cubes.prepare(&t, def).await?;
                }
            }
            CubeStatement::Drop { name, if_exists } => {
                let id = self.db.cube(&name).map(|(_, c)| c.id);
                self.db.drop_cube(&name, if_exists).await?;
                if let Some(id) = id {
                    self.cubes.forget(id);
                }
            }
        }
        Ok(Streamed::Command {
            tag: tag.into(),
            rows: 0,
        })
    }
}

/// Plans every cube of the database (at start), so the rule can use them
/// from the first query. A cube that no longer plans (a function gone) is
/// logged and left unused: its segments are read raw.
pub(super) fn prepare_cubes(db: &Db, cubes: &Cubes) {
    for (table, def) in db.cubes() {
        let name = def.name.clone();
        if let Err(e) = futures::executor::block_on(cubes.prepare(&table, def)) {
            tracing::warn!(cube = name, error = %e, "cube not usable");
        }
    }
}
