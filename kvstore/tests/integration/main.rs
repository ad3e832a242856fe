//! The crate's integration tests, as modules of one test binary (one link of the crate and
//! its dependencies instead of one per file). `cargo test -p <crate> --test integration <module>::`
//! runs one module.

mod ballots;
mod replica;
mod sim;
