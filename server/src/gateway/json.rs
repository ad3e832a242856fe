//! etcd's messages as JSON, the way etcd 3.4's gateway (grpc-gateway v1: jsonpb with the
//! original field names, defaults omitted) writes and reads them. The mapping is proto3's
//! canonical JSON mapping, done by `prost-reflect` from the messages' descriptors (compiled
//! by build.rs, with etcd's field names such as `ID` and `TTL`):
//! 64-bit integers as strings, bytes as standard base64, enums by name, default values
//! left out. Requests may name fields in snake_case or lowerCamelCase and give integers as
//! numbers or strings; unknown fields are ignored, unknown enum names are not (etcd's answer
//! to `"sort_order": "SIDEWAYS"` is an error, and ignoring it would sort some other way).

use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};
use std::sync::OnceLock;
use tonic::Status;

/// The descriptors of etcd's messages with etcd's field names (see build.rs).
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gateway.fds"));

const SERIALIZE: SerializeOptions = SerializeOptions::new().use_proto_field_name(true).skip_default_fields(true);
/// Strict: unknown fields are removed before (see [`strip_unknown_fields`]), so that
/// prost-reflect's leniency about them does not extend to unknown enum names.
const DESERIALIZE: DeserializeOptions = DeserializeOptions::new().deny_unknown_fields(true);

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).expect("build.rs wrote a valid descriptor set"))
}

/// The descriptor of the message `name` (e.g. `etcdserverpb.RangeRequest`).
///
/// # Panics
/// If there is no such message: the names are constants of the routes, all of which a
/// test resolves.
pub fn descriptor(name: &str) -> MessageDescriptor {
    pool().get_message_by_name(name).unwrap_or_else(|| panic!("no message {name} in the gateway's descriptors"))
}

/// Decodes a request body. An empty body is the default request, as etcd's gateway takes it;
/// anything after the first JSON value is ignored, as there.
pub fn decode<T: Message + Default>(name: &str, body: &[u8]) -> Result<T, Status> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>();
    let value = match values.next() {
        Some(Ok(value)) => value,
        Some(Err(e)) => return Err(Status::invalid_argument(format!("malformed JSON for {name}: {e}"))),
        None => return Ok(T::default()),
    };
    decode_value(name, value)
}

/// Decodes one JSON value (a request body's, or one of a request stream's).
pub fn decode_value<T: Message + Default>(name: &str, mut value: serde_json::Value) -> Result<T, Status> {
    let descriptor = descriptor(name);
    strip_unknown_fields(&mut value, &descriptor);
    let message = DynamicMessage::deserialize_with_options(descriptor, value, &DESERIALIZE)
        .map_err(|e| Status::invalid_argument(format!("malformed JSON for {name}: {e}")))?;
    transcode(name, &message)
}

/// Removes from `value` every member that names no field of `message` (by its name or its
/// JSON name), at every depth, as etcd's gateway ignores them.
fn strip_unknown_fields(value: &mut serde_json::Value, message: &MessageDescriptor) {
    let serde_json::Value::Object(members) = value else {
        return;
    };
    members.retain(|key, _| message.get_field_by_name(key).or_else(|| message.get_field_by_json_name(key)).is_some());
    for (key, member) in members.iter_mut() {
        let Some(field) = message.get_field_by_name(key).or_else(|| message.get_field_by_json_name(key)) else {
            continue;
        };
        let prost_reflect::Kind::Message(inner) = field.kind() else {
            continue;
        };
        match member {
            serde_json::Value::Array(items) if field.is_list() => {
                items.iter_mut().for_each(|item| strip_unknown_fields(item, &inner))
            }
            _ => strip_unknown_fields(member, &inner),
        }
    }
}

fn transcode<T: Message + Default>(name: &str, message: &DynamicMessage) -> Result<T, Status> {
    message.transcode_to::<T>().map_err(|e| Status::invalid_argument(format!("unusable {name}: {e}")))
}

/// Encodes `message`, whose wire form is that of the message `name`, as JSON.
pub fn encode<T: Message>(name: &str, message: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write(name, message, &mut out);
    out
}

