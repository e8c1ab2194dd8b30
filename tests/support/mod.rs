//! Fixtures shared by several test binaries (`mod support;` in each). Not a test target:
//! cargo only builds the files directly under `tests/`.

pub mod proxied;
pub mod redis;
// The history checkers' binaries loop over the stores with it; `tests/stores` does not.
#[allow(dead_code, unused_macros, unused_imports)]
pub mod sides;
pub mod url;
