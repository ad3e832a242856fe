//! Running the project's command-line programs from a test and reading what they said.

#![allow(dead_code)] // each test file uses its own part of it

use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `program` with `args` to completion.
pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().expect("the program runs")
}

/// The standard output of a run that must have succeeded (`what` names it in the failure).
pub fn succeeded(output: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{what} failed: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// The output of `child` once it exits, or `None` if it has not within `limit`: it is then
/// killed by its pid (and reaped, if it goes within a few seconds).
pub fn output_within(child: Child, limit: Duration) -> Option<std::io::Result<Output>> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(output) => Some(output),
        Err(_) => {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            let _ = rx.recv_timeout(Duration::from_secs(5));
            None
        }
    }
}
