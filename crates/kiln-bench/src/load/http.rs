//! The HTTP client of the load drivers and of `kiln sql --url`: reqwest
//! over rustls with the `ring` provider (the server's, so nothing needs a
//! C toolchain beyond what the server already builds), plain `http://` or
//! `https://` trusting a given CA.

use std::path::Path;

use crate::error::{Error, Result};

/// A client builder; with `ca_cert` (a PEM file) `https://` servers are
/// trusted only if that CA signed their certificate.
pub fn client(ca_cert: Option<&Path>) -> Result<reqwest::ClientBuilder> {
    // reqwest is built without a provider of its own; an error means one
    // is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    if let Some(path) = ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| Error::Config(format!("--ca-cert {}: {e}", path.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| Error::Config(format!("--ca-cert {}: {e}", path.display())))?;
        builder = builder.tls_certs_only(certs);
    }
    Ok(builder)
}
