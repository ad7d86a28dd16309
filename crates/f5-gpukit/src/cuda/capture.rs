//! Bookkeeping that keeps CUDA graph capture safe, free of CUDA types so it is unit-tested on
//! machines without a GPU.
//!
//! - [`CaptureGate`]: stream capture records *every* launch queued on the stream, from any
//!   thread. Every op therefore enters the gate (a shared lock) while it queues work, and a
//!   capture holds it exclusively: another thread's op waits until the capture has ended instead
//!   of landing in someone else's graph. The capturing thread itself passes (it is the one
//!   recording), and an op nested in another op of the same thread does not lock twice.
//! - [`Scratch`]: a reusable device buffer (the bf16 GEMM staging, GRN's norms). A captured graph
//!   keeps the raw address of the scratch it used, so while any graph exists (or is being
//!   captured) a scratch that must grow keeps its old allocation alive instead of freeing it;
//!   inside a capture it cannot grow at all (that would allocate), which is refused with an error
//!   that says to run the work once eagerly first.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::ThreadId;

use crate::{KitError, Result};

thread_local! {
    /// The gates this thread currently holds open (by address): nested ops skip the lock.
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Serialises graph capture against the ops of other threads; counts live graphs.
#[derive(Default)]
pub(crate) struct CaptureGate {
    lock: RwLock<()>,
    owner: Mutex<Option<ThreadId>>,
    /// Graphs that exist (captured and not dropped), plus a capture in progress.
    live: Arc<AtomicUsize>,
}

/// Held while an op queues work; see [`CaptureGate::enter`].
pub(crate) struct OpGuard<'a> {
    _read: Option<RwLockReadGuard<'a, ()>>,
    key: Option<usize>,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(i) = h.iter().rposition(|&k| k == key) {
                    h.remove(i);
                }
            });
        }
    }
}

/// Held for the length of a capture; ends it on drop.
pub(crate) struct CaptureGuard<'a> {
    gate: &'a CaptureGate,
    _write: RwLockWriteGuard<'a, ()>,
    /// Taken over by the graph ([`CaptureGuard::into_pin`]) or released on drop.
    pin: Option<GraphPin>,
}

impl CaptureGuard<'_> {
    /// The capture produced a graph: the graph now keeps the scratch pinned.
    pub fn into_pin(mut self) -> GraphPin {
        self.pin.take().unwrap_or_else(|| GraphPin::new(&self.gate.live))
    }
}

impl Drop for CaptureGuard<'_> {
    fn drop(&mut self) {
        *self.gate.owner.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Keeps scratch buffers from being freed while the graph that holds it exists.
pub(crate) struct GraphPin {
    live: Arc<AtomicUsize>,
}

impl GraphPin {
    fn new(live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        GraphPin { live: live.clone() }
    }
}

impl Drop for GraphPin {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CaptureGate {
    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Whether the calling thread is recording a capture on this gate.
    pub fn capturing_here(&self) -> bool {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) == Some(std::thread::current().id())
    }

    /// Whether a graph exists or is being captured (scratch must not be freed).
    pub fn pinned(&self) -> bool {
        self.live.load(Ordering::SeqCst) > 0
    }

    /// Enter before queuing work: waits while another thread captures.
    pub fn enter(&self) -> Result<OpGuard<'_>> {
        let key = self.key();
        if self.capturing_here() || HELD.with(|h| h.borrow().contains(&key)) {
            return Ok(OpGuard { _read: None, key: None });
        }
        // The lock guards no data, only ordering: a panic elsewhere does not make it unusable.
        let read = self.lock.read().unwrap_or_else(|e| e.into_inner());
        HELD.with(|h| h.borrow_mut().push(key));
        Ok(OpGuard { _read: Some(read), key: Some(key) })
    }

    /// Starts a capture on this thread: waits for other threads' ops in flight, then keeps them
    /// out until the guard drops. Refuses a nested capture and a capture from inside an op.
    pub fn begin(&self) -> Result<CaptureGuard<'_>> {
        if self.capturing_here() {
            return Err(KitError::Device("a graph capture cannot be nested in another one".into()));
        }
        if HELD.with(|h| h.borrow().contains(&self.key())) {
            return Err(KitError::Device("a graph capture cannot start inside an op of the same backend".into()));
        }
        let write = self.lock.write().unwrap_or_else(|e| e.into_inner());
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current().id());
        Ok(CaptureGuard { gate: self, _write: write, pin: Some(GraphPin::new(&self.live)) })
    }

    /// A clear refusal for an op that cannot be recorded into a graph.
    pub fn refuse(&self, op: &str, why: &str) -> Result<()> {
        if self.capturing_here() {
            return Err(KitError::Device(format!("{op} cannot be captured in a CUDA graph: it {why}")));
        }
        Ok(())
    }
}

/// A reusable device buffer that only grows; see the module docs for the graph rules.
pub(crate) struct Scratch<S> {
    current: Option<S>,
    /// Outgrown buffers a graph may still point into; freed once no graph exists.
    retired: Vec<S>,
    what: &'static str,
}

