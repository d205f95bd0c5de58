//! HTTPS to a hub started with `--tls-cert`/`--tls-key` (docs/protocol.md §2.5): the rustls
//! configuration the HTTP client is built with.
//!
//! reqwest carries the TLS itself (its rustls support, with no provider of its own): this module
//! gives it a configuration on the ring provider whose only roots are the certificates in the
//! PEM file `RELAY_CA_CERT` (for a self-signed hub, its certificate itself). No system roots are
//! trusted, so a hub is reached only when its certificate chains to what the person named.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use std::sync::Arc;

/// The environment variable naming the PEM file of roots an `https://` hub must chain to.
pub const CA_ENV: &str = "RELAY_CA_CERT";

/// Make ring this process's default rustls provider (once; later calls do nothing). reqwest is
/// built without a provider of its own, so a `reqwest::Client` built without a configuration
/// from this module (a test's plain client, say) takes this one instead of panicking.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client configuration for an `https://` hub: the roots of `RELAY_CA_CERT` only, or why
/// there are none.
pub fn client_config() -> Result<rustls::ClientConfig, String> {
    let path = std::env::var(CA_ENV)
        .ok()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            format!(
                "an https:// hub needs {CA_ENV}: a PEM file of the roots its certificate chains \
                 to (for a self-signed hub, its certificate)"
            )
        })?;
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
        .map_err(|e| format!("{CA_ENV}={path}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{CA_ENV}={path}: bad PEM: {e}"))?;
    for c in certs {
        roots.add(c).map_err(|e| format!("{CA_ENV}={path}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{CA_ENV}={path} holds no certificate"));
    }
    with_roots(roots)
}

/// A configuration for a plain `http://` hub: the client is built with TLS (reqwest has no
/// provider of its own), but with no root nothing could ever be trusted over it.
pub fn no_roots_config() -> Result<rustls::ClientConfig, String> {
    with_roots(rustls::RootCertStore::empty())
}

fn with_roots(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
