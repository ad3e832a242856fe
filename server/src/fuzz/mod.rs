//! The server's fuzz targets (docs/fuzzing.md): every input a client or a peer can send,
//! decoded as the node decodes it, must end in a clear error or a valid request, never a
//! panic. Each target replays its committed corpus (`fuzz/corpus/<target>/`) and then runs
//! proptest's generated and mutated cases (`PROPTEST_CASES` sets how many).

#[path = "../../../fuzz/support.rs"]
mod support;

mod config;
mod gateway;
mod grpc;
mod peer;
