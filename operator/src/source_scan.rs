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
