//! The tokens of Rust source, as much as the import check needs: names and punctuation, with
//! comments, lifetimes and the insides of literals out of the way.

/// The tokens of `text`: identifiers, `::`, single punctuation; a string literal is one token
/// starting with `"` (its text kept for `#[path]`), other literals, comments and lifetimes go.
pub fn lex(text: &str) -> Vec<String> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut out, mut i) = (Vec::new(), 0);
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && at(j + 1) == '*' {
                    (depth, j) = (depth + 1, j + 2);
                } else if c[j] == '*' && at(j + 1) == '/' {
                    (depth, j) = (depth - 1, j + 2);
                } else {
                    j += 1;
                }
            }
            i = j;
        } else if let Some(start) = raw_string_start(&c, i) {
            // r"..", r#".."#, br#".."#: ends at the quote followed by as many hashes.
            let hashes = start - i - 1 - usize::from(ch == 'b');
            let mut j = start + 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#')) {
                j += 1;
            }
            out.push(format!("\"{}", c[start + 1..j.min(c.len())].iter().collect::<String>()));
            i = j + 1 + hashes;
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            let mut j = i + 1 + usize::from(ch == 'b');
            let start = j;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push(format!("\"{}", c[start..j.min(c.len())].iter().collect::<String>()));
            i = j + 1;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            let j = i + usize::from(ch == 'b');
            if at(j + 1) == '\\' {
                // An escaped char literal: to its closing quote.
                let mut k = j + 2;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
            } else if at(j + 2) == '\'' {
                i = j + 3; // 'x'
            } else {
                // A lifetime or a label: not a name of the code's.
                i = j + 1;
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
            }
        } else if ident(ch) {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if ch == ':' && at(i + 1) == ':' {
            out.push("::".into());
            i += 2;
        } else {
            out.push(ch.to_string());
            i += 1;
        }
    }
    out
}

/// Where the quote of a raw string starting at `i` is, if one starts there.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    let mut j = i + usize::from(c[i] == 'b');
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some(j)
}
