//! What clients read to learn which server they talk to: `version()`,
//! `current_setting()`, `SHOW name`, `SHOW ALL`, and `to_regtype()` (the
//! types psycopg looks up when SQLAlchemy connects); and the catalog
//! functions whose answer for any Kiln object is NULL (`obj_description`,
//! `pg_get_indexdef`, ...; [`Constant::no_catalog_entry`]).
//!
//! Why: drivers and BI tools decide how to talk from these. SQLAlchemy
//! parses `version()` for `PostgreSQL X.Y` and refused to connect to
//! DataFusion's `Apache DataFusion 55...`; Grafana and pgjdbc read
//! `server_version_num`, `TimeZone`, `standard_conforming_strings` and the
//! like, and got blank columns. Kiln answers as the PostgreSQL version whose
//! wire protocol and catalogs it follows, naming itself in `version()`.
//! Values a session changed with `SET` (kept in the connection's metadata)
//! are shown by `SHOW`; `current_setting()` is a function of the shared
//! session and shows the server's defaults.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::{DFSchema, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::hooks::HookClient;

use super::hook::Answer;
use datafusion_postgres::pgwire::api::ClientInfo;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::results::Response;
use datafusion_postgres::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};

/// The PostgreSQL release whose protocol and catalogs Kiln follows.
pub const PG_VERSION: &str = "16.6";
const PG_VERSION_NUM: &str = "160006";

