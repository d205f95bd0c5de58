//! The worker-thread plumbing every backend shares: jobs, their queues, and the loops that run
//! them.
//!
//! A backend owns one writer thread and a few reader threads, each with a connection of its
//! own. [`Workers`] is the sending side a store handle keeps: [`Workers::read`] and
//! [`Workers::write`] box a closure with its reply channel and queue it, and resolve when the
//! thread answers. The backend's writer thread takes the first queued [`WriteJob`], pulls in
//! what else is queued ([`pull`]), runs the batch in one transaction of its own making, and then
//! hands the outcome to [`finish_batch`] — so a reply is sent only after `COMMIT` returned.
//!
//! A backend's store handle keeps its queues and what it reports in a [`Shared`] and implements
//! [`Backend`]; the [`Store`] it gets is written once, here.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use tokio::sync::{broadcast, oneshot};

use crate::{Change, LeaseStatus, ReadTx, Store, StoreError, WriteTx};

/// A write closure bound to its reply channel, in two steps so the reply can wait for COMMIT.
pub trait WriteJob: Send {
    /// Run the closure; `true` when it succeeded (its changes are to be kept).
    fn run(&mut self, tx: &mut dyn WriteTx) -> bool;
    /// Send the outcome: the closure's own result when the batch committed, else `batch_err`.
    fn finish(self: Box<Self>, batch_err: Option<&StoreError>);
}

/// A queued write job.
pub type BoxedWriteJob = Box<dyn WriteJob>;

/// A read job, run by a reader thread on its connection `C`.
pub type ReadJob<C> = Box<dyn FnOnce(&mut C) + Send>;

/// The receiving side of the reader queue, shared by every reader thread.
pub type ReadQueue<C> = Arc<Mutex<mpsc::Receiver<ReadJob<C>>>>;

struct Job<F, R> {
    f: Option<F>,
    out: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> WriteJob for Job<F, R>
where
    F: FnOnce(&mut dyn WriteTx) -> Result<R, StoreError> + Send,
    R: Send,
{
    fn run(&mut self, tx: &mut dyn WriteTx) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let out = catch_unwind(AssertUnwindSafe(|| f(tx))).unwrap_or_else(|p| {
            Err(StoreError::db(format!(
                "write closure panicked: {}",
                panic_message(&p)
            )))
        });
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn finish(self: Box<Self>, batch_err: Option<&StoreError>) {
        let Job { out, reply, .. } = *self;
        let result = match (out, batch_err) {
            // A closure that failed was rolled back either way; its own error says more.
            (Some(Err(e)), _) => Err(e),
            (_, Some(e)) => Err(e.clone()),
            (Some(Ok(v)), None) => Ok(v),
            (None, None) => Err(StoreError::db("write was never run")),
        };
        // The caller may have stopped waiting (request cancelled); the write stands anyway.
        let _ = reply.send(result);
    }
}

/// What a panicking store closure said, for the error its caller gets instead (the worker
/// threads catch the panic so one closure cannot take the store down).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Run a read closure on `tx`, turning a panic into an error.
pub fn run_read_closure<R>(
    tx: &dyn ReadTx,
    f: impl FnOnce(&dyn ReadTx) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    catch_unwind(AssertUnwindSafe(|| f(tx))).unwrap_or_else(|p| {
        Err(StoreError::db(format!(
            "read closure panicked: {}",
            panic_message(&p)
        )))
    })
}

/// The sending side of a backend's worker queues, kept by the store handle.
pub struct Workers<C> {
    writer: Option<mpsc::Sender<BoxedWriteJob>>,
    reader: Option<mpsc::Sender<ReadJob<C>>>,
}

impl<C> Workers<C> {
    /// Close both queues: the threads finish what is queued and end.
    pub fn close(&mut self) {
        self.writer.take();
        self.reader.take();
    }
}

impl<C: 'static> Workers<C> {
    /// New queues, with the receiving sides for the writer thread and the reader threads.
    pub fn new() -> (Workers<C>, mpsc::Receiver<BoxedWriteJob>, ReadQueue<C>) {
        let (wtx, wrx) = mpsc::channel();
        let (rtx, rrx) = mpsc::channel();
        let workers = Workers {
            writer: Some(wtx),
            reader: Some(rtx),
        };
        (workers, wrx, Arc::new(Mutex::new(rrx)))
    }

    /// Queue `run` for a reader thread; resolves with its answer.
    pub fn read<R, F>(
        &self,
        run: F,
    ) -> impl Future<Output = Result<R, StoreError>> + Send + use<R, F, C>
    where
        F: FnOnce(&mut C) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: ReadJob<C> = Box::new(move |conn: &mut C| {
            let _ = tx.send(run(conn));
        });
        answer(self.reader.as_ref(), job, rx)
    }

    /// Queue the write closure `f` for the writer thread; resolves once its batch committed
    /// (or failed).
    pub fn write<R, F>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<R, StoreError>> + Send + use<R, F, C>
    where
        F: FnOnce(&mut dyn WriteTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: BoxedWriteJob = Box::new(Job {
            f: Some(f),
            out: None,
            reply: tx,
        });
        answer(self.writer.as_ref(), job, rx)
    }
}

