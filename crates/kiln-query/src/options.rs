//! Kiln's session options (`kiln.*`), carried in DataFusion's
//! [`ConfigOptions`] so that optimizer rules and functions read them from
//! the state a query is planned with: `SET kiln.cubes = off` turns cube
//! rewriting off; the session's user is what `current_user` answers.

use std::sync::Arc;

use datafusion::common::Result as DfResult;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::config::ConfigOptions;
use datafusion::error::DataFusionError;

/// Kiln's options of one query's session.
#[derive(Debug, Clone)]
pub struct KilnOptions {
    /// Whether aggregates may be answered from cubes (`kiln.cubes`).
    pub cubes: bool,
    /// Who the session is (`current_user`, `session_user`): set by the
    /// engine from the query, never by `SET` (see [`Begin::session_user`]).
    ///
    /// [`Begin::session_user`]: crate::admission::Begin::session_user
    pub session_user: Option<Arc<str>>,
}

impl Default for KilnOptions {
    fn default() -> Self {
        Self {
            cubes: true,
            session_user: None,
        }
    }
}

impl ConfigExtension for KilnOptions {
    const PREFIX: &'static str = "kiln";
}

impl ExtensionOptions for KilnOptions {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> DfResult<()> {
        match key {
            "cubes" => {
                self.cubes = match value.to_ascii_lowercase().as_str() {
                    "on" | "true" | "1" => true,
                    "off" | "false" | "0" => false,
                    other => {
                        return Err(DataFusionError::Configuration(format!(
                            "kiln.cubes is on or off, not '{other}'"
                        )));
                    }
                };
                Ok(())
            }
            _ => Err(DataFusionError::Configuration(format!(
                "unknown setting kiln.{key} (known: kiln.cubes)"
            ))),
        }
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        vec![ConfigEntry {
            key: "kiln.cubes".into(),
            value: Some(if self.cubes { "on" } else { "off" }.into()),
            description: "whether aggregates are answered from cubes",
        }]
    }
}

/// Whether cube rewriting is on in these options.
pub fn cubes_enabled(options: &ConfigOptions) -> bool {
    options
        .extensions
        .get::<KilnOptions>()
        .is_none_or(|o| o.cubes)
}

/// The session's user in these options, if the engine set one.
pub fn session_user(options: &ConfigOptions) -> Option<&str> {
    options
        .extensions
        .get::<KilnOptions>()
        .and_then(|o| o.session_user.as_deref())
}
