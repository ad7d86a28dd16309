//! The job queue and the model thread.
//!
//! The queue is a mutex-guarded deque with a condition variable rather than a channel because
//! the model thread must wake for three different reasons — a job, a stop, or the idle clock
//! running out — and a timed wait on the condition variable covers all three with one sleep.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use f5_synth::{Audio, ModelFiles, SpeakOptions, SpeechEngine, VoiceRef};
use tokio::sync::oneshot;

/// One utterance to speak; each job carries its own options.
pub(crate) struct JobSpec {
    /// Which of the server's models speaks it (an index into the loader's list).
    pub model: usize,
    pub voice: VoiceRef,
    pub text: String,
    pub options: SpeakOptions,
    /// When the job must be done by; past it the job stops at the next step boundary.
    pub deadline: Instant,
    /// A streamed job hands its samples here as each chunk is final, instead of keeping them;
    /// a closed receiver (the client went away) stops the job at that chunk boundary.
    pub stream: Option<tokio::sync::mpsc::Sender<Vec<f32>>>,
}

/// A finished job.
pub(crate) struct JobOutput {
    pub audio: Audio,
    /// The model that spoke it (an index into the loader's list).
    pub model: usize,
    /// Time spent waiting in the queue, and running (a reload included).
    pub waited: Duration,
    pub ran: Duration,
}

/// Why a job did not produce audio.
#[derive(Debug)]
pub(crate) enum JobError {
    /// The request cannot be spoken as asked (options, text): the client's to fix.
    Rejected(String),
    /// The server failed (weights could not be reloaded, the engine broke).
    Failed(String),
    /// The job ran past its deadline and was stopped.
    TimedOut,
    /// Its client went away; nobody waits for the answer.
    Cancelled,
    /// The server is shutting down and its drain time ran out before the job was done.
    ShuttingDown,
}

/// Why a running job was stopped from its progress callback. The engine's progress callback
/// cannot return an error, so the model thread unwinds out of the synthesis with this as the
/// payload (`resume_unwind`, which runs no panic hook) and catches it in `run_job`. The callback
/// runs between steps and chunks, when no forward is half done, so the weights stay usable.
enum Stop {
    ClientGone,
    Deadline,
    DrainOver,
}

type Reply = oneshot::Sender<Result<JobOutput, JobError>>;

struct Job {
    spec: JobSpec,
    queued_at: Instant,
    reply: Reply,
}

struct QueueState {
    jobs: VecDeque<Job>,
    stopping: bool,
    paused: bool,
}

/// Counters `GET /health` reports.
#[derive(Default)]
pub(crate) struct Stats {
    pub loaded: AtomicBool,
    /// The model whose weights are loaded, or were last (an index into the loader's list).
    pub current: AtomicUsize,
    /// Every time weights were read from disk: the first load, reloads after idle, switches.
    pub loads: AtomicU64,
    /// Weights dropped after `unload_after` without a job.
    pub unloads: AtomicU64,
    /// Weights exchanged because a job asked for another model than the one loaded.
    pub switches: AtomicU64,
    pub jobs_done: AtomicU64,
    pub jobs_failed: AtomicU64,
    /// Jobs stopped because their client went away.
    pub jobs_cancelled: AtomicU64,
    /// Running mean of a job's run time in milliseconds, for Retry-After.
    pub mean_job_ms: AtomicU64,
    /// Histograms of finished jobs, for `/metrics`.
    pub job_metrics: crate::metrics::JobMetrics,
}

/// How a job is admitted to the queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A new request: refused when the queue is full.
    New,
    /// A later line of an admitted dialogue: never refused, so a dialogue that was accepted
    /// is not cut off half way. Each dialogue has at most one job queued at a time, so this
    /// can exceed the capacity by at most the number of dialogues in flight.
    Continuation,
}

/// The queue was full: the client should come back after `retry_after_s`.
pub(crate) struct QueueFull {
    pub retry_after_s: u64,
}

