//! Blocking work on an async worker's own thread.

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
