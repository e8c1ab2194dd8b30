//! The conformance and primitive suites on the file backend: every client a `FileLock` of its
//! own on one shared directory (separate open files exclude each other as processes do).
//!
//! Run: `cargo test -p lock-file --test file conformance::`.

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

lock_testkit::conformance_tests!(crate::conformance::FileFactory::default());
lock_testkit::primitive_tests!(crate::conformance::FileFactory::default());

/// The composite read-write lock's reader slots are a semaphore whose count is the lock
/// handle's: no count record is stored for them (only `Semaphore::new` stores one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_slots_store_no_permit_count() {
    let dir = tempfile::tempdir().expect("dir");
    let backend = Arc::new(FileLock::new(dir.path()).expect("file lock"));
    let locker = lock_core::Locker::new(backend.clone());
    let rw = lock_core::RwLock::new(&locker, "slots").expect("rwlock").with_reader_slots(2).expect("slots");
    assert!(!rw.is_native(), "the file store has no shared holds: the composite");
    rw.read().try_acquire().await.expect("try").expect("free").release().await.expect("release");
    let stored =
        lock_core::backend::Records::record(&*backend, "slots#s-n", lock_core::backend::RecordOp::Get).await;
    assert_eq!(stored.expect("record").value, None, "the reader slots stored a count");
    let sem = lock_core::Semaphore::new(&locker, "sem", 2).expect("semaphore");
    sem.try_acquire().await.expect("try").expect("free").release().await.expect("release");
    assert_eq!(sem.stored_permits().await.expect("stored"), Some(2), "a semaphore stores its count");
}
