//! The crate's modules stay in the layer order its `lib.rs` documents: a
//! module's code (comments aside) names only modules of lower layers, so
//! there is no import loop and each optimisation can be read, tested and
//! removed on its own.

use std::collections::BTreeMap;
use std::path::Path;

/// Top-level modules, lowest layer first; a module may use those before it.
const LAYERS: &[&[&str]] = &[
    &[
        "error",
        "options",
        "memory",
        "executor",
        "chunks",
        "displayable",
    ],
    &["transaction", "files", "auth"],
    &["shape"],
    &["functions", "pruning"],
    &["admission"],
    &["config"],
    &["cache"],
    &["scan"],
    &["cube"],
    &["rules", "system"],
    &["session"],
    &["plan_cache", "ddl", "ingest"],
    &["engine"],
];

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no layer of LAYERS"))
}

/// `crate::x` paths named by each top-level module's code, by file.
fn uses(dir: &Path, top: Option<&str>, out: &mut BTreeMap<(String, String), String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            uses(&path, Some(top.unwrap_or(&name)), out);
            continue;
        }
        if name == "tests" || name == "lib" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let module = top.unwrap_or(&name).to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let used: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !used.is_empty() && used != module {
                    out.insert((module.clone(), used), path.display().to_string());
                }
            }
        }
    }
}

#[test]
fn modules_only_use_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    uses(&src, None, &mut found);
    assert!(found.len() > 20, "the walk found the crate's imports");
    let upward: Vec<String> = found
        .iter()
        .filter(|((from, to), _)| layer(to) >= layer(from))
        .map(|((from, to), file)| format!("{file}: {from} uses {to}"))
        .collect();
    assert!(
        upward.is_empty(),
        "imports against the layer order:\n{}",
        upward.join("\n")
    );
}