/// The front of the model thread.
pub(crate) struct Engine {
    queue: Mutex<QueueState>,
    wake: Condvar,
    capacity: usize,
    pub stats: Stats,
    /// Set when a shutdown's drain time has run out: the running job stops at its next step,
    /// queued ones are not started, and every request still waiting is answered 503 at once
    /// (see [`Engine::drain_over`]).
    cut_off: AtomicBool,
    drain_over: tokio::sync::watch::Sender<bool>,
}

/// What opens the weights, on the model thread, as often as they are reloaded or exchanged.
pub(crate) struct Loader {
    /// The models in the order configured; the first is loaded at start.
    pub models: Vec<ModelFiles>,
    pub threads: usize,
    pub device: f5_gpukit::DeviceChoice,
    pub transcriber: Option<String>,
    pub language: Option<String>,
}

/// Loaded weights, of whichever family on whichever backend: the pipeline chose both when it
/// opened them. Dropping it gives the device memory back (the unload-after path).
type LoadedModel = Box<dyn SpeechEngine>;

impl Loader {
    fn open(&self, index: usize) -> Result<LoadedModel, String> {
        let files = self.models.get(index).ok_or_else(|| format!("no model number {index}"))?;
        let device = f5_synth::DeviceOptions::new(self.device, self.threads);
        // Errors name the problem, never the file's place on the server's disk.
        let mut engine = f5_synth::open_engine(files, device).map_err(|e| e.to_string())?;
        if let Some(addr) = &self.transcriber {
            let t = f5_verify::Transcriber::new(addr, self.language.clone()).map_err(|e| format!("transcriber {addr}: {e}"))?;
            engine.set_listen_back(f5_synth::ListenBack {
                transcriber: Box::new(t),
                language: f5_verify::language_for(self.language.as_deref()),
            });
        }
        Ok(engine)
    }
}

/// While held, the model thread takes no job (see `Server::pause_jobs`).
pub struct PauseGuard {
    engine: Arc<Engine>,
}

impl Drop for PauseGuard {
    fn drop(&mut self) {
        self.engine.lock().paused = false;
        self.engine.wake.notify_all();
    }
}

enum Next {
    Run(Box<Job>),
    Unload,
    Stop,
}

