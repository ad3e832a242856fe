//! etcd's sorting and revision filters on a range, applied to the store's answer.
//!
//! The store reads keys in key order and knows nothing of sorting or filters; etcd applies
//! both after reading too (`server/etcdserver/txn/range.go`): with a sort or a filter it
//! reads the whole range, drops what the filters exclude, sorts, and only then cuts the
//! answer at `limit`, setting `more`. `count` stays the number of keys in the range before
//! filtering, as etcd reports it. Done here, at the API edge, so the store's commands and
//! their encoding in the log and snapshots are unchanged.

use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::EtcdError;
use leasekv_kvstore::{KeyValue, RangeResponse, Revision};
use std::cmp::Ordering;
use tonic::Status;

/// What to order the keys by (`RangeRequest.sort_target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortTarget {
    Key,
    Version,
    Create,
    Mod,
    Value,
}

/// The sorting, filters and limit of one range request, when it has any sorting or filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeShape {
    /// Order by this, descending when the flag is set; `None`: key order as read.
    sort: Option<(SortTarget, bool)>,
    min_mod_revision: Revision,
    max_mod_revision: Revision,
    min_create_revision: Revision,
    max_create_revision: Revision,
    /// The client's limit (0: none), applied after filtering and sorting.
    limit: i64,
    /// The client asked for keys only; values were read anyway to sort by them.
    keys_only: bool,
}

impl RangeShape {
    /// The shape of `r`, or `None` when the store's own answer (key order, its limit) is
    /// already etcd's. An unknown sort order or target is etcd's "invalid sort option".
    pub fn of(r: &pb::RangeRequest) -> Result<Option<RangeShape>, Status> {
        let target = match pb::range_request::SortTarget::try_from(r.sort_target) {
            Ok(pb::range_request::SortTarget::Key) => SortTarget::Key,
            Ok(pb::range_request::SortTarget::Version) => SortTarget::Version,
            Ok(pb::range_request::SortTarget::Create) => SortTarget::Create,
            Ok(pb::range_request::SortTarget::Mod) => SortTarget::Mod,
            Ok(pb::range_request::SortTarget::Value) => SortTarget::Value,
            Err(_) => return Err(invalid_sort_option()),
        };
        let order = pb::range_request::SortOrder::try_from(r.sort_order).map_err(|_| invalid_sort_option())?;
        // etcd: a target other than the key with no order sorts ascending; the key ascending
        // is the order the store reads in anyway.
        let sort = match (order, target) {
            (pb::range_request::SortOrder::None | pb::range_request::SortOrder::Ascend, SortTarget::Key) => None,
            (pb::range_request::SortOrder::None | pb::range_request::SortOrder::Ascend, target) => {
                Some((target, false))
            }
            (pb::range_request::SortOrder::Descend, target) => Some((target, true)),
        };
        let filtered = r.min_mod_revision != 0
            || r.max_mod_revision != 0
            || r.min_create_revision != 0
            || r.max_create_revision != 0;
        if sort.is_none() && !filtered {
            return Ok(None);
        }
        Ok(Some(RangeShape {
            sort,
            min_mod_revision: r.min_mod_revision,
            max_mod_revision: r.max_mod_revision,
            min_create_revision: r.min_create_revision,
            max_create_revision: r.max_create_revision,
            limit: r.limit,
            keys_only: r.keys_only,
        }))
    }

    /// Whether the store must read values although the client asked for keys only.
    pub fn needs_values(&self) -> bool {
        matches!(self.sort, Some((SortTarget::Value, _)))
    }

    /// The store's answer shaped by `shape`, if the request had one.
    pub fn apply_if(shape: Option<&RangeShape>, response: RangeResponse) -> RangeResponse {
        match shape {
            Some(shape) => shape.apply(response),
            None => response,
        }
    }

    /// Filters, sorts and cuts the store's answer, read without a limit.
    pub fn apply(&self, mut response: RangeResponse) -> RangeResponse {
        response.kvs.retain(|kv| self.keeps(kv));
        if let Some((target, descending)) = self.sort {
            // A stable sort: keys that compare equal stay in key order (etcd leaves their
            // order unspecified).
            response.kvs.sort_by(|a, b| {
                let order = compare(target, a, b);
                if descending {
                    order.reverse()
                } else {
                    order
                }
            });
        }
        response.more = false;
        if self.limit > 0 && response.kvs.len() as i64 > self.limit {
            response.kvs.truncate(self.limit as usize);
            response.more = true;
        }
        if self.keys_only {
            for kv in &mut response.kvs {
                kv.value.clear();
            }
        }
        response
    }

