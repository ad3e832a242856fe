//! Deterministic simulation of whole replicas.

pub mod linearizability;
