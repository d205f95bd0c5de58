//! HTTPS to a hub started with `--tls-cert`/`--tls-key` (docs/protocol.md §2.5).
//!
//! The HTTP client is built without a TLS stack, so an `https://` hub is reached through a
//! loopback tunnel: a listener on `127.0.0.1:<port 0>` whose every connection is carried over
//! rustls (ring) to the hub. The client talks plain HTTP to the tunnel with the hub's own `Host`
//! header; signatures cover the path and query only, so they verify unchanged. The hub's
//! certificate must chain to a root in `RELAY_CA_CERT` (a PEM file; for a self-signed hub, its
//! certificate itself). One tunnel per hub address per process, on its own thread.

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The environment variable naming the PEM file of roots an `https://` hub must chain to.
pub const CA_ENV: &str = "RELAY_CA_CERT";

/// Where to send plain HTTP for an `https://` hub: the tunnel's base URL and the `Host` header.
#[derive(Debug, Clone)]
pub struct Tunnel {
    /// `http://127.0.0.1:<port>` plus the hub URL's path prefix.
    pub base: String,
    /// The hub's `host[:port]`, sent as `Host`.
    pub host: String,
}

static TUNNELS: Mutex<Option<HashMap<String, SocketAddr>>> = Mutex::new(None);

/// The tunnel for the `https://` hub `base` (started on first use), or why there is none.
pub fn tunnel(base: &str) -> Result<Tunnel, String> {
    let url = reqwest::Url::parse(base).map_err(|e| format!("{base}: {e}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| format!("{base} names no host"))?
        .to_string();
    let port = url.port_or_known_default().unwrap_or(443);
    let host_header = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    let key = format!("{host}:{port}");
    let mut slot = TUNNELS.lock().unwrap_or_else(|e| e.into_inner());
    let map = slot.get_or_insert_with(HashMap::new);
    let addr = match map.get(&key) {
        Some(a) => *a,
        None => {
            let a = start(&host, port)?;
            map.insert(key, a);
            a
        }
    };
    Ok(Tunnel {
        base: format!("http://{addr}{}", url.path().trim_end_matches('/')),
        host: host_header,
    })
}

fn client_config() -> Result<rustls::ClientConfig, String> {
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn start(host: &str, port: u16) -> Result<SocketAddr, String> {
    let config = Arc::new(client_config()?);
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot open the local TLS tunnel: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot open the local TLS tunnel: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot open the local TLS tunnel: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the TLS tunnel's runtime: {e}"))?;
    let host = host.to_string();
    std::thread::Builder::new()
        .name(format!("tls-tunnel-{host}"))
        .spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let connector = tokio_rustls::TlsConnector::from(config);
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let (connector, name, host) = (connector.clone(), name.clone(), host.clone());
                    tokio::spawn(async move {
                        let Ok(tcp) = tokio::net::TcpStream::connect((host.as_str(), port)).await
                        else {
                            return;
                        };
                        let _ = tcp.set_nodelay(true);
                        // A failed handshake closes the inbound side, which the HTTP client
                        // reports as the hub being unreachable.
                        if let Ok(mut tls) = connector.connect(name, tcp).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut tls).await;
                        }
                    });
                }
            });
        })
        .map_err(|e| format!("cannot start the TLS tunnel: {e}"))?;
    Ok(addr)
}
