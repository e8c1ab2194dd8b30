//! Which module file imports which, read from the text: a small lexer, the module tree from
//! `mod` declarations, the names each module defines and binds with `use`, and the paths its
//! code names, each resolved to the file it lands in.
//!
//! The rule: file A imports file B when A's code names an item defined in B. A name is
//! followed through A's own `use` bindings (and private imports it reaches through `super::`)
//! to the file that defines it, but stops at a public re-export (`pub use`, `pub(crate) use`,
//! a public glob): an item named through a facade is imported from the facade's file, whose
//! `pub use` line is not itself an import. A module naming an item of its own descendants is
//! assembling its parts, as its `mod` lines do: not an import; a child naming its parent's
//! items is. Not seen: comments, doc links, string literals, `macro_rules!` bodies (they name
//! things where they expand), and method calls (`x.f()` on a type from elsewhere), so an edge
//! made only of those is missed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::lex::lex;

/// A module's names: the items it defines, its child modules, its `use` bindings and globs,
/// and which of those bindings are public (re-exports).
#[derive(Default, Debug)]
struct Module {
    file: String,
    items: BTreeSet<String>,
    children: BTreeMap<String, Vec<String>>,
    uses: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    reexports: BTreeSet<String>,
    public_globs: BTreeSet<usize>,
}

/// What a path names: a module, or an item defined in a module.
#[derive(Debug, Clone)]
enum Target {
    Module(Vec<String>),
    Item(Vec<String>),
}

/// A crate's module tree and the paths its code names (file, module, path).
#[derive(Default, Debug)]
pub struct Crate {
    modules: BTreeMap<Vec<String>, Module>,
    named: Vec<(String, Vec<String>, Vec<String>)>,
}

const ITEMS: [&str; 8] = ["fn", "struct", "enum", "trait", "type", "const", "static", "union"];

impl Crate {
    /// The crate whose root file is `root` (relative to the crate's directory); `read` gives a
    /// file's text, or `None` when it does not exist.
    pub fn load(root: &str, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
        let mut krate = Crate::default();
        let dir = Path::new(root).parent().unwrap_or(Path::new("")).to_owned();
        krate.parse(Path::new(root), Vec::new(), dir, read);
        krate
    }

