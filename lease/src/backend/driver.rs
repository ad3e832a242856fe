//! The tokio driver: runs a sans-IO [`ElectionCore`] as an async [`ElectionBackend`].
//!
//! One task owns the core. It feeds it the messages of the [`Inbox`], the timers it asks
//! for and the commands of the backend handle, sends what the core produces over the
//! [`Transport`], and publishes the resulting [`ElectionStatus`] on a watch channel.

use super::transport::{Inbox, Transport};
use super::{ElectionBackend, ElectionCounts, ElectionError, ElectionStatus};
use crate::core::{ElectionCore, LeadershipChange, Mastership};
use crate::ids::NodeId;
use crate::members::Configuration;
use crate::message::ElectionMessage;
#[cfg(not(feature = "clock-rate"))]
use crate::time::duration_nanos;
use crate::time::Instant;
use async_trait::async_trait;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// The node's monotonic clock as the cores see it: nanoseconds since the clock was created.
///
/// It reads `tokio::time::Instant`, which is monotonic in production and follows the
/// virtual clock under `tokio::time::pause`, so paused-time tests exercise real lease
/// timing without waiting. Copies share the origin, so every copy reads the same clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonotonicClock {
    origin: tokio::time::Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock { origin: tokio::time::Instant::now() }
    }

    /// The current reading.
    pub fn now(&self) -> Instant {
        #[cfg(feature = "clock-rate")]
        {
            Instant::from_nanos(super::clock_rate::reading(self.origin, tokio::time::Instant::now()))
        }
        #[cfg(not(feature = "clock-rate"))]
        {
            Instant::from_nanos(duration_nanos(self.origin.elapsed()))
        }
    }

    /// The tokio instant of reading `at`, for sleeping until a core's deadline. Readings
    /// too far away to represent map to about thirty years from now, which is never.
    pub fn to_tokio(&self, at: Instant) -> tokio::time::Instant {
        #[cfg(feature = "clock-rate")]
        let real = super::clock_rate::real_instant(self.origin, at.as_nanos());
        #[cfg(not(feature = "clock-rate"))]
        let real = self.origin.checked_add(Duration::from_nanos(at.as_nanos()));
        real.unwrap_or_else(|| tokio::time::Instant::now() + FAR_FUTURE)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Stands in for "no deadline" where an instant is needed.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// How many commands (step-down, stop) may wait for the driver task. Commands are rare and
/// each caller awaits its reply, so a handful is plenty.
const COMMAND_CAPACITY: usize = 8;

enum Command {
    StepDown(oneshot::Sender<()>),
    HandOver(NodeId, oneshot::Sender<()>),
    Stop(oneshot::Sender<()>),
}

/// The core's rule-5 answer, copied out by the driver task after every step so that
/// [`ElectionBackend::change_allowed_after`] can read it without a round trip to the task.
type ChangeAllowed = Arc<std::sync::Mutex<Option<(u64, Instant)>>>;

/// An [`ElectionBackend`] made of a protocol core driven by a tokio task.
///
/// Created by [`DrivenBackend::start`]. The task stops on [`ElectionBackend::stop`], or,
/// with the same graceful release, when the last handle is dropped.
pub struct DrivenBackend {
    name: &'static str,
    id: NodeId,
    clock: MonotonicClock,
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<ElectionStatus>,
    /// Counted by the driver task as it logs each change.
    counts: Arc<std::sync::Mutex<ElectionCounts>>,
    change_allowed: ChangeAllowed,
    /// The configuration the core takes before its next step (latest wins).
    configuration: watch::Sender<Option<Configuration>>,
    /// The candidacy the core takes before its next step (latest wins).
    candidacy: watch::Sender<bool>,
    /// The core's `configuration_seen` after its latest step.
    configuration_seen: Arc<AtomicU64>,
}

impl fmt::Debug for DrivenBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrivenBackend")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("status", &*self.status.borrow())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl DrivenBackend {
    /// Spawns the task that drives `core` and returns the handle to it.
    ///
    /// `name` is the backend's configuration name (see [`super::BackendKind::name`]),
    /// `clock` must be the clock the core was created with (its `now` readings), messages
    /// go out through `transport` and come in through `inbox`.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime (like `tokio::spawn`): that is a programming
    /// error, not a runtime condition.
    pub fn start<C: ElectionCore>(
        name: &'static str,
        core: C,
        clock: MonotonicClock,
        transport: Arc<dyn Transport>,
        inbox: Inbox,
    ) -> Arc<DrivenBackend> {
        match Self::start_with(name, core, clock, transport, inbox, None) {
            Ok(backend) => backend,
            Err(_) => unreachable!("spawning a task on the current runtime cannot fail"),
        }
    }

    /// [`Self::start`] on a thread of its own, with a single-threaded runtime of its own:
    /// no work of the node (applying a large command, answering a large read, encoding
    /// answers on the gRPC runtime) can delay the election's timers, so a master's lease is
    /// renewed on time whatever the data path does. Its messages go out through
    /// `transport` (queues, served by the network's own runtime) and come in on `inbox`.
    /// Fails only when the thread or its runtime cannot be created.
    pub fn start_on_own_thread<C: ElectionCore>(
        name: &'static str,
        core: C,
        clock: MonotonicClock,
        transport: Arc<dyn Transport>,
        inbox: Inbox,
    ) -> std::io::Result<Arc<DrivenBackend>> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Self::start_with(name, core, clock, transport, inbox, Some(runtime))
    }

    fn start_with<C: ElectionCore>(
        name: &'static str,
        core: C,
        clock: MonotonicClock,
        transport: Arc<dyn Transport>,
        inbox: Inbox,
        own_thread: Option<tokio::runtime::Runtime>,
    ) -> std::io::Result<Arc<DrivenBackend>> {
        let id = core.id();
        let now = clock.now();
        let initial = ElectionStatus { master: live_mastership(&core, now), hint: core.master_hint(now) };
        let (status_tx, status_rx) = watch::channel(initial);
        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_CAPACITY);
        let counts = Arc::new(std::sync::Mutex::new(ElectionCounts::default()));
        let change_allowed = Arc::new(std::sync::Mutex::new(core.change_allowed_after()));
        let configuration_seen = Arc::new(AtomicU64::new(core.configuration_seen()));
        let (configuration, configurations) = watch::channel(None);
        let (candidacy, candidacies) = watch::channel(true);
        let driver = Driver {
            name,
            id,
            core,
            clock,
            transport,
            status: StatusPublisher(status_tx),
            counts: counts.clone(),
            change_allowed: change_allowed.clone(),
            configuration_seen: configuration_seen.clone(),
        };
        let run = driver.run(inbox, commands_rx, configurations, candidacies);
        match own_thread {
            None => drop(tokio::spawn(run)),
            Some(runtime) => {
                let name = format!("{name}-election");
                std::thread::Builder::new().name(name).spawn(move || runtime.block_on(run))?;
            }
        }
        Ok(Arc::new(DrivenBackend {
            name,
            id,
            clock,
            commands: commands_tx,
            status: status_rx,
            counts,
            change_allowed,
            configuration,
            candidacy,
            configuration_seen,
        }))
    }

    /// Whether the driver task has exited (after [`ElectionBackend::stop`], or if it died).
    pub fn is_stopped(&self) -> bool {
        self.commands.is_closed()
    }

    /// The clock `valid_until` and [`ElectionBackend::now`] are measured with.
    pub fn clock(&self) -> MonotonicClock {
        self.clock
    }
}

