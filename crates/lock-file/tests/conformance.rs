//! The conformance and primitive suites on the file backend: every client a `FileLock` of its
//! own on one shared directory (separate open files exclude each other as processes do).
//!
//! Run: `cargo test -p lock-file --test conformance`.

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lock_file::FileLock;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult};

/// One directory for the whole test binary, removed when the process ends.
static DIR: LazyLock<tempfile::TempDir> =
    LazyLock::new(|| tempfile::Builder::new().prefix("lock-file-").tempdir().expect("temp dir"));

/// Makes `FileLock` clients on the binary's directory.
#[derive(Debug)]
pub struct FileFactory {
    dir: PathBuf,
}

impl Default for FileFactory {
    fn default() -> Self {
        FileFactory { dir: DIR.path().to_owned() }
    }
}

#[lock_core::async_trait]
impl Factory for FileFactory {
    fn label(&self) -> String {
        "file".into()
    }

    async fn client(&self) -> Client {
        let lock = FileLock::with_check_every(&self.dir, Duration::from_millis(50)).expect("FileLock");
        Client::with_faults(Arc::new(lock), Remove { dir: self.dir.clone() })
    }
}

/// An operator removing the lock file behind its holder.
struct Remove {
    dir: PathBuf,
}

#[lock_core::async_trait]
impl ClientFaults for Remove {
    async fn sever(&self, key: &str) -> FaultResult {
        let name = lock_file::lock_file_name(key);
        std::fs::remove_file(self.dir.join(name)).expect("remove the lock file");
        Ok(())
    }
}

lock_testkit::conformance_tests!(crate::FileFactory::default());
lock_testkit::primitive_tests!(crate::FileFactory::default());
