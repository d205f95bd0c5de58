//! The plain-HTTP front of the accept loop: what a connection costs while a `/poll` is held.
//!
//! hyper's HTTP/1 server keeps two 8 KiB buffers per connection for as long as the connection
//! lives, and a request in flight keeps the router's futures (one box per middleware layer)
//! besides; a held poll would carry ~20 KB of both for minutes. So the front reads each request
//! head itself, into a buffer it frees once the head is parsed, and:
//!
//! - a plain `GET /poll` (HTTP/1.1, no body) it runs through the same router itself. The poll
//!   handler, seeing [`Parkable`] on the request, returns at once with its hold as a [`Parked`]
//!   reply: a [`Hold`], the poll's own small state between looks, not a future. The
//!   middleware futures end there, the futures that served the request are freed, and the
//!   connection's task keeps the socket, the hold and [`drive`]'s wait (the wake-ups, the
//!   deadline, the socket's hang-up watch); it writes the reply itself (`content-length`,
//!   `date`, keep-alive as the request asked);
//! - every other request it hands to hyper for exactly that request: hyper reads the head the
//!   front already read (then the body from the socket), answers, and when it next wants a head
//!   the connection's IO says end-of-file, which makes hyper hand the socket back
//!   ([`hyper::server::conn::http1::Connection::poll_without_shutdown`]); the front then reads
//!   the next head. When hyper ends the connection itself (`Connection: close`, HTTP/1.0, an
//!   error it answered), the front closes it.
//!
//! TLS connections are served by hyper for their whole life, as before.

use crate::conn::{Busy, ConnSlot, Tracked};
use crate::wake::Armed;
use axum::http;
use axum::response::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// The longest request head the front reads itself; a longer one goes to hyper, which answers
/// it under its own limits (and the hub's JSON error shape).
const MAX_HEAD: usize = 16 * 1024;
/// Headers the front parses; a request with more goes to hyper.
const MAX_HEADERS: usize = 64;
/// How much the head buffer grows per read.
const READ_CHUNK: usize = 1024;

/// Set by the front on a request it serves itself: the handler may answer with [`Parked`].
#[derive(Debug, Clone, Copy)]
pub struct Parkable;

/// A held request as its driver ([`drive`]) sees it: a small state between looks, not a
/// future, so while it waits a held poll costs its own fields and the driver's wait, nothing
/// of the router's or the handler's futures.
///
/// The driver arms the wake-ups, then looks; a look that finds nothing gives the hold back,
/// and the driver waits for a wake-up (and looks again), the deadline ([`Hold::expire`]) or
/// the client hanging up (the hold is dropped).
pub trait Hold: Send + 'static {
    /// Fresh wake-ups for the next wait; the driver enables them before [`Hold::look`].
    fn arm(&self) -> Armed;
    /// Look once: the reply (news, an error, or the hub stopping), or the hold back to wait.
    fn look(self: Box<Self>) -> Looking;
    /// When the wait ends without news.
    fn deadline(&self) -> tokio::time::Instant;
    /// The reply at the deadline.
    fn expire(self: Box<Self>) -> Response;
}

/// A look in progress ([`Hold::look`]); boxed, so it is freed before the wait.
pub type Looking = Pin<Box<dyn Future<Output = Result<Response, Box<dyn Hold>>> + Send>>;

/// A reply that is not ready yet: the front drives the hold and writes what it answers,
/// headers included. Only on requests marked [`Parkable`].
#[derive(Clone)]
pub struct Parked(Arc<Mutex<Option<Box<dyn Hold>>>>);

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parked")
    }
}

/// A response carrying `hold` as its [`Parked`] reply.
pub fn park(hold: Box<dyn Hold>) -> Response {
    let mut resp = Response::new(axum::body::Body::empty());
    resp.extensions_mut()
        .insert(Parked(Arc::new(Mutex::new(Some(hold)))));
    resp
}

/// Whether `resp` is a parked reply (its outcome is counted when it resolves).
pub fn is_parked(resp: &Response) -> bool {
    resp.extensions().get::<Parked>().is_some()
}

