//! The conformance factory of the in-memory backend.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::MemoryBackend;

use crate::factory::{Client, ClientFaults, Factory, FaultResult};

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

    async fn client(&self) -> Client {
        Client::with_faults(Arc::new(self.table.clone()), Table(self.table.clone()))
    }
}

/// Every client shares the table, so severing through any handle severs the holder's lock.
struct Table(MemoryBackend);

#[async_trait]
impl ClientFaults for Table {
    async fn sever(&self, key: &str) -> FaultResult {
        assert!(self.0.sever(key), "sever: {key:?} is not held");
        Ok(())
    }
}
