//! One vocabulary across the store crates: the same file name for the same concept in every
//! store, and no type named after the toolkit type it wraps.

use std::path::Path;

/// File names every store crate has: its entry, its `LockBackend`, and how keys become the
/// store's names.
pub const REQUIRED: &[&str] = &["lib", "backend", "keys"];

/// Names of a concept that has a name already, and that name: a store calls its key mapping
/// `keys`, its notifications `notify` and its records `records`.
pub const SYNONYMS: &[(&str, &str)] = &[
    ("key", "keys"),
    ("name", "keys"),
    ("names", "keys"),
    ("layout", "keys"),
    ("hub", "notify"),
    ("wakeups", "notify"),
    ("waiters", "notify"),
    ("record", "records"),
];

/// The stem of a module file: `a/b.rs` is `b`, `a/b/mod.rs` is `b`.
pub fn stem(file: &Path) -> Option<String> {
    let name = file.file_stem()?.to_str()?;
    if name == "mod" {
        return Some(file.parent()?.file_name()?.to_str()?.to_owned());
    }
    Some(name.to_owned())
}

/// The types in `text` declared with the name of the type they hold from another module, such
/// as `struct Warm(Arc<session::Warm<Pinned>>)`: a reader meets two things of one name.
pub fn namesakes(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("struct ") {
        let after = &rest[at + "struct ".len()..];
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // The declaration up to its end: a tuple struct's `;` or a braced one's closing line.
        let end = after.find("\n}").or_else(|| after.find(';')).unwrap_or(after.len());
        let body = &after[name.len()..end];
        if !name.is_empty() && (body.contains(&format!("::{name}<")) || body.contains(&format!("::{name}>")))
        {
            out.push(name);
        }
        rest = &after[end.min(after.len())..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapper_of_a_namesake_is_found() {
        let text = "pub(crate) struct Warm(Arc<session::Warm<Pinned>>);\nstruct Kept {\n    inner: session::Warm<P>,\n}\n";
        assert_eq!(namesakes(text), ["Warm"]);
        assert_eq!(stem(Path::new("src/session/mod.rs")).as_deref(), Some("session"));
    }
}
