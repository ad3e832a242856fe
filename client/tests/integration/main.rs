//! The crate's integration tests, as modules of one test binary (one link of the crate and
//! its dependencies instead of one per file). `cargo test -p <crate> --test integration <module>::`
//! runs one module.

mod etcdctl_against_stub;
mod indeterminate_write;

/// The RangeStream answer type of the stub servers, which refuse RangeStream.
type NoRangeStream = std::pin::Pin<
    Box<
        dyn tokio_stream::Stream<Item = Result<leasekv_client::proto::etcdserverpb::RangeStreamResponse, tonic::Status>>
            + Send,
    >,
>;
