//! Decoding what servers send back: pub/sub channel names of any shape map to a key or to
//! nothing (never a panic), and a decoded key encodes back to the same channel.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: (&str, &str)| {
    let (prefix, channel) = data;
    if prefix.contains(['{', '}']) {
        return; // the builder refuses such prefixes
    }
    if let Some(key) = lock_redis::fuzzing::key_of_channel(prefix, channel) {
        let names = lock_redis::fuzzing::names(prefix, &key);
        assert_eq!(names[4], channel, "{channel:?} decoded to {key:?}, which encodes elsewhere");
    }
});
