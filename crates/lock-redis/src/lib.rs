//! redis backend (work in progress).
