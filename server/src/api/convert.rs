//! Conversions between etcd's wire types and the store's commands (the errors they meet
//! are mapped in [`super::errors`]).

use super::range_shape::RangeShape;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::proto::mvccpb;
use leasekv_kvstore::{
    Command, Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, Keep, KeyRange, KeyValue,
    PutRequest, PutResponse, RangeRequest, RangeResponse, TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};
use tonic::Status;

/// etcd's KeyValue.
pub fn kv_out(kv: KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

/// A range request as the store reads it.
pub struct RangeIn {
    /// The read.
    pub request: RangeRequest,
    /// The revision to read at (0 or less: the current one).
    pub revision: i64,
    /// Whether it may be served from this node's state (etcd's `serializable`).
    pub serializable: bool,
    /// Sorting and revision filters, applied to the store's answer ([`RangeShape`]).
    pub shape: Option<RangeShape>,
}

/// Converts etcd's range request.
pub fn range_in(r: pb::RangeRequest) -> Result<RangeIn, Status> {
    let shape = RangeShape::of(&r)?;
    let request = RangeRequest {
        range: KeyRange { key: r.key, range_end: r.range_end },
        // Sorted or filtered: read everything, the shape cuts at the limit afterwards.
        limit: if shape.is_some() { 0 } else { r.limit },
        count_only: r.count_only,
        keys_only: r.keys_only && !shape.as_ref().is_some_and(RangeShape::needs_values),
    };
    Ok(RangeIn { request, revision: r.revision, serializable: r.serializable, shape })
}

/// A range answer.
pub fn range_out(r: RangeResponse, header: pb::ResponseHeader) -> pb::RangeResponse {
    pb::RangeResponse {
        header: Some(header),
        kvs: r.kvs.into_iter().map(kv_out).collect(),
        more: r.more,
        count: r.count,
    }
}

/// A put request, and what it keeps of the existing key (`ignore_value`, `ignore_lease`).
pub fn put_in(p: pb::PutRequest) -> (PutRequest, Option<Keep>) {
    let keep = (p.ignore_value || p.ignore_lease).then_some(Keep { value: p.ignore_value, lease: p.ignore_lease });
    (PutRequest { key: p.key, value: p.value, lease: p.lease, prev_kv: p.prev_kv }, keep)
}

/// A put as a log command.
pub fn put_command(p: pb::PutRequest) -> Command {
    match put_in(p) {
        (put, None) => Command::Put(put),
        (put, Some(keep)) => Command::PutKeeping(put, keep),
    }
}

/// A put answer.
pub fn put_out(p: PutResponse, header: pb::ResponseHeader) -> pb::PutResponse {
    pb::PutResponse { header: Some(header), prev_kv: p.prev_kv.map(kv_out) }
}

/// A delete request.
pub fn delete_in(d: pb::DeleteRangeRequest) -> DeleteRangeRequest {
    DeleteRangeRequest { range: KeyRange { key: d.key, range_end: d.range_end }, prev_kv: d.prev_kv }
}

/// A delete answer.
pub fn delete_out(d: DeleteRangeResponse, header: pb::ResponseHeader) -> pb::DeleteRangeResponse {
    pb::DeleteRangeResponse {
        header: Some(header),
        deleted: d.deleted,
        prev_kvs: d.prev_kvs.into_iter().map(kv_out).collect(),
    }
}

fn compare_in(c: pb::Compare) -> Result<Compare, Status> {
    use pb::compare::TargetUnion;
    let result = match c.result {
        0 => CompareResult::Equal,
        1 => CompareResult::Greater,
        2 => CompareResult::Less,
        3 => CompareResult::NotEqual,
        other => return Err(Status::invalid_argument(format!("etcdserver: unknown compare result {other}"))),
    };
    // A missing union value compares against the zero value, as etcd does.
    let union = c.target_union;
    let target = match c.target {
        0 => CompareTarget::Version(match union {
            Some(TargetUnion::Version(v)) => v,
            _ => 0,
        }),
        1 => CompareTarget::CreateRevision(match union {
            Some(TargetUnion::CreateRevision(v)) => v,
            _ => 0,
        }),
        2 => CompareTarget::ModRevision(match union {
            Some(TargetUnion::ModRevision(v)) => v,
            _ => 0,
        }),
        3 => CompareTarget::Value(match union {
            Some(TargetUnion::Value(v)) => v,
            _ => Vec::new(),
        }),
        4 => CompareTarget::Lease(match union {
            Some(TargetUnion::Lease(v)) => v,
            _ => 0,
        }),
        other => return Err(Status::invalid_argument(format!("etcdserver: unknown compare target {other}"))),
    };
    Ok(Compare { range: KeyRange { key: c.key, range_end: c.range_end }, target, result })
}

/// One operation of a Txn, with the sorting and filters of its ranges.
fn op_in(op: pb::RequestOp) -> Result<(TxnOp, OpShape), Status> {
    use pb::request_op::Request;
    match op.request {
        Some(Request::RequestRange(r)) => {
            let range = range_in(r)?;
            let op = if range.revision > 0 {
                TxnOp::RangeAt(range.request, range.revision)
            } else {
                TxnOp::Range(range.request)
            };
            Ok((op, range.shape.map_or(OpShape::Plain, OpShape::Range)))
        }
        Some(Request::RequestPut(p)) => Ok((
            match put_in(p) {
                (put, None) => TxnOp::Put(put),
                (put, Some(keep)) => TxnOp::PutKeeping(put, keep),
            },
            OpShape::Plain,
        )),
        Some(Request::RequestDeleteRange(d)) => Ok((TxnOp::DeleteRange(delete_in(d)), OpShape::Plain)),
        Some(Request::RequestTxn(t)) => {
            let (txn, shapes) = txn_in(t)?;
            Ok((TxnOp::Txn(txn), OpShape::Txn(shapes)))
        }
        // etcd's answer to an empty operation (its checkRequestOp).
        None => Err(leasekv_client::EtcdError::KeyNotFound.status()),
    }
}

/// How one operation's answer is shaped on its way out.
#[derive(Debug, Default)]
pub enum OpShape {
    /// As the store answered.
    #[default]
    Plain,
    /// A range with sorting or filters.
    Range(RangeShape),
    /// A nested transaction, with the shapes of its own operations.
    Txn(TxnShapes),
}

/// The shapes of the operations in a Txn's two branches, by operation index, applied to the
/// answer of the branch that ran.
#[derive(Debug, Default)]
pub struct TxnShapes {
    success: Vec<OpShape>,
    failure: Vec<OpShape>,
}

/// A transaction, and the shapes of its ranges.
pub fn txn_in(t: pb::TxnRequest) -> Result<(TxnRequest, TxnShapes), Status> {
    let branch = |ops: Vec<pb::RequestOp>| -> Result<(Vec<TxnOp>, Vec<OpShape>), Status> {
        Ok(ops.into_iter().map(op_in).collect::<Result<Vec<_>, _>>()?.into_iter().unzip())
    };
    let (success, success_shapes) = branch(t.success)?;
    let (failure, failure_shapes) = branch(t.failure)?;
    let compare = t.compare.into_iter().map(compare_in).collect::<Result<_, _>>()?;
    Ok((TxnRequest { compare, success, failure }, TxnShapes { success: success_shapes, failure: failure_shapes }))
}

/// A transaction's answer. As in etcd, each operation's answer has a header holding only the
/// revision that operation saw: the revision before the transaction until the transaction's
/// first write, the transaction's own revision (`header.revision`) from that write on.
/// `shapes` sort and filter its ranges as [`txn_in`] found them.
pub fn txn_out(t: TxnResponse, header: pb::ResponseHeader, shapes: &TxnShapes) -> pb::TxnResponse {
    let before = if t.responses.iter().any(writes) { header.revision - 1 } else { header.revision };
    let mut written = false;
    let responses = ops_out(t.responses, t.succeeded, header.revision, before, &mut written, shapes);
    pb::TxnResponse { header: Some(header), succeeded: t.succeeded, responses }
}

/// Whether an operation's answer shows it wrote something.
fn writes(r: &TxnOpResponse) -> bool {
    match r {
        TxnOpResponse::Put(_) => true,
        TxnOpResponse::DeleteRange(d) => d.deleted > 0,
        TxnOpResponse::Range(_) => false,
        TxnOpResponse::Txn(t) => t.responses.iter().any(writes),
    }
}

/// The answers of one branch: each header holds `before` until the first write of the
/// whole transaction (`written`, shared with nested ones), `revision` from it on.
fn ops_out(
    responses: Vec<TxnOpResponse>,
    succeeded: bool,
    revision: i64,
    before: i64,
    written: &mut bool,
    shapes: &TxnShapes,
) -> Vec<pb::ResponseOp> {
    use pb::response_op::Response;
    let branch_shapes = if succeeded { &shapes.success } else { &shapes.failure };
    responses
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let shape = branch_shapes.get(i);
            let response = match r {
                TxnOpResponse::Txn(nested) => {
                    let empty = TxnShapes::default();
                    let shapes = match shape {
                        Some(OpShape::Txn(shapes)) => shapes,
                        _ => &empty,
                    };
                    let responses = ops_out(nested.responses, nested.succeeded, revision, before, written, shapes);
                    // etcd fills only the outer transaction's header; a nested one's is empty.
                    Response::ResponseTxn(pb::TxnResponse {
                        header: Some(pb::ResponseHeader::default()),
                        succeeded: nested.succeeded,
                        responses,
                    })
                }
                other => {
                    *written |= writes(&other);
                    let op_header =
                        pb::ResponseHeader { revision: if *written { revision } else { before }, ..Default::default() };
                    match other {
                        TxnOpResponse::Range(r) => {
                            let shape = match shape {
                                Some(OpShape::Range(shape)) => Some(shape),
                                _ => None,
                            };
                            Response::ResponseRange(range_out(RangeShape::apply_if(shape, r), op_header))
                        }
                        TxnOpResponse::Put(p) => Response::ResponsePut(put_out(p, op_header)),
                        TxnOpResponse::DeleteRange(d) => Response::ResponseDeleteRange(delete_out(d, op_header)),
                        TxnOpResponse::Txn(_) => unreachable!("matched above"),
                    }
                }
            };
            pb::ResponseOp { response: Some(response) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_kvstore::{RangeResponse, TxnOpResponse};

    fn header(revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader { cluster_id: 7, member_id: 2, revision, raft_term: 3 }
    }

    fn op_revisions(t: &pb::TxnResponse) -> Vec<i64> {
        use pb::response_op::Response;
        t.responses
            .iter()
            .map(|r| {
                let h = match r.response.as_ref().expect("a response") {
                    Response::ResponseRange(r) => r.header,
                    Response::ResponsePut(p) => p.header,
                    Response::ResponseDeleteRange(d) => d.header,
                    Response::ResponseTxn(t) => t.header,
                }
                .expect("a header");
                assert_eq!((h.cluster_id, h.member_id, h.raft_term), (0, 0, 0), "only the revision, as etcd");
                h.revision
            })
            .collect()
    }

    #[test]
    fn txn_operation_headers_carry_the_revision_each_operation_saw() {
        let range = || TxnOpResponse::Range(RangeResponse::default());
        let put = || TxnOpResponse::Put(PutResponse { prev_kv: None });
        let delete = |deleted| TxnOpResponse::DeleteRange(DeleteRangeResponse { deleted, prev_kvs: Vec::new() });
        // Read, write, read, delete nothing, write: the transaction wrote revision 19.
        let t = TxnResponse { succeeded: true, responses: vec![range(), put(), range(), delete(0), put()] };
        let out = txn_out(t, header(19), &TxnShapes::default());
        assert_eq!(out.header, Some(header(19)));
        assert_eq!(op_revisions(&out), [18, 19, 19, 19, 19]);
        // Reads and a delete of nothing write nothing: every header is the current revision.
        let t = TxnResponse { succeeded: false, responses: vec![range(), delete(0), range()] };
        assert_eq!(op_revisions(&txn_out(t, header(20), &TxnShapes::default())), [20, 20, 20]);
        // A delete that deletes is a write.
        let t = TxnResponse { succeeded: true, responses: vec![range(), delete(2), range()] };
        assert_eq!(op_revisions(&txn_out(t, header(21), &TxnShapes::default())), [20, 21, 21]);
    }
}
