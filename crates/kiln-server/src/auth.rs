//! Authentication at the server's doors: whether it is on (`--auth`), the
//! first admin's password, and who an HTTP request is (Basic or a bearer
//! token). The PostgreSQL protocol's login (SCRAM-SHA-256) is in
//! `pg::startup`; users, privileges and their checks are the query layer's
//! ([`kiln_query::auth`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::{Args, ValueEnum};
use kiln_query::Engine;
use kiln_query::auth::Auth;

use crate::error::ApiError;

/// Whether clients must log in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// On unless every listener is on a loopback address.
    Auto,
    On,
    Off,
}

/// A secret given on the command line or in the environment: never shown
/// by `Debug` (the configuration may be logged).
#[derive(Clone)]
pub struct Secret(String);

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("'***'")
    }
}

/// Authentication settings.
#[derive(Clone, Debug, Args)]
pub struct AuthConfig {
    /// Whether clients must log in (SCRAM-SHA-256 on the PostgreSQL port;
    /// Basic or a bearer token over HTTP): `auto` is on unless both
    /// listeners are on loopback addresses.
    #[arg(long = "auth", env = "KILN_AUTH", value_enum, default_value = "auto")]
    pub mode: AuthMode,

    /// Password of the admin user `admin` (made if missing, reset to this
    /// if it differs) when authentication is on. Without it, or
    /// --admin-password-file, an admin must already exist.
    #[arg(long, env = "KILN_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<Secret>,

    /// A file whose first line is the admin password (instead of
    /// --admin-password, so it is not in the process's arguments).
    #[arg(long, env = "KILN_ADMIN_PASSWORD_FILE")]
    pub admin_password_file: Option<PathBuf>,
}

impl AuthConfig {
    /// Whether authentication is on for a server listening on `addrs`.
    pub fn on(&self, addrs: &[SocketAddr]) -> bool {
        match self.mode {
            AuthMode::On => true,
            AuthMode::Off => false,
            AuthMode::Auto => !addrs.iter().all(|a| a.ip().is_loopback()),
        }
    }

    /// The admin password from the flag, the environment or the file.
    fn admin_password(&self) -> Result<Option<String>, String> {
        if let Some(p) = &self.admin_password {
            return Ok(Some(p.0.clone()));
        }
        let Some(path) = &self.admin_password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading --admin-password-file {}: {e}", path.display()))?;
        let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
        if line.is_empty() {
            return Err(format!(
                "--admin-password-file {}: the first line is empty",
                path.display()
            ));
        }
        Ok(Some(line.to_string()))
    }

    /// Turns authentication on in `engine` if it is on for `addrs`; an
    /// error (the server does not start) when it is on and there is no
    /// admin password.
    pub fn apply(&self, engine: &Engine, addrs: &[SocketAddr]) -> Result<bool, String> {
        if !self.on(addrs) {
            if !addrs.iter().all(|a| a.ip().is_loopback()) {
                tracing::warn!(
                    "--auth off on a non-loopback address: anyone who can reach the server can read, write and drop every table"
                );
            }
            return Ok(false);
        }
        let password = self.admin_password()?;
        engine.auth().enable(password.as_deref()).map_err(|e| {
            let why = if self.mode == AuthMode::Auto {
                " (authentication is on because a listener is not on loopback; --auth off turns it off)"
            } else {
                ""
            };
            format!("{e}{why}")
        })?;
        Ok(true)
    }
}

/// Who sent an HTTP request: `None` when authentication is off.
#[derive(Clone, Debug)]
pub struct Identity(pub Option<Arc<str>>);

/// Paths anyone may call: load balancers' probes and the metrics scraper.
pub const OPEN_PATHS: [&str; 3] = ["/health", "/ready", "/metrics"];

/// Who an HTTP request with `headers` is: its `Authorization` (Basic user
/// and password, or Bearer token) checked; 401 when missing or wrong
/// (counted, logged without the secret).
pub async fn identify(auth: &Arc<Auth>, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let refuse = |why: &str, user: Option<&str>| {
        auth.counters.http_failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(user, why, "http login refused");
        ApiError::unauthenticated(why)
    };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(refuse(
            "authentication required: send Authorization: Basic (user and password) or Bearer (a token from CREATE TOKEN)",
            None,
        ));
    };
    let (scheme, credentials) = value.trim().split_once(' ').unwrap_or((value, ""));
    let credentials = credentials.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return match auth.login_token(credentials) {
            Ok(user) => Ok(Identity(Some(user))),
            Err(e) => Err(refuse(&e.to_string(), None)),
        };
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(refuse(
            "unsupported Authorization scheme (Basic or Bearer)",
            None,
        ));
    }
    let decoded = STANDARD
        .decode(credentials)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let Some((user, password)) = decoded.as_deref().and_then(|d| d.split_once(':')) else {
        return Err(refuse(
            "malformed Basic credentials (base64 of user:password)",
            None,
        ));
    };
    if let Some(u) = auth.checked(user, password) {
        return Ok(Identity(Some(u)));
    }
    // PBKDF2 takes milliseconds by design: off the async threads.
    let (a, u, p) = (auth.clone(), user.to_string(), password.to_string());
    match tokio::task::spawn_blocking(move || a.login_password(&u, &p)).await {
        Ok(Ok(user)) => Ok(Identity(Some(user))),
        Ok(Err(e)) => Err(refuse(&e.to_string(), Some(user))),
        Err(e) => Err(ApiError::internal(format!("checking a password: {e}"))),
    }
}
