//! Conformance suite on the mysql backend (work in progress).
