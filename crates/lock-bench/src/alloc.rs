//! Allocations per operation: the process's global allocator is `System` behind
//! `stats_alloc`'s counters, so a scenario reads how many allocations (and bytes) an operation
//! cost. The counters are process-wide: they include what the backends' connection tasks
//! allocate for the operation, which is part of its cost.

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Allocator calls and bytes so far (a realloc counts as a call; its growth as bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocs {
    /// `alloc`, `alloc_zeroed` and `realloc` calls.
    pub calls: u64,
    /// Bytes requested, growth by `realloc` included.
    pub bytes: u64,
}

impl Allocs {
    /// The counters now.
    pub fn now() -> Self {
        let s = GLOBAL.stats();
        Allocs { calls: (s.allocations + s.reallocations) as u64, bytes: s.bytes_allocated as u64 }
    }

    /// What happened since `earlier`.
    pub fn since(self, earlier: Allocs) -> Allocs {
        Allocs {
            calls: self.calls.saturating_sub(earlier.calls),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Heap bytes in use by the whole process now: allocated and not yet freed.
pub fn live_bytes() -> u64 {
    let s = GLOBAL.stats();
    s.bytes_allocated.saturating_sub(s.bytes_deallocated) as u64
}

/// Allocations summed over a number of operations.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerOp {
    total: Allocs,
    ops: u64,
}

impl PerOp {
    /// Add one operation's allocations.
    pub fn add(&mut self, a: Allocs) {
        self.total.calls += a.calls;
        self.total.bytes += a.bytes;
        self.ops += 1;
    }

    /// (allocations, bytes) per operation, `None` before the first.
    pub fn mean(&self) -> Option<(f64, f64)> {
        (self.ops > 0)
            .then(|| (self.total.calls as f64 / self.ops as f64, self.total.bytes as f64 / self.ops as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::Allocs;

    #[test]
    fn a_boxed_value_counts_one_allocation_and_its_bytes() {
        let before = Allocs::now();
        let b = std::hint::black_box(Box::new([0u8; 4096]));
        let d = Allocs::now().since(before);
        drop(b);
        // Other test threads may allocate meanwhile: at least ours is counted.
        assert!(d.calls >= 1, "{d:?}");
        assert!(d.bytes >= 4096, "{d:?}");
    }
}
