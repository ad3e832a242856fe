//! etcd's Cluster (MemberAdd, MemberRemove, MemberUpdate, MemberList, MemberPromote) and Maintenance (Status, Alarm, Defragment, Hash, HashKV,
//! Snapshot, MoveLeader) services.

use super::Shared;
use crate::auth::caller_of;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::EtcdError;
use leasekv_kvstore::membership::{Member, MemberChange, Membership};
use leasekv_kvstore::{AlarmAction, AlarmKind, Command, CommandResponse};
use leasekv_lease::NodeId;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// How long MoveLeader waits for the target to take over: a few lease times (a target that
/// is down or cut off never does; the cluster then fails over as usual).
const TRANSFER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes per message of a snapshot stream (etcd sends 32 KiB; larger chunks cost fewer
/// messages and stay far below every client's 4 MiB receive limit).
const SNAPSHOT_CHUNK: usize = 256 << 10;

/// Cluster: the member list as this node's log records it, and etcd's membership changes,
/// proposed through the master like every write (docs/membership.md).
pub struct ClusterService(pub Arc<Shared>);

/// etcd's view of one member. A member that never started has no name and no client URLs.
fn member_pb(member: &Member) -> pb::Member {
    pb::Member {
        id: u64::from(member.id.0),
        name: member.name.clone(),
        peer_urls: member.peer_urls.clone(),
        client_urls: member.client_urls.clone(),
        is_learner: member.learner,
    }
}

fn members_pb(membership: &Membership) -> Vec<pb::Member> {
    membership.members().map(member_pb).collect()
}

/// A member id from a request: ours are `u32` node ids.
fn member_id(id: u64) -> Result<NodeId, Status> {
    u32::try_from(id).ok().filter(|id| *id > 0).map(NodeId).ok_or_else(|| EtcdError::MemberNotFound.status())
}

impl ClusterService {
    /// Proposes `change` through the master and answers with the configuration after it
    /// and the id an Add gave its member. The header carries no revision, as etcd's Cluster
    /// answers (membership is not part of the key space's history).
    async fn change(&self, change: MemberChange) -> Result<(Membership, Option<NodeId>, pb::ResponseHeader), Status> {
        self.0
            .serve_command(Command::ChangeMembers(change), |response, _| match response {
                CommandResponse::Members { membership, added } => Some((membership, added, self.0.header(0))),
                _ => None,
            })
            .await
    }
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_add(
        &self,
        request: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let request = request.into_inner();
        let change = MemberChange::Add { peer_urls: request.peer_urls, learner: request.is_learner };
        let (membership, added, header) = self.change(change).await?;
        let member = added.and_then(|id| membership.get(id)).map(member_pb);
        Ok(Response::new(pb::MemberAddResponse { header: Some(header), member, members: members_pb(&membership) }))
    }

    /// Refused for the lease-tracker backend's tracker node: every lease comes from it, and
    /// moving that role safely needs consensus on the tracker, which that backend does not
    /// have (docs/membership.md, last section).
    async fn member_remove(
        &self,
        request: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let id = member_id(request.into_inner().id)?;
        if self.0.tracker == Some(id) {
            return Err(Status::failed_precondition(format!(
                "leasekv: member {id} is the lease tracker of the lease-tracker election backend: every master lease is granted by it, and moving that role needs consensus the backend does not have, so it cannot be removed (use the paxoslease backend to replace any member)"
            )));
        }
        let (membership, _, header) = self.change(MemberChange::Remove { id }).await?;
        Ok(Response::new(pb::MemberRemoveResponse { header: Some(header), members: members_pb(&membership) }))
    }

    async fn member_update(
        &self,
        request: Request<pb::MemberUpdateRequest>,
    ) -> Result<Response<pb::MemberUpdateResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let request = request.into_inner();
        let id = member_id(request.id)?;
        let (membership, _, header) = self.change(MemberChange::Update { id, peer_urls: request.peer_urls }).await?;
        Ok(Response::new(pb::MemberUpdateResponse { header: Some(header), members: members_pb(&membership) }))
    }

    /// Served from this member's view, as etcd's non-linearizable MemberList.
    async fn member_list(
        &self,
        _request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let members = members_pb(&self.0.node.membership());
        // etcd's MemberList header carries no revision (only cluster, member and term).
        Ok(Response::new(pb::MemberListResponse { header: Some(self.0.header(0)), members }))
    }

    async fn member_promote(
        &self,
        request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let id = member_id(request.into_inner().id)?;
        let (membership, _, header) = self.change(MemberChange::Promote { id }).await?;
        Ok(Response::new(pb::MemberPromoteResponse { header: Some(header), members: members_pb(&membership) }))
    }
}