impl Engine {
    /// Starts the model thread and waits until it has loaded the weights once.
    pub async fn start(
        loader: Loader,
        capacity: usize,
        unload_after: Option<Duration>,
    ) -> Result<(Arc<Engine>, std::thread::JoinHandle<()>), String> {
        let engine = Arc::new(Engine {
            queue: Mutex::new(QueueState { jobs: VecDeque::new(), stopping: false, paused: false }),
            wake: Condvar::new(),
            capacity,
            stats: Stats::default(),
            cut_off: AtomicBool::new(false),
            drain_over: tokio::sync::watch::Sender::new(false),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_engine = engine.clone();
        let handle = std::thread::Builder::new()
            .name("f5-model".into())
            .spawn(move || model_thread(thread_engine, loader, unload_after, ready_tx))
            .map_err(|e| format!("cannot start the model thread: {e}"))?;
        match ready_rx.await {
            Ok(Ok(())) => Ok((engine, handle)),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => {
                let _ = handle.join();
                Err("the model thread stopped while loading".into())
            }
        }
    }

    /// The queue even when a panicking holder poisoned it: the state is a deque and two
    /// flags, always consistent between statements.
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a job; the receiver gets its result.
    pub fn submit(&self, spec: JobSpec, admission: Admission) -> Result<oneshot::Receiver<Result<JobOutput, JobError>>, QueueFull> {
        let (reply, rx) = oneshot::channel();
        let mut q = self.lock();
        if q.stopping || (admission == Admission::New && q.jobs.len() >= self.capacity) {
            let depth = q.jobs.len() as u64 + 1;
            let mean_ms = self.stats.mean_job_ms.load(Ordering::Relaxed).max(1);
            return Err(QueueFull { retry_after_s: (depth * mean_ms).div_ceil(1000).clamp(1, 600) });
        }
        q.jobs.push_back(Job { spec, queued_at: Instant::now(), reply });
        drop(q);
        self.wake.notify_all();
        Ok(rx)
    }

    /// Whether a new job would be taken now (not stopping, room in the queue).
    pub fn accepting(&self) -> bool {
        let q = self.lock();
        !q.stopping && q.jobs.len() < self.capacity
    }

    pub fn depth(&self) -> usize {
        self.lock().jobs.len()
    }

    pub fn pause(self: &Arc<Self>) -> PauseGuard {
        self.lock().paused = true;
        PauseGuard { engine: self.clone() }
    }

    /// Ends a shutdown's drain: jobs not done by now are answered 503 (see `cut_off`).
    pub fn cut_off(&self) {
        self.cut_off.store(true, Ordering::SeqCst);
        self.drain_over.send_replace(true);
        self.wake.notify_all();
    }

    /// Whether [`Engine::cut_off`] was called.
    pub fn is_cut_off(&self) -> bool {
        self.cut_off.load(Ordering::SeqCst)
    }

    /// Completes when the drain time of a shutdown has run out; never before a shutdown.
    pub async fn drain_over(&self) {
        let mut rx = self.drain_over.subscribe();
        let _ = rx.wait_for(|over| *over).await;
    }

    /// Asks the model thread to stop; queued jobs are dropped, so their clients get an error.
    pub fn stop(&self) {
        self.lock().stopping = true;
        self.wake.notify_all();
    }

    /// Sleeps until there is a job, a stop, or the weights have been idle past the limit.
    fn next(&self, loaded: bool, idle_since: Instant, unload_after: Option<Duration>) -> Next {
        let mut q = self.lock();
        loop {
            if q.stopping {
                q.jobs.clear();
                return Next::Stop;
            }
            if !q.paused {
                if let Some(job) = q.jobs.pop_front() {
                    return Next::Run(Box::new(job));
                }
            }
            match unload_after.filter(|_| loaded && q.jobs.is_empty()) {
                Some(limit) => {
                    let idle = idle_since.elapsed();
                    if idle >= limit {
                        return Next::Unload;
                    }
                    q = self.wake.wait_timeout(q, limit - idle).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                }
                None => q = self.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

fn model_thread(engine: Arc<Engine>, loader: Loader, unload_after: Option<Duration>, ready: oneshot::Sender<Result<(), String>>) {
    let stats = &engine.stats;
    let mut synth = match loader.open(0) {
        Ok(s) => Some(s),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    stats.loaded.store(true, Ordering::SeqCst);
    stats.current.store(0, Ordering::SeqCst);
    stats.loads.store(1, Ordering::SeqCst);
    let _ = ready.send(Ok(()));
    let mut idle_since = Instant::now();
    loop {
        match engine.next(synth.is_some(), idle_since, unload_after) {
            Next::Stop => return,
            Next::Unload => {
                synth = None;
                stats.loaded.store(false, Ordering::SeqCst);
                stats.unloads.fetch_add(1, Ordering::SeqCst);
            }
            Next::Run(job) => {
                let waited = job.queued_at.elapsed();
                // A client that went away no longer needs its forward.
                if job.reply.is_closed() {
                    stats.jobs_cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                // The drain time ran out while it waited.
                if engine.is_cut_off() {
                    let _ = job.reply.send(Err(JobError::ShuttingDown));
                    continue;
                }
                // Its whole time went on waiting.
                if Instant::now() >= job.spec.deadline {
                    let _ = job.reply.send(Err(JobError::TimedOut));
                    continue;
                }
                let started = Instant::now();
                let result = run_job(&mut synth, &loader, &job, stats, &engine.cut_off);
                let ran = started.elapsed();
                idle_since = Instant::now();
                match &result {
                    Ok(audio) => {
                        stats.job_metrics.observe(ran.as_secs_f64(), audio, job.spec.options.max_wer);
                        stats.jobs_done.fetch_add(1, Ordering::SeqCst);
                        let ms = ran.as_millis().min(u64::MAX as u128) as u64;
                        let old = stats.mean_job_ms.load(Ordering::Relaxed);
                        stats.mean_job_ms.store(if old == 0 { ms } else { (old * 7 + ms) / 8 }, Ordering::Relaxed);
                    }
                    // A request the engine refused is the client's mistake, not a failure; a job
                    // stopped for its client or its deadline is neither.
                    Err(JobError::Rejected(_)) | Err(JobError::TimedOut) | Err(JobError::ShuttingDown) => {}
                    Err(JobError::Cancelled) => {
                        stats.jobs_cancelled.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(JobError::Failed(_)) => {
                        stats.jobs_failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let model = job.spec.model;
                let _ = job.reply.send(result.map(|audio| JobOutput { audio, model, waited, ran }));
            }
        }
    }
}

fn run_job(synth: &mut Option<LoadedModel>, loader: &Loader, job: &Job, stats: &Stats, cut_off: &AtomicBool) -> Result<Audio, JobError> {
    let spec = &job.spec;
    let switching = stats.current.load(Ordering::SeqCst) != spec.model;
    if switching {
        // The old weights go before the new ones are read, so two models never sit in memory
        // at once.
        *synth = None;
        stats.loaded.store(false, Ordering::SeqCst);
    }
    if synth.is_none() {
        let loaded = loader.open(spec.model).map_err(|e| JobError::Failed(format!("cannot load the model: {e}")))?;
        *synth = Some(loaded);
        stats.current.store(spec.model, Ordering::SeqCst);
        stats.loaded.store(true, Ordering::SeqCst);
        stats.loads.fetch_add(1, Ordering::SeqCst);
        if switching {
            stats.switches.fetch_add(1, Ordering::SeqCst);
        }
    }
    let Some(model) = synth.as_ref() else {
        return Err(JobError::Failed("the model is not loaded".into()));
    };
    // Between steps and chunks: stop if the client is gone or the deadline has passed.
    let mut check = |_: f5_synth::Progress<'_>| {
        if job.reply.is_closed() {
            std::panic::resume_unwind(Box::new(Stop::ClientGone));
        }
        if Instant::now() >= spec.deadline {
            std::panic::resume_unwind(Box::new(Stop::Deadline));
        }
        if cut_off.load(Ordering::SeqCst) {
            std::panic::resume_unwind(Box::new(Stop::DrainOver));
        }
    };
    // A panic inside the engine must not take the model thread (and every later request) with it.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &spec.stream {
        None => f5_synth::speak_to_memory(&**model, &spec.voice, &spec.text, &spec.options, &mut check),
        Some(blocks) => {
            let mut sink = |block: &[f64]| {
                // As f32, the precision of a whole answer's samples, so a stream and a whole
                // answer round to the same 16-bit values.
                if !block.is_empty() && blocks.blocking_send(block.iter().map(|&x| x as f32).collect()).is_err() {
                    std::panic::resume_unwind(Box::new(Stop::ClientGone));
                }
            };
            let spoken = model.speak(&spec.voice, &spec.text, &spec.options, &mut check, &mut sink)?;
            // The samples went to the client; the report stays.
            let score = spoken.chunks.iter().map(|c| &c.score).collect();
            Ok(Audio { seed: spoken.seed, score, chunks: spoken.chunks, words: spoken.words, ..Audio::default() })
        }
    }));
    // With a transcriber the synthesizer listens to each chunk itself (the listen-back gate);
    // the score travels back in `Audio::score`.
    match outcome {
        Ok(Ok(audio)) => Ok(audio),
        Ok(Err(e)) if e.is_caller_error() => Err(JobError::Rejected(e.to_string())),
        Ok(Err(e)) => Err(JobError::Failed(e.to_string())),
        Err(payload) if payload.is::<Stop>() => match payload.downcast_ref::<Stop>() {
            Some(Stop::ClientGone) => Err(JobError::Cancelled),
            Some(Stop::DrainOver) => Err(JobError::ShuttingDown),
            _ => Err(JobError::TimedOut),
        },
        Err(_) => {
            // The weights may be half-way through something: load them afresh next time.
            *synth = None;
            stats.loaded.store(false, Ordering::SeqCst);
            Err(JobError::Failed("the synthesis engine failed; the model will be reloaded".into()))
        }
    }
}