impl<S> Scratch<S> {
    pub const fn new(what: &'static str) -> Self {
        Scratch { current: None, retired: Vec::new(), what }
    }

    /// A buffer of at least `len` elements. `size` reads a buffer's length, `alloc` makes one.
    pub fn ensure(
        &mut self,
        gate: &CaptureGate,
        len: usize,
        size: impl Fn(&S) -> usize,
        alloc: impl FnOnce(usize) -> Result<S>,
    ) -> Result<&S> {
        let pinned = gate.pinned();
        if !pinned {
            self.retired.clear();
        }
        let fits = self.current.as_ref().is_some_and(|s| size(s) >= len);
        if !fits {
            if gate.capturing_here() {
                return Err(KitError::Device(format!(
                    "{} needs {len} values inside a graph capture, more than it holds: run the work once eagerly before capturing",
                    self.what
                )));
            }
            let fresh = alloc(len)?;
            if let Some(old) = self.current.replace(fresh) {
                if pinned {
                    self.retired.push(old);
                }
            }
        }
        self.current.as_ref().ok_or_else(|| KitError::Device(format!("{} missing", self.what)))
    }

    #[cfg(test)]
    fn retired(&self) -> usize {
        self.retired.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn grow(s: &mut Scratch<Vec<u8>>, gate: &CaptureGate, len: usize) -> Result<usize> {
        s.ensure(gate, len, |v| v.len(), |n| Ok(vec![0; n])).map(|v| v.len())
    }

    /// Without graphs an outgrown scratch is freed at once; with a live graph it is kept until
    /// the graph is gone; inside a capture growing is refused with advice.
    #[test]
    fn scratch_outlives_the_graphs_that_use_it() {
        let gate = CaptureGate::default();
        let mut s = Scratch::new("test scratch");
        assert_eq!(grow(&mut s, &gate, 4).unwrap(), 4);
        assert_eq!(grow(&mut s, &gate, 8).unwrap(), 8);
        assert_eq!(s.retired(), 0, "no graph: the old buffer is freed");
        assert_eq!(grow(&mut s, &gate, 2).unwrap(), 8, "a smaller request reuses the buffer");

        let pin = {
            let capture = gate.begin().unwrap();
            assert_eq!(grow(&mut s, &gate, 8).unwrap(), 8, "a capture may use scratch that fits");
            let err = grow(&mut s, &gate, 9).unwrap_err().to_string();
            assert!(err.contains("eagerly before capturing"), "{err}");
            capture.into_pin()
        };
        assert!(gate.pinned());
        assert_eq!(grow(&mut s, &gate, 16).unwrap(), 16);
        assert_eq!(s.retired(), 1, "a live graph keeps the buffer it recorded");
        drop(pin);
        assert!(!gate.pinned());
        assert_eq!(grow(&mut s, &gate, 1).unwrap(), 16);
        assert_eq!(s.retired(), 0, "retired buffers are freed once no graph exists");
    }

    /// A panic inside a capture leaves the gate usable (it guards ordering, not data).
    #[test]
    fn a_panicking_capture_does_not_lock_the_backend_out() {
        let gate = Arc::new(CaptureGate::default());
        let g = gate.clone();
        let panicked = std::thread::spawn(move || {
            let _capture = g.begin().unwrap();
            panic!("work failed mid-capture");
        })
        .join();
        assert!(panicked.is_err());
        assert!(!gate.pinned());
        drop(gate.enter().unwrap());
        drop(gate.begin().unwrap());
    }

    /// A failed capture (guard dropped without a graph) unpins and frees the owner.
    #[test]
    fn a_dropped_capture_releases_everything() {
        let gate = CaptureGate::default();
        drop(gate.begin().unwrap());
        assert!(!gate.pinned());
        assert!(!gate.capturing_here());
        assert!(gate.refuse("lstm", "copies host data").is_ok());
    }

    #[test]
    fn refusals_and_nesting_inside_a_capture() {
        let gate = CaptureGate::default();
        let capture = gate.begin().unwrap();
        let err = gate.refuse("embedding", "copies the ids from host memory").unwrap_err().to_string();
        assert!(err.contains("embedding cannot be captured"), "{err}");
        assert!(gate.begin().is_err(), "nested capture");
        // The capturing thread's own ops pass the gate.
        drop(gate.enter().unwrap());
        drop(capture);
        // An op holding the gate cannot start a capture (it would deadlock on itself).
        let op = gate.enter().unwrap();
        let nested = gate.enter().unwrap();
        assert!(gate.begin().is_err());
        drop(nested);
        drop(op);
        drop(gate.begin().unwrap());
    }

    /// Another thread's op waits for the capture to end instead of being recorded into it.
    #[test]
    fn other_threads_wait_for_the_capture() {
        let gate = Arc::new(CaptureGate::default());
        let capture = gate.begin().unwrap();
        let (tx, rx) = mpsc::channel();
        let g = gate.clone();
        let worker = std::thread::spawn(move || {
            let _op = g.enter().unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "the op ran during another thread's capture");
        drop(capture);
        rx.recv_timeout(Duration::from_secs(10)).expect("the op runs once the capture ends");
        worker.join().unwrap();
    }
}
