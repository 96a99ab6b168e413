//! The crate's own sources, for tests that hold the code to a rule the
//! compiler cannot (no API reads in controllers, no controller importing
//! another's module).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/<dir>`, sorted.
pub fn rust_files(dir: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut out = Vec::new();
    walk(&root, &mut out);
    out.sort();
    out
}

/// `(line number, code)` of `file`'s lines, comments cut off.
pub fn code_lines(file: &Path) -> Vec<(usize, String)> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("").to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    /// docs/architecture.md's walkthrough of one TableEntrySet names, per
    /// step, a file and the functions it runs there ("(`FILE` at `a`,
    /// `b`)"): each must be defined in that file, so the walkthrough
    /// cannot name code that no longer exists, and it names at most a
    /// dozen files.
    #[test]
    fn the_walkthrough_names_what_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        let start = doc.find("## One TableEntrySet").expect("the walkthrough");
        let end = doc[start + 1..]
            .find("\n## ")
            .map_or(doc.len(), |e| start + 1 + e);
        let walk = doc[start..end].replace('\n', " ");
        let mut files = std::collections::BTreeSet::new();
        let mut missing = Vec::new();
        let mut rest = walk.as_str();
        while let Some(open) = rest.find("(`") {
            rest = &rest[open + 2..];
            let Some(close) = rest.find('`') else { break };
            let file = &rest[..close];
            let after = &rest[close + 1..];
            let Some(names) = after.strip_prefix(" at ") else {
                continue;
            };
            let names = &names[..names.find(')').unwrap_or(names.len())];
            let text =
                std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            files.insert(file.to_string());
            for name in names.split(',').map(|n| n.trim().trim_matches('`')) {
                let defined = [
                    format!("fn {name}("),
                    format!("fn {name}<"),
                    format!("struct {name}<"),
                    format!("struct {name} "),
                    format!("enum {name} "),
                ]
                .iter()
                .any(|d| text.contains(d.as_str()));
                if !defined {
                    missing.push(format!("{file}: {name}"));
                }
            }
        }
        assert!(files.len() >= 10, "read {files:?}");
        assert!(files.len() <= 12, "{} files: {files:?}", files.len());
        assert!(missing.is_empty(), "named but not defined: {missing:?}");
    }
}