#[async_trait]
impl ElectionBackend for DrivenBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn node_id(&self) -> NodeId {
        self.id
    }

    fn status(&self) -> ElectionStatus {
        let mut status = *self.status.borrow();
        // The task may be late to publish the expiry (busy runtime, slow transport); the
        // store must never act as master past valid_until, so time is checked here too.
        if status.master.is_some_and(|m| m.valid_until <= self.clock.now()) {
            status.master = None;
        }
        status
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn counts(&self) -> ElectionCounts {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn subscribe(&self) -> watch::Receiver<ElectionStatus> {
        self.status.clone()
    }

    async fn step_down(&self) -> Result<(), ElectionError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.commands.send(Command::StepDown(reply_tx)).await.map_err(|_| ElectionError::Stopped)?;
        // A dropped reply means the task exited before handling the command.
        reply_rx.await.map_err(|_| ElectionError::Stopped)
    }

    async fn hand_over(&self, to: NodeId) -> Result<(), ElectionError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.commands.send(Command::HandOver(to, reply_tx)).await.map_err(|_| ElectionError::Stopped)?;
        reply_rx.await.map_err(|_| ElectionError::Stopped)
    }

    fn configure(&self, configuration: Configuration) {
        self.configuration.send_replace(Some(configuration));
    }

    fn configuration_seen(&self) -> u64 {
        self.configuration_seen.load(Ordering::Acquire)
    }

    fn set_candidacy(&self, candidate: bool) {
        self.candidacy.send_if_modified(|current| std::mem::replace(current, candidate) != candidate);
    }

    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        *self.change_allowed.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn stop(&self) -> Result<(), ElectionError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        if self.commands.send(Command::Stop(reply_tx)).await.is_err() {
            return Ok(()); // already stopped
        }
        // Err: a concurrent stop got there first and the task exited; stopped either way.
        let _ = reply_rx.await;
        Ok(())
    }
}