/// Maintenance: Status (leader = the master's member id, raft_term = the log round, as in
/// response headers).
pub struct MaintenanceService(pub Arc<Shared>);

fn alarm_type(kind: AlarmKind) -> pb::AlarmType {
    match kind {
        AlarmKind::NoSpace => pb::AlarmType::Nospace,
        AlarmKind::Corrupt => pb::AlarmType::Corrupt,
    }
}

/// A snapshot stream: the backup file in chunks.
type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for MaintenanceService {
    type SnapshotStream = SnapshotStream;

    /// Lists, raises or disarms alarms, through the log as etcd does, so every member
    /// answers from the same alarms.
    async fn alarm(&self, request: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        {
            // Listing alarms needs a user; raising or disarming one the root role.
            let caller = caller_of(&self.0.node, &request)?;
            match request.get_ref().action {
                0 => caller.authenticated()?,
                _ => caller.admin()?,
            }
        }
        let request = request.into_inner();
        let action = match pb::alarm_request::AlarmAction::try_from(request.action) {
            Ok(pb::alarm_request::AlarmAction::Get) => AlarmAction::List,
            Ok(pb::alarm_request::AlarmAction::Activate) => AlarmAction::Raise,
            Ok(pb::alarm_request::AlarmAction::Deactivate) => AlarmAction::Disarm,
            Err(_) => return Err(Status::invalid_argument(format!("unknown alarm action {}", request.action))),
        };
        let kind = match pb::AlarmType::try_from(request.alarm) {
            Ok(pb::AlarmType::None) => None,
            Ok(pb::AlarmType::Nospace) => Some(AlarmKind::NoSpace),
            Ok(pb::AlarmType::Corrupt) => Some(AlarmKind::Corrupt),
            Err(_) => return Err(Status::invalid_argument(format!("unknown alarm type {}", request.alarm))),
        };
        let command = Command::Alarm { action, member: request.member_id, kind };
        let response = self
            .0
            .serve_command(command, |response, header| match response {
                CommandResponse::Alarm { alarms } => Some(pb::AlarmResponse {
                    header: Some(header),
                    alarms: alarms
                        .into_iter()
                        .map(|a| pb::AlarmMember { member_id: a.member, alarm: alarm_type(a.kind) as i32 })
                        .collect(),
                }),
                _ => None,
            })
            .await?;
        Ok(Response::new(response))
    }

    /// Hands mastership to `target_id` (etcd's leader transfer): the master releases its
    /// lease telling the others to let the target take it, and answers once the target is
    /// master. Sent to a member that is not master, it fails as etcd's does (`etcdctl
    /// move-leader` finds the master itself).
    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let target = request.into_inner().target_id;
        let target = self
            .0
            .node
            .membership()
            .voters()
            .into_iter()
            .find(|id| u64::from(id.0) == target)
            .ok_or_else(|| EtcdError::BadLeaderTransferee.status())?;
        let election = &self.0.node.election;
        if !election.status().is_master_at(election.now()) {
            return Err(EtcdError::NotLeader.status());
        }
        // etcd answers a leader transfer with an empty response, no header.
        let header = || Response::new(pb::MoveLeaderResponse { header: None });
        if target == self.0.me {
            return Ok(header());
        }
        if election.name() == leasekv_lease::BackendKind::LeaseTracker.name() {
            return Err(Status::failed_precondition(
                "leasekv: the lease-tracker election backend cannot hand mastership to a chosen member (its tracker grants the lease to whoever asks first); use step-down, or the paxoslease backend",
            ));
        }
        let mut changes = election.subscribe();
        election.hand_over(target).await.map_err(|_| EtcdError::Stopped.status())?;
        let took_over = tokio::time::timeout(TRANSFER_TIMEOUT, async {
            while changes.borrow_and_update().hint != Some(target) {
                if changes.changed().await.is_err() {
                    return false;
                }
            }
            true
        })
        .await;
        match took_over {
            Ok(true) => Ok(header()),
            // etcd's ErrTimeoutLeaderTransfer has no gRPC code of its own: UNKNOWN.
            _ => Err(EtcdError::LeaderTransferTimeout.status()),
        }
    }

    /// Nothing to do: sled reuses the space of dropped data as it rewrites its log
    /// segments, and the quota measures data in use, which compaction alone lowers.
    async fn defragment(
        &self,
        request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        // etcd answers with an empty response, no header.
        Ok(Response::new(pb::DefragmentResponse { header: None }))
    }

    /// The backup file of this member's state, in etcd's snapshot format (a bbolt database
    /// in etcd's layout: see `leasekv_kvstore::etcd_snapshot`), taken at once and streamed as etcd's server streams its database: the content in chunks,
    /// `remaining_bytes` counting down to 0 over the content alone, then one more message
    /// whose blob is the 32-byte SHA-256 of everything sent before (the file's last 32
    /// bytes), which clients check (etcdctl keeps it at the end of the file it saves).
    /// No message carries a header, as none of etcd's does; every one carries the API
    /// version, as etcd 3.6's carry its storage version.
    async fn snapshot(&self, request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let (file, len, _revision) = self.0.node.backup().await.map_err(super::errors::request_error)?;
        let content_len = len.saturating_sub(leasekv_kvstore::backup::HASH_LEN as u64);
        // Read a chunk at a time as the stream is polled: serving a snapshot holds one chunk
        // in memory, whatever the state's size.
        let mut reader = std::io::BufReader::new(file);
        let mut sent = 0u64;
        let mut digest_sent = false;
        let chunks = std::iter::from_fn(move || {
            use std::io::Read;
            let unread = content_len - sent;
            let (want, last) = match unread {
                0 if digest_sent => return None,
                0 => (leasekv_kvstore::backup::HASH_LEN as u64, true),
                n => (n.min(SNAPSHOT_CHUNK as u64), false),
            };
            let mut blob = vec![0u8; want as usize];
            if let Err(error) = reader.read_exact(&mut blob) {
                digest_sent = true;
                sent = content_len;
                return Some(Err(Status::internal(format!("etcdserver: reading the snapshot file failed: {error}"))));
            }
            if last {
                digest_sent = true;
            } else {
                sent += want;
            }
            Some(Ok(pb::SnapshotResponse {
                header: None,
                remaining_bytes: content_len - sent,
                blob,
                version: crate::gateway::health::ETCD_API.to_string(),
            }))
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    /// The hash of this member's keys and history up to a revision (0: its current one).
    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let revision = request.into_inner().revision;
        let hash = self
            .0
            .node
            .hash_kv(revision)
            .await
            .map_err(super::errors::request_error)?
            .map_err(|e| super::errors::kv_error(&e))?;
        Ok(Response::new(pb::HashKvResponse {
            header: Some(self.0.header(self.0.node.revision())),
            hash: hash.hash,
            // etcd's store starts with a compaction point of -1 and reports it as such.
            compact_revision: if hash.compact_revision == 0 { -1 } else { hash.compact_revision },
            hash_revision: hash.revision,
        }))
    }

    /// The hash of this member's whole replicated state.
    async fn hash(&self, request: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        let (hash, revision) = self.0.node.hash().await.map_err(super::errors::request_error)?;
        Ok(Response::new(pb::HashResponse { header: Some(self.0.header(revision)), hash }))
    }

    async fn status(&self, _request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let node = self.0.node.status().await.map_err(super::errors::request_error)?;
        let election = self.0.node.election.status();
        let leader = if election.master.is_some() { Some(self.0.me) } else { election.hint };
        Ok(Response::new(pb::StatusResponse {
            header: Some(self.0.header(node.revision)),
            version: concat!("leasekv ", env!("CARGO_PKG_VERSION")).to_string(),
            leader: leader.map_or(0, |l| l.0 as u64),
            raft_index: node.commit,
            raft_term: self.0.node.term(),
            raft_applied_index: node.applied,
            db_size: node.db_size.map_or(0, |b| b as i64),
            // The data the quota measures: keys, values and retained history.
            db_size_in_use: node.bytes_in_use as i64,
            db_size_quota: node.quota_bytes as i64,
            // As etcd lists here a missing leader and the raised alarms (etcdctl endpoint
            // status shows them).
            errors: leader
                .is_none()
                .then(|| EtcdError::NoLeader.message().to_string())
                .into_iter()
                .chain(node.alarms.iter().map(|a| format!("memberID:{} alarm:{}", a.member, a.kind.etcd_name())))
                // Why this member does not offer itself as master (catching up, a failed
                // snapshot install): what an operator looking at `endpoint status` needs.
                .chain(node.withdrawal.iter().map(ToString::to_string))
                .collect(),
            ..Default::default()
        }))
    }
}
