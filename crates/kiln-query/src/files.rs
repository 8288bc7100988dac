//! [`FileAccess`]: which server files SQL may read or write. `COPY ... TO
//! 'path'`, `COPY ... FROM 'path'` and `CREATE EXTERNAL TABLE ... LOCATION`
//! are refused ([`Error::PermissionDenied`]) unless the server was started
//! with `--sql-file-access DIR`; then a path must resolve (symlinks and
//! `..` followed) inside `DIR`, and never inside the data directory, which
//! only the storage engine writes.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The directory SQL may use (if any) and the data directory it may not.
#[derive(Debug, Clone)]
pub struct FileAccess {
    /// Canonical `--sql-file-access` directory; `None`: no file access.
    root: Option<PathBuf>,
    /// Canonical data directory.
    data_dir: PathBuf,
}

impl FileAccess {
    /// `root`: `--sql-file-access` (must exist); `data_dir`: the database's.
    pub fn new(root: Option<&Path>, data_dir: &Path) -> Result<Self> {
        let canonical = |p: &Path, what: &str| {
            std::fs::canonicalize(p).map_err(|source| Error::Io {
                context: format!("resolving {what} {}", p.display()),
                source,
            })
        };
        let data_dir = canonical(data_dir, "the data directory")?;
        let root = root
            .map(|r| canonical(r, "--sql-file-access"))
            .transpose()?;
        Ok(Self { root, data_dir })
    }

    /// Whether SQL may use files at all.
    pub fn enabled(&self) -> bool {
        self.root.is_some()
    }

    /// The resolved path SQL may use for `location` (what `what` names in
    /// errors: `COPY ... TO`), or [`Error::PermissionDenied`].
    pub fn check(&self, what: &str, location: &str) -> Result<PathBuf> {
        let Some(root) = &self.root else {
            return Err(Error::PermissionDenied(format!(
                "{what} '{location}': SQL may not use the server's files (start the server with --sql-file-access DIR to allow files inside DIR)"
            )));
        };
        let denied = |why: &str| {
            Err(Error::PermissionDenied(format!(
                "{what} '{location}': {why}"
            )))
        };
        let path = match location.strip_prefix("file://") {
            Some(p) => p,
            None if location.contains("://") => {
                return denied("only local paths are allowed");
            }
            None => location,
        };
        let Some(resolved) = resolve(Path::new(path)) else {
            return denied("the path cannot be resolved ('..' after a missing directory?)");
        };
        if resolved.starts_with(&self.data_dir) {
            return denied("the data directory is the storage engine's alone");
        }
        if !resolved.starts_with(root) {
            return denied(&format!(
                "outside the --sql-file-access directory {}",
                root.display()
            ));
        }
        Ok(resolved)
    }
}

/// `path` made absolute (against the working directory, as DataFusion
/// would) with every symlink and `..` of its existing part followed; the
/// part that does not exist yet is appended as written, and may not
/// contain `..`. `None` when it cannot be resolved.
pub fn resolve(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut existing = absolute.as_path();
    let mut rest = vec![];
    let base = loop {
        match std::fs::canonicalize(existing) {
            Ok(c) => break c,
            Err(_) => {
                rest.push(existing.file_name()?.to_os_string());
                existing = existing.parent()?;
                // `file_name` is None for a path ending in `..`.
            }
        }
    };
    let mut out = base;
    for part in rest.iter().rev() {
        match Path::new(part).components().next() {
            Some(Component::Normal(_)) => out.push(part),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, FileAccess, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("files");
        let data = tmp.path().join("data");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let access = FileAccess::new(Some(&root), &data).unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        (tmp, access, root)
    }

    #[test]
    fn refused_without_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let access = FileAccess::new(None, tmp.path()).unwrap();
        let in_tmp = tmp.path().join("x.csv");
        let e = access.check("COPY ... TO", in_tmp.to_str().unwrap());
        assert!(matches!(e, Err(Error::PermissionDenied(_))), "{e:?}");
        assert!(!access.enabled());
    }

    #[test]
    fn inside_the_directory_is_allowed() {
        let (_tmp, access, root) = setup();
        let p = root.join("sub/new/x.csv");
        assert_eq!(access.check("COPY", p.to_str().unwrap()).unwrap(), p);
        let url = format!("file://{}", root.join("y.csv").display());
        assert_eq!(access.check("COPY", &url).unwrap(), root.join("y.csv"));
        // `..` that stays inside is fine once resolved.
        let p = root.join("sub/../z.csv");
        assert_eq!(
            access.check("COPY", p.to_str().unwrap()).unwrap(),
            root.join("z.csv")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (tmp, access, root) = setup();
        let denied = |p: &str| {
            let r = access.check("COPY", p);
            assert!(matches!(r, Err(Error::PermissionDenied(_))), "{p}: {r:?}");
        };
        denied("/tmp/x.csv");
        denied(root.join("../x.csv").to_str().unwrap());
        denied(root.join("sub/../../x.csv").to_str().unwrap());
        // `..` after a directory that does not exist.
        denied(root.join("missing/../../x.csv").to_str().unwrap());
        denied("s3://bucket/x.csv");
        // A symlink inside pointing out.
        std::os::unix::fs::symlink(tmp.path(), root.join("out")).unwrap();
        denied(root.join("out/x.csv").to_str().unwrap());
        // A symlink inside pointing into the data directory.
        std::os::unix::fs::symlink(tmp.path().join("data"), root.join("data")).unwrap();
        denied(root.join("data/catalog.json").to_str().unwrap());
        denied(tmp.path().join("data/catalog.json").to_str().unwrap());
    }

    #[test]
    fn the_data_directory_is_refused_even_inside_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let access = FileAccess::new(Some(tmp.path()), &data).unwrap();
        let r = access.check("COPY", data.join("catalog.json").to_str().unwrap());
        assert!(matches!(r, Err(Error::PermissionDenied(_))), "{r:?}");
        let r = access.check("COPY", data.to_str().unwrap());
        assert!(matches!(r, Err(Error::PermissionDenied(_))), "{r:?}");
        assert!(
            access
                .check("COPY", tmp.path().join("x.csv").to_str().unwrap())
                .is_ok()
        );
    }
}
