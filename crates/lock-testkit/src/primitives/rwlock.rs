//! The rwlock suite (cases named `rw_*`).

/// Expand the rwlock suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! rwlock_tests {
    ($factory:expr) => {
        $crate::rwlock_tests!(@cases $factory;
            rw_readers_share,
            rw_readers_of_one_client_share,
            rw_writer_excludes_everyone,
            rw_writer_not_starved,
            rw_write_fences_increase,
            rw_reader_lost_signal_fires,
            rw_writer_lost_signal_fires,
            rw_crashed_writer_frees_lock,
            rw_write_grants_only_live_parts,
            rw_upgradeable_read_grants_only_live_parts,
            rw_reader_cannot_upgrade,
            rw_upgradeable_read_upgrades_before_writers,
            rw_bad_input,
            rw_phase_fair,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::rwlock::$case(&factory).await;
            }
        )*
    };
}

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockError, MAX_KEY_BYTES, MAX_PERMITS, RwLock};

pub use super::rw_fair::rw_phase_fair;
pub use super::rw_lost::{
    rw_crashed_writer_frees_lock, rw_reader_lost_signal_fires, rw_upgradeable_read_grants_only_live_parts,
    rw_write_grants_only_live_parts, rw_writer_lost_signal_fires,
};
use crate::factory::{Factory, key, skip};
use crate::poll::within;

pub(super) async fn rw<F: Factory + ?Sized>(f: &F, name: &str, slots: u32) -> RwLock {
    let l = f.client().await.locker();
    RwLock::new(&l, name).expect("rwlock").with_reader_slots(slots).expect("slots")
}

/// Several readers (each its own client) hold the lock at once; a writer cannot while they do,
/// and can once they are gone.
pub async fn rw_readers_share<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_share");
    let mut readers = Vec::new();
    for _ in 0..3 {
        let r = rw(f, &name, 4).await;
        readers.push(r.read().wait(Duration::from_secs(5)).acquire().await.expect("reader"));
    }
    let w = rw(f, &name, 4).await;
    assert!(w.write().try_acquire().await.expect("try").is_none(), "a writer while 3 readers hold");
    for g in readers {
        g.release().await.expect("release");
    }
    let g = w.write().wait(Duration::from_secs(5)).acquire().await.expect("writer after readers");
    let slots = if w.is_native() { 0 } else { 4 };
    assert_eq!(g.slots().len(), slots, "a writer holds every reader slot (none when native)");
    let r = rw(f, &name, 4).await;
    assert!(r.read().try_acquire().await.expect("try").is_none(), "a reader while the writer holds");
    g.release().await.expect("release");
    let g = r.read().try_acquire().await.expect("try").expect("reader after the writer");
    g.release().await.expect("release");
}

/// Readers of one client (one handle, so one connection pool and one hold table) share too:
/// each is its own hold, released on its own, and the writer gets in after the last.
pub async fn rw_readers_of_one_client_share<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_share_one");
    let r = rw(f, &name, 4).await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(r.read().wait(Duration::from_secs(5)).acquire().await.expect("reader"));
    }
    let w = rw(f, &name, 4).await;
    for g in readers {
        assert!(w.write().try_acquire().await.expect("try").is_none(), "a writer while a reader holds");
        assert!(!g.is_lost(), "another reader's grant took this one's hold");
        g.release().await.expect("each reader releases its own hold");
    }
    let g = w.write().wait(Duration::from_secs(5)).acquire().await.expect("writer after readers");
    g.release().await.expect("release");
}

/// Under real concurrency (6 clients, readers and writers mixed), a writer is alone: no reader
/// and no other writer at the same time.
pub async fn rw_writer_excludes_everyone<F: Factory + ?Sized>(f: &F) {
    const TASKS: usize = 6;
    const ROUNDS: usize = 30;
    let name = key("rw_excl");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let shared_reads = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let l = rw(f, &name, 4).await;
        let (readers, writers, shared_reads) = (readers.clone(), writers.clone(), shared_reads.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..ROUNDS {
                if (t + i) % 3 == 0 {
                    let g = l
                        .write()
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await;
                    let g = g.expect("writer");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers at once");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a reader inside with a writer");
                    tokio::task::yield_now().await;
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a reader came in with a writer");
                    writers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                } else {
                    let g =
                        l.read().lease(Duration::from_secs(10)).wait(Duration::from_secs(60)).acquire().await;
                    let g = g.expect("reader");
                    if readers.fetch_add(1, Ordering::SeqCst) > 0 {
                        shared_reads.fetch_add(1, Ordering::SeqCst);
                    }
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a writer inside with a reader");
                    tokio::task::yield_now().await;
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a writer came in with a reader");
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }
        }));
    }
    for t in tasks {
        within(Duration::from_secs(120), "mixed readers and writers", t).await.expect("task");
    }
    eprintln!(
        "[{}] rw_writer_excludes_everyone: {} reads began while another read was in",
        f.label(),
        shared_reads.load(Ordering::SeqCst)
    );
}