/// `version()`: PostgreSQL's format, naming Kiln.
pub fn version() -> String {
    format!(
        "PostgreSQL {PG_VERSION} (Kiln {}) on {}-pc-linux-gnu, compiled by rustc, 64-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// Settings clients read: name as PostgreSQL spells it, server default,
/// description.
const SETTINGS: &[(&str, &str, &str)] = &[
    (
        "application_name",
        "",
        "Sets the application name to be reported in statistics and logs.",
    ),
    ("bytea_output", "hex", "Sets the output format for bytea."),
    (
        "client_encoding",
        "UTF8",
        "Sets the client's character set encoding.",
    ),
    (
        "DateStyle",
        "ISO, MDY",
        "Sets the display format for date and time values.",
    ),
    (
        "default_transaction_isolation",
        "read committed",
        "Sets the transaction isolation level of each new transaction.",
    ),
    (
        "default_transaction_read_only",
        "off",
        "Sets the default read-only status of new transactions.",
    ),
    (
        "extra_float_digits",
        "1",
        "Sets the number of digits displayed for floating-point values.",
    ),
    (
        "integer_datetimes",
        "on",
        "Shows whether datetimes are integer based.",
    ),
    (
        "IntervalStyle",
        "postgres",
        "Sets the display format for interval values.",
    ),
    (
        "is_superuser",
        "on",
        "Shows whether the current user is a superuser.",
    ),
    ("lc_collate", "C.UTF-8", "Shows the collation order locale."),
    (
        "lc_ctype",
        "C.UTF-8",
        "Shows the character classification and case conversion locale.",
    ),
    (
        "max_identifier_length",
        "63",
        "Shows the maximum identifier length.",
    ),
    (
        "max_index_keys",
        "32",
        "Shows the maximum number of index keys.",
    ),
    (
        "search_path",
        "\"$user\", public",
        "Sets the schema search order for names that are not schema-qualified.",
    ),
    (
        "server_encoding",
        "UTF8",
        "Shows the server (database) character set encoding.",
    ),
    ("server_version", PG_VERSION, "Shows the server version."),
    (
        "server_version_num",
        PG_VERSION_NUM,
        "Shows the server version as an integer.",
    ),
    (
        "standard_conforming_strings",
        "on",
        "Causes '...' strings to treat backslashes literally.",
    ),
    (
        "statement_timeout",
        "0",
        "Sets the maximum allowed duration of any statement.",
    ),
    (
        "TimeZone",
        "UTC",
        "Sets the time zone for displaying and interpreting time stamps.",
    ),
    (
        "transaction_isolation",
        "read committed",
        "Sets the current transaction's isolation level.",
    ),
    (
        "transaction_read_only",
        "off",
        "Sets the current transaction's read-only status.",
    ),
];

/// Settings PostgreSQL fixes when it is built or started, and how it says
/// so: `SET` refuses them (55P02) as PostgreSQL does, where it used to be
/// ignored.
const FIXED: &[(&str, &str)] = &[
    ("lc_collate", ""),
    ("lc_ctype", ""),
    ("max_connections", " without restarting the server"),
    ("max_identifier_length", ""),
    ("max_index_keys", ""),
    ("server_encoding", ""),
    ("server_version", ""),
    ("server_version_num", ""),
];

/// Why a `SET` of a fixed setting is refused, if `stmt` is one.
fn sets_fixed(stmt: &Statement) -> Option<String> {
    use datafusion::sql::sqlparser::ast::Set;
    let Statement::Set(Set::SingleAssignment { variable, .. }) = stmt else {
        return None;
    };
    let name = variable.to_string();
    FIXED
        .iter()
        .find(|(f, _)| f.eq_ignore_ascii_case(&name))
        .map(|(f, when)| format!("parameter \"{f}\" cannot be changed{when}"))
}

/// The settings a server shows: [`SETTINGS`] and those its flags give
/// (`max_connections` is `--pg-max-connections`), by name.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Settings(Vec<super::pg_catalog::Setting>);

impl Settings {
    /// The settings of a server of at most `max_connections` PostgreSQL
    /// connections.
    pub fn new(max_connections: u32) -> Self {
        let mut all: Vec<_> = SETTINGS
            .iter()
            .map(|(n, v, d)| (n.to_string(), v.to_string(), d.to_string()))
            .collect();
        all.push((
            "max_connections".into(),
            max_connections.to_string(),
            "Sets the maximum number of concurrent connections.".into(),
        ));
        all.sort_by_key(|(n, ..)| n.to_ascii_lowercase());
        Self(all)
    }

    /// Every setting: name, server value, description (`pg_settings`).
    pub(super) fn all(&self) -> Vec<super::pg_catalog::Setting> {
        self.0.clone()
    }

    /// The setting `name` names (case-insensitively), if Kiln knows it.
    fn get(&self, name: &str) -> Option<&super::pg_catalog::Setting> {
        self.0.iter().find(|(n, ..)| n.eq_ignore_ascii_case(name))
    }
}

fn unknown(name: &str) -> String {
    format!("unrecognized configuration parameter \"{name}\"")
}

/// `name`'s value in `client`'s session: what it `SET`, else the default
/// (always the server's for a fixed setting).
fn session_value(client: &dyn ClientInfo, name: &str, default: &str) -> String {
    if FIXED.iter().any(|(f, _)| f.eq_ignore_ascii_case(name)) {
        return default.to_string();
    }
    let metadata = client.metadata();
    match name {
        "statement_timeout" => metadata
            .get(super::STATEMENT_TIMEOUT_MS)
            .map_or_else(|| default.to_string(), |ms| format!("{ms}ms")),
        _ => metadata
            .get(&name.to_ascii_lowercase())
            .cloned()
            .unwrap_or_else(|| default.to_string()),
    }
}

/// `version()`, `current_setting(name [, missing_ok])` (of `settings`),
/// `pg_is_in_recovery()` and Kiln's `session_user`, registered over
/// DataFusion's `version()` and pg_catalog's `session_user`.
pub fn register_functions(ctx: &SessionContext, settings: Arc<Settings>) {
    ctx.register_udf(ScalarUDF::from(Constant::version()));
    ctx.register_udf(ScalarUDF::from(CurrentSetting::new(settings)));
    ctx.register_udf(ScalarUDF::from(ToRegtype::new()));
    ctx.register_udf(ScalarUDF::from(Constant::no_serial_sequence()));
    ctx.register_udf(ScalarUDF::from(Constant::not_in_recovery()));
    // pg_catalog's own answers 'postgres' whoever is connected.
    ctx.register_udf(kiln_query::functions::session_user());
    for none in Constant::no_catalog_entry() {
        ctx.register_udf(ScalarUDF::from(none));
    }
}

/// Built-in PostgreSQL types by name (and common alias), with their OIDs.
const TYPES: &[(&str, i32)] = &[
    ("bool", 16),
    ("boolean", 16),
    ("bytea", 17),
    ("int8", 20),
    ("bigint", 20),
    ("int2", 21),
    ("smallint", 21),
    ("int4", 23),
    ("integer", 23),
    ("int", 23),
    ("text", 25),
    ("json", 114),
    ("float4", 700),
    ("real", 700),
    ("float8", 701),
    ("double precision", 701),
    ("varchar", 1043),
    ("character varying", 1043),
    ("date", 1082),
    ("time", 1083),
    ("timestamp", 1114),
    ("timestamp without time zone", 1114),
    ("timestamptz", 1184),
    ("timestamp with time zone", 1184),
    ("interval", 1186),
    ("numeric", 1700),
    ("uuid", 2950),
    ("jsonb", 3802),
];

/// `to_regtype(name)`: the OID of the type `name` names, NULL when there
/// is none (as for extension types such as `hstore`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToRegtype {
    signature: Signature,
}

impl ToRegtype {
    fn new() -> Self {
        Self {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
        }
    }
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Int32)
    }
    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let oid = |name: Option<&str>| {
            let name = name?.trim().trim_start_matches("pg_catalog.");
            TYPES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, oid)| *oid)
        };
        match &args.args[0] {
            ColumnarValue::Scalar(s) => Ok(ColumnarValue::Scalar(ScalarValue::Int32(oid(s
                .try_as_str()
                .flatten())))),
            ColumnarValue::Array(a) => {
                let names = datafusion::common::cast::as_string_array(a)?;
                let oids: arrow::array::Int32Array = names.iter().map(oid).collect();
                Ok(ColumnarValue::Array(Arc::new(oids)))
            }
        }
    }
}

