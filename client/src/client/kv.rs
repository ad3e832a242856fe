//! etcd's KV service: puts, ranges, deletes, transactions and compaction.

use super::*;

impl Client {
    /// Writes `key = value`, attached to `lease_id` (0 for none); `prev_kv` asks for the old pair.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease_id: i64,
        prev_kv: bool,
    ) -> Result<PutResponse, ClientError> {
        let request =
            PutRequest { key: key.into(), value: value.into(), lease: lease_id, prev_kv, ..Default::default() };
        self.call("Put", unary!(KvClient, put, request.clone())).await
    }

    /// Reads one key or, with `options.prefix`, every key starting with `key`.
    pub async fn get(&self, key: impl Into<Vec<u8>>, options: GetOptions) -> Result<RangeResponse, ClientError> {
        let key = key.into();
        let range_end = if options.prefix { prefix_range_end(&key) } else { Vec::new() };
        let request = RangeRequest {
            key,
            range_end,
            limit: options.limit,
            serializable: options.serializable,
            keys_only: options.keys_only,
            count_only: options.count_only,
            revision: options.revision,
            ..Default::default()
        };
        self.range(request).await
    }

    /// A raw Range call, for options [`Client::get`] does not offer.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, ClientError> {
        self.call("Range", unary!(KvClient, range, request.clone())).await
    }

    /// Deletes one key or, with `prefix`, every key starting with `key`.
    pub async fn delete(
        &self,
        key: impl Into<Vec<u8>>,
        prefix: bool,
        prev_kv: bool,
    ) -> Result<DeleteRangeResponse, ClientError> {
        let key = key.into();
        let range_end = if prefix { prefix_range_end(&key) } else { Vec::new() };
        let request = DeleteRangeRequest { key, range_end, prev_kv };
        self.call("DeleteRange", unary!(KvClient, delete_range, request.clone())).await
    }

    /// A transaction, passed through as given.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, ClientError> {
        self.call("Txn", unary!(KvClient, txn, request.clone())).await
    }

    /// Discards history before `revision`.
    pub async fn compact(&self, revision: i64, physical: bool) -> Result<CompactionResponse, ClientError> {
        let request = CompactionRequest { revision, physical };
        self.call("Compact", unary!(KvClient, compact, request)).await
    }
}