/// A waiting writer is not starved by a stream of overlapping readers: once it waits, new
/// readers are turned away, and it gets the lock when the readers inside leave.
pub async fn rw_writer_not_starved<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_starve");
    let r = rw(f, &name, 4).await;
    let mut current = r.read().try_acquire().await.expect("try").expect("first reader");
    let w = rw(f, &name, 4).await;
    let writer = tokio::spawn(async move { w.write().wait(Duration::from_secs(30)).acquire().await });
    // A stream of readers, each coming in before the last leaves, so a reader is always in.
    // Without writer priority this would go on forever.
    let mut handovers = 0u32;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Some(next) = r.read().try_acquire().await.expect("try") {
        assert!(
            tokio::time::Instant::now() < give_up,
            "new readers still let in after {handovers} handovers: the waiting writer is starved"
        );
        current.release().await.expect("release");
        current = next;
        handovers += 1;
    }
    assert!(!writer.is_finished(), "the writer cannot hold while a reader does");
    current.release().await.expect("release");
    let g =
        within(Duration::from_secs(20), "writer", writer).await.expect("task").expect("writer after readers");
    eprintln!("[{}] rw_writer_not_starved: {handovers} reader handovers before the writer queued", f.label());
    g.release().await.expect("release");
}

/// Write fencing tokens strictly increase across writers (clients).
pub async fn rw_write_fences_increase<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_fence");
    let a = rw(f, &name, 2).await;
    let g1 = a.write().try_acquire().await.expect("try").expect("free");
    let Some(f1) = g1.fence() else {
        g1.release().await.expect("release");
        return skip(&f.label(), "rw_write_fences_increase", "backend declares no fencing tokens");
    };
    g1.release().await.expect("release");
    let b = rw(f, &name, 2).await;
    let r = b.read().try_acquire().await.expect("try").expect("free");
    r.release().await.expect("release");
    let g2 = b.write().try_acquire().await.expect("try").expect("free");
    let f2 = g2.fence().expect("fence");
    assert!(f2 > f1, "{f2:?} !> {f1:?}");
    g2.release().await.expect("release");
    let g3 = a.write().wait(Duration::from_secs(5)).acquire().await.expect("writer");
    assert!(g3.fence().expect("fence") > f2);
    g3.release().await.expect("release");
}

/// A reader cannot upgrade: a write request of the caller holding a read lock is refused at
/// once with a typed error naming the lock (also without a deadline, where it used to wait for
/// itself for good), while another task's write waits for the reader as usual; nothing is left
/// behind.
pub async fn rw_reader_cannot_upgrade<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_upgrade");
    let r = rw(f, &name, 2).await;
    let g = r.read().try_acquire().await.expect("try").expect("free");
    // Without a deadline too: the caller is told at once, instead of waiting for itself.
    for wait in [None, Some(Duration::from_millis(300))] {
        let mut req = r.write();
        if let Some(w) = wait {
            req = req.wait(w);
        }
        match within(Duration::from_secs(2), "an upgrade is refused at once", req.acquire()).await {
            Err(LockError::WouldDeadlock { key, .. }) => assert_eq!(key, name),
            other => panic!("an upgrade must be refused, got {other:?}"),
        }
    }
    assert!(matches!(r.write().try_acquire().await, Err(LockError::WouldDeadlock { .. })));
    // Another task of the same process is another caller: it waits for the reader as usual.
    let (r2, n) = (r.clone(), name.clone());
    let writer = tokio::spawn(async move {
        let w = r2.write().wait(Duration::from_secs(10)).acquire().await.expect("another task writes");
        // The writer may not read through its own handle either.
        assert!(matches!(r2.read().try_acquire().await, Err(LockError::WouldDeadlock { .. })), "{n}");
        w.release().await.expect("release");
    });
    g.release().await.expect("release");
    within(Duration::from_secs(10), "the other task's write", writer).await.expect("task");
    let other = rw(f, &name, 2).await;
    let w = other.write().wait(Duration::from_secs(5)).acquire().await.expect("nothing left behind");
    w.release().await.expect("release");
}

