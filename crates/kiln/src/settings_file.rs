//! The optional TOML settings file (`--config FILE` or `KILN_CONFIG`).
//!
//! Why through the environment: every flag already has a `KILN_*` variable,
//! so a file key is applied by setting that variable when the process has
//! not set it. Precedence is then clap's own: flag, then environment, then
//! file, then default; and `--help` stays the single list of settings.
//! Keys are flag names (`http-addr` or `http_addr`); an unknown key is an
//! error naming the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::config::Config;

/// The settings file named on the command line or in `KILN_CONFIG`.
pub fn path_from_args() -> Option<PathBuf> {
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        let a = a.to_string_lossy().into_owned();
        if a == "--" {
            break;
        }
        if a == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    std::env::var_os("KILN_CONFIG").map(PathBuf::from)
}

/// Every flag's long name and its environment variables, over all subcommands.
fn flag_envs() -> BTreeMap<String, Vec<String>> {
    fn walk(cmd: &clap::Command, out: &mut BTreeMap<String, Vec<String>>) {
        for arg in cmd.get_arguments() {
            if let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) {
                let envs = out.entry(long.to_string()).or_default();
                let env = env.to_string_lossy().into_owned();
                if !envs.contains(&env) {
                    envs.push(env);
                }
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&Config::command(), &mut out);
    out
}

/// The `KILN_*` assignments a settings file makes, in file order; errors
/// name the file and the key.
pub fn assignments(path: &Path, text: &str) -> Result<Vec<(String, String)>, String> {
    let file = path.display();
    let table: toml::Table = text.parse().map_err(|e| format!("{file}: {e}"))?;
    let flags = flag_envs();
    let mut out = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        if name == "config" {
            return Err(format!("{file}: 'config' cannot be set in a settings file"));
        }
        let envs = flags.get(&name).ok_or_else(|| {
            format!("{file}: unknown setting '{key}' (settings are flag names; see `kiln <command> --help`)")
        })?;
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            other => {
                return Err(format!(
                    "{file}: setting '{key}' must be a string, number, boolean or list, not {}",
                    other.type_str()
                ));
            }
        };
        for env in envs {
            out.push((env.clone(), value.clone()));
        }
    }
    Ok(out)
}

/// Reads the settings file, if any, and sets each of its variables that the
/// environment does not set already. Must run before any thread is started.
pub fn apply() -> Result<(), String> {
    let Some(path) = path_from_args() else {
        return Ok(());
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("reading settings file {}: {e}", path.display()))?;
    for (env, value) in assignments(&path, &text)? {
        if std::env::var_os(&env).is_none() {
            // SAFETY: called from `main` before the runtime or any other
            // thread exists, so nothing reads the environment concurrently.
            unsafe { std::env::set_var(env, value) };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_variables() {
        let text = "http_addr = \"127.0.0.1:9000\"\nmax-concurrent-queries = 4\nwal-skip-corrupt = true\nclients = [1, 2]\n";
        let got = assignments(Path::new("k.toml"), text).unwrap();
        assert!(
            got.contains(&("KILN_HTTP_ADDR".into(), "127.0.0.1:9000".into())),
            "{got:?}"
        );
        assert!(got.contains(&("KILN_MAX_CONCURRENT_QUERIES".into(), "4".into())));
        assert!(got.contains(&("KILN_WAL_SKIP_CORRUPT".into(), "true".into())));
        assert!(got.contains(&("KILN_BENCH_CLIENTS".into(), "1,2".into())));
    }

    #[test]
    fn unknown_keys_and_bad_toml_are_named() {
        let e = assignments(Path::new("k.toml"), "htp_addr = 1").unwrap_err();
        assert!(
            e.contains("k.toml") && e.contains("unknown setting 'htp_addr'"),
            "{e}"
        );
        let e = assignments(Path::new("k.toml"), "a = ").unwrap_err();
        assert!(e.starts_with("k.toml: "), "{e}");
        let e = assignments(Path::new("k.toml"), "[server]\nx = 1").unwrap_err();
        assert!(e.contains("unknown setting 'server'"), "{e}");
    }
}