/// Drive `hold` to its reply: look, and until there is news, wait for a wake-up or the
/// deadline. With `io` (the front's own connection), also watch the socket: `None` when the
/// client hung up first (the hold is dropped, its presence and wake slot with it).
///
/// The hang-up watch uses the socket's own peek readiness (no waiter of its own in this
/// future): this is the state a held poll's connection stays in.
pub async fn drive(mut hold: Box<dyn Hold>, io: Option<&TcpStream>) -> Option<Response> {
    // Once the client sent more (a pipelined request), it stays for the next head and the
    // hang-up watch stops: the socket is then readable until the head is read.
    let mut watching = io.is_some();
    loop {
        // Arm before looking, so a commit racing with the look still wakes the wait.
        let mut armed = std::pin::pin!(hold.arm());
        armed.as_mut().enable();
        hold = match hold.look().await {
            Ok(resp) => return Some(resp),
            Err(hold) => hold,
        };
        let mut expiry = std::pin::pin!(tokio::time::sleep_until(hold.deadline()));
        let woke = std::future::poll_fn(|cx| {
            if armed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(true));
            }
            if expiry.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(false));
            }
            if let (true, Some(io)) = (watching, io) {
                let mut probe = [0u8; 1];
                let mut probe = ReadBuf::new(&mut probe);
                match io.poll_peek(cx, &mut probe) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(None),
                    Poll::Ready(Ok(_)) => watching = false,
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await?;
        if !woke {
            return Some(hold.expire());
        }
    }
}

/// Serve a plain TCP connection until it ends, the hub stops, or it is shed while idle.
///
/// This future is the connection's task, and while a poll is held it is most of what the poll
/// costs; so serving requests ([`serve_until_held`]) is a boxed future, freed when a request
/// turns out to be a held poll, and writing the reply is boxed too: during the hold the task
/// keeps only the connection, the [`Hold`] and [`drive`]'s wait.
pub(crate) async fn serve_plain(io: TcpStream, front: Arc<Front>, slot: Arc<ConnSlot>) {
    let (mut io, mut buf) = (io, Vec::new());
    loop {
        let serving = serve_until_held(io, buf, &front, &slot);
        let Some(held) = Box::pin(serving).await else {
            return;
        };
        let Held {
            io: held_io,
            buf: held_buf,
            hold,
            close,
            busy,
        } = *held;
        io = held_io;
        buf = held_buf;
        let Some(resp) = drive(hold, Some(&io)).await else {
            // The client hung up while held.
            return;
        };
        let keep = Box::pin(write_reply(&mut io, Box::new(resp), close)).await;
        drop(busy);
        if !keep || *front.stop.borrow() {
            return;
        }
    }
}

/// What every connection of one accept loop shares: one allocation, not a copy per
/// connection (a held poll's task keeps one pointer to it).
pub(crate) struct Front {
    /// The router every request runs through.
    pub(crate) app: axum::Router,
    /// How long a request head (and a TLS handshake) may take; an idle keep-alive ends then.
    pub(crate) header_timeout: Duration,
    /// Flips to true when the hub stops.
    pub(crate) stop: watch::Receiver<bool>,
}

/// A connection whose request is a held poll: what the hold's wait keeps.
struct Held {
    io: TcpStream,
    /// Bytes pipelined behind the poll's head (usually none: an empty, unallocated buffer).
    buf: Vec<u8>,
    hold: Box<dyn Hold>,
    /// The client asked to close after this reply.
    close: bool,
    /// The connection counts as busy (not shed at the cap) until the reply is written.
    busy: Busy,
}