/// The core's mastership at `now`, never past its `valid_until`: the published status must
/// not claim an expired lease even if a core were to report one.
fn live_mastership<C: ElectionCore>(core: &C, now: Instant) -> Option<Mastership> {
    core.mastership(now).filter(|m| now < m.valid_until)
}

/// Owns the status sender so that however the task ends (stop, panic in the core, runtime
/// shutdown), subscribers see the mastership end instead of a stale claim.
struct StatusPublisher(watch::Sender<ElectionStatus>);

impl StatusPublisher {
    fn publish(&self, status: ElectionStatus) {
        self.0.send_if_modified(|current| {
            if *current == status {
                return false;
            }
            *current = status;
            true
        });
    }

    fn current(&self) -> ElectionStatus {
        *self.0.borrow()
    }
}

impl Drop for StatusPublisher {
    fn drop(&mut self) {
        let status = ElectionStatus { master: None, ..self.current() };
        self.publish(status);
    }
}

struct Driver<C> {
    name: &'static str,
    id: NodeId,
    core: C,
    clock: MonotonicClock,
    transport: Arc<dyn Transport>,
    status: StatusPublisher,
    counts: Arc<std::sync::Mutex<ElectionCounts>>,
    change_allowed: ChangeAllowed,
    configuration_seen: Arc<AtomicU64>,
}