/// A function whose answer does not depend on its arguments.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Constant {
    name: &'static str,
    value: ScalarValue,
    signature: Signature,
}

impl Constant {
    fn version() -> Self {
        Self {
            name: "version",
            value: ScalarValue::Utf8(Some(version())),
            signature: Signature::exact(vec![], Volatility::Stable),
        }
    }

    /// `pg_is_in_recovery()`: false, since a Kiln server is never a
    /// standby replaying another server's log. Health checks and admin
    /// tools ask it to tell a primary.
    fn not_in_recovery() -> Self {
        Self {
            name: "pg_is_in_recovery",
            value: ScalarValue::Boolean(Some(false)),
            signature: Signature::exact(vec![], Volatility::Stable),
        }
    }

    /// `pg_get_serial_sequence(table, column)`: NULL, since Kiln has no
    /// sequences (what PostgreSQL answers for a column without one).
    fn no_serial_sequence() -> Self {
        Self {
            name: "pg_get_serial_sequence",
            value: ScalarValue::Utf8(None),
            signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Stable),
        }
    }
}

impl Constant {
    /// Catalog functions whose answer is NULL for every object Kiln has,
    /// as PostgreSQL answers for an object without one: a comment
    /// (`obj_description(oid, catalog)`, `col_description(table, column)`;
    /// Kiln keeps none), an index's definition (`pg_get_indexdef(index
    /// [, column, pretty])`; Kiln has no indexes) and a function's result
    /// type (`pg_get_function_result(function)`; Kiln has no user-defined
    /// functions), whether a collation is visible (Kiln has none). pgjdbc's
    /// `getUDTs`, `getIndexInfo` and `getFunctions` and SQLAlchemy's
    /// `get_columns` call them.
    fn no_catalog_entry() -> [Self; 5] {
        let none = |name, args: &[usize]| Self {
            name,
            value: ScalarValue::Utf8(None),
            signature: Signature::one_of(
                args.iter().map(|&n| TypeSignature::Any(n)).collect(),
                Volatility::Stable,
            ),
        };
        [
            none("obj_description", &[1, 2]),
            none("col_description", &[2]),
            none("pg_get_indexdef", &[1, 3]),
            none("pg_get_function_result", &[1]),
            // Kiln has no collations: SQLAlchemy's `get_columns` asks.
            Self {
                value: ScalarValue::Boolean(None),
                ..none("pg_collation_is_visible", &[1])
            },
        ]
    }
}

