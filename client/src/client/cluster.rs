//! etcd's Cluster and Maintenance services: members, status, alarms, hashes, snapshots.

use super::*;

impl Client {
    /// The cluster's members.
    pub async fn member_list(&self) -> Result<MemberListResponse, ClientError> {
        self.call("MemberList", unary!(ClusterClient, member_list, MemberListRequest { linearizable: false })).await
    }

    /// Adds a member reached at `peer_urls` (`http://host:port`), as a learner or a voter;
    /// the answer names its id (`member`) and lists every member.
    pub async fn member_add(&self, peer_urls: Vec<String>, learner: bool) -> Result<MemberAddResponse, ClientError> {
        let request = MemberAddRequest { peer_urls, is_learner: learner };
        self.call("MemberAdd", unary!(ClusterClient, member_add, request.clone())).await
    }

    /// Removes member `id`.
    pub async fn member_remove(&self, id: u64) -> Result<MemberRemoveResponse, ClientError> {
        self.call("MemberRemove", unary!(ClusterClient, member_remove, MemberRemoveRequest { id })).await
    }

    /// Makes learner `id` a voter. While the previous change settles the cluster answers
    /// UNAVAILABLE ("unhealthy cluster"), which this retries like any unavailable answer.
    pub async fn member_promote(&self, id: u64) -> Result<MemberPromoteResponse, ClientError> {
        self.call("MemberPromote", unary!(ClusterClient, member_promote, MemberPromoteRequest { id })).await
    }

    /// Changes member `id`'s peer URLs.
    pub async fn member_update(&self, id: u64, peer_urls: Vec<String>) -> Result<MemberUpdateResponse, ClientError> {
        let request = MemberUpdateRequest { id, peer_urls };
        self.call("MemberUpdate", unary!(ClusterClient, member_update, request.clone())).await
    }

    /// Status of the member that answers (the current endpoint).
    pub async fn status(&self) -> Result<StatusResponse, ClientError> {
        self.call("Status", unary!(MaintenanceClient, status, StatusRequest {})).await
    }

    /// The raised alarms (NOSPACE, CORRUPT) of every member.
    pub async fn alarm_list(&self) -> Result<Vec<AlarmMember>, ClientError> {
        let request = AlarmRequest { action: AlarmAction::Get as i32, member_id: 0, alarm: AlarmType::None as i32 };
        Ok(self.call("Alarm", unary!(MaintenanceClient, alarm, request)).await?.alarms)
    }

    /// Disarms every raised alarm (etcdctl's `alarm disarm`); returns the alarms disarmed.
    /// A NOSPACE alarm whose cause is still there is raised again by the next write.
    pub async fn alarm_disarm_all(&self) -> Result<Vec<AlarmMember>, ClientError> {
        let mut disarmed = Vec::new();
        for alarm in self.alarm_list().await? {
            let request =
                AlarmRequest { action: AlarmAction::Deactivate as i32, member_id: alarm.member_id, alarm: alarm.alarm };
            let response: AlarmResponse = self.call("Alarm", unary!(MaintenanceClient, alarm, request)).await?;
            disarmed.extend(response.alarms);
        }
        Ok(disarmed)
    }

    /// Asks the master to hand mastership to member `target_id` (etcd's MoveLeader); the
    /// answering member must be the master (`etcdserver: not leader` otherwise).
    pub async fn move_leader(&self, target_id: u64) -> Result<MoveLeaderResponse, ClientError> {
        self.call("MoveLeader", unary!(MaintenanceClient, move_leader, MoveLeaderRequest { target_id })).await
    }

    /// Asks the answering member to give unused disk space back (etcd's Defragment).
    pub async fn defragment(&self) -> Result<DefragmentResponse, ClientError> {
        self.call("Defragment", unary!(MaintenanceClient, defragment, DefragmentRequest {})).await
    }

    /// The hash of the answering member's keys and history up to `revision` (0: its
    /// current revision), etcd's HashKV: members that agree give equal hashes for equal
    /// revisions and compaction points.
    pub async fn hash_kv(&self, revision: i64) -> Result<HashKvResponse, ClientError> {
        self.call("HashKV", unary!(MaintenanceClient, hash_kv, HashKvRequest { revision })).await
    }

    /// A snapshot of the answering member's state (etcd's Snapshot): the whole stream,
    /// checked to have ended where its `remaining_bytes` said it would. From leasekv as
    /// from etcd it is an etcd snapshot file (a bbolt database and its SHA-256), which
    /// `kvserver restore` and `etcdctl snapshot restore` read.
    pub async fn snapshot(&self) -> Result<Vec<u8>, ClientError> {
        let mut stream =
            self.call_with_deadline("Snapshot", None, unary!(MaintenanceClient, snapshot, SnapshotRequest {})).await?;
        let endpoint = self.current_endpoint().to_string();
        let failed =
            |status| ClientError::Rpc { endpoint: endpoint.clone(), method: "Snapshot", status: Box::new(status) };
        let mut file = Vec::new();
        let mut remaining = None;
        while let Some(chunk) = stream.message().await.map_err(failed)? {
            file.extend_from_slice(&chunk.blob);
            remaining = Some(chunk.remaining_bytes);
        }
        match remaining {
            Some(0) => Ok(file),
            Some(short) => Err(failed(Status::data_loss(format!("the snapshot stream ended {short} bytes short")))),
            None => Err(failed(Status::data_loss("the snapshot stream ended before its first chunk"))),
        }
    }
}
