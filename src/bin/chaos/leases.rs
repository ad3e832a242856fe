//! TTL leases under faults: clients grant leases (TTL 2–5 s), attach a key, keep them alive
//! every TTL/3, then abandon or revoke them; an observer reads each key (linearizably) every
//! [`OBSERVE_EVERY`] until it is seen gone. The checks, from what the clients saw:
//!
//! - **never early:** a key is never seen gone before `TTL/(1+ε)` after the invoke of an
//!   acknowledged keepalive (or the grant) of its lease;
//! - **no keepalive after death:** no keepalive invoked after the key was seen gone succeeds;
//! - **gone in time:** an abandoned lease's key is not seen later than `TTL·(1+ε) +`
//!   [`EXPIRY_SLACK`] after its last acknowledged keepalive, a deadline pushed back to
//!   the end of every fault (and its aftermath) that begins before it (the documented
//!   guarantee: each master change may restart the countdown, docs/ttl-leases.md).
//!
//! All times are the recorder's (one monotonic clock for the whole harness).

use crate::cluster::DRIFT_BOUND;
use crate::workload::{channel, Recorder};
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::lease_client::LeaseClient;
use leasekv::client::proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, PutRequest, RangeRequest,
};
use leasekv::lease::rng::SplitMix64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often an observer reads its lease's key.
const OBSERVE_EVERY: Duration = Duration::from_millis(100);
/// How long an answer may take before it counts as none.
const TIMEOUT: Duration = Duration::from_secs(4);
/// What "gone in time" allows beyond the TTL in a fault-free span: the expiry's trip through
/// the log and an observer's period and read.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(1500);
/// How long observers go on after the clients are told to stop: past the deadline of every
/// lease abandoned in the quiet phase.
const AFTER_STOP: Duration = Duration::from_secs(12);
/// Leases held at once per lease client.
const LIVE_PER_CLIENT: usize = 3;

/// One lease's life as its client saw it.
#[derive(Debug, Clone, Default)]
pub struct LeaseLife {
    /// The lease id and its key.
    pub id: i64,
    pub key: String,
    /// The TTL the grant answered, seconds.
    pub ttl_s: i64,
    /// Invoke times of the grant and of every keepalive answered with a positive TTL.
    pub acked_keepalives: Vec<u64>,
    /// Invoke and return of every keepalive answered "no such lease" (TTL 0).
    pub refused_keepalives: Vec<(u64, u64)>,
    /// When the key's put returned.
    pub put_ret: u64,
    /// When the client stopped keeping it alive without revoking it.
    pub abandoned: Option<u64>,
    /// When the client invoked a revoke.
    pub revoked: Option<u64>,
    /// Linearizable reads of the key: (invoke, return, present).
    pub observations: Vec<(u64, u64, bool)>,
}

/// Every lease life, shared by the clients and the checks.
pub type Lives = Arc<Mutex<Vec<LeaseLife>>>;

