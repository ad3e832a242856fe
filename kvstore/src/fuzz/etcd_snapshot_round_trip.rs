//! Target `etcd_snapshot_round_trip`: generated stores written by the backup writer
//! (`etcd_snapshot::write_file`, what `Maintenance.Snapshot` streams) and read back by the
//! importer (`etcd_snapshot::decode`, what `kvserver restore` does). Every store comes back
//! whole: revision, compaction point, keys at every retained revision, history, leases with
//! names and keys, users and roles. The stores mix puts over puts, deletes, transactions of
//! several changes, named and unnamed leases revoked with their keys, compactions, values
//! from empty to several pages, and keys long enough to need branch pages of few children.

use crate::command::{Command, DeleteRangeRequest, PutRequest, TxnOp, TxnRequest};
use crate::etcd_snapshot::round_trip::{assert_same, export};
use crate::state::StateMachine;
use crate::types::{KeyRange, NO_LEASE};
use proptest::prelude::*;

/// One change to the store, with its numbers drawn small so that changes meet.
#[derive(Debug, Clone)]
enum Op {
    Put { key: u8, long_key: bool, value_len: usize, lease: Option<u8> },
    Delete { key: u8 },
    DeletePrefix { key: u8 },
    Txn { keys: Vec<u8> },
    Grant { lease: u8, named: bool },
    Revoke { lease: u8 },
    Compact { back: u8 },
}

fn key(key: u8, long: bool) -> Vec<u8> {
    let mut bytes = format!("/k/{}", key % 40).into_bytes();
    if long {
        // Keys of kilobytes: few per leaf, and few per branch page.
        bytes.extend(std::iter::repeat_n(b'x', 2000 + usize::from(key) * 10));
    }
    bytes
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), prop::bool::weighted(0.05), prop_oneof![0usize..64, 64usize..9000], prop::option::weighted(0.3, 0u8..4))
            .prop_map(|(key, long_key, value_len, lease)| Op::Put { key, long_key, value_len, lease }),
        1 => any::<u8>().prop_map(|key| Op::Delete { key }),
        1 => any::<u8>().prop_map(|key| Op::DeletePrefix { key }),
        1 => prop::collection::vec(any::<u8>(), 1..4).prop_map(|keys| Op::Txn { keys }),
        1 => (0u8..4, any::<bool>()).prop_map(|(lease, named)| Op::Grant { lease, named }),
        1 => (0u8..4).prop_map(|lease| Op::Revoke { lease }),
        1 => any::<u8>().prop_map(|back| Op::Compact { back }),
    ]
}

fn apply(machine: &mut StateMachine, op: &Op, step: usize) {
    let command = match op {
        Op::Put { key: k, long_key, value_len, lease } => Command::Put(PutRequest {
            key: key(*k, *long_key),
            value: vec![(step % 251) as u8; *value_len],
            lease: lease.map_or(NO_LEASE, |l| 100 + i64::from(l)),
            prev_kv: false,
        }),
        Op::Delete { key: k } => {
            Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key(*k, false)), prev_kv: false })
        }
        Op::DeletePrefix { key: k } => {
            let prefix = format!("/k/{}", k % 4).into_bytes();
            Command::DeleteRange(DeleteRangeRequest { range: KeyRange::prefix(prefix), prev_kv: false })
        }
        Op::Txn { keys } => Command::Txn(TxnRequest {
            compare: Vec::new(),
            success: keys
                .iter()
                .map(|k| {
                    TxnOp::Put(PutRequest { key: key(*k, false), value: vec![*k; 3], lease: NO_LEASE, prev_kv: false })
                })
                .collect(),
            failure: Vec::new(),
        }),
        Op::Grant { lease, named } => Command::LeaseGrant {
            id: 100 + i64::from(*lease),
            name: named.then(|| format!("lease-{lease}")),
            ttl: 10 + i64::from(*lease),
        },
        Op::Revoke { lease } => Command::LeaseRevoke { id: 100 + i64::from(*lease) },
        Op::Compact { back } => Command::Compact { revision: (machine.revision() - i64::from(*back % 16)).max(1) },
    };
    // Refused changes (a put on a missing lease, a name taken) are part of the mix.
    machine.apply(&command);
}

#[test]
fn generated_stores_come_back_whole() {
    proptest::proptest!(super::support::config(64), |(ops in prop::collection::vec(op(), 0..120))| {
        let mut machine = StateMachine::new();
        for (step, op) in ops.iter().enumerate() {
            apply(&mut machine, op, step);
        }
        let bytes = export(&mut machine);
        let restored = crate::etcd_snapshot::decode(&bytes).expect("the written file reads back");
        assert_same(&machine, &restored);
    });
}
