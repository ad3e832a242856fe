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

/// How much lower a reader thread's scheduling priority is than the node's other threads (a
/// nice value; Linux schedules each thread by its own). At +10 the kernel gives a runnable
/// thread of the default priority about ten times its share, so the node loop, the
/// election's renewals and replication run first, and reads still progress under a
/// write load. Raising one's own nice value needs no privilege (lowering it back would,
/// which is why such work gets a thread of its own rather than one of a pool).
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

/// Moves the calling thread to Linux's idle scheduling class (`SCHED_IDLE`): it runs only on
/// CPU time no other thread of the default class wants, and a waking thread of that class
/// takes the CPU from it at once. A nice value is not enough for catch-up work: the kernel's
/// scheduler (EEVDF) lets a running thread of any weight finish its slice before a waking
/// one, and a put wakes several threads on its way through the members. (The 15 % of puts
/// kept during a `scalebench catch-up` had another cause, a read lease held by the member
/// catching up; this class alone moved it to 21 %.) Needs no privilege; a failure leaves
/// the thread at [`BACKGROUND_NICENESS`].
pub(crate) fn idle_own_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `sched_setscheduler` with pid 0 changes only the calling thread's policy; the
    // parameter is a valid, initialised struct (priority 0, the only one SCHED_IDLE takes),
    // and the result is checked.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "a catch-up thread kept the default class");
            lower_own_priority();
        }
    }
    #[cfg(not(target_os = "linux"))]
    lower_own_priority();
}

/// Runs `work` on a new thread named `name` in the idle scheduling class
/// ([`idle_own_priority`]): catch-up work, which must not take the CPU of the loops serving
/// the cluster (on a host the members share, and on a busy master). Its result comes back
/// through the receiver (closed if `work` panicked). Falls back to tokio's blocking pool, at
/// the usual priority, if no thread can be started.
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
                idle_own_priority();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Catch-up work runs in the idle class and the caller's thread keeps its own: the whole
    /// point is that only the background thread yields.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn background_work_runs_in_the_idle_class_and_only_there() {
        // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy; no arguments
        // to uphold.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let seen = spawn_background("test-background", policy).await.expect("the background work ran");
        assert_eq!(seen, libc::SCHED_IDLE, "a background thread is in the idle class");
        assert_eq!(policy(), libc::SCHED_OTHER, "the caller's thread keeps the default class");
    }

    /// Readers are niced, not idle: under a write load that keeps the CPU busy they must
    /// still progress.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_reader_is_niced_not_idle() {
        let (policy, nice) = std::thread::spawn(|| {
            lower_own_priority();
            // SAFETY: both calls read the calling thread's own scheduling settings.
            unsafe {
                (libc::sched_getscheduler(0), libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t))
            }
        })
        .join()
        .expect("the thread ran");
        assert_eq!(policy, libc::SCHED_OTHER);
        assert_eq!(nice, BACKGROUND_NICENESS);
    }
}
