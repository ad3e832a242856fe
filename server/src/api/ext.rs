//! The `leasekv.v1.LeaseKv` extension: named leases, election status, step-down.

use super::Shared;
use crate::auth::caller_of;
use leasekv_client::proto::leasekv as ext;
use leasekv_client::EtcdError;
use leasekv_kvstore::log::RequestError;
use leasekv_kvstore::{Command, CommandResponse};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The extension service.
pub struct ExtService(pub Arc<Shared>);

#[tonic::async_trait]
impl ext::lease_kv_server::LeaseKv for ExtService {
    async fn grant_named(
        &self,
        request: Request<ext::GrantNamedRequest>,
    ) -> Result<Response<ext::GrantNamedResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let request = request.into_inner();
        let command = Command::LeaseGrant { id: 0, name: Some(request.name), ttl: request.ttl };
        let reply = self.0.serve_command(command, |response, _header| match response {
            CommandResponse::LeaseGrant(g) => Some(ext::GrantNamedResponse { id: g.id, ttl: g.ttl }),
            _ => None,
        });
        reply.await.map(Response::new)
    }

    async fn resolve_name(
        &self,
        request: Request<ext::ResolveNameRequest>,
    ) -> Result<Response<ext::ResolveNameResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let name = request.into_inner().name;
        match self.0.node.resolve_name(name.clone()).await.map_err(super::errors::request_error)? {
            Some(id) => Ok(Response::new(ext::ResolveNameResponse { id })),
            None => Err(EtcdError::LeaseNotFound.explained(
                "LEASE_NAME_NOT_FOUND",
                format!("no live lease is named {name:?} (grant it with: kvcli lease grant {name} --ttl SECONDS)"),
            )),
        }
    }

    async fn list_leases(
        &self,
        request: Request<ext::ListLeasesRequest>,
    ) -> Result<Response<ext::ListLeasesResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let shared = &self.0;
        let list = shared.serve(|| shared.node.lease_list()).await?;
        Ok(Response::new(ext::ListLeasesResponse {
            leases: list
                .into_iter()
                .map(|l| ext::LeaseInfo {
                    id: l.id,
                    name: l.name.unwrap_or_default(),
                    granted_ttl: l.granted_ttl,
                    remaining_ttl_ms: l.remaining.as_millis() as i64,
                })
                .collect(),
        }))
    }

    async fn election_status(
        &self,
        request: Request<ext::ElectionStatusRequest>,
    ) -> Result<Response<ext::ElectionStatusResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let election = &self.0.node.election;
        let status = election.status();
        let now = election.now();
        let remaining = status.master.map_or(0, |m| m.valid_until.saturating_since(now).as_millis() as i64);
        let master = if status.master.is_some() { Some(self.0.me) } else { status.hint };
        Ok(Response::new(ext::ElectionStatusResponse {
            backend: election.name().to_string(),
            master_id: master.map(|m| m.0),
            term: status.term().map(|t| ext::ElectionTerm { counter: t.counter, epoch: t.epoch, node: t.node.0 }),
            this_node_id: self.0.me.0,
            is_master: status.is_master_at(now),
            lease_remaining_ms: remaining,
        }))
    }

    /// Asks the master to step down, wherever this request arrived: the node loop serves it
    /// on the master and forwards it there from anywhere else, like any master request. It
    /// is not retried: with no master to ask, it fails at once.
    async fn step_down(
        &self,
        request: Request<ext::StepDownRequest>,
    ) -> Result<Response<ext::StepDownResponse>, Status> {
        caller_of(&self.0.node, &request)?.admin()?;
        match self.0.node.step_down().await {
            Ok(()) => Ok(Response::new(ext::StepDownResponse {})),
            Err(RequestError::NotMaster { .. }) => {
                Err(EtcdError::NoLeader.explained("NO_MASTER", "there is no master to step down right now"))
            }
            Err(error) => Err(super::errors::request_error(error)),
        }
    }
}