impl<C: ElectionCore> Driver<C> {
    async fn run(
        mut self,
        inbox: Inbox,
        mut commands: mpsc::Receiver<Command>,
        mut configurations: watch::Receiver<Option<Configuration>>,
        mut candidacies: watch::Receiver<bool>,
    ) {
        let mut inbox = Some(inbox);
        // The core may have produced output when it was built (PaxosLease starts its first
        // round in `new`).
        self.flush().await;
        loop {
            let wake = self.next_wake().map(|at| self.clock.to_tokio(at));
            let sleep = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Commands first: a step-down must not wait behind a burst of messages.
                biased;
                command = commands.recv() => match command {
                    Some(Command::StepDown(reply)) => {
                        self.core.step_down(self.clock.now());
                        self.flush().await;
                        let _ = reply.send(()); // the caller may have given up waiting
                    }
                    Some(Command::HandOver(to, reply)) => {
                        self.core.hand_over(self.clock.now(), to);
                        self.flush().await;
                        let _ = reply.send(());
                    }
                    Some(Command::Stop(reply)) => {
                        self.shut_down().await;
                        let _ = reply.send(());
                        return;
                    }
                    None => {
                        // Every handle is gone: nobody can use the mastership any more,
                        // so release it for the others rather than let it run out.
                        tracing::debug!(backend = self.name, node = %self.id, "backend dropped, shutting down");
                        self.shut_down().await;
                        return;
                    }
                },
                // Before any message: a configuration the log applied is the core's before
                // it counts another vote.
                Ok(()) = configurations.changed() => {
                    let configuration = configurations.borrow_and_update().clone();
                    if let Some(configuration) = configuration {
                        tracing::info!(backend = self.name, node = %self.id, epoch = configuration.epoch,
                            voters = ?configuration.voters.as_slice(), learners = ?configuration.learners.as_slice(),
                            "election: configuration applied");
                        self.core.set_configuration(self.clock.now(), &configuration);
                        self.flush().await;
                    }
                }
                Ok(()) = candidacies.changed() => {
                    let candidate = *candidacies.borrow_and_update();
                    tracing::info!(backend = self.name, node = %self.id, candidate,
                        "election: candidacy {}", if candidate { "resumed" } else { "withdrawn" });
                    self.core.set_candidacy(self.clock.now(), candidate);
                    self.flush().await;
                }
                () = sleep => {
                    let now = self.clock.now();
                    // The wake may be for the published mastership's expiry rather than a
                    // core timer; then there is nothing to hand the core, only a status to
                    // republish.
                    if self.core.poll_timeout().is_some_and(|deadline| deadline <= now) {
                        self.core.handle_timeout(now);
                    }
                    self.flush().await;
                }
                message = recv_or_pending(&mut inbox) => match message {
                    Some((from, msg)) => {
                        self.core.handle_message(self.clock.now(), from, msg);
                        self.flush().await;
                    }
                    None => {
                        // The network side went away. Timers still matter (the lease must
                        // still expire and be published), so keep running without it.
                        tracing::debug!(backend = self.name, node = %self.id, "inbox closed");
                        inbox = None;
                    }
                },
            }
        }
    }

    /// The earliest of the core's next timer and the end of the published mastership:
    /// mastership ends by time alone, and the status must say so then even if the core
    /// had no timer at that instant.
    fn next_wake(&self) -> Option<Instant> {
        let expiry = self.status.current().master.map(|m| m.valid_until);
        match (self.core.poll_timeout(), expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn shut_down(&mut self) {
        self.core.shut_down(self.clock.now());
        // Flush so the release reaches the peers: they can take over at once instead of
        // waiting for the lease to run out.
        self.flush().await;
        let status = ElectionStatus { master: None, ..self.status.current() };
        self.status.publish(status);
        tracing::debug!(backend = self.name, node = %self.id, "election backend stopped");
    }

    /// Hands on everything the core produced and publishes the status after the step.
    async fn flush(&mut self) {
        let output = self.core.take_output();
        let now = self.clock.now();
        // Publish before sending: a lost mastership must reach the store as early as
        // possible, and sends may take a little while. The store's node takes the status
        // before each input, so once a release is out no input is served as master
        // (`a_step_down_is_published_before_its_release_is_sent`).
        self.status
            .publish(ElectionStatus { master: live_mastership(&self.core, now), hint: self.core.master_hint(now) });
        for change in output.changes {
            self.log_change(now, change);
        }
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).failed_rounds = self.core.failed_rounds();
        *self.change_allowed.lock().unwrap_or_else(|e| e.into_inner()) = self.core.change_allowed_after();
        self.configuration_seen.store(self.core.configuration_seen(), Ordering::Release);
        for envelope in output.messages {
            self.transport.send(envelope.to, envelope.msg).await;
        }
    }

    fn log_change(&self, now: Instant, change: LeadershipChange) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).count(&change);
        let (name, node) = (self.name, self.id);
        match change {
            LeadershipChange::Elected { term, valid_until } => {
                let valid_for = valid_until.saturating_since(now);
                tracing::info!(backend = name, %node, %term, ?valid_for, "elected master");
            }
            LeadershipChange::Extended { term, valid_until } => {
                let valid_for = valid_until.saturating_since(now);
                tracing::debug!(backend = name, %node, %term, ?valid_for, "master lease extended");
            }
            LeadershipChange::Lost { term, reason } => {
                tracing::info!(backend = name, %node, %term, ?reason, "lost mastership");
            }
        }
    }
}

async fn recv_or_pending(inbox: &mut Option<Inbox>) -> Option<(NodeId, ElectionMessage)> {
    match inbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