/// Appends the JSON of `message` to `out`.
pub fn write<T: Message>(name: &str, message: &T, out: &mut Vec<u8>) {
    let dynamic = DynamicMessage::decode(descriptor(name), message.encode_to_vec().as_slice())
        .expect("a message decodes as its own descriptor");
    let mut json = serde_json::Serializer::new(out);
    dynamic.serialize_with_options(&mut json, &SERIALIZE).expect("JSON into memory does not fail");
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_client::proto::etcdserverpb as pb;
    use leasekv_client::proto::mvccpb;

    fn json(name: &str, message: &impl Message) -> serde_json::Value {
        serde_json::from_slice(&encode(name, message)).unwrap()
    }

    #[test]
    fn responses_are_written_as_etcds_gateway_writes_them() {
        let response = pb::RangeResponse {
            header: Some(pb::ResponseHeader { cluster_id: 1, member_id: 2, revision: 3, raft_term: 0 }),
            kvs: vec![mvccpb::KeyValue {
                key: b"foo".to_vec(),
                value: b"bar".to_vec(),
                create_revision: 3,
                mod_revision: 3,
                version: 1,
                lease: 0,
            }],
            more: false,
            count: 1,
        };
        assert_eq!(
            json("etcdserverpb.RangeResponse", &response),
            serde_json::json!({
                "header": {"cluster_id": "1", "member_id": "2", "revision": "3"},
                "kvs": [{"key": "Zm9v", "value": "YmFy", "create_revision": "3", "mod_revision": "3", "version": "1"}],
                "count": "1"
            })
        );
        let grant = pb::LeaseGrantResponse { header: None, id: 7, ttl: 10, error: String::new() };
        assert_eq!(json("etcdserverpb.LeaseGrantResponse", &grant), serde_json::json!({"ID": "7", "TTL": "10"}));
        let member = pb::Member {
            id: 1,
            name: "n1".into(),
            peer_urls: vec!["http://a".into()],
            client_urls: vec!["http://b".into()],
            is_learner: false,
        };
        assert_eq!(
            json("etcdserverpb.Member", &member),
            serde_json::json!({"ID": "1", "name": "n1", "peerURLs": ["http://a"], "clientURLs": ["http://b"]})
        );
    }

    #[test]
    fn requests_accept_both_spellings_and_integers_as_strings_or_numbers() {
        let a: pb::RangeRequest =
            decode("etcdserverpb.RangeRequest", br#"{"key":"Zm9v","range_end":"Zm9w","limit":"5","x":1}"#).unwrap();
        let b: pb::RangeRequest =
            decode("etcdserverpb.RangeRequest", br#"{"key":"Zm9v","rangeEnd":"Zm9w","limit":5}"#).unwrap();
        assert_eq!(a, b);
        let nested: pb::TxnRequest = decode(
            "etcdserverpb.TxnRequest",
            br#"{"success":[{"request_put":{"key":"YQ==","novel":true},"extra":[1]}],"future":{"a":1}}"#,
        )
        .unwrap();
        assert_eq!(nested.success.len(), 1);
        assert_eq!((a.key.as_slice(), a.range_end.as_slice(), a.limit), (&b"foo"[..], &b"fop"[..], 5));
        let grant: pb::LeaseGrantRequest = decode("etcdserverpb.LeaseGrantRequest", br#"{"TTL":"30","ID":9}"#).unwrap();
        assert_eq!((grant.ttl, grant.id), (30, 9));
        let empty: pb::StatusRequest = decode("etcdserverpb.StatusRequest", b"").unwrap();
        assert_eq!(empty, pb::StatusRequest {});
    }

    #[test]
    fn malformed_requests_are_invalid_arguments() {
        for body in [
            &br#"{"key": 5}"#[..],
            b"{",
            b"[1,2]",
            br#"{"limit":"many"}"#,
            b"not json",
            br#"{"sort_order":"SIDEWAYS","x":1}"#,
        ] {
            let error = decode::<pb::RangeRequest>("etcdserverpb.RangeRequest", body).unwrap_err();
            assert_eq!(error.code(), tonic::Code::InvalidArgument, "{}", String::from_utf8_lossy(body));
        }
    }
}
