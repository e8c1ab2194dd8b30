//! mysql backend (work in progress).
