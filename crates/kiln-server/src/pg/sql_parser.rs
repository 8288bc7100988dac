//! datafusion-postgres's SQL parser, minus one stale entry of its list of
//! statements it replaces wholesale.
//!
//! Why: `PostgresCompatibilityParser` replaces Grafana's search-path
//! subquery (`string_to_array(current_setting('search_path'), ',') s`,
//! `generate_series(...) AS i`, `THEN user`) by `''`, from when none of
//! it could be planned, so Grafana's editors matched no schema and listed
//! every table schema-qualified. Kiln plans that subquery now
//! (`current_setting` in `settings`, the rest in
//! `kiln_query::shape::relations`), so text that reads the search path is
//! parsed without the replacement list; its rewrite rules still apply.
//! Every other statement goes through the parser unchanged.

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;

/// The text whose replacement is stale (module docs).
const SEARCH_PATH: &str = "current_setting('search_path')";

#[derive(Debug, Default)]
pub struct SqlParser(PostgresCompatibilityParser);

impl SqlParser {
    /// `sql`'s statements, rewritten by datafusion-postgres's rules.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        // Compared in place: this runs for every statement.
        let reads_search_path = sql
            .as_bytes()
            .windows(SEARCH_PATH.len())
            .any(|w| w.eq_ignore_ascii_case(SEARCH_PATH.as_bytes()));
        if !reads_search_path {
            return self.0.parse(sql);
        }
        Ok(Parser::parse_sql(&PostgreSqlDialect {}, sql)?
            .into_iter()
            .map(|stmt| self.0.rewrite(stmt))
            .collect())
    }
}
