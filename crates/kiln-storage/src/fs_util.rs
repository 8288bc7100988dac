//! Writing a file atomically and durably on local disk.
//!
//! The catalog and the saved idempotency keys are rewritten whole; segments
//! and manifests are written once. A reader (recovery after a crash) must
//! find either the old file or the new one, never a torn mix, and once the
//! write returns the new one must survive power loss. Hence one sequence:
//! write a temporary file beside the target, fsync it, rename it over the
//! target (or, for a file that must not exist yet, hard-link it to the
//! target, which fails if the target exists), fsync the directory (which
//! makes the new name durable).

use std::io::Write;
use std::path::{Path, PathBuf};

/// A step of [`write_atomic`], for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    CreateTemp,
    WriteTemp,
    SyncTemp,
    Rename,
    Link,
    SyncDir,
}

/// Which step of [`write_atomic`] failed, on which path, and why.
#[derive(Debug)]
pub(crate) struct AtomicWriteError {
    pub step: Step,
    /// The temporary file, or the directory for [`Step::SyncDir`].
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl AtomicWriteError {
    /// What was being done, as a verb: "creating", "writing", "fsyncing" or "renaming".
    pub fn verb(&self) -> &'static str {
        match self.step {
            Step::CreateTemp => "creating",
            Step::WriteTemp => "writing",
            Step::SyncTemp | Step::SyncDir => "fsyncing",
            Step::Rename => "renaming",
            Step::Link => "linking",
        }
    }
}

/// The temporary file [`write_atomic`] uses for `path`: `{path}.tmp`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Replaces `path` with `bytes`: temporary file `{path}.tmp`, fsync, rename
/// over `path`, fsync of the directory. When this returns `Ok` the new
/// contents are durable; on error `path` holds the old contents or the new
/// ones, never a part.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AtomicWriteError> {
    let tmp = temp_path(path);
    write_temp(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(fail(Step::Rename, &tmp))?;
    sync_dir(path)
}

fn fail(step: Step, path: &Path) -> impl FnOnce(std::io::Error) -> AtomicWriteError {
    let path = path.to_path_buf();
    move |source| AtomicWriteError { step, path, source }
}

/// Writes and fsyncs the temporary file `tmp`.
fn write_temp(tmp: &Path, bytes: &[u8]) -> Result<(), AtomicWriteError> {
    let mut f = std::fs::File::create(tmp).map_err(fail(Step::CreateTemp, tmp))?;
    f.write_all(bytes).map_err(fail(Step::WriteTemp, tmp))?;
    f.sync_all().map_err(fail(Step::SyncTemp, tmp))
}

/// Fsyncs the directory of `path`, making a new name in it durable.
fn sync_dir(path: &Path) -> Result<(), AtomicWriteError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail(Step::SyncDir, dir))
}

/// Creates directory `dir` and any missing parents, each made durable: the
/// directory holding a new one is fsynced, so a file later written and
/// fsynced inside cannot be lost with its directory's entry in a power
/// loss.
pub(crate) fn create_dir_durable(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(dir).map_err(|e| e.source),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `path` with `bytes` unless it exists: a temporary file (unique,
/// so concurrent creators do not collide), fsync, hard link to `path`,
/// fsync of the directory. `Ok(true)` if this call created it, `Ok(false)`
/// if `path` existed (left untouched).
pub(crate) fn create_new(path: &Path, bytes: &[u8]) -> Result<bool, AtomicWriteError> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let tmp = PathBuf::from(name);
    write_temp(&tmp, bytes)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_dir(path).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(fail(Step::Link, &tmp)(e)),
    }
}

/// [`write_atomic`] for other crates (the query layer's user file): the
/// error as an `io::Error` that names the step and the path.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes).map_err(|e| {
        std::io::Error::new(
            e.source.kind(),
            format!("{} {}: {}", e.verb(), e.path.display(), e.source),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_directories_and_accepts_existing_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("tables/7/2026-11-01");
        create_dir_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_durable(&deep).unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(
            create_dir_durable(&file.join("sub")).is_err(),
            "a file is in the way"
        );
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f.json");
        write_atomic(&path, b"one").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        write_atomic(&path, b"two, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two, longer");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.json"], "the temporary file was renamed away");
    }

    #[test]
    fn create_new_never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("1.json");
        assert!(create_new(&path, b"first").unwrap());
        assert!(!create_new(&path, b"second").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["1.json"], "no temporary file is left");
    }

    #[test]
    fn errors_name_the_failed_step_and_keep_the_old_contents() {
        let tmp = tempfile::tempdir().unwrap();
        let err = write_atomic(&tmp.path().join("missing/f.json"), b"x").unwrap_err();
        assert_eq!(err.step, Step::CreateTemp);
        assert_eq!(err.verb(), "creating");
        assert_eq!(err.path, tmp.path().join("missing/f.json.tmp"));

        // Renaming a file over a non-empty directory fails: the target is untouched.
        let target = tmp.path().join("d");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), b"old").unwrap();
        let err = write_atomic(&target, b"new").unwrap_err();
        assert_eq!((err.step, err.verb()), (Step::Rename, "renaming"));
        assert_eq!(err.path, temp_path(&target));
        assert_eq!(std::fs::read(target.join("inside")).unwrap(), b"old");
    }
}
