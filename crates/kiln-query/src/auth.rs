//! [`Auth`]: who may connect, and what each user may do.
//!
//! With authentication off (the default when every listener is on
//! loopback) every client may do everything, as before users existed. With
//! it on, a PostgreSQL client logs in with SCRAM-SHA-256 ([`scram`]), an
//! HTTP client with Basic (the same users and passwords) or a bearer token
//! made by `CREATE TOKEN`, and every statement is checked in the engine
//! (the one door) against the user's privileges:
//! - an admin may do everything;
//! - any other user may read a table with `SELECT` on it (or on all
//!   tables), write it (INSERT, COPY FROM STDIN, the HTTP write API) with
//!   `INSERT`, read the catalogs and `system.*`, change their own password,
//!   and nothing else: DDL, users, tokens, server files and `KILL` are an
//!   admin's.
//!
//! Users and tokens are kept in `users.json` in the data directory,
//! replaced atomically on every change: passwords as SCRAM verifiers,
//! tokens as SHA-256 hashes, so the file lets no one log in. Privileges
//! are looked up at each check, so a `REVOKE` applies to open sessions at
//! their next statement.

pub mod scram;
pub mod statement;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use dashmap::DashMap;
use kiln_storage::Clock;
use parking_lot::Mutex;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use scram::Verifier;
pub use statement::{Account, Expiry, Privileges, Secret, Target};

/// The first admin's name (`--auth on` makes it from `--admin-password`).
pub const ADMIN: &str = "admin";

/// The file users and tokens are kept in, in the data directory.
pub const USERS_FILE: &str = "users.json";

/// Prefix of every token, so a leaked one is recognisable in a scan.
pub const TOKEN_PREFIX: &str = "kiln_";