    fn keeps(&self, kv: &KeyValue) -> bool {
        (self.max_mod_revision == 0 || kv.mod_revision <= self.max_mod_revision)
            && (self.min_mod_revision == 0 || kv.mod_revision >= self.min_mod_revision)
            && (self.max_create_revision == 0 || kv.create_revision <= self.max_create_revision)
            && (self.min_create_revision == 0 || kv.create_revision >= self.min_create_revision)
    }
}

fn compare(target: SortTarget, a: &KeyValue, b: &KeyValue) -> Ordering {
    match target {
        SortTarget::Key => a.key.cmp(&b.key),
        SortTarget::Version => a.version.cmp(&b.version),
        SortTarget::Create => a.create_revision.cmp(&b.create_revision),
        SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
        SortTarget::Value => a.value.cmp(&b.value),
    }
}

/// etcd's answer to a sort order or target it does not know (`ErrGRPCInvalidSortOption`).
fn invalid_sort_option() -> Status {
    EtcdError::InvalidSortOption.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create: Revision, modified: Revision, version: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: create,
            mod_revision: modified,
            version,
            lease: 0,
        }
    }

    fn read() -> RangeResponse {
        RangeResponse {
            kvs: vec![kv("a", "zz", 2, 9, 3), kv("b", "yy", 3, 4, 1), kv("c", "xx", 5, 7, 2)],
            more: false,
            count: 3,
        }
    }

    fn keys(response: &RangeResponse) -> Vec<String> {
        response.kvs.iter().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect()
    }

    fn request(order: pb::range_request::SortOrder, target: pb::range_request::SortTarget) -> pb::RangeRequest {
        pb::RangeRequest { sort_order: order as i32, sort_target: target as i32, ..Default::default() }
    }

    use pb::range_request::{SortOrder, SortTarget as Target};

    #[test]
    fn key_order_needs_no_shape() {
        assert_eq!(RangeShape::of(&pb::RangeRequest::default()).unwrap(), None);
        assert_eq!(RangeShape::of(&request(SortOrder::Ascend, Target::Key)).unwrap(), None);
        assert!(RangeShape::of(&request(SortOrder::Descend, Target::Key)).unwrap().is_some());
    }

    #[test]
    fn sorts_by_each_target_and_a_target_alone_means_ascending() {
        let by = |order, target| keys(&RangeShape::of(&request(order, target)).unwrap().unwrap().apply(read()));
        assert_eq!(by(SortOrder::Descend, Target::Key), ["c", "b", "a"]);
        assert_eq!(by(SortOrder::None, Target::Mod), ["b", "c", "a"]);
        assert_eq!(by(SortOrder::Descend, Target::Mod), ["a", "c", "b"]);
        assert_eq!(by(SortOrder::Ascend, Target::Create), ["a", "b", "c"]);
        assert_eq!(by(SortOrder::Ascend, Target::Version), ["b", "c", "a"]);
        assert_eq!(by(SortOrder::Ascend, Target::Value), ["c", "b", "a"]);
    }

    #[test]
    fn filters_then_sorts_then_limits_and_keeps_the_range_count() {
        let r = pb::RangeRequest {
            sort_order: SortOrder::Descend as i32,
            sort_target: Target::Mod as i32,
            min_mod_revision: 5,
            limit: 1,
            ..Default::default()
        };
        let shaped = RangeShape::of(&r).unwrap().unwrap().apply(read());
        assert_eq!(keys(&shaped), ["a"]);
        assert!(shaped.more, "c was cut by the limit");
        assert_eq!(shaped.count, 3, "etcd counts the range before filtering");
        let r = pb::RangeRequest { max_create_revision: 3, min_create_revision: 3, ..Default::default() };
        assert_eq!(keys(&RangeShape::of(&r).unwrap().unwrap().apply(read())), ["b"]);
    }

    #[test]
    fn keys_only_sorted_by_value_reads_values_and_drops_them() {
        let r = pb::RangeRequest { sort_target: Target::Value as i32, keys_only: true, ..Default::default() };
        let shape = RangeShape::of(&r).unwrap().unwrap();
        assert!(shape.needs_values());
        let shaped = shape.apply(read());
        assert_eq!(keys(&shaped), ["c", "b", "a"]);
        assert!(shaped.kvs.iter().all(|kv| kv.value.is_empty()));
    }

    #[test]
    fn an_unknown_sort_option_is_etcds_error() {
        for r in [
            pb::RangeRequest { sort_order: 7, ..Default::default() },
            pb::RangeRequest { sort_target: -1, ..Default::default() },
        ] {
            let status = RangeShape::of(&r).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert_eq!(status.message(), "etcdserver: invalid sort option");
        }
    }
}
