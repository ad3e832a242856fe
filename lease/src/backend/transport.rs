//! Placeholder: transports (being written).
