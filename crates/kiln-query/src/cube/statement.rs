//! The cube statements, recognised from their first words like the
//! account statements (no SQL parser knows them):
//! `CREATE CUBE [IF NOT EXISTS] name ON table DIMENSIONS (expr [AS alias], ...)
//! MEASURES (aggregate [AS alias], ...)`, `DROP CUBE [IF EXISTS] name`,
//! `SHOW CUBES`. Expressions are parsed by the SQL parser, so they are
//! kept as the SQL text it prints back.

use datafusion::sql::sqlparser::ast::Expr as AstExpr;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;
use kiln_storage::CubeColumn;

use crate::error::{Error, Result};

/// A cube statement.
#[derive(Debug, Clone, PartialEq)]
pub enum CubeStatement {
    Create {
        name: String,
        table: String,
        dimensions: Vec<CubeColumn>,
        measures: Vec<CubeColumn>,
        if_not_exists: bool,
    },
    Drop {
        name: String,
        if_exists: bool,
    },
    Show,
}

impl CubeStatement {
    /// The command tag.
    pub fn tag(&self) -> &'static str {
        match self {
            CubeStatement::Create { .. } => "CREATE CUBE",
            CubeStatement::Drop { .. } => "DROP CUBE",
            CubeStatement::Show => "SHOW",
        }
    }
}

/// Whether `sql` starts like a cube statement (its first two words).
pub fn is_cube_text(sql: &str) -> bool {
    let mut words = sql
        .trim_start()
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty());
    let (a, b) = (words.next(), words.next());
    let is = |w: Option<&str>, k: &str| w.is_some_and(|w| w.eq_ignore_ascii_case(k));
    ((is(a, "CREATE") || is(a, "DROP")) && is(b, "CUBE")) || (is(a, "SHOW") && is(b, "CUBES"))
}

/// `sql` as a cube statement; `None` when it is not one.
pub fn parse(sql: &str) -> Option<Result<CubeStatement>> {
    is_cube_text(sql).then(|| statement(sql).map_err(|e| Error::Sql(format!("{e}"))))
}

fn statement(sql: &str) -> std::result::Result<CubeStatement, ParserError> {
    let mut p = Parser::new(&GenericDialect {}).try_with_sql(sql)?;
    let stmt = if p.parse_keyword(Keyword::SHOW) {
        word(&mut p, "CUBES")?;
        CubeStatement::Show
    } else if p.parse_keyword(Keyword::DROP) {
        word(&mut p, "CUBE")?;
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        CubeStatement::Drop {
            name: ident(&mut p)?,
            if_exists,
        }
    } else {
        p.expect_keyword(Keyword::CREATE)?;
        word(&mut p, "CUBE")?;
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = ident(&mut p)?;
        p.expect_keyword(Keyword::ON)?;
        let table = ident(&mut p)?;
        word(&mut p, "DIMENSIONS")?;
        let dimensions = columns(&mut p, "d")?;
        word(&mut p, "MEASURES")?;
        let measures = columns(&mut p, "m")?;
        if measures.is_empty() {
            return Err(ParserError::ParserError(
                "a cube needs at least one measure".into(),
            ));
        }
        CubeStatement::Create {
            name,
            table,
            dimensions,
            measures,
            if_not_exists,
        }
    };
    while p.consume_token(&Token::SemiColon) {}
    match p.peek_token().token {
        Token::EOF => Ok(stmt),
        t => Err(ParserError::ParserError(format!(
            "unexpected {t} after the cube statement"
        ))),
    }
}

/// Expects the (non-reserved) word `w`.
fn word(p: &mut Parser, w: &str) -> std::result::Result<(), ParserError> {
    let t = p.next_token();
    match &t.token {
        Token::Word(x) if x.value.eq_ignore_ascii_case(w) => Ok(()),
        other => Err(ParserError::ParserError(format!(
            "expected {w}, found {other} at {}",
            t.span.start
        ))),
    }
}

/// A name: unquoted ones are lower-cased, as in PostgreSQL.
fn ident(p: &mut Parser) -> std::result::Result<String, ParserError> {
    let i = p.parse_identifier()?;
    Ok(match i.quote_style {
        Some(_) => i.value,
        None => i.value.to_ascii_lowercase(),
    })
}

/// `(expr [AS alias], ...)`; unnamed expressions are named after their
/// column, or `{prefix}{n}`.
fn columns(p: &mut Parser, prefix: &str) -> std::result::Result<Vec<CubeColumn>, ParserError> {
    p.expect_token(&Token::LParen)?;
    if p.consume_token(&Token::RParen) {
        return Ok(vec![]);
    }
    let items = p.parse_comma_separated(|p| {
        let expr = p.parse_expr()?;
        let alias = match p.parse_keyword(Keyword::AS) {
            true => Some(ident(p)?),
            false => None,
        };
        Ok((expr, alias))
    })?;
    p.expect_token(&Token::RParen)?;
    let mut out: Vec<CubeColumn> = vec![];
    for (n, (expr, alias)) in items.into_iter().enumerate() {
        let name = alias.unwrap_or_else(|| match &expr {
            AstExpr::Identifier(i) => i.value.to_ascii_lowercase(),
            _ => format!("{prefix}{}", n + 1),
        });
        if out.iter().any(|c| c.name == name) {
            return Err(ParserError::ParserError(format!(
                "two cube columns are named {name}; give one an alias (AS ...)"
            )));
        }
        out.push(CubeColumn {
            sql: expr.to_string(),
            name,
        });
    }
    Ok(out)
}
