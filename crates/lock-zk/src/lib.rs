//! zk backend (work in progress).
