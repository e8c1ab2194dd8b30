//! Where a semaphore keeps its nodes under its key's directory, as Curator's
//! `InterProcessSemaphoreV2` does: a gate (a mutex every permit request queues on) and the
//! leases. The queue store and the permits both find their nodes here.

/// The gate's directory under a semaphore's: Curator's `InterProcessSemaphoreV2` mutex.
pub(crate) const GATE_SUFFIX: &str = "/locks";
/// The leases' directory under a semaphore's.
const LEASES: &str = "leases";

/// The gate's directory of the semaphore in `dir`.
pub(crate) fn gate_dir(dir: &str) -> String {
    format!("{dir}{GATE_SUFFIX}")
}

/// The leases' directory of the semaphore in `dir`.
pub(crate) fn leases_dir(dir: &str) -> String {
    format!("{dir}/{LEASES}")
}

/// Whether `children` of a lock directory are a semaphore's (Curator's or ours).
pub(crate) fn is_semaphore(children: &[String]) -> bool {
    children.iter().any(|c| c == LEASES)
}
