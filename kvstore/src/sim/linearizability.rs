//! Linearizability checker.
