//! Which backend `--storage` names, and how it is built: the data
//! directory, another local directory, or S3 (any S3-compatible server
//! through `--s3-endpoint`), each request bounded by
//! `--s3-request-timeout` and its retries by `--s3-retry-timeout`.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, RetryConfig};

use crate::config::StorageConfig;
use crate::error::{Error, Result};

/// Where the objects live.
pub(super) enum Backend {
    Local(PathBuf),
    Remote {
        store: Arc<dyn ObjectStore>,
        location: String,
    },
}

impl Backend {
    pub fn parse(config: &StorageConfig) -> Result<Self> {
        let url = config.object_store.storage.trim();
        if url.is_empty() {
            return Ok(Backend::Local(config.data_dir.clone()));
        }
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(Error::Config(format!(
                    "--storage {url}: a file URL needs an absolute path (file:///var/lib/kiln)"
                )));
            }
            return Ok(Backend::Local(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Config(format!(
                    "--storage {url}: no bucket (s3://bucket/prefix)"
                )));
            }
            let store = s3(config, bucket)?;
            let prefix = prefix.trim_matches('/');
            let store: Arc<dyn ObjectStore> = match prefix {
                "" => store,
                p => Arc::new(PrefixStore::new(store, p)),
            };
            return Ok(Backend::Remote {
                store,
                location: url.trim_end_matches('/').to_string(),
            });
        }
        Err(Error::Config(format!(
            "--storage {url}: unknown scheme (use file:///path or s3://bucket/prefix)"
        )))
    }
}

fn s3(config: &StorageConfig, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let c = &config.object_store;
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(c.s3_allow_http)
                .with_timeout(c.s3_request_timeout),
        )
        .with_retry(RetryConfig {
            retry_timeout: c.s3_retry_timeout,
            ..RetryConfig::default()
        });
    let set = |s: &str| (!s.is_empty()).then(|| s.to_string());
    if let Some(e) = set(&c.s3_endpoint) {
        b = b.with_endpoint(e);
    }
    let region = set(&c.s3_region)
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| "us-east-1".into());
    b = b.with_region(region);
    if let Some(k) = set(&c.s3_access_key_id) {
        b = b.with_access_key_id(k);
    }
    if let Some(k) = set(&c.s3_secret_access_key) {
        b = b.with_secret_access_key(k);
    }
    let store = b
        .build()
        .map_err(|e| Error::Config(format!("--storage s3://{bucket}: {e}")))?;
    Ok(Arc::new(store))
}