impl ScalarUDFImpl for Constant {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(self.value.data_type())
    }
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
    settings: Arc<Settings>,
}

impl CurrentSetting {
    fn new(settings: Arc<Settings>) -> Self {
        Self {
            settings,
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let missing_ok = matches!(
            args.args.get(1),
            Some(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))
        );
        let lookup = |name: Option<&str>| -> datafusion::error::Result<Option<String>> {
            let Some(name) = name else { return Ok(None) };
            match self.settings.get(name) {
                Some((_, value, _)) => Ok(Some(value.clone())),
                None if missing_ok => Ok(None),
                None => exec_err!("{}", unknown(name)),
            }
        };
        match &args.args[0] {
            ColumnarValue::Scalar(s) => {
                let name = s.try_as_str().flatten();
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(lookup(name)?)))
            }
            ColumnarValue::Array(a) => {
                let names = datafusion::common::cast::as_string_array(a)?;
                let values: StringArray = names
                    .iter()
                    .map(lookup)
                    .collect::<datafusion::error::Result<_>>()?;
                Ok(ColumnarValue::Array(Arc::new(values)))
            }
        }
    }
}

/// The prefixes of the session options the engine keeps: DataFusion's and
/// Kiln's own (`kiln.cubes`).
const SESSION_OPTIONS: [&str; 2] = ["datafusion.", "kiln."];

/// Whether `name` is an option of the engine's session.
fn engine_option(name: &str) -> bool {
    SESSION_OPTIONS.iter().any(|p| name.starts_with(p))
}

/// The DataFusion options `client`'s session `SET`, for each of its queries
/// ([`kiln_query::Begin::settings`]).
pub(super) fn datafusion_settings(client: &(impl ClientInfo + ?Sized)) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = client
        .metadata()
        .iter()
        .filter(|(k, _)| engine_option(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.sort();
    out
}

/// `SET datafusion.name = value` or `SET kiln.name = value` (and `TO DEFAULT`): checked by the engine,
/// kept in the connection's metadata, applied to its queries only; the
/// shared session is never changed. A `SET` of a fixed setting
/// (`server_version`, ...) is refused. Other `SET`s go on to
/// datafusion-postgres's hook (`statement_timeout`, `DateStyle`, ...).
pub(crate) struct SetHook {
    pub engine: Arc<kiln_query::Engine>,
}

impl SetHook {
    /// The option `stmt` sets and its value as written (None: not a SET
    /// of a DataFusion option).
    fn target(stmt: &Statement) -> Option<(String, String)> {
        use datafusion::sql::sqlparser::ast::{Expr, Set, Value};
        let Statement::Set(Set::SingleAssignment {
            variable, values, ..
        }) = stmt
        else {
            return None;
        };
        let mut name = variable.to_string().to_ascii_lowercase();
        if name == "timezone" || name == "time.zone" {
            // DataFusion's alias: it would set the shared session's.
            name = "datafusion.execution.time_zone".into();
        }
        if !engine_option(&name) {
            return None;
        }
        let value = match values.first() {
            Some(Expr::Value(v)) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            Some(other) => other.to_string(),
            None => String::new(),
        };
        Some((name, value))
    }
}

#[async_trait::async_trait]
impl Answer for SetHook {
    async fn respond(
        &self,
        stmt: &Statement,
        _params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        if let Some(message) = sets_fixed(stmt) {
            return Some(Err(crate::error::ApiError::cant_change(message).to_pg()));
        }
        let (name, value) = Self::target(stmt)?;
        Some(match self.engine.check_setting(&name, &value) {
            Ok((name, Some(value))) => {
                client.metadata_mut().insert(name, value);
                Ok(Response::Execution(
                    datafusion_postgres::pgwire::api::results::Tag::new("SET"),
                ))
            }
            Ok((name, None)) => {
                client.metadata_mut().remove(&name);
                Ok(Response::Execution(
                    datafusion_postgres::pgwire::api::results::Tag::new("SET"),
                ))
            }
            Err(e) => Err(crate::error::ApiError::from(e).to_pg()),
        })
    }

    fn plan(
        &self,
        stmt: &Statement,
        _client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        if sets_fixed(stmt).is_none() {
            Self::target(stmt)?;
        }
        Some(Ok(super::no_rows(DFSchema::empty())))
    }
}

/// `SHOW name` and `SHOW ALL`, answered from [`Settings`] and the session;
/// `SHOW datafusion.name` or `SHOW kiln.name` from the session's `SET` or the server's value.
pub(crate) struct ShowHook {
    pub engine: Arc<kiln_query::Engine>,
    pub settings: Arc<Settings>,
}

impl ShowHook {
    /// The columns and rows `stmt` shows (None: not a SHOW this answers).
    fn rows(
        &self,
        stmt: &Statement,
        client: &dyn ClientInfo,
    ) -> Option<Result<RecordBatch, String>> {
        let Statement::ShowVariable { variable } = stmt else {
            return None;
        };
        let words: Vec<String> = variable.iter().map(|v| v.value.to_lowercase()).collect();
        let name = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["all"] => return Some(Ok(show_all(client, &self.settings))),
            ["time", "zone"] => "timezone".to_string(),
            ["transaction", "isolation", "level"] => "transaction_isolation".to_string(),
            ["datafusion" | "kiln", ..] => words.join("."),
            _ => words.join(" "),
        };
        if engine_option(&name) {
            let value = client
                .metadata()
                .get(&name)
                .cloned()
                .or_else(|| self.engine.setting(&name));
            return Some(match value {
                Some(v) => Ok(batch(&[(name.as_str(), vec![v])])),
                None => Err(unknown(&name)),
            });
        }
        let Some((canonical, default, _)) = self.settings.get(&name) else {
            return Some(Err(unknown(&name)));
        };
        let value = session_value(client, canonical, default);
        Some(Ok(batch(&[(canonical.as_str(), vec![value])])))
    }

    async fn answer(
        &self,
        stmt: &Statement,
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        let rows = match self.rows(stmt, &*client)? {
            Ok(rows) => rows,
            Err(msg) => {
                let info = ErrorInfo::new("ERROR".into(), "42704".into(), msg);
                return Some(Err(PgWireError::UserError(Box::new(info))));
            }
        };
        let schema = rows.schema();
        let stream = Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            futures::stream::iter([Ok(rows)]),
        ));
        Some(
            super::execute::encode(&schema, stream, &Format::UnifiedText, None, &*client)
                .map(Response::Query),
        )
    }
}

