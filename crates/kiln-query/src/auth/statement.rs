//! Kiln's account statements: users, their privileges and HTTP tokens.
//!
//! Why a parser of their own: DataFusion's SQL parser knows some of these
//! statements in other databases' forms (Snowflake's `CREATE USER`) and not
//! `CREATE TOKEN` at all, and whatever parses a statement may also log it
//! or echo it in an error. These are recognised from their first words
//! before any other parser sees them, on every protocol, so their
//! passwords never reach a log, `system.queries` ([`redact`]) or an error
//! message (no error here quotes a string literal).
//!
//! ```sql
//! CREATE USER|ROLE [IF NOT EXISTS] name [WITH] [PASSWORD 'pw'] [SUPERUSER|NOSUPERUSER|LOGIN|NOLOGIN]
//! ALTER USER|ROLE name [WITH] [PASSWORD 'pw'] [SUPERUSER|NOSUPERUSER]
//! DROP USER|ROLE [IF EXISTS] name [, ...]
//! GRANT SELECT|INSERT|ALL [PRIVILEGES] [, ...] ON [TABLE] t [, ...] | ON ALL TABLES [IN SCHEMA s] TO user [, ...]
//! REVOKE ... FROM user [, ...]
//! GRANT admin TO user [, ...]        REVOKE admin FROM user [, ...]
//! CREATE TOKEN name FOR user [EXPIRES IN '30 days' | EXPIRES AT '2027-01-01T00:00:00Z']
//! DROP TOKEN [IF EXISTS] name
//! SHOW USERS                         SHOW TOKENS
//! ```

use std::borrow::Cow;

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Error, Result};

/// A password as written in a statement: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("'***'")
    }
}

/// What a grant gives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Privileges {
    #[serde(default)]
    pub select: bool,
    #[serde(default)]
    pub insert: bool,
}

impl Privileges {
    pub const ALL: Privileges = Privileges {
        select: true,
        insert: true,
    };

    pub fn any(self) -> bool {
        self.select || self.insert
    }

    /// `self` with `other`'s privileges added (`grant`) or taken away.
    pub fn with(self, other: Privileges, grant: bool) -> Privileges {
        Privileges {
            select: if other.select { grant } else { self.select },
            insert: if other.insert { grant } else { self.insert },
        }
    }
}

impl std::fmt::Display for Privileges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.select, self.insert) {
            (true, true) => f.write_str("SELECT, INSERT"),
            (true, false) => f.write_str("SELECT"),
            (false, true) => f.write_str("INSERT"),
            (false, false) => f.write_str(""),
        }
    }
}

/// The tables a grant is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tables(Vec<String>),
    /// Every table, present and future.
    AllTables,
}

/// When a token stops working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expiry {
    /// `EXPIRES IN '30 days'`: this long after it is created.
    In(std::time::Duration),
    /// `EXPIRES AT '2027-01-01T00:00:00Z'`: nanoseconds since the epoch.
    At(i64),
}

/// One account statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    CreateUser {
        name: String,
        if_not_exists: bool,
        password: Option<Secret>,
        admin: Option<bool>,
    },
    AlterUser {
        name: String,
        password: Option<Secret>,
        admin: Option<bool>,
    },
    DropUser {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `GRANT`/`REVOKE` of table privileges (`grant` false: REVOKE).
    Grant {
        grant: bool,
        privileges: Privileges,
        on: Target,
        users: Vec<String>,
    },
    /// `GRANT admin TO` / `REVOKE admin FROM`.
    Admin {
        grant: bool,
        users: Vec<String>,
    },
    CreateToken {
        name: String,
        user: String,
        expires: Option<Expiry>,
    },
    DropToken {
        name: String,
        if_exists: bool,
    },
    ShowUsers,
    ShowTokens,
}

impl Account {
    /// The command tag PostgreSQL would answer with.
    pub fn tag(&self) -> &'static str {
        match self {
            Account::CreateUser { .. } => "CREATE ROLE",
            Account::AlterUser { .. } => "ALTER ROLE",
            Account::DropUser { .. } => "DROP ROLE",
            Account::Grant { grant: true, .. } | Account::Admin { grant: true, .. } => "GRANT",
            Account::Grant { grant: false, .. } | Account::Admin { grant: false, .. } => "REVOKE",
            Account::CreateToken { .. } => "CREATE TOKEN",
            Account::DropToken { .. } => "DROP TOKEN",
            Account::ShowUsers | Account::ShowTokens => "SHOW",
        }
    }
}

/// Whether `sql` starts like an account statement.
fn is_account(words: &[String]) -> bool {
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    match w(0) {
        "CREATE" | "ALTER" | "DROP" => matches!(w(1), "USER" | "ROLE" | "TOKEN"),
        "GRANT" | "REVOKE" => true,
        "SHOW" => matches!(w(1), "USERS" | "TOKENS"),
        _ => false,
    }
}

