//! etcd's Cluster (MemberList) and Maintenance (Status) services.

use super::Shared;
use leasekv_client::proto::etcdserverpb as pb;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Cluster: the member list from the configuration.
pub struct ClusterService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_list(
        &self,
        _request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let members = self
            .0
            .members
            .iter()
            .map(|(id, client, peer)| pb::Member {
                id: id.0 as u64,
                name: format!("n{}", id.0),
                peer_urls: vec![format!("http://{peer}")],
                client_urls: vec![format!("http://{client}")],
                is_learner: false,
            })
            .collect();
        // etcd's MemberList header carries no revision (only cluster, member and term).
        Ok(Response::new(pb::MemberListResponse { header: Some(self.0.header(0)), members }))
    }
}

/// Maintenance: Status (leader = the master's member id, raft_term = the log round, as in
/// response headers).
pub struct MaintenanceService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for MaintenanceService {
    async fn status(&self, _request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let node = self.0.node.status().await.map_err(super::convert::request_error)?;
        let election = self.0.node.election.status();
        let leader = if election.master.is_some() { Some(self.0.me) } else { election.hint };
        Ok(Response::new(pb::StatusResponse {
            header: Some(self.0.header(node.revision)),
            version: concat!("leasekv ", env!("CARGO_PKG_VERSION")).to_string(),
            leader: leader.map_or(0, |l| l.0 as u64),
            raft_index: node.commit,
            raft_term: self.0.node.term(),
            raft_applied_index: node.applied,
            // One sled database holds everything, in use or not: etcd's two sizes are one.
            db_size: node.db_size.map_or(0, |b| b as i64),
            db_size_in_use: node.db_size.map_or(0, |b| b as i64),
            ..Default::default()
        }))
    }
}
