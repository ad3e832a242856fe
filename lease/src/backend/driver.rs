//! Placeholder: the tokio driver (being written).
