//! Optional HTTPS: a rustls acceptor built from PEM files (`--tls-cert`, `--tls-key`), so a
//! crew across machines does not send code and tokens in clear text (docs/protocol.md §2.2).

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// Build the acceptor from a PEM certificate chain and its PEM private key.
pub fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read TLS certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad PEM in {}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("no certificate in {}", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read TLS key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the TLS key does not fit the certificate")?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