/// Every setting with its session value, as PostgreSQL's `SHOW ALL`.
fn show_all(client: &dyn ClientInfo, settings: &Settings) -> RecordBatch {
    let names = settings.0.iter().map(|(n, ..)| n.clone()).collect();
    let values = settings
        .0
        .iter()
        .map(|(n, d, _)| session_value(client, n, d))
        .collect();
    let descriptions = settings.0.iter().map(|(.., d)| d.clone()).collect();
    batch(&[
        ("name", names),
        ("setting", values),
        ("description", descriptions),
    ])
}

/// A batch of text columns.
fn batch(columns: &[(&str, Vec<String>)]) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, _)| Field::new(*n, DataType::Utf8, false))
        .collect();
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, v)| Arc::new(StringArray::from(v.clone())) as ArrayRef)
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("text columns")
}

#[async_trait::async_trait]
impl Answer for ShowHook {
    async fn respond(
        &self,
        stmt: &Statement,
        _params: &[ScalarValue],
        client: &mut dyn HookClient,
    ) -> Option<PgWireResult<Response>> {
        self.answer(stmt, client).await
    }

    fn plan(
        &self,
        stmt: &Statement,
        client: &(dyn ClientInfo + Send + Sync),
    ) -> Option<PgWireResult<LogicalPlan>> {
        // The plan carries the columns Describe reports; Execute answers.
        let schema = match self.rows(stmt, client)? {
            Ok(rows) => rows.schema(),
            Err(_) => Arc::new(Schema::new(vec![Field::new(
                "setting",
                DataType::Utf8,
                false,
            )])),
        };
        Some(
            DFSchema::try_from(schema)
                .map(super::no_rows)
                .map_err(|e| PgWireError::ApiError(Box::new(e))),
        )
    }
}

#[cfg(test)]
mod tests;
