//! Who holds: the identity `dlock run` and `dlock leader` note on their holds, which
//! `dlock status` shows.

/// The longest program name noted (a note holds at most 1 KiB, and a status line stays short).
const PROGRAM_MAX: usize = 64;

/// `host:pid` of this dlock process, then the command's program and the caller's label:
/// `build-7:4242 cmd=backup label=nightly`.
pub fn identity(program: Option<&str>, label: Option<&str>) -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    let mut id = format!("{host}:{}", std::process::id());
    if let Some(p) = program {
        let name = p.rsplit('/').next().unwrap_or(p);
        let mut end = name.len().min(PROGRAM_MAX);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        id.push_str(" cmd=");
        id.push_str(&name[..end]);
    }
    if let Some(l) = label {
        id.push_str(" label=");
        id.push_str(l);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::identity;

    #[test]
    fn host_pid_program_and_label() {
        let pid = format!(":{} ", std::process::id());
        let id = identity(Some("/usr/local/bin/backup"), Some("nightly run"));
        assert!(id.contains(&pid) && id.ends_with(" cmd=backup label=nightly run"), "{id}");
        assert!(identity(None, None).ends_with(pid.trim_end()), "dlock leader's default: host:pid");
        let long = "é".repeat(100);
        let id = identity(Some(&long), None);
        assert_eq!(id.split("cmd=").nth(1).map(str::len), Some(64), "cut on a character boundary");
    }
}
