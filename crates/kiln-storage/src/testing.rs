//! Running test suites on object storage. When `KILN_TEST_S3_ENDPOINT`
//! names an S3-compatible server (the test script starts one), suites that
//! call these helpers keep their segments, manifests and catalog in its
//! bucket (`KILN_TEST_S3_BUCKET`, default `kiln-test`) instead of on local
//! disk; otherwise they change nothing. Each data directory gets its own
//! prefix, stable across restarts of that directory.

use std::path::Path;

use crate::config::StorageConfig;

/// The endpoint of the test S3 server, if the suites run on one.
pub fn s3_endpoint() -> Option<String> {
    std::env::var("KILN_TEST_S3_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
}

/// The `--storage` URL for the data directory `dir` on the test server.
fn storage_url(dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let bucket = std::env::var("KILN_TEST_S3_BUCKET").unwrap_or_else(|_| "kiln-test".into());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    format!("s3://{bucket}/{:016x}", h.finish())
}

/// Points `config` at the test S3 server, if there is one.
pub fn use_test_store(config: &mut StorageConfig) {
    let Some(endpoint) = s3_endpoint() else {
        return;
    };
    let s = &mut config.object_store;
    s.storage = storage_url(&config.data_dir);
    s.s3_endpoint = endpoint;
    s.s3_allow_http = true;
    s.s3_access_key_id = "test".into();
    s.s3_secret_access_key = "test".into();
    // One process per prefix: its leftovers are swept at once, as on disk.
    s.orphan_grace = std::time::Duration::ZERO;
}

/// The environment that puts `dir`'s storage on the test S3 server for a
/// `kiln` process (empty if there is none): the `KILN_*` variables of
/// `--storage` and its S3 flags.
pub fn test_store_env(dir: &Path) -> Vec<(&'static str, String)> {
    let Some(endpoint) = s3_endpoint() else {
        return vec![];
    };
    vec![
        ("KILN_STORAGE", storage_url(dir)),
        ("KILN_S3_ENDPOINT", endpoint),
        ("KILN_S3_ALLOW_HTTP", "true".into()),
        ("KILN_S3_ACCESS_KEY_ID", "test".into()),
        ("KILN_S3_SECRET_ACCESS_KEY", "test".into()),
        ("KILN_ORPHAN_GRACE", "0s".into()),
    ]
}