/// The first two words of `sql`, upper-cased, cheaply (no tokenizer).
fn first_words(sql: &str) -> Vec<String> {
    let mut rest = sql.trim_start();
    let mut words = Vec::with_capacity(2);
    // Leading comments.
    while let Some(r) = rest.strip_prefix("--") {
        rest = r.split_once('\n').map_or("", |(_, r)| r).trim_start();
    }
    for _ in 0..2 {
        let end = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        words.push(rest[..end].to_ascii_uppercase());
        rest = rest[end..].trim_start();
    }
    words
}

/// `sql` as one account statement; `None` when it is not one (it is then
/// for the SQL parser).
pub fn parse(sql: &str) -> Option<Result<Account>> {
    is_account_text(sql).then(|| Parser::new(sql).and_then(|mut p| p.statement()))
}

/// Whether `sql` starts like an account statement, read from its first
/// two words only (no tokenizer).
pub fn is_account_text(sql: &str) -> bool {
    is_account(&first_words(sql))
}

/// `sql` as it may be shown (`system.queries`, logs): an account
/// statement's string literals (passwords) are replaced by `'***'`; other
/// statements are returned as they are.
pub fn redact(sql: &str) -> Cow<'_, str> {
    if !is_account_text(sql) {
        return Cow::Borrowed(sql);
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Cow::Borrowed("<account statement>");
    };
    let text: String = tokens
        .iter()
        .map(|t| match t {
            Token::Word(_) | Token::Whitespace(_) | Token::Comma | Token::SemiColon => {
                t.to_string()
            }
            Token::Number(..) | Token::Period | Token::EOF => t.to_string(),
            _ => "'***'".to_string(),
        })
        .collect();
    Cow::Owned(text)
}

/// A recursive-descent parser over the statement's tokens (whitespace and
/// comments dropped).
struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

fn syntax(msg: impl Into<String>) -> Error {
    Error::Sql(msg.into())
}

impl Parser {
    fn new(sql: &str) -> Result<Self> {
        let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
            .tokenize()
            .map_err(|_| syntax("account statement: unterminated quote or bad token"))?
            .into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect();
        Ok(Self { tokens, at: 0 })
    }

    fn peek(&self) -> &Token {
        self.tokens.get(self.at).unwrap_or(&Token::EOF)
    }

    /// What the next token is, for an error message: a keyword or name as
    /// written, any literal only as "a string" (it may be a password).
    fn found(&self) -> String {
        match self.peek() {
            Token::Word(w) => format!("'{}'", w.value),
            Token::EOF => "the end of the statement".into(),
            Token::SingleQuotedString(_) => "a string".into(),
            Token::Comma => "','".into(),
            _ => "a symbol".into(),
        }
    }

    fn expected(&self, what: &str) -> Error {
        syntax(format!("expected {what}, found {}", self.found()))
    }

