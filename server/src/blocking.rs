//! Blocking work: on an async worker's own thread, or on a thread of its own at a lower
//! priority than the node's loops (background work that must not take their CPU).

/// Runs `work`, which may block for a while (a disk write, a snapshot install), where it is
/// called. On a multi-thread runtime the worker's other tasks move to another thread for
/// its duration (`block_in_place`), so the election's renewals and peer pulls go on;
/// elsewhere (a current-thread runtime in tests, or no runtime) it simply runs.
pub(crate) fn run_here<R>(work: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// How much lower a background thread's scheduling priority is than the node's other
/// threads (a nice value; Linux schedules each thread by its own). At +10 the kernel gives a
/// runnable thread of the default priority about ten times its share, so the node loop, the
/// election's renewals and replication run first and background work takes what is left.
/// Raising one's own nice value needs no privilege (lowering it back would, which is why
/// such work gets a thread of its own rather than one of a pool).
pub(crate) const BACKGROUND_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority by [`BACKGROUND_NICENESS`]; a failure (no
/// such call on this platform) leaves it as it is.
pub(crate) fn lower_own_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` has no preconditions; `setpriority` on this thread's own id only
    // changes its nice value, and its result is checked.
    unsafe {
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICENESS) != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "a background thread kept its priority");
        }
    }
}

/// Runs `work` on a new thread named `name` at the background priority
/// ([`lower_own_priority`]); its result comes back through the receiver (closed if `work`
/// panicked). Falls back to tokio's blocking pool, at the usual priority, if no thread can
/// be started.
pub(crate) fn spawn_background<R: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> R + Send + 'static,
) -> tokio::sync::oneshot::Receiver<R> {
    let (tell, result) = tokio::sync::oneshot::channel();
    let work = std::sync::Arc::new(std::sync::Mutex::new(Some((work, tell))));
    let on_thread = std::sync::Arc::clone(&work);
    let run = move |lower: bool| {
        let taken = on_thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some((work, tell)) = taken {
            if lower {
                lower_own_priority();
            }
            let _ = tell.send(work());
        }
    };
    let run_later = run.clone();
    if let Err(error) = std::thread::Builder::new().name(name.to_string()).spawn(move || run(true)) {
        tracing::debug!(%error, name, "no thread for background work; running it on the blocking pool");
        drop(tokio::task::spawn_blocking(move || run_later(false)));
    }
    drop(work);
    result
}