/// Queue `job` on `queue` (`None`: closed) and resolve with the answer it sends on `rx`.
fn answer<J, R>(
    queue: Option<&mpsc::Sender<J>>,
    job: J,
    rx: oneshot::Receiver<Result<R, StoreError>>,
) -> impl Future<Output = Result<R, StoreError>> + use<J, R> {
    let sent = match queue {
        Some(s) => s.send(job).map_err(|_| StoreError::Closed),
        None => Err(StoreError::Closed),
    };
    async move {
        sent?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// A reader thread's loop: take the next job, run it on `conn`, until the queue closes.
pub fn reader_loop<C>(mut conn: C, rx: ReadQueue<C>) {
    loop {
        // Hold the lock only while waiting for one job, so the other readers take the next.
        let job = {
            let guard = match rx.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            guard.recv()
        };
        match job {
            Ok(job) => job(&mut conn),
            Err(_) => break,
        }
    }
}

/// Move the jobs queued right now into `batch`, up to `max_batch` in all.
pub fn pull(rx: &mpsc::Receiver<BoxedWriteJob>, batch: &mut Vec<BoxedWriteJob>, max_batch: usize) {
    while batch.len() < max_batch {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// Answer every job of a batch that ran: each its own result when the batch committed, else
/// the batch's error (logged once here).
pub fn finish_batch(batch: &mut Vec<BoxedWriteJob>, outcome: Result<(), StoreError>) {
    if let Err(e) = &outcome {
        tracing::error!(error = %e.report(), jobs = batch.len(), "store write batch failed");
    }
    let err = outcome.err();
    for job in batch.drain(..) {
        job.finish(err.as_ref());
    }
}

/// What a backend's store handle holds for its [`Store`]: the queues to its worker threads and
/// what it reports.
pub struct Shared<C> {
    /// The queues to the worker threads.
    pub workers: Workers<C>,
    /// What [`Store::describe`] says.
    pub describe: String,
    /// The durability level in force ([`Store::synchronous`]).
    pub synchronous: &'static str,
    /// Where changes other processes commit are published ([`Store::watch`]); `None` when no
    /// other process can write to the store.
    pub changes: Option<broadcast::Sender<Change>>,
    /// The periodic-work lease as last checked ([`Store::lease`]); `None` when this process is
    /// the only writer.
    pub lease: Option<Arc<Mutex<LeaseStatus>>>,
    /// The threads serving the store, joined when it is dropped.
    pub threads: Vec<JoinHandle<()>>,
}

impl<C> Drop for Shared<C> {
    fn drop(&mut self) {
        // Closing the queues ends the worker threads; joining makes "drop, then reopen" see
        // everything they did finished.
        self.workers.close();
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            // A closure that captured the last handle drops it on a store thread, which must
            // not wait for itself.
            if t.thread().id() == me {
                continue;
            }
            if t.join().is_err() {
                tracing::error!("a store thread panicked");
            }
        }
    }
}

/// A store whose transactions run on worker threads: what a backend implements to be a
/// [`Store`].
pub trait Backend: Clone + Send + Sync + 'static {
    /// What each reader thread owns (its connection).
    type Conn: 'static;
    /// The handle's queues and reports.
    fn shared(&self) -> &Shared<Self::Conn>;
    /// Run `f` in a read transaction (one consistent snapshot) on a reader's `conn`.
    fn read_on<R>(
        conn: &mut Self::Conn,
        f: impl FnOnce(&dyn ReadTx) -> Result<R, StoreError>,
    ) -> Result<R, StoreError>;
    /// [`Store::ledger_current`]: ready at once (the default) where each commit keeps the
    /// contract ledger.
    fn ledger_current(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }
}

impl<B: Backend> Store for B {
    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        F: FnOnce(&dyn ReadTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        self.shared()
            .workers
            .read(move |conn: &mut B::Conn| B::read_on(conn, f))
    }

    fn write<R, F>(&self, f: F) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        F: FnOnce(&mut dyn WriteTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        self.shared().workers.write(f)
    }

    fn describe(&self) -> String {
        self.shared().describe.clone()
    }

    fn synchronous(&self) -> &'static str {
        self.shared().synchronous
    }

    fn watch(&self) -> Option<broadcast::Receiver<Change>> {
        self.shared()
            .changes
            .as_ref()
            .map(broadcast::Sender::subscribe)
    }

    fn ledger_current(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        B::ledger_current(self)
    }

    fn lease(&self) -> Option<LeaseStatus> {
        let status = self.shared().lease.as_ref()?;
        Some(match status.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        })
    }
}
