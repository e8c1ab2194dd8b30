//! Key handling: validation never panics; valid keys map to Redis names and ZooKeeper node
//! names without aliasing, and a key comes back from its notification channel unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: (&str, &str)| {
    let (a, b) = data;
    let (va, vb) = (lock_core::validate_key(a).is_ok(), lock_core::validate_key(b).is_ok());
    if !(va && vb) {
        return;
    }
    let (za, zb) = (lock_zk::encode_key(a), lock_zk::encode_key(b));
    assert!(!za.is_empty() && !za.contains('/') && za != "." && za != "..", "{a:?} -> {za:?}");
    assert_eq!(a == b, za == zb, "zk names alias: {a:?} {b:?}");
    for prefix in ["dlock:", "", "app/x:"] {
        let (ra, rb) = (lock_redis::fuzzing::names(prefix, a), lock_redis::fuzzing::names(prefix, b));
        if a != b {
            for (x, y) in ra.iter().zip(&rb) {
                assert_ne!(x, y, "redis names alias: {a:?} {b:?}");
            }
        }
        assert_eq!(
            lock_redis::fuzzing::key_of_channel(prefix, &ra[4]).as_deref(),
            Some(a),
            "channel round trip"
        );
    }
});
