//! Conformance suite on the zk backend (work in progress).