/// Bad input gets typed errors: 0 or too many reader slots, an empty or too long name.
pub async fn rw_bad_input<F: Factory + ?Sized>(f: &F) {
    let l = f.client().await.locker();
    let r = RwLock::new(&l, key("rw_bad")).expect("rwlock");
    for k in [0, MAX_PERMITS + 1] {
        assert!(matches!(r.clone().with_reader_slots(k), Err(LockError::InvalidConfig { .. })), "{k} slots");
    }
    assert!(matches!(RwLock::new(&l, ""), Err(LockError::InvalidKey { .. })));
    assert!(matches!(RwLock::new(&l, "tab\there"), Err(LockError::InvalidKey { .. })));
    let mut longest = key("rw_max");
    while longest.len() < MAX_KEY_BYTES - 8 {
        longest.push('x');
    }
    assert!(matches!(RwLock::new(&l, format!("{longest}x")), Err(LockError::InvalidKey { .. })));
    let r = RwLock::new(&l, &longest).expect("longest name").with_reader_slots(MAX_PERMITS).expect("slots");
    assert!(r.reader_slot_key(MAX_PERMITS - 1).len() <= MAX_KEY_BYTES);
    let g = r.read().try_acquire().await.expect("try").expect("free");
    g.release().await.expect("release");
    let wait = r.read().wait(Duration::MAX).acquire().await;
    assert!(matches!(wait, Err(LockError::InvalidWait { .. })), "{wait:?}");
}

/// An upgradeable read shares the lock with readers and keeps out writers and other
/// upgradeable readers; its upgrade waits for the other readers, keeps new ones out, and gets
/// in before a writer that was waiting first; its caller cannot also take the write side.
/// Where the store cannot upgrade, a typed `Unsupported` at once.
pub async fn rw_upgradeable_read_upgrades_before_writers<F: Factory + ?Sized>(f: &F) {
    let name = key("rw_upgrade");
    let wait = Duration::from_secs(10);
    let locker = f.client().await.locker();
    let caps = locker.backend().capabilities();
    let u = RwLock::new(&locker, &name).expect("rwlock").with_reader_slots(4).expect("slots");
    let mut up = match u.upgradeable_read().try_acquire().await {
        Ok(g) => g.expect("free"),
        Err(LockError::Unsupported { .. }) => {
            assert!(!caps.upgrade, "refused though the store declares upgrades");
            return;
        }
        Err(e) => panic!("upgradeable read: {e}"),
    };
    assert!(matches!(u.write().try_acquire().await, Err(LockError::WouldDeadlock { .. })), "own write");
    assert!(matches!(u.upgradeable_read().try_acquire().await, Err(LockError::WouldDeadlock { .. })));
    let other = rw(f, &name, 4).await;
    let reader = other.read().try_acquire().await.expect("try").expect("a reader shares with it");
    // Fresh handles: this task holds a read through `other`, which would refuse both at once.
    let third = rw(f, &name, 4).await;
    assert!(third.upgradeable_read().try_acquire().await.expect("try").is_none(), "one upgradeable reader");
    assert!(rw(f, &name, 4).await.write().try_acquire().await.expect("try").is_none(), "no writer");
    assert!(!up.try_upgrade().await.expect("try upgrade"), "another reader holds");
    let writer = rw(f, &name, 4).await;
    let w = tokio::spawn(async move {
        let g = writer.write().wait(wait).acquire().await;
        g.map(|g| (g.fence(), g))
    });
    // The writer waits before the upgrade does: new readers are then turned away.
    while let Some(g) = other.read().try_acquire().await.expect("try") {
        g.release().await.expect("release");
        assert!(!w.is_finished(), "the writer got in past two readers");
        tokio::task::yield_now().await;
    }
    let upgrading = tokio::spawn(async move { up.upgrade(wait).await.map(|()| up) });
    reader.release().await.expect("release");
    let mut up =
        within(wait, "upgrade", upgrading).await.expect("task").expect("upgrade after the reader left");
    assert!(up.is_upgraded());
    assert!(!w.is_finished(), "the waiting writer did not get in before the upgrade");
    assert!(other.read().try_acquire().await.expect("try").is_none(), "no reader while upgraded");
    up.upgrade(wait).await.expect("upgrading again does nothing");
    let fence = up.fence();
    assert_eq!(fence.is_some(), caps.fencing);
    up.release().await.expect("release");
    let (later, g) = within(wait, "writer after the upgrade", w).await.expect("task").expect("writer");
    if let (Some(a), Some(b)) = (fence, later) {
        assert!(b > a, "the later writer's fence {b:?} is above the upgrade's {a:?}");
    }
    g.release().await.expect("release");
}
