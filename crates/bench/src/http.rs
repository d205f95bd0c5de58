//! A minimal HTTP/1.1 keep-alive client for the benchmarks.
//!
//! Hand-written on purpose: the benchmark times single requests in microseconds, so the client
//! must add as little as possible (no pool, no middleware, one connection per caller, Nagle off)
//! and its cost must be obvious from reading it. It understands exactly what the hub sends:
//! `Content-Length` or chunked bodies.

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One keep-alive connection to the hub.
pub struct Http {
    conn: BufReader<TcpStream>,
    line: String,
}

/// A response: status and body bytes.
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// `Ok` on a 200; otherwise an error naming `what`, the status and the body.
    pub fn ok(&self, what: &str) -> Result<()> {
        if self.status != 200 {
            bail!(
                "{what}: HTTP {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            );
        }
        Ok(())
    }

    /// The body as JSON, failing on a non-2xx status with the body in the message.
    pub fn json(&self) -> Result<serde_json::Value> {
        if !(200..300).contains(&self.status) {
            bail!(
                "HTTP {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            );
        }
        serde_json::from_slice(&self.body).context("reply is not JSON")
    }
}

impl Http {
    /// Connect to `127.0.0.1:port`.
    pub async fn connect(port: u16) -> Result<Http> {
        Self::connect_with(port, 64 * 1024).await
    }

    /// Connect to `127.0.0.1:port` with a read buffer of `buffer` bytes (a crowd of thousands
    /// of connections keeps them small; a longer reply is read in several fills).
    pub async fn connect_with(port: u16, buffer: usize) -> Result<Http> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .with_context(|| format!("cannot connect to 127.0.0.1:{port}"))?;
        stream.set_nodelay(true)?;
        Ok(Http {
            conn: BufReader::with_capacity(buffer, stream),
            line: String::new(),
        })
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> Result<Response> {
        self.request("GET", path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&mut self, path: &str, body: &str) -> Result<Response> {
        self.request("POST", path, Some(body)).await
    }

    /// `method path` with extra headers (e.g. a request signature) and an optional JSON body.
    pub async fn request_with(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&str>,
    ) -> Result<Response> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        if let Some(b) = body {
            req.push_str(b);
        }
        self.conn.get_mut().write_all(req.as_bytes()).await?;
        self.read_response().await
    }

    async fn request(&mut self, method: &str, path: &str, body: Option<&str>) -> Result<Response> {
        self.request_with(method, path, &[], body).await
    }

    async fn next_line(&mut self) -> Result<&str> {
        self.line.clear();
        let n = self.conn.read_line(&mut self.line).await?;
        if n == 0 {
            bail!("connection closed by the hub");
        }
        Ok(self.line.trim_end_matches(['\r', '\n']))
    }

    async fn read_response(&mut self) -> Result<Response> {
        let status_line = self.next_line().await?.to_string();
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {status_line:?}"))?;
        let mut length: Option<usize> = None;
        let mut chunked = false;
        loop {
            let line = self.next_line().await?;
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse().context("bad content-length")?);
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let size_line = self.next_line().await?.to_string();
                let size = usize::from_str_radix(size_line.split(';').next().unwrap_or(""), 16)
                    .with_context(|| format!("bad chunk size {size_line:?}"))?;
                if size == 0 {
                    // Trailers (none expected) end with an empty line.
                    while !self.next_line().await?.is_empty() {}
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.conn.read_exact(&mut body[start..]).await?;
                self.next_line().await?;
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.conn.read_exact(&mut body).await?;
        }
        Ok(Response { status, body })
    }
}
