//! Conformance suite on the redis backend (work in progress).
