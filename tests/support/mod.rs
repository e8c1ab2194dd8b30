//! Fixtures shared by several test binaries (`mod support;` in each). Not a test target:
//! cargo only builds the files directly under `tests/`.

pub mod proxied;
pub mod redis;
pub mod url;