/// A lease client on `node` until `stop`: keeps [`LIVE_PER_CLIENT`] leases going, each on
/// its own task.
pub async fn lease_client(
    client: u32,
    node: usize,
    seed: u64,
    recorder: Recorder,
    lives: Lives,
    stop: Arc<AtomicBool>,
) {
    let mut rng = SplitMix64::new(seed ^ (u64::from(client) << 32) ^ 0x1ea5e);
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        while tasks.try_join_next().is_some() {}
        if tasks.len() < LIVE_PER_CLIENT {
            n += 1;
            let key = format!("/chaos/lease/{client}-{n}");
            let ttl = rng.range_u64(2, 5) as i64;
            let lifetime = Duration::from_secs(ttl as u64).mul_f64(1.0 + 3.0 * rng.next_f64());
            let revoke = rng.chance(0.3);
            let (recorder, lives, stop) = (recorder.clone(), lives.clone(), stop.clone());
            tasks.spawn(async move { one_lease(node, key, ttl, lifetime, revoke, recorder, lives, stop).await });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while tasks.join_next().await.is_some() {}
}

/// Grants a lease, attaches `key`, keeps it alive for `lifetime` (or until `stop`), then
/// revokes or abandons it while an observer reads the key, and records it all.
#[allow(clippy::too_many_arguments)]
async fn one_lease(
    node: usize,
    key: String,
    ttl: i64,
    lifetime: Duration,
    revoke: bool,
    recorder: Recorder,
    lives: Lives,
    stop: Arc<AtomicBool>,
) {
    let mut leases = LeaseClient::new(channel(node));
    let mut kv = KvClient::new(channel(node));
    let granted_call = recorder.now();
    let Ok(Ok(grant)) = tokio::time::timeout(TIMEOUT, leases.lease_grant(LeaseGrantRequest { ttl, id: 0 })).await
    else {
        return; // Not granted, or unknown: a lease nobody holds expires unobserved.
    };
    let grant = grant.into_inner();
    let put =
        PutRequest { key: key.clone().into_bytes(), value: b"alive".to_vec(), lease: grant.id, ..Default::default() };
    if !matches!(tokio::time::timeout(TIMEOUT, kv.put(put)).await, Ok(Ok(_))) {
        return; // The key may or may not be there: nothing certain to check.
    }
    let life = Arc::new(Mutex::new(LeaseLife {
        id: grant.id,
        key: key.clone(),
        ttl_s: grant.ttl,
        acked_keepalives: vec![granted_call],
        put_ret: recorder.now(),
        ..Default::default()
    }));
    let done = Arc::new(AtomicBool::new(false));
    let observer = tokio::spawn(observe(node, key, recorder.clone(), life.clone(), done.clone(), stop.clone()));

    let began = tokio::time::Instant::now();
    let every = Duration::from_secs(grant.ttl.max(1) as u64) / 3;
    while began.elapsed() < lifetime && !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(every).await;
        let call = recorder.now();
        let answer = tokio::time::timeout(TIMEOUT, keep_alive_once(&mut leases, grant.id)).await;
        let ret = recorder.now();
        match answer {
            Ok(Some(ttl)) if ttl > 0 => lock(&life).acked_keepalives.push(call),
            Ok(Some(_)) => {
                lock(&life).refused_keepalives.push((call, ret));
                break; // The lease is gone.
            }
            _ => {} // No answer: the keepalive may or may not have taken effect.
        }
    }
    if revoke {
        lock(&life).revoked = Some(recorder.now());
        let _ = tokio::time::timeout(TIMEOUT, leases.lease_revoke(LeaseRevokeRequest { id: grant.id })).await;
    } else {
        lock(&life).abandoned = Some(recorder.now());
    }
    done.store(true, Ordering::Relaxed);
    let _ = observer.await;
    let life = lock(&life).clone();
    lock(&lives).push(life);
}

/// One keepalive on its own stream: the TTL answered, or `None` without an answer.
async fn keep_alive_once(leases: &mut LeaseClient<tonic::transport::Channel>, id: i64) -> Option<i64> {
    let request = tokio_stream::once(LeaseKeepAliveRequest { id });
    let mut answers = leases.lease_keep_alive(request).await.ok()?.into_inner();
    let answer = answers.message().await.ok()??;
    Some(answer.ttl)
}

