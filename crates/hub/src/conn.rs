//! One connection as the server sees it: whether a request is in flight on it (the connection
//! cap sheds only idle ones), and the router wrapped as a hyper service that marks it busy from
//! a request's head until its reply's body has been sent. The accept loop (`lib.rs`) and the
//! plain-HTTP front share it.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

/// One live connection as the shedder sees it.
#[derive(Debug, Default)]
pub(crate) struct ConnSlot {
    /// Requests in flight (a held poll or a streaming reply counts until its body ends).
    pub(crate) busy: AtomicUsize,
    /// Told to close (the connection cap needs its descriptor).
    pub(crate) shed: tokio::sync::Notify,
    /// Requests hyper has started on this connection (the front takes the connection back
    /// once one has been answered: see [`front`]).
    pub(crate) requests: std::sync::atomic::AtomicU64,
    /// The waker of hyper's pending read, woken when the last request in flight ends.
    pub(crate) reader: Mutex<Option<std::task::Waker>>,
}

/// Marks its connection busy while alive.
pub(crate) struct Busy(Arc<ConnSlot>);

impl Busy {
    pub(crate) fn new(slot: &Arc<ConnSlot>) -> Busy {
        slot.busy.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Busy(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let was = self
            .0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if was == 1 {
            let reader = self
                .0
                .reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(w) = reader {
                w.wake();
            }
        }
    }
}

/// The router as a hyper service that marks its connection busy from the request head until
/// the reply's body has been sent.
pub(crate) struct Tracked {
    pub(crate) inner: hyper_util::service::TowerToHyperService<axum::Router>,
    pub(crate) slot: Arc<ConnSlot>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let busy = Busy::new(&self.slot);
        self.slot
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|inner| TrackedBody { inner, _busy: busy }))
        })
    }
}

/// A reply body that keeps its connection marked busy until it is dropped.
pub(crate) struct TrackedBody {
    inner: axum::body::Body,
    _busy: Busy,
}

impl hyper::body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
