//! The conformance factory of the in-memory backend.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{LockBackend, MemoryBackend};

use crate::Factory;

/// Clients of one shared [`MemoryBackend`] table; `sever` deletes the key behind the holder.
#[derive(Debug, Default)]
pub struct MemoryFactory {
    table: MemoryBackend,
}

impl MemoryFactory {
    /// A fresh table.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Factory for MemoryFactory {
    fn label(&self) -> String {
        "memory".into()
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.table.clone())
    }

    async fn sever(&self, _holder: &Arc<dyn LockBackend>, key: &str) -> bool {
        self.table.sever(key)
    }
}