/// Serve requests on the connection until one is a held poll (returned, for the caller to
/// drive with the connection's task kept small) or the connection ends (`None`).
async fn serve_until_held(
    mut io: TcpStream,
    mut buf: Vec<u8>,
    front: &Front,
    slot: &Arc<ConnSlot>,
) -> Option<Box<Held>> {
    let (app, header_timeout) = (&front.app, front.header_timeout);
    let stop = &mut front.stop.clone();
    loop {
        let head = Box::pin(next_head(&mut io, &mut buf, header_timeout, stop, slot)).await;
        match head {
            Head::Closed => return None,
            Head::Own { req, len, close } => {
                buf.drain(..len);
                if buf.is_empty() {
                    // Nothing pipelined behind it: free the buffer for the hold.
                    buf = Vec::new();
                }
                let busy = Busy::new(slot);
                let resp = match Box::pin(route(&io, app, req)).await {
                    Some(Routed::Ready(resp)) => resp,
                    Some(Routed::Parked(hold)) => {
                        return Some(Box::new(Held {
                            io,
                            buf,
                            hold,
                            close,
                            busy,
                        }));
                    }
                    None => return None,
                };
                let keep = Box::pin(write_reply(&mut io, resp, close)).await;
                drop(busy);
                if !keep || *stop.borrow() {
                    return None;
                }
            }
            Head::Hyper { hand_back } => {
                let prefix = std::mem::take(&mut buf);
                let session = Box::pin(serve_one_with_hyper(
                    io,
                    prefix,
                    hand_back,
                    app,
                    header_timeout,
                    stop,
                    slot,
                ))
                .await;
                match session {
                    Some((back, rest)) if !*stop.borrow() => {
                        io = back;
                        buf = rest;
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// What the next request head is.
enum Head {
    /// The connection ended (closed, timed out, shed, or the hub stops) before a whole head.
    Closed,
    /// A request the front serves itself; `len` bytes of the buffer are its head.
    Own {
        req: Box<http::Request<axum::body::Body>>,
        len: usize,
        close: bool,
    },
    /// Anything else: hyper serves it from the buffered bytes on. `hand_back`: the request
    /// has no body, so once it is answered the connection may come back to the front; a
    /// request with a body (or one hyper must judge: malformed, too long) keeps hyper on the
    /// connection to its end, since hyper may answer before it has read the body, and the
    /// unread rest would otherwise be taken for the next head.
    Hyper { hand_back: bool },
}

/// Read until `buf` holds a whole head (or something only hyper should answer).
async fn next_head(
    io: &mut TcpStream,
    buf: &mut Vec<u8>,
    header_timeout: Duration,
    stop: &mut watch::Receiver<bool>,
    slot: &ConnSlot,
) -> Head {
    let deadline = tokio::time::Instant::now() + header_timeout;
    loop {
        if !buf.is_empty() {
            match classify(buf) {
                Some(head) => return head,
                None if buf.len() >= MAX_HEAD => return Head::Hyper { hand_back: false },
                None => {}
            }
        }
        buf.reserve(READ_CHUNK);
        tokio::select! {
            r = io.read_buf(buf) => match r {
                Ok(0) | Err(_) => return Head::Closed,
                Ok(_) => {}
            },
            // hyper's header timeout, kept: a head must arrive within it, and an idle
            // keep-alive connection is closed by it.
            _ = tokio::time::sleep_until(deadline) => return Head::Closed,
            // No request in flight here, so the cap may take this connection.
            _ = slot.shed.notified() => return Head::Closed,
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => return Head::Closed,
        }
    }
}

/// `None` while the head is incomplete.
fn classify(buf: &[u8]) -> Option<Head> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return None,
        // Malformed, or more headers than we parse: hyper gives the error reply.
        Err(_) => return Some(Head::Hyper { hand_back: false }),
    };
    Some(own_poll(&parsed, len).unwrap_or_else(|| Head::Hyper {
        hand_back: bodyless(&parsed),
    }))
}

/// No body, no upgrade, nothing to continue: hyper's answer ends the request.
fn bodyless(parsed: &httparse::Request<'_, '_>) -> bool {
    parsed.headers.iter().all(|h| {
        if h.name.eq_ignore_ascii_case("content-length") {
            h.value.trim_ascii() == b"0"
        } else {
            !["transfer-encoding", "expect", "upgrade"]
                .iter()
                .any(|n| h.name.eq_ignore_ascii_case(n))
        }
    })
}

/// A plain `GET /poll` over HTTP/1.1 with no body, as a request for the router.
fn own_poll(parsed: &httparse::Request<'_, '_>, len: usize) -> Option<Head> {
    let path = parsed.path?;
    let is_poll = path
        .strip_prefix("/poll")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'));
    if parsed.method? != "GET" || !is_poll || parsed.version? != 1 {
        return None;
    }
    let mut close = false;
    let mut req = http::Request::new(axum::body::Body::empty());
    *req.uri_mut() = http::Uri::try_from(path).ok()?;
    *req.version_mut() = http::Version::HTTP_11;
    let headers = req.headers_mut();
    for h in parsed.headers.iter() {
        let name = http::HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = http::HeaderValue::from_bytes(h.value).ok()?;
        if name == http::header::CONTENT_LENGTH {
            if value.as_bytes().trim_ascii() != b"0" {
                return None;
            }
        } else if name == http::header::TRANSFER_ENCODING
            || name == http::header::EXPECT
            || name == http::header::UPGRADE
        {
            return None;
        } else if name == http::header::CONNECTION {
            close |= value
                .to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
        }
        headers.append(name, value);
    }
    req.extensions_mut().insert(Parkable);
    Some(Head::Own {
        req: Box::new(req),
        len,
        close,
    })
}

/// What the router answered a request the front serves.
enum Routed {
    /// A reply to write now (boxed: this enum outlives nothing, but keeps the connection's
    /// future small).
    Ready(Box<Response>),
    /// A held poll: the reply once [`drive`] has driven this.
    Parked(Box<dyn Hold>),
}

/// Run one request through the router; `None` when the client went away meanwhile.
async fn route(
    io: &TcpStream,
    app: &axum::Router,
    req: Box<http::Request<axum::body::Body>>,
) -> Option<Routed> {
    let service = hyper_util::service::TowerToHyperService::new(app.clone());
    let call = hyper::service::Service::call(&service, *req);
    let mut resp = tokio::select! {
        r = call => match r {
            Ok(r) => r,
            Err(never) => match never {},
        },
        _ = client_gone(io) => return None,
    };
    let parked = resp
        .extensions_mut()
        .remove::<Parked>()
        .and_then(|p| p.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    // The placeholder response (its extensions, the parked slot) is dropped here, before
    // the hold.
    Some(match parked {
        Some(hold) => Routed::Parked(hold),
        None => Routed::Ready(Box::new(resp)),
    })
}

/// Write `resp` as the reply; `false` when the connection is to close (the client asked, or
/// the body or the write failed).
async fn write_reply(io: &mut TcpStream, resp: Box<Response>, close: bool) -> bool {
    let (parts, body) = (*resp).into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(error = %e, "reply body failed");
            return false;
        }
    };
    let out = encode(&parts, &body, close);
    if io.write_all(&out).await.is_err() {
        return false;
    }
    !close
}

/// Resolves when the peer closed its side (or the socket failed); pending while it is open.
/// Bytes it sent meanwhile (a pipelined request) stay in the socket for the next head.
async fn client_gone(io: &TcpStream) {
    let mut probe = [0u8; 1];
    match io.peek(&mut probe).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// An HTTP/1.1 reply: status line, the response's headers, `content-length`, `date`.
fn encode(parts: &http::response::Parts, body: &[u8], close: bool) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(256 + body.len());
    let status = parts.status;
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in &parts.headers {
        if name == http::header::CONTENT_LENGTH
            || name == http::header::TRANSFER_ENCODING
            || name == http::header::CONNECTION
            || name == http::header::DATE
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let _ = write!(
        out,
        "content-length: {}\r\ndate: {}\r\n",
        body.len(),
        http_date(std::time::SystemTime::now())
    );
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// `Thu, 03 Dec 2026 15:04:05 GMT` (RFC 9110, section 5.6.7).
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let weekday = WEEKDAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month_name = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    format!(
        "{weekday}, {day:02} {month_name} {year} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Let hyper serve the request whose bytes start `prefix` (and any pipelined behind it); the
/// socket and the bytes hyper read past its last request come back when hyper wants the next
/// head, `None` when the connection is done.
async fn serve_one_with_hyper(
    io: TcpStream,
    prefix: Vec<u8>,
    hand_back: bool,
    app: &axum::Router,
    header_timeout: Duration,
    stop: &mut watch::Receiver<bool>,
    slot: &Arc<ConnSlot>,
) -> Option<(TcpStream, Vec<u8>)> {
    let once = OneRequest {
        io,
        prefix,
        pos: 0,
        slot: slot.clone(),
        start: slot.requests.load(Ordering::Acquire),
        hand_back,
        handed_back: false,
    };
    let service = Tracked {
        inner: hyper_util::service::TowerToHyperService::new(app.clone()),
        slot: slot.clone(),
    };
    let mut conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(once), service);
    let ended = loop {
        tokio::select! {
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => break r,
            // Shed at the connection cap: with no request in flight, dropping it loses
            // nothing. One whose request began since it was picked is served on.
            _ = slot.shed.notified() => {
                if slot.busy.load(Ordering::Acquire) == 0 {
                    tracing::debug!("idle connection shed at the cap");
                    return None;
                }
            }
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                Pin::new(&mut conn).graceful_shutdown();
                let _ = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await;
                return None;
            }
        }
    };
    slot.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
        return None;
    }
    let parts = conn.into_parts();
    let once = parts.io.into_inner();
    if !once.handed_back {
        // hyper finished the connection itself.
        return None;
    }
    let mut rest = parts.read_buf.to_vec();
    rest.extend_from_slice(&once.prefix[once.pos..]);
    Some((once.io, rest))
}

/// The socket as hyper sees it for one request: the bytes the front already read first, then
/// the socket; once a request has been answered and none is in flight, end-of-file (the front
/// takes the connection back).
struct OneRequest {
    io: TcpStream,
    prefix: Vec<u8>,
    pos: usize,
    slot: Arc<ConnSlot>,
    /// The slot's request count when hyper got the connection.
    start: u64,
    /// Whether the connection may come back once the request is answered ([`Head::Hyper`]).
    hand_back: bool,
    /// End-of-file was reported for the hand-back (not a real close).
    handed_back: bool,
}

impl AsyncRead for OneRequest {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        // Register before looking, so a reply that ends in between still wakes this read.
        *this.slot.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        if this.hand_back
            && this.slot.requests.load(Ordering::Acquire) > this.start
            && this.slot.busy.load(Ordering::Acquire) == 0
        {
            this.handed_back = true;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for OneRequest {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_imf_fixdate() {
        let t = std::time::UNIX_EPOCH + Duration::from_secs(1_796_310_245);
        assert_eq!(http_date(t), "Thu, 03 Dec 2026 15:04:05 GMT");
        assert_eq!(
            http_date(std::time::UNIX_EPOCH),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        let leap = std::time::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(http_date(leap), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn only_plain_polls_are_the_fronts_own() {
        let own = |raw: &str| matches!(classify(raw.as_bytes()), Some(Head::Own { .. }));
        assert!(own("GET /poll?session=a:p HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(own("GET /poll HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
        assert!(!own("GET /polls HTTP/1.1\r\n\r\n"));
        assert!(!own("GET /poll HTTP/1.0\r\n\r\n"));
        assert!(!own("POST /poll HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));
        assert!(!own(
            "GET /poll HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
        assert!(!own("GET /inbox?session=a:p HTTP/1.1\r\n\r\n"));
        assert!(classify(b"GET /poll HTTP/1.1\r\nHost: x\r\n").is_none());
        assert!(matches!(
            classify(b"\x01\x02 nonsense\r\n\r\n"),
            Some(Head::Hyper { hand_back: false })
        ));
        // A request with a body stays with hyper; a body-less one comes back.
        let back = |raw: &str| match classify(raw.as_bytes()) {
            Some(Head::Hyper { hand_back }) => hand_back,
            _ => panic!("not hyper's: {raw}"),
        };
        assert!(back("GET /inbox?session=a:p HTTP/1.1\r\n\r\n"));
        assert!(back("GET /health HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
        assert!(!back(
            "GET /task/update HTTP/1.1\r\nContent-Length: 9\r\n\r\n"
        ));
        assert!(!back(
            "POST /send HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        ));
        assert!(!back("POST /send HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"));
        match classify(b"GET /poll HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n") {
            Some(Head::Own { close, len, .. }) => {
                assert!(close);
                assert_eq!(len, 53);
            }
            _ => panic!("not the front's own"),
        }
    }
}
