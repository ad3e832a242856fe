//! kvcli: the command line for leasekv (and, for the etcd subset, any etcd cluster).
//!
//! Exit codes: 0 success, 1 a request failed or the thing asked for was not found,
//! 2 usage errors (reported by clap).

#[path = "../cli/mod.rs"]
mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kvcli: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` puts anyhow's context chain on one line: "what we did: why it failed".
            eprintln!("kvcli: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
