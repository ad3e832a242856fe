//! Running the project's command-line programs from a test and reading what they said.

#![allow(dead_code)] // each test file uses its own part of it

use std::process::{Command, Output};

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
