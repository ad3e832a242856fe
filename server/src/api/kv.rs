//! etcd's KV service.

use super::convert::{delete_in, delete_out, put_command, put_out, range_in, range_out, txn_in, txn_out};
use super::range_shape::RangeShape;
use super::{guard, Shared};
use crate::auth::{caller_of, Caller};
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::ReadConsistency;
use leasekv_kvstore::{Command, CommandResponse};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// KV: Range (at any retained revision), Put, DeleteRange, Txn, Compact.
pub struct KvService(pub Arc<Shared>);

impl KvService {
    async fn serve_txn(&self, caller: &Caller, request: pb::TxnRequest) -> Result<pb::TxnResponse, Status> {
        let (txn, shapes) = txn_in(request)?;
        if txn.reads_only() {
            let shared = &self.0;
            let (response, revision) = shared.serve(|| super::read_txn::answer(shared, &txn)).await?;
            return Ok(txn_out(response, shared.header(revision), &shapes));
        }
        let reply = self.0.serve_command(caller.command(Command::Txn(txn)), move |response, header| match response {
            CommandResponse::Txn(t) => Some(txn_out(t, header, &shapes)),
            _ => None,
        });
        reply.await
    }

    /// The `split-txn` negative control (fault-injection builds only): the first success
    /// operation with the comparisons, then every other one as a Txn of its own.
    async fn split_txn(&self, caller: &Caller, mut request: pb::TxnRequest) -> Result<pb::TxnResponse, Status> {
        let rest = request.success.split_off(1);
        let first = self.serve_txn(caller, request).await?;
        if first.succeeded {
            for op in rest {
                let single = pb::TxnRequest { compare: vec![], success: vec![op], failure: vec![] };
                self.serve_txn(caller, single).await?;
            }
        }
        Ok(first)
    }
}

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    type RangeStreamStream = super::range_stream::RangeStreamStream;

    /// etcd 3.7's streamed Range (`super::range_stream`).
    async fn range_stream(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        guard::range(&caller_of(&self.0.node, &request)?, request.get_ref())?;
        let request = request.into_inner();
        super::range_stream::check(&request)?;
        Ok(Response::new(super::range_stream::start(Arc::clone(&self.0), request)))
    }

    async fn range(&self, request: Request<pb::RangeRequest>) -> Result<Response<pb::RangeResponse>, Status> {
        guard::range(&caller_of(&self.0.node, &request)?, request.get_ref())?;
        let range = range_in(request.into_inner())?;
        let consistency =
            if range.serializable { ReadConsistency::Serializable } else { ReadConsistency::Linearizable };
        let shared = &self.0;
        let (answer, revision) =
            shared.serve(|| shared.node.read(range.request.clone(), range.revision, consistency)).await?;
        let answer = RangeShape::apply_if(range.shape.as_ref(), answer);
        let hold = shared.read_budget.take(crate::read_budget::answer_bytes(&answer))?;
        let mut response = Response::new(range_out(answer, shared.header(revision)));
        response.extensions_mut().insert(hold);
        Ok(response)
    }

    async fn put(&self, request: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        self.0.check_request_size(request.get_ref())?;
        let caller = caller_of(&self.0.node, &request)?;
        guard::put(&caller, request.get_ref())?;
        let command = caller.command(put_command(request.into_inner()));
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::Put(p) => Some(put_out(p, header)),
            _ => None,
        });
        reply.await.map(Response::new)
    }

    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        self.0.check_request_size(request.get_ref())?;
        let caller = caller_of(&self.0.node, &request)?;
        guard::delete(&caller, request.get_ref())?;
        let command = caller.command(Command::DeleteRange(delete_in(request.into_inner())));
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::DeleteRange(d) => Some(delete_out(d, header)),
            _ => None,
        });
        reply.await.map(Response::new)
    }

    async fn txn(&self, request: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        self.0.check_request_size(request.get_ref())?;
        let caller = caller_of(&self.0.node, &request)?;
        guard::txn(&caller, request.get_ref())?;
        let request = request.into_inner();
        if crate::fault_injection::split_txn() && request.success.len() > 1 {
            return self.split_txn(&caller, request).await.map(Response::new);
        }
        self.serve_txn(&caller, request).await.map(Response::new)
    }

    /// Compaction goes through the log and is complete on a replica once applied there, so
    /// the answer (after the master applied it) is already "physical" in etcd's sense.
    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        // The root role, as etcd asks since 3.4.42 / 3.5.28 / 3.6.9 (older releases asked
        // nothing, which let any client drop everyone's history).
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let command = caller.command(Command::Compact { revision: request.into_inner().revision });
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::Compact { .. } => Some(pb::CompactionResponse { header: Some(header) }),
            _ => None,
        });
        reply.await.map(Response::new)
    }
}