/// What a statement needs.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// Reading the table (`SELECT`).
    Read(&'a str),
    /// Writing rows into the table (`INSERT`, COPY FROM STDIN, HTTP write).
    Write(&'a str),
    /// Something only an admin may do; names it for the error.
    Admin(&'a str),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct User {
    #[serde(default)]
    admin: bool,
    /// None: the user cannot log in (no password set yet).
    verifier: Option<Verifier>,
    #[serde(default)]
    all_tables: Privileges,
    #[serde(default)]
    tables: BTreeMap<String, Privileges>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Token {
    user: String,
    /// Hex SHA-256 of the token.
    hash: String,
    created_ns: i64,
    expires_ns: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    users: BTreeMap<String, User>,
    tokens: BTreeMap<String, Token>,
}

/// Login failures and refusals, for `/metrics`.
#[derive(Debug, Default)]
pub struct AuthCounters {
    /// Failed logins over the PostgreSQL protocol.
    pub pg_failed: AtomicU64,
    /// Failed logins over HTTP (bad password, unknown, expired or
    /// revoked token, no credentials).
    pub http_failed: AtomicU64,
    /// Statements refused for want of a privilege.
    pub denied: AtomicU64,
}

/// The result of an account statement.
#[derive(Debug)]
pub enum AccountOutput {
    Command(&'static str),
    Rows(RecordBatch),
}

/// Users, their privileges and tokens; see the module docs.
pub struct Auth {
    enabled: AtomicBool,
    path: PathBuf,
    /// Read without a lock by every login and statement check; replaced
    /// whole by a change.
    state: ArcSwap<State>,
    /// Serialises changes (each rewrites the file).
    changing: Mutex<()>,
    /// HTTP Basic credentials already checked: a hash of user and password
    /// to the user. PBKDF2 costs milliseconds by design; a dashboard
    /// sending the same Basic header with every request pays it once.
    /// Emptied on every change.
    checked: DashMap<Vec<u8>, Arc<str>>,
    clock: Arc<dyn Clock>,
    random: SystemRandom,
    /// Random per process: salts answered for unknown users are derived
    /// from it, so they look like real ones and stay the same.
    mock_key: [u8; 32],
    pub counters: AuthCounters,
}

/// Entries kept in [`Auth::checked`] at most.
const CHECKED_MAX: usize = 4096;

fn sha256(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn denied(msg: String) -> Error {
    Error::PermissionDenied(msg)
}

impl Auth {
    /// Reads `data_dir`'s users (none if the file does not exist yet);
    /// authentication starts off ([`Auth::enable`]).
    pub fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Self> {
        let path = data_dir.join(USERS_FILE);
        let state = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Io {
                context: format!("reading {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(source) => {
                return Err(Error::Io {
                    context: format!("reading {}", path.display()),
                    source,
                });
            }
        };
        let random = SystemRandom::new();
        let mut mock_key = [0u8; 32];
        random.fill(&mut mock_key).map_err(|_| Error::Io {
            context: "reading the system's random source".into(),
            source: std::io::Error::other("no randomness"),
        })?;
        Ok(Self {
            enabled: AtomicBool::new(false),
            path,
            state: ArcSwap::from_pointee(state),
            changing: Mutex::new(()),
            checked: DashMap::new(),
            clock,
            random,
            mock_key,
            counters: AuthCounters::default(),
        })
    }

    /// Turns authentication on. `admin_password` (the server's
    /// `--admin-password`) sets the password of the admin user `admin`,
    /// creating it; without one, an admin with a password must already
    /// exist.
    pub fn enable(&self, admin_password: Option<&str>) -> Result<()> {
        match admin_password {
            Some(pw) => {
                let verifier = self.verifier_for(pw)?;
                self.change(|s| {
                    let user = s.users.entry(ADMIN.into()).or_insert_with(|| User {
                        admin: true,
                        verifier: None,
                        all_tables: Privileges::default(),
                        tables: BTreeMap::new(),
                    });
                    user.admin = true;
                    if !user.verifier.as_ref().is_some_and(|v| v.matches(pw)) {
                        user.verifier = Some(verifier);
                    }
                    Ok(())
                })?;
            }
            None => {
                let has_admin = self
                    .state
                    .load()
                    .users
                    .values()
                    .any(|u| u.admin && u.verifier.is_some());
                if !has_admin {
                    return Err(Error::PermissionDenied(
                        "authentication is on and no admin has a password: give one with --admin-password, KILN_ADMIN_PASSWORD or --admin-password-file".into(),
                    ));
                }
            }
        }
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether clients must log in.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    fn random_bytes<const N: usize>(&self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        self.random.fill(&mut out).map_err(|_| Error::Io {
            context: "reading the system's random source".into(),
            source: std::io::Error::other("no randomness"),
        })?;
        Ok(out)
    }

    /// A new verifier of `password` with a fresh salt.
    fn verifier_for(&self, password: &str) -> Result<Verifier> {
        if password.is_empty() {
            return Err(Error::Sql("a password may not be empty".into()));
        }
        let salt: [u8; 16] = self.random_bytes()?;
        Ok(Verifier::new(password, &salt, scram::ITERATIONS))
    }

    /// A random nonce for a SCRAM exchange (printable, no comma).
    pub fn nonce(&self) -> Result<String> {
        Ok(URL_SAFE_NO_PAD.encode(self.random_bytes::<18>()?))
    }

    /// The verifier a SCRAM exchange for `user` checks against: the user's,
    /// or, for a user who does not exist or has no password, one no
    /// password matches, with a salt that stays the same for that name (so
    /// the exchange does not tell whether the user exists).
    pub fn scram_verifier(&self, user: &str) -> (Verifier, bool) {
        if let Some(v) = self
            .state
            .load()
            .users
            .get(user)
            .and_then(|u| u.verifier.clone())
        {
            return (v, true);
        }
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.mock_key);
        let salt = ring::hmac::sign(&key, user.as_bytes());
        let mut v = Verifier::new("", &salt.as_ref()[..16], scram::ITERATIONS);
        v.stored_key = String::new();
        (v, false)
    }

    /// The user of HTTP Basic credentials checked before (and unchanged
    /// since): no password hashing.
    pub fn checked(&self, user: &str, password: &str) -> Option<Arc<str>> {
        let key = sha256(format!("{user}\0{password}").as_bytes());
        self.checked.get(&key).map(|u| u.clone())
    }

    /// The user HTTP Basic credentials log in as (`Err`: refused, with a
    /// message that does not say whether the user exists). Hashes the
    /// password (milliseconds) unless [`Auth::checked`] knows it.
    pub fn login_password(&self, user: &str, password: &str) -> Result<Arc<str>> {
        let key = sha256(format!("{user}\0{password}").as_bytes());
        if let Some(u) = self.checked.get(&key) {
            return Ok(u.clone());
        }
        let verifier = self
            .state
            .load()
            .users
            .get(user)
            .and_then(|u| u.verifier.clone());
        match verifier {
            Some(v) if v.matches(password) => {
                let name: Arc<str> = user.into();
                if self.checked.len() >= CHECKED_MAX {
                    self.checked.clear();
                }
                self.checked.insert(key, name.clone());
                Ok(name)
            }
            found => {
                if found.is_none() {
                    // As long as for a user who exists: the time taken does
                    // not tell whether the user does.
                    let _ = self.scram_verifier(user).0.matches(password);
                }
                Err(Error::AuthFailed(format!(
                    "password authentication failed for user \"{user}\""
                )))
            }
        }
    }

    /// The user a bearer token logs in as (`Err`: unknown, revoked or
    /// expired; the message says which, never the token).
    pub fn login_token(&self, token: &str) -> Result<Arc<str>> {
        let hash = hex(&sha256(token.as_bytes()));
        let state = self.state.load();
        let Some((name, t)) = state.tokens.iter().find(|(_, t)| t.hash == hash) else {
            return Err(Error::AuthFailed(
                "invalid token (unknown or revoked)".into(),
            ));
        };
        if t.expires_ns.is_some_and(|e| e <= self.clock.now_ns()) {
            return Err(Error::AuthFailed(format!("token \"{name}\" has expired")));
        }
        if !state.users.contains_key(&t.user) {
            return Err(Error::AuthFailed(format!(
                "token \"{name}\": its user no longer exists"
            )));
        }
        Ok(t.user.as_str().into())
    }

    /// Whether `user` may do `access`; refusals are counted.
    pub fn authorize(&self, user: &str, access: Access<'_>) -> Result<()> {
        let state = self.state.load();
        let Some(u) = state.users.get(user) else {
            self.counters.denied.fetch_add(1, Ordering::Relaxed);
            return Err(denied(format!("user \"{user}\" no longer exists")));
        };
        if u.admin {
            return Ok(());
        }
        let table_privileges = |t: &str| {
            let own = u.tables.get(t).copied().unwrap_or_default();
            Privileges {
                select: own.select || u.all_tables.select,
                insert: own.insert || u.all_tables.insert,
            }
        };
        let refused = match access {
            Access::Read(t) if table_privileges(t).select => return Ok(()),
            Access::Write(t) if table_privileges(t).insert => return Ok(()),
            Access::Read(t) => format!("table {t}: user \"{user}\" has no SELECT privilege on it"),
            Access::Write(t) => format!("table {t}: user \"{user}\" has no INSERT privilege on it"),
            Access::Admin(what) => format!("{what} needs an admin, and user \"{user}\" is not one"),
        };
        self.counters.denied.fetch_add(1, Ordering::Relaxed);
        Err(denied(refused))
    }

    /// Applies `change` to a copy of the state, writes it to the file, then
    /// makes it current: a failed write changes nothing.
    fn change(&self, change: impl FnOnce(&mut State) -> Result<()>) -> Result<()> {
        let _one = self.changing.lock();
        let mut next = State::clone(&self.state.load());
        change(&mut next)?;
        let bytes = serde_json::to_vec_pretty(&next).map_err(|e| Error::Io {
            context: "encoding users".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        kiln_storage::replace_file(&self.path, &bytes).map_err(|source| Error::Io {
            context: format!("writing {}", self.path.display()),
            source,
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600));
        }
        self.state.store(Arc::new(next));
        self.checked.clear();
        Ok(())
    }

    /// Runs an account statement for `by` (`None`: authentication is off,
    /// or the embedded engine, which may do everything).
    pub fn execute(&self, by: Option<&str>, stmt: Account) -> Result<AccountOutput> {
        let own_password = matches!(
            &stmt,
            Account::AlterUser { name, admin: None, .. } if Some(name.as_str()) == by
        );
        if let Some(by) = by
            && !own_password
        {
            self.authorize(
                by,
                Access::Admin(&format!("{} (users, privileges and tokens)", stmt.tag())),
            )?;
        }
        let tag = stmt.tag();
        match stmt {
            Account::CreateUser {
                name,
                if_not_exists,
                password,
                admin,
            } => {
                let verifier = password.map(|p| self.verifier_for(&p.0)).transpose()?;
                self.change(|s| {
                    if s.users.contains_key(&name) {
                        return match if_not_exists {
                            true => Ok(()),
                            false => Err(Error::DuplicateObject(format!(
                                "role \"{name}\" already exists"
                            ))),
                        };
                    }
                    s.users.insert(
                        name,
                        User {
                            admin: admin.unwrap_or(false),
                            verifier,
                            all_tables: Privileges::default(),
                            tables: BTreeMap::new(),
                        },
                    );
                    Ok(())
                })?;
            }
            Account::AlterUser {
                name,
                password,
                admin,
            } => {
                let verifier = password.map(|p| self.verifier_for(&p.0)).transpose()?;
                self.change(|s| {
                    let admins = s.users.values().filter(|u| u.admin).count();
                    let user = s.users.get_mut(&name).ok_or_else(|| no_user(&name))?;
                    if admin == Some(false) && user.admin && admins == 1 {
                        return Err(last_admin(&name));
                    }
                    if let Some(v) = verifier {
                        user.verifier = Some(v);
                    }
                    if let Some(a) = admin {
                        user.admin = a;
                    }
                    Ok(())
                })?;
            }
            Account::DropUser { names, if_exists } => self.change(|s| {
                for name in &names {
                    let Some(user) = s.users.get(name) else {
                        if if_exists {
                            continue;
                        }
                        return Err(no_user(name));
                    };
                    if user.admin && s.users.values().filter(|u| u.admin).count() == 1 {
                        return Err(last_admin(name));
                    }
                    if by == Some(name.as_str()) {
                        return Err(Error::PermissionDenied(
                            "a user may not drop themselves".into(),
                        ));
                    }
                    s.users.remove(name);
                    s.tokens.retain(|_, t| &t.user != name);
                }
                Ok(())
            })?,
            Account::Grant {
                grant,
                privileges,
                on,
                users,
            } => self.change(|s| {
                for name in &users {
                    let user = s.users.get_mut(name).ok_or_else(|| no_user(name))?;
                    match &on {
                        Target::AllTables => {
                            user.all_tables = user.all_tables.with(privileges, grant);
                        }
                        Target::Tables(tables) => {
                            for t in tables {
                                let p = user.tables.entry(t.clone()).or_default();
                                *p = p.with(privileges, grant);
                                if !p.any() {
                                    user.tables.remove(t);
                                }
                            }
                        }
                    }
                }
                Ok(())
            })?,
            Account::Admin { grant, users } => self.change(|s| {
                for name in &users {
                    let admins = s.users.values().filter(|u| u.admin).count();
                    let user = s.users.get_mut(name).ok_or_else(|| no_user(name))?;
                    if !grant && user.admin && admins == 1 {
                        return Err(last_admin(name));
                    }
                    user.admin = grant;
                }
                Ok(())
            })?,
            Account::CreateToken {
                name,
                user,
                expires,
            } => return self.create_token(name, user, expires),
            Account::DropToken { name, if_exists } => {
                self.change(|s| match (s.tokens.remove(&name), if_exists) {
                    (Some(_), _) | (None, true) => Ok(()),
                    (None, false) => Err(Error::UndefinedObject(format!(
                        "token \"{name}\" does not exist"
                    ))),
                })?
            }
            Account::ShowUsers => return Ok(AccountOutput::Rows(self.users_batch())),
            Account::ShowTokens => return Ok(AccountOutput::Rows(self.tokens_batch())),
        }
        Ok(AccountOutput::Command(tag))
    }

    fn create_token(
        &self,
        name: String,
        user: String,
        expires: Option<Expiry>,
    ) -> Result<AccountOutput> {
        let secret = format!(
            "{TOKEN_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(self.random_bytes::<32>()?)
        );
        let now = self.clock.now_ns();
        let expires_ns = match expires {
            None => None,
            Some(Expiry::At(at)) => Some(at),
            Some(Expiry::In(d)) => {
                Some(now.saturating_add(d.as_nanos().min(i64::MAX as u128) as i64))
            }
        };
        self.change(|s| {
            if !s.users.contains_key(&user) {
                return Err(no_user(&user));
            }
            if s.tokens.contains_key(&name) {
                return Err(Error::DuplicateObject(format!(
                    "token \"{name}\" already exists"
                )));
            }
            s.tokens.insert(
                name.clone(),
                Token {
                    user: user.clone(),
                    hash: hex(&sha256(secret.as_bytes())),
                    created_ns: now,
                    expires_ns,
                },
            );
            Ok(())
        })?;
        let schema = token_schema();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![name])),
            Arc::new(StringArray::from(vec![user])),
            Arc::new(StringArray::from(vec![secret])),
            Arc::new(StringArray::from(vec![expires_ns.map(rfc3339)])),
        ];
        Ok(AccountOutput::Rows(
            RecordBatch::try_new(schema, columns).expect("columns match the schema"),
        ))
    }

    /// `SHOW USERS`: name, admin, privileges (never a password).
    fn users_batch(&self) -> RecordBatch {
        let state = self.state.load();
        let mut names = vec![];
        let mut admins = vec![];
        let mut privileges = vec![];
        for (name, u) in &state.users {
            names.push(name.clone());
            admins.push(u.admin);
            let mut parts = vec![];
            if u.all_tables.any() {
                parts.push(format!("ALL TABLES: {}", u.all_tables));
            }
            parts.extend(u.tables.iter().map(|(t, p)| format!("{t}: {p}")));
            privileges.push(parts.join("; "));
        }
        let schema = users_schema();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(names)),
            Arc::new(BooleanArray::from(admins)),
            Arc::new(StringArray::from(privileges)),
        ];
        RecordBatch::try_new(schema, columns).expect("columns match the schema")
    }

    /// `SHOW TOKENS`: name, user, created, expiry (never the token).
    fn tokens_batch(&self) -> RecordBatch {
        let state = self.state.load();
        let now = self.clock.now_ns();
        let tokens: Vec<(&String, &Token)> = state.tokens.iter().collect();
        let text = |f: &dyn Fn(&(&String, &Token)) -> String| -> ArrayRef {
            Arc::new(StringArray::from(tokens.iter().map(f).collect::<Vec<_>>()))
        };
        let columns: Vec<ArrayRef> = vec![
            text(&|(name, _)| name.to_string()),
            text(&|(_, t)| t.user.clone()),
            text(&|(_, t)| rfc3339(t.created_ns)),
            Arc::new(StringArray::from(
                tokens
                    .iter()
                    .map(|(_, t)| t.expires_ns.map(rfc3339))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                tokens
                    .iter()
                    .map(|(_, t)| t.expires_ns.is_some_and(|e| e <= now))
                    .collect::<Vec<_>>(),
            )),
        ];
        let schema = tokens_schema();
        RecordBatch::try_new(schema, columns).expect("columns match the schema")
    }
}

/// The columns `stmt`'s result has; `None`: it answers with a command tag.
pub fn result_schema(stmt: &Account) -> Option<SchemaRef> {
    match stmt {
        Account::CreateToken { .. } => Some(token_schema()),
        Account::ShowUsers => Some(users_schema()),
        Account::ShowTokens => Some(tokens_schema()),
        _ => None,
    }
}

/// `CREATE TOKEN`'s one row: the token, shown this once.
fn token_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("user", DataType::Utf8, false),
        Field::new("token", DataType::Utf8, false),
        Field::new("expires_at", DataType::Utf8, true),
    ]))
}

fn users_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("admin", DataType::Boolean, false),
        Field::new("privileges", DataType::Utf8, false),
    ]))
}

fn tokens_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("user", DataType::Utf8, false),
        Field::new("created_at", DataType::Utf8, false),
        Field::new("expires_at", DataType::Utf8, true),
        Field::new("expired", DataType::Boolean, false),
    ]))
}

fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn no_user(name: &str) -> Error {
    Error::UndefinedObject(format!("role \"{name}\" does not exist"))
}

fn last_admin(name: &str) -> Error {
    Error::PermissionDenied(format!(
        "\"{name}\" is the last admin: make another user an admin first"
    ))
}

#[cfg(test)]
mod tests;