/// Reads the key every [`OBSERVE_EVERY`] until the lease is done with and the key was seen
/// gone (or, for an abandoned lease, a minute has passed: the end-of-run check decides).
async fn observe(
    node: usize,
    key: String,
    recorder: Recorder,
    life: Arc<Mutex<LeaseLife>>,
    done: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    let mut kv = KvClient::new(channel(node));
    let mut done_since: Option<tokio::time::Instant> = None;
    let mut stop_since: Option<tokio::time::Instant> = None;
    loop {
        if done.load(Ordering::Relaxed) {
            let since = *done_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() > Duration::from_secs(60) {
                return;
            }
        }
        // After the run, long enough for any lease to be past its deadline (no faults then).
        if stop.load(Ordering::Relaxed)
            && stop_since.get_or_insert_with(tokio::time::Instant::now).elapsed() > AFTER_STOP
        {
            return;
        }
        let call = recorder.now();
        let request = RangeRequest { key: key.clone().into_bytes(), ..Default::default() };
        if let Ok(Ok(answer)) = tokio::time::timeout(TIMEOUT, kv.range(request)).await {
            let present = !answer.into_inner().kvs.is_empty();
            lock(&life).observations.push((call, recorder.now(), present));
            if !present && done.load(Ordering::Relaxed) {
                return;
            }
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// For an abandoned (not revoked) lease whose key was seen gone: when its last
/// acknowledged keepalive was invoked, and how long after it the key was seen gone, less
/// the TTL, in seconds.
pub fn expiry_error(life: &LeaseLife) -> Option<(u64, f64)> {
    if life.abandoned.is_none() || life.revoked.is_some() {
        return None;
    }
    let last = life.acked_keepalives.iter().copied().max()?;
    let gone = life.observations.iter().filter(|o| !o.2 && o.0 > life.put_ret).map(|o| o.1).min()?;
    Some((last, (gone.saturating_sub(last) as f64 - life.ttl_s as f64 * 1e9) / 1e9))
}

/// What the lease checks found.
#[derive(Debug, Default)]
pub struct LeaseVerdict {
    /// Leases checked.
    pub leases: usize,
    /// Anomalies, one line each.
    pub anomalies: Vec<String>,
    /// Seen-gone time after the last acknowledged keepalive, less the TTL, over abandoned
    /// leases (earliest, latest), seconds.
    pub expiry_error_s: Option<(f64, f64)>,
}

/// Checks every lease life; `fault_windows` are the spans in which faults were in force
/// or their effects (restarts, elections) could still last, and the instants at which a
/// leader was seen taking office: each may restart every countdown.
pub fn check(lives: &[LeaseLife], fault_windows: &[(u64, u64)]) -> LeaseVerdict {
    let mut verdict = LeaseVerdict { leases: lives.len(), ..Default::default() };
    let slack = 1.0 + DRIFT_BOUND;
    let mut errors: Vec<f64> = Vec::new();
    for life in lives {
        let ttl_ns = life.ttl_s as f64 * 1e9;
        let first_gone = life.observations.iter().filter(|o| !o.2 && o.0 > life.put_ret).min_by_key(|o| o.1).copied();
        // Never early.
        for &(call, ret, present) in &life.observations {
            if present || call < life.put_ret || life.revoked.is_some_and(|r| r < ret) {
                continue;
            }
            if let Some(&k) = life.acked_keepalives.iter().filter(|&&k| k < ret).max() {
                let earliest = k as f64 + ttl_ns / slack;
                if (ret as f64) < earliest {
                    verdict.anomalies.push(format!(
                        "lease {:x} (TTL {} s): key {} seen gone {:.3} s after a keepalive invoked at {:.3} s, \
                         earlier than TTL/(1+ε)",
                        life.id,
                        life.ttl_s,
                        life.key,
                        (ret - k) as f64 / 1e9,
                        k as f64 / 1e9
                    ));
                }
            }
        }
        // No keepalive after death.
        if let Some((_, gone_ret, _)) = first_gone {
            if let Some(&k) = life.acked_keepalives.iter().find(|&&k| k > gone_ret) {
                verdict.anomalies.push(format!(
                    "lease {:x}: a keepalive invoked at {:.3} s succeeded after its key {} was seen gone at {:.3} s",
                    life.id,
                    k as f64 / 1e9,
                    life.key,
                    gone_ret as f64 / 1e9
                ));
            }
        }
        // Gone in time: by TTL·(1+ε) + slack after the last keepalive, pushed back to the
        // end of any fault (and its aftermath) that began before that deadline, since each
        // master change may restart the countdown.
        if life.abandoned.is_some() && life.revoked.is_none() {
            let last = life.acked_keepalives.iter().copied().max().unwrap_or(0);
            let bound = (ttl_ns * slack) as u64 + EXPIRY_SLACK.as_nanos() as u64;
            let mut deadline = last + bound;
            while let Some(end) =
                fault_windows.iter().filter(|w| w.0 < deadline && w.1 + bound > deadline).map(|w| w.1).max()
            {
                deadline = end + bound;
            }
            if let Some((_, gone_ret, _)) = first_gone {
                errors.push((gone_ret.saturating_sub(last) as f64 - ttl_ns) / 1e9);
            }
            let late = life.observations.iter().filter(|o| o.2 && o.0 > deadline).map(|o| o.0).max();
            if let Some(seen) = late {
                verdict.anomalies.push(format!(
                    "lease {:x} (TTL {} s): key {} still there {:.3} s after its last keepalive, {:.3} s past its \
                     deadline (TTL·(1+ε) + {:.1} s, after the last fault that could restart the countdown)",
                    life.id,
                    life.ttl_s,
                    life.key,
                    (seen - last) as f64 / 1e9,
                    (seen - deadline) as f64 / 1e9,
                    EXPIRY_SLACK.as_secs_f64()
                ));
            }
        }
    }
    if !errors.is_empty() {
        let min = errors.iter().copied().fold(f64::INFINITY, f64::min);
        let max = errors.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        verdict.expiry_error_s = Some((min, max));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A 2 s lease granted at 0, kept alive at 1 s, abandoned at 1.5 s, its key seen at
    /// 0.5 s and gone at `gone` seconds.
    fn life(gone: f64) -> LeaseLife {
        let gone = (gone * S as f64) as u64;
        LeaseLife {
            id: 7,
            key: "/chaos/lease/x".into(),
            ttl_s: 2,
            acked_keepalives: vec![0, S],
            put_ret: S / 10,
            abandoned: Some(3 * S / 2),
            observations: vec![(S / 2, S / 2 + 1000, true), (gone - 1000, gone, false)],
            ..Default::default()
        }
    }

    #[test]
    fn an_expiry_within_its_bounds_passes() {
        let verdict = check(&[life(3.2)], &[]);
        assert!(verdict.anomalies.is_empty(), "{:?}", verdict.anomalies);
        let (min, max) = verdict.expiry_error_s.expect("an abandoned lease seen gone");
        assert!((min - 0.2).abs() < 1e-3 && (max - 0.2).abs() < 1e-3);
    }

    #[test]
    fn a_key_gone_before_ttl_over_one_plus_epsilon_is_caught() {
        let verdict = check(&[life(2.5)], &[]);
        assert!(verdict.anomalies.iter().any(|a| a.contains("earlier than TTL/(1+ε)")), "{:?}", verdict.anomalies);
    }

    #[test]
    fn a_keepalive_that_succeeds_after_the_key_was_seen_gone_is_caught() {
        let mut life = life(3.2);
        life.acked_keepalives.push(4 * S);
        let verdict = check(&[life], &[]);
        assert!(verdict.anomalies.iter().any(|a| a.contains("succeeded after its key")), "{:?}", verdict.anomalies);
    }

    #[test]
    fn a_late_expiry_is_caught_unless_a_fault_pushed_the_deadline_back() {
        // Deadline: 1 s + 2 s·1.01 + 1.5 s = 4.52 s; the key is still seen at 5.5 s.
        let mut late = life(6.0);
        late.observations.insert(1, (11 * S / 2, 11 * S / 2 + 1000, true));
        assert!(check(std::slice::from_ref(&late), &[]).anomalies.iter().any(|a| a.contains("past its deadline")));
        // A fault from 2 s to 5 s moves the deadline to 8.52 s.
        assert!(check(&[late], &[(2 * S, 5 * S)]).anomalies.is_empty());
    }

    #[test]
    fn an_abandoned_lease_never_seen_gone_is_caught_once_past_its_deadline() {
        let mut life = life(3.2);
        life.observations.truncate(1);
        assert!(check(std::slice::from_ref(&life), &[]).anomalies.is_empty(), "no observation past the deadline");
        life.observations.push((10 * S, 10 * S + 1000, true));
        assert!(check(&[life], &[]).anomalies.iter().any(|a| a.contains("past its deadline")));
    }
}