    /// Consumes the keyword `kw` if it is next.
    fn keyword(&mut self, kw: &str) -> bool {
        match self.peek() {
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn keywords(&mut self, kws: &[&str]) -> bool {
        let start = self.at;
        if kws.iter().all(|k| self.keyword(k)) {
            return true;
        }
        self.at = start;
        false
    }

    fn expect(&mut self, kw: &str) -> Result<()> {
        match self.keyword(kw) {
            true => Ok(()),
            false => Err(self.expected(kw)),
        }
    }

    /// A name: lower-cased unless quoted, as PostgreSQL folds identifiers.
    fn name(&mut self, what: &str) -> Result<String> {
        match self.peek().clone() {
            Token::Word(w) => {
                self.at += 1;
                Ok(match w.quote_style {
                    Some(_) => w.value,
                    None => w.value.to_lowercase(),
                })
            }
            _ => Err(self.expected(what)),
        }
    }

    /// A table name, its schema dropped (Kiln's tables are all in `public`).
    fn table(&mut self) -> Result<String> {
        let mut name = self.name("a table name")?;
        while matches!(self.peek(), Token::Period) {
            self.at += 1;
            name = self.name("a table name")?;
        }
        Ok(name)
    }

    fn names(
        &mut self,
        what: &str,
        one: fn(&mut Self, &str) -> Result<String>,
    ) -> Result<Vec<String>> {
        let mut out = vec![one(self, what)?];
        while matches!(self.peek(), Token::Comma) {
            self.at += 1;
            out.push(one(self, what)?);
        }
        Ok(out)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        match self.peek().clone() {
            Token::SingleQuotedString(s) => {
                self.at += 1;
                Ok(s)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn end(&mut self) -> Result<()> {
        while matches!(self.peek(), Token::SemiColon) {
            self.at += 1;
        }
        match self.peek() {
            Token::EOF => Ok(()),
            _ => Err(syntax(format!(
                "unexpected {} after the statement (an account statement must be sent alone)",
                self.found()
            ))),
        }
    }

    fn statement(&mut self) -> Result<Account> {
        let stmt = if self.keyword("CREATE") {
            if self.keyword("TOKEN") {
                self.create_token()?
            } else {
                self.user_kind()?;
                let if_not_exists = self.keywords(&["IF", "NOT", "EXISTS"]);
                let name = self.name("a user name")?;
                let (password, admin) = self.options()?;
                Account::CreateUser {
                    name,
                    if_not_exists,
                    password,
                    admin,
                }
            }
        } else if self.keyword("ALTER") {
            self.user_kind()?;
            let name = self.name("a user name")?;
            let (password, admin) = self.options()?;
            if password.is_none() && admin.is_none() {
                return Err(self.expected("PASSWORD, SUPERUSER or NOSUPERUSER"));
            }
            Account::AlterUser {
                name,
                password,
                admin,
            }
        } else if self.keyword("DROP") {
            if self.keyword("TOKEN") {
                let if_exists = self.keywords(&["IF", "EXISTS"]);
                let name = self.name("a token name")?;
                Account::DropToken { name, if_exists }
            } else {
                self.user_kind()?;
                let if_exists = self.keywords(&["IF", "EXISTS"]);
                let names = self.names("a user name", Self::name)?;
                Account::DropUser { names, if_exists }
            }
        } else if self.keyword("GRANT") {
            self.grant(true)?
        } else if self.keyword("REVOKE") {
            self.grant(false)?
        } else {
            self.expect("SHOW")?;
            if self.keyword("USERS") {
                Account::ShowUsers
            } else {
                self.expect("TOKENS")?;
                Account::ShowTokens
            }
        };
        self.end()?;
        Ok(stmt)
    }

    fn user_kind(&mut self) -> Result<()> {
        match self.keyword("USER") || self.keyword("ROLE") {
            true => Ok(()),
            false => Err(self.expected("USER or ROLE")),
        }
    }

    /// `[WITH] [PASSWORD 'pw' | PASSWORD NULL] [SUPERUSER | NOSUPERUSER |
    /// ADMIN | LOGIN | NOLOGIN ...]`.
    fn options(&mut self) -> Result<(Option<Secret>, Option<bool>)> {
        self.keyword("WITH");
        let (mut password, mut admin) = (None, None);
        loop {
            if self.keyword("PASSWORD") {
                password = Some(Secret(self.string("a quoted password")?));
            } else if self.keyword("SUPERUSER") || self.keyword("ADMIN") {
                admin = Some(true);
            } else if self.keyword("NOSUPERUSER") || self.keyword("NOADMIN") {
                admin = Some(false);
            } else if self.keyword("LOGIN") || self.keyword("INHERIT") {
                // Every Kiln user may log in.
            } else if matches!(self.peek(), Token::SemiColon | Token::EOF) {
                return Ok((password, admin));
            } else {
                return Err(self.expected("PASSWORD, SUPERUSER or NOSUPERUSER"));
            }
        }
    }

    fn grant(&mut self, grant: bool) -> Result<Account> {
        let to = if grant { "TO" } else { "FROM" };
        if self.keyword("ADMIN") {
            self.expect(to)?;
            let users = self.names("a user name", Self::name)?;
            return Ok(Account::Admin { grant, users });
        }
        let mut privileges = Privileges::default();
        loop {
            if self.keyword("SELECT") {
                privileges.select = true;
            } else if self.keyword("INSERT") {
                privileges.insert = true;
            } else if self.keyword("ALL") {
                self.keyword("PRIVILEGES");
                privileges = Privileges::ALL;
            } else {
                return Err(self.expected("SELECT, INSERT or ALL"));
            }
            if !matches!(self.peek(), Token::Comma) {
                break;
            }
            self.at += 1;
        }
        self.expect("ON")?;
        let on = if self.keywords(&["ALL", "TABLES"]) {
            if self.keywords(&["IN", "SCHEMA"]) {
                self.name("a schema name")?;
            }
            Target::AllTables
        } else {
            self.keyword("TABLE");
            Target::Tables(self.names("a table name", |p, _| p.table())?)
        };
        self.expect(to)?;
        let users = self.names("a user name", Self::name)?;
        Ok(Account::Grant {
            grant,
            privileges,
            on,
            users,
        })
    }

    fn create_token(&mut self) -> Result<Account> {
        let name = self.name("a token name")?;
        self.expect("FOR")?;
        let user = self.name("a user name")?;
        let expires = if self.keyword("EXPIRES") {
            if self.keyword("IN") {
                let text = self.string("a quoted duration ('30 days')")?;
                let d = humantime::parse_duration(&text).map_err(|e| {
                    syntax(format!(
                        "EXPIRES IN: not a duration ('30 days', '12h'): {e}"
                    ))
                })?;
                Some(Expiry::In(d))
            } else {
                self.expect("AT")?;
                let text = self.string("a quoted timestamp ('2027-01-01T00:00:00Z')")?;
                let at = chrono::DateTime::parse_from_rfc3339(&text)
                    .map_err(|e| {
                        syntax(format!(
                            "EXPIRES AT: not an RFC 3339 timestamp ('2027-01-01T00:00:00Z'): {e}"
                        ))
                    })?
                    .timestamp_nanos_opt()
                    .ok_or_else(|| syntax("EXPIRES AT: timestamp out of range"))?;
                Some(Expiry::At(at))
            }
        } else {
            None
        };
        Ok(Account::CreateToken {
            name,
            user,
            expires,
        })
    }
}
