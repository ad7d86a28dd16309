//! The connection loop: what `axum::serve` does, plus the limits it does not offer.
//!
//! - A connection cap: a permit per open connection; at the cap the loop stops accepting and
//!   further clients wait in the kernel's backlog instead of costing a task and buffers each.
//! - A header-read timeout (hyper's): a client that opens a connection and sends its request
//!   head slowly, or not at all, is dropped.
//! - An idle timeout: a kept-alive connection with no request in flight and no bytes moving is
//!   closed. A request being answered (a synthesis may take minutes) never counts as idle.
//!
//! The body-read timeout lives with the body readers in `api`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// After `shutdown`, how long the requests in flight have to finish; `None`: as long as
    /// they take. When it runs out, `on_drain_over` is called (which answers the requests still
    /// waiting 503) and the loop waits at most [`CUT_OFF_GRACE`] more for those answers.
    pub drain_timeout: Option<Duration>,
    pub on_drain_over: Box<dyn FnOnce() + Send>,
}

/// Time for the 503 answers of a cut-off drain to be written, after the drain time.
pub(crate) const CUT_OFF_GRACE: Duration = Duration::from_secs(2);

/// How a drain ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Drained {
    /// Every request in flight was answered in time.
    Complete,
    /// The drain time ran out; what was still waiting was answered 503.
    CutOff,
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the connections in
/// flight to finish their requests (at most the drain timeout, see [`Limits`]).
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Drained {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: wait a moment rather than spin.
                    crate::log_line!("f5 serve: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched { inner: stream, activity: activity.clone() });
        let service_activity = activity.clone();
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let busy = Busy::new(service_activity.clone());
            let mut app = app.clone();
            async move {
                let response = tower_service::Service::call(&mut app, req.map(axum::body::Body::new)).await;
                drop(busy);
                response
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(io, service);
        let connection = graceful.watch(connection);
        let idle = limits.idle_timeout;
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let mut tick = tokio::time::interval(idle.div_f64(4.0).max(Duration::from_millis(10)));
            loop {
                tokio::select! {
                    _ = &mut connection => break,
                    _ = tick.tick() => {
                        if activity.idle_for() >= idle {
                            break; // dropping the connection closes it
                        }
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let Some(limit) = limits.drain_timeout else {
        graceful.shutdown().await;
        return Drained::Complete;
    };
    let mut finished = std::pin::pin!(graceful.shutdown());
    if tokio::time::timeout(limit, &mut finished).await.is_ok() {
        return Drained::Complete;
    }
    (limits.on_drain_over)();
    // The waiting requests answer 503 at once; a connection still busy after the grace is one
    // whose answer was already streaming when the time ran out, and it is closed unfinished.
    let _ = tokio::time::timeout(CUT_OFF_GRACE, finished).await;
    Drained::CutOff
}

/// When a connection last moved bytes, and how many of its requests are being answered.
struct Activity {
    born: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity { born: Instant::now(), last_ms: AtomicU64::new(0), in_flight: AtomicUsize::new(0) }
    }
    fn touch(&self) {
        self.last_ms.store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    /// How long nothing has happened; zero while a request is being answered.
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let now = self.born.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Marks a request in flight for as long as it lives.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket that records when bytes last moved.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
