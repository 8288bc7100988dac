//! TLS on both ports, with rustls and its `ring` provider (the one pgwire is
//! built with).
//!
//! Why this shape:
//! - One certificate, read from `--tls-cert` and `--tls-key`, serves both
//!   ports. It sits in an [`ArcSwap`] behind a certificate resolver, so
//!   SIGHUP swaps it for handshakes that start afterwards while open
//!   connections keep the keys they negotiated; a reload that fails (file
//!   missing, bad PEM, key not matching) is logged and the old certificate
//!   stays.
//! - Each port has one `rustls::ServerConfig`, built once at startup and
//!   shared by every connection: a handshake takes no lock of Kiln's, and
//!   ring draws randomness from the kernel without a process-wide lock (a
//!   global lock on the random source is what cut a REST service's TLS
//!   throughput to a third). Resumption uses stateless tickets, so resumed
//!   handshakes touch no shared session cache either.
//! - The PostgreSQL port negotiates TLS through pgwire (SSLRequest, or
//!   PostgreSQL 17's direct TLS with ALPN `postgresql`); the HTTP port sniffs
//!   the first byte of each connection ([`http::TlsListener`]), so one port
//!   serves https and, unless `--tls-required`, plain http.

pub mod http;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use clap::Args;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::BoxError;
use crate::metrics::Metrics;

/// The ALPN protocol PostgreSQL 17 clients offer for direct TLS
/// (`sslnegotiation=direct`); pgwire refuses a direct handshake without it.
const PG_ALPN: &[u8] = b"postgresql";
/// The HTTP port speaks HTTP/1.1 only.
const HTTP_ALPN: &[u8] = b"http/1.1";

/// TLS settings of both ports. Without `--tls-cert` the server speaks
/// plaintext only.
#[derive(Clone, Debug, Default, Args)]
pub struct TlsConfig {
    /// PEM certificate chain (server certificate first) served on both the
    /// HTTP and the PostgreSQL port; needs --tls-key. Re-read on SIGHUP.
    /// Default: none, no TLS.
    #[arg(long, env = "KILN_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert. Re-read on
    /// SIGHUP. Default: none.
    #[arg(long, env = "KILN_TLS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// Refuse plaintext: a PostgreSQL client without TLS gets SQLSTATE 28000
    /// and an HTTP request without https a 400. Needs --tls-cert. Default:
    /// off, both ports also accept plaintext.
    #[arg(long, env = "KILN_TLS_REQUIRED", default_value_t = false)]
    pub tls_required: bool,
}

/// TLS as configured: the certificate both ports serve and an acceptor per
/// port.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Arc<Current>,
    pg: TlsAcceptor,
    http: TlsAcceptor,
    /// Plaintext connections are refused.
    pub required: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the certificate and key; `None` when TLS is not configured.
    /// Errors name the flag and the file.
    pub fn from_config(config: &TlsConfig) -> Result<Option<Arc<Tls>>, BoxError> {
        let (cert, key) = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone()),
            (None, None) if config.tls_required => {
                return Err("--tls-required needs --tls-cert and --tls-key".into());
            }
            (None, None) => return Ok(None),
            (Some(_), None) => return Err("--tls-cert needs --tls-key".into()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".into()),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certified = load(&cert, &key, &provider)?;
        let current = Arc::new(Current(ArcSwap::from_pointee(certified)));
        let acceptor = |alpn: &[u8]| -> Result<TlsAcceptor, BoxError> {
            let mut server = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_cert_resolver(current.clone());
            server.alpn_protocols = vec![alpn.to_vec()];
            server.ticketer = rustls::crypto::ring::Ticketer::new()?;
            Ok(TlsAcceptor::from(Arc::new(server)))
        };
        Ok(Some(Arc::new(Tls {
            pg: acceptor(PG_ALPN)?,
            http: acceptor(HTTP_ALPN)?,
            cert,
            key,
            provider,
            current,
            required: config.tls_required,
        })))
    }

    /// The acceptor of the PostgreSQL port.
    pub fn pg_acceptor(&self) -> TlsAcceptor {
        self.pg.clone()
    }

    /// The acceptor of the HTTP port.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        self.http.clone()
    }

    /// The certificate chain new handshakes are given.
    pub fn current_chain(&self) -> Vec<CertificateDer<'static>> {
        self.current.0.load().cert.clone()
    }

    /// Re-reads both files; new handshakes get the new certificate. On an
    /// error the old one stays.
    pub fn reload(&self) -> Result<(), BoxError> {
        let certified = load(&self.cert, &self.key, &self.provider)?;
        self.current.0.store(Arc::new(certified));
        Ok(())
    }

    /// Reloads the certificate on every SIGHUP until the process ends.
    #[cfg(unix)]
    pub fn reload_on_sighup(self: &Arc<Self>, metrics: Arc<Metrics>) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup())?;
        let tls = self.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match tls.reload() {
                    Ok(()) => {
                        metrics.tls_reload(true);
                        tracing::info!(cert = %tls.cert.display(), "SIGHUP: TLS certificate reloaded");
                    }
                    Err(e) => {
                        metrics.tls_reload(false);
                        tracing::error!(
                            "SIGHUP: TLS certificate not reloaded, keeping the old one: {e}"
                        );
                    }
                }
            }
        });
        Ok(())
    }

    #[cfg(not(unix))]
    pub fn reload_on_sighup(self: &Arc<Self>, _metrics: Arc<Metrics>) -> std::io::Result<()> {
        Ok(())
    }
}

/// The certificate new handshakes get.
struct Current(ArcSwap<CertifiedKey>);

impl fmt::Debug for Current {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Current")
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// Reads a certificate chain and its private key; errors name the flag and
/// the file (never the key's bytes).
fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, BoxError> {
    let named = |flag: &str, path: &Path, e: &dyn fmt::Display| -> BoxError {
        format!("{flag} {}: {e}", path.display()).into()
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| named("--tls-cert", cert, &pem_error(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| named("--tls-cert", cert, &pem_error(e)))?;
    if chain.is_empty() {
        return Err(named("--tls-cert", cert, &"no PEM CERTIFICATE in the file"));
    }
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| named("--tls-key", key, &pem_error(e)))?;
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| named("--tls-key", key, &e))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "--tls-key {} does not match --tls-cert {}: {e}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(certified)
}

/// A PEM reading error in words (an unreadable file keeps its OS reason).
fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::Io(e) => e.to_string(),
        Error::NoItemsFound => "no PEM item of the expected kind in the file".into(),
        other => format!("not valid PEM: {other}"),
    }
}

#[cfg(test)]
mod tests;
