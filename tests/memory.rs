//! The conformance suite on the in-memory backend, through `Arc<dyn LockBackend>`.
use lock_testkit::{MemoryFactory, conformance_tests};

conformance_tests!(MemoryFactory::new());
lock_testkit::primitive_tests!(MemoryFactory::new());
