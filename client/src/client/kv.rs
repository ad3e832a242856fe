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

    /// etcd 3.7's RangeStream: `request` answered in chunks, every one at the revision of
    /// the first (only the last carries the header, `more` and `count`). The call is
    /// retried as any other until the stream opens, never once chunks flow.
    pub async fn range_stream(&self, request: RangeRequest) -> Result<Streaming<RangeStreamResponse>, ClientError> {
        self.call_with_deadline("RangeStream", None, unary!(KvClient, range_stream, request.clone())).await
    }

    /// A range read through [`Self::range_stream`] and merged into Range's answer (etcd's
    /// `GetStreamToGetResponse`): no single message holds the whole range. A server
    /// without RangeStream (etcd before 3.7) answers `Unimplemented`, and the plain Range
    /// is read instead.
    pub async fn range_streamed(&self, request: RangeRequest) -> Result<RangeResponse, ClientError> {
        let mut stream = match self.range_stream(request.clone()).await {
            Ok(stream) => stream,
            Err(error) if error.code() == Some(Code::Unimplemented) => return self.range(request).await,
            Err(error) => return Err(error),
        };
        let endpoint = self.current_endpoint().to_string();
        let failed =
            |status| ClientError::Rpc { endpoint: endpoint.clone(), method: "RangeStream", status: Box::new(status) };
        let mut merged = RangeResponse::default();
        while let Some(chunk) = stream.message().await.map_err(failed)? {
            let chunk = chunk.range_response.unwrap_or_default();
            merged.kvs.extend(chunk.kvs);
            if chunk.header.is_some() {
                merged.header = chunk.header;
                merged.more = chunk.more;
                merged.count = chunk.count;
            }
        }
        if merged.header.is_none() {
            return Err(failed(Status::data_loss("the RangeStream ended before its last chunk")));
        }
        Ok(merged)
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