    fn parse(
        &mut self,
        file: &Path,
        module: Vec<String>,
        dir: PathBuf,
        read: &dyn Fn(&Path) -> Option<String>,
    ) {
        let Some(text) = read(file) else { return };
        let name = file.to_string_lossy().into_owned();
        let t = lex(&text);
        let tok = |i: usize| t.get(i).map_or("", String::as_str);
        // Open modules: (path, brace depth of its items, directory of its child files).
        let mut scopes = vec![(module.clone(), 0usize, dir)];
        self.modules.entry(module).or_default().file = name.clone();
        let (mut depth, mut i) = (0usize, 0usize);
        while i < t.len() {
            let (m, top, dir) = scopes.last().cloned().expect("the file's own module");
            match tok(i) {
                "{" => depth += 1,
                "}" => {
                    depth = depth.saturating_sub(1);
                    if scopes.len() > 1 && depth < top {
                        scopes.pop();
                    }
                }
                "mod" if tok(i + 2) == ";" || tok(i + 2) == "{" => {
                    let child = tok(i + 1).to_owned();
                    let path: Vec<String> = m.iter().cloned().chain([child.clone()]).collect();
                    self.modules.entry(m.clone()).or_default().children.insert(child.clone(), path.clone());
                    if tok(i + 2) == "{" {
                        self.modules.entry(path.clone()).or_default().file = name.clone();
                        scopes.push((path, depth + 1, dir.join(&child)));
                    } else {
                        // `#[path = "x.rs"] mod child;` is relative to the declaring file.
                        let attr = (i >= 4 && tok(i - 4) == "path").then(|| tok(i - 2));
                        let attr = attr.or_else(|| (i >= 5 && tok(i - 5) == "path").then(|| tok(i - 3)));
                        let files = match attr.and_then(|a| a.strip_prefix('"')) {
                            Some(p) => vec![file.parent().unwrap_or(Path::new("")).join(p)],
                            None => vec![dir.join(format!("{child}.rs")), dir.join(&child).join("mod.rs")],
                        };
                        if let Some(f) = files.into_iter().find(|f| read(f).is_some()) {
                            let sub = if f.ends_with("mod.rs") {
                                f.parent().expect("dir").to_owned()
                            } else {
                                dir.join(&child)
                            };
                            self.parse(&f, path, sub, read);
                        }
                    }
                    i += 2;
                    continue;
                }
                "use" => {
                    let end = (i..t.len()).find(|&j| t[j] == ";").unwrap_or(t.len());
                    let module = self.modules.entry(m.clone()).or_default();
                    // `pub use` or `pub(crate) use`: a re-export.
                    let public = i > 0 && (tok(i - 1) == "pub" || tok(i - 1) == ")");
                    let (mut uses, globs) = (BTreeMap::new(), module.globs.len());
                    use_tree(&t[i + 1..end], &mut Vec::new(), &mut uses, &mut module.globs);
                    if public {
                        module.reexports.extend(uses.keys().cloned());
                        module.public_globs.extend(globs..module.globs.len());
                    }
                    module.uses.extend(uses);
                    i = end + 1;
                    continue;
                }
                "macro_rules" => {
                    // A macro's body names things where it is expanded, not here: skipped.
                    let open = (i..t.len()).find(|&j| ["{", "(", "["].contains(&tok(j))).unwrap_or(t.len());
                    let mut level = 0;
                    for (j, w) in t.iter().enumerate().skip(open) {
                        level += i32::from(["{", "(", "["].contains(&w.as_str()));
                        level -= i32::from(["}", ")", "]"].contains(&w.as_str()));
                        if level == 0 {
                            i = j;
                            break;
                        }
                    }
                }
                k if ITEMS.contains(&k) && !ITEMS.contains(&tok(i + 1)) => {
                    if depth == top {
                        self.modules.entry(m.clone()).or_default().items.insert(tok(i + 1).to_owned());
                    }
                    i += 1; // the defined name is not a use of it
                }
                "." => i += 1, // a field or a method: not a path
                w if w.starts_with(|ch: char| ch.is_alphabetic() || ch == '_') => {
                    let mut path = vec![w.to_owned()];
                    while tok(i + 2 * path.len() - 1) == "::"
                        && tok(i + 2 * path.len()).starts_with(char::is_alphabetic)
                    {
                        path.push(tok(i + 2 * path.len()).to_owned());
                    }
                    let next = i + 2 * path.len() - 1;
                    if tok(next) != "!" && !(i > 0 && tok(i - 1) == "::") {
                        self.named.push((name.clone(), m.clone(), path));
                    }
                    i = next;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// What `name` is in module `m`: seen from `m`'s own code (`own`) a binding is followed to
    /// the item; seen from elsewhere, a re-exported name is the re-exporting module's.
    fn lookup(&self, m: &[String], name: &str, fuel: u32, own: bool) -> Option<Target> {
        let module = self.modules.get(m)?;
        if fuel == 0 {
            return None;
        }
        if module.items.contains(name) {
            return Some(Target::Item(m.to_vec()));
        }
        if let Some(child) = module.children.get(name) {
            return Some(Target::Module(child.clone()));
        }
        if let Some(path) = module.uses.get(name) {
            if !own && module.reexports.contains(name) {
                return Some(Target::Item(m.to_vec()));
            }
            return self.resolve(m, path, fuel - 1);
        }
        module.globs.iter().enumerate().find_map(|(n, g)| match self.resolve(m, g, fuel - 1)? {
            Target::Module(gm) => match self.lookup(&gm, name, fuel - 1, false)? {
                _ if !own && module.public_globs.contains(&n) => Some(Target::Item(m.to_vec())),
                found => Some(found),
            },
            Target::Item(_) => None,
        })
    }

    /// What `path`, named in module `m`, names; `None` for another crate's or an unknown name.
    fn resolve(&self, m: &[String], path: &[String], fuel: u32) -> Option<Target> {
        let mut cur = match path.first()?.as_str() {
            "crate" => Target::Module(Vec::new()),
            "self" | "super" => Target::Module(m.to_vec()),
            first => self.lookup(m, first, fuel, true)?,
        };
        let skip = usize::from(path[0] != "super");
        for seg in &path[skip..] {
            cur = match (cur, seg.as_str()) {
                (Target::Item(item), _) => return Some(Target::Item(item)),
                (Target::Module(p), "super") => Target::Module(p[..p.len().checked_sub(1)?].to_vec()),
                (Target::Module(p), "self") => Target::Module(p),
                (Target::Module(p), s) => self.lookup(&p, s, fuel, false)?,
            };
        }
        Some(cur)
    }

    /// File -> (file it imports -> the first path that imports it). A module naming an item of
    /// its own descendants is assembling its parts, as its `mod` lines do: not an import.
    pub fn imports(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (file, m, path) in &self.named {
            if let Some(Target::Item(def)) = self.resolve(m, path, 16) {
                let to = &self.modules[&def].file;
                if to != file && !def.starts_with(m) {
                    out.entry(file.clone()).or_default().entry(to.clone()).or_insert_with(|| path.join("::"));
                }
            }
        }
        out
    }
}

/// The bindings of a `use` tree (`a::{self, b, c::d as e, f::*}`) under `prefix`.
fn use_tree(
    t: &[String],
    prefix: &mut Vec<String>,
    uses: &mut BTreeMap<String, Vec<String>>,
    globs: &mut Vec<Vec<String>>,
) {
    let depth = prefix.len();
    for (i, w) in t.iter().enumerate() {
        match w.as_str() {
            "{" => {
                // The group's members, split at its top-level commas.
                let (mut level, mut start) = (0, i + 1);
                for j in i..t.len() {
                    match t[j].as_str() {
                        "{" => level += 1,
                        "}" | "," if level == 1 => {
                            use_tree(&t[start..j], prefix, uses, globs);
                            start = j + 1;
                        }
                        "}" => level -= 1,
                        _ => {}
                    }
                }
                prefix.truncate(depth);
                return;
            }
            "*" => globs.push(prefix.clone()),
            "as" => {
                if let Some(alias) = t.get(i + 1).filter(|a| *a != "_") {
                    uses.insert(alias.clone(), prefix.clone());
                }
                prefix.truncate(depth);
                return;
            }
            // `self` in a group binds the group's own path.
            "::" | "self" => {}
            w => prefix.push(w.to_owned()),
        }
    }
    if let Some(last) =
        prefix.last().filter(|_| prefix.len() > depth || t.first().is_some_and(|w| w == "self"))
    {
        uses.insert(last.clone(), prefix.clone());
    }
    prefix.truncate(depth);
}

/// Every elementary cycle of `graph`, each as its files from the smallest and back to it.
pub fn cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    // A walk from `start` only visits files that can come back to it (and sort after it, so
    // each cycle is found once, from its smallest file).
    fn walk(
        graph: &Graph,
        back: &BTreeSet<&str>,
        start: &str,
        path: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        let last = path.last().expect("the start").clone();
        for next in graph.get(&last).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                out.push(path.iter().cloned().chain([start.to_owned()]).collect());
            } else if back.contains(next.as_str()) && !path.contains(next) {
                path.push(next.clone());
                walk(graph, back, start, path, out);
                path.pop();
            }
        }
    }
    type Graph = BTreeMap<String, BTreeMap<String, String>>;
    let mut out = Vec::new();
    for start in graph.keys() {
        let mut back = BTreeSet::new();
        let mut todo = vec![start.as_str()];
        while let Some(to) = todo.pop() {
            for (from, edges) in graph {
                if from > start && edges.contains_key(to) && back.insert(from.as_str()) {
                    todo.push(from);
                }
            }
        }
        walk(graph, &back, start, &mut vec![start.clone()], &mut out);
    }
    out
}
