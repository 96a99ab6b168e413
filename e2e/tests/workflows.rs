//! Files that run elsewhere are checked here: the hosted-CI workflows pass
//! actionlint (bin/actionlint, which also runs shellcheck on their `run:`
//! steps), and the shell scripts of hack/ and e2e/kind/ pass shellcheck.

use std::path::{Path, PathBuf};
use std::process::Command;

use p4fleet_e2e::{output_text, path_bin, repo_bin, repo_root};

fn files_in(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e))
        })
        .collect();
    files.sort();
    files
}

fn actionlint(files: &[PathBuf]) -> std::process::Output {
    let bin = repo_bin("actionlint").unwrap_or_else(|e| panic!("{e}"));
    Command::new(bin)
        .arg("-no-color")
        .args(files)
        .current_dir(repo_root())
        .output()
        .expect("run actionlint")
}

#[test]
fn workflows_pass_actionlint() {
    let files = files_in(&repo_root().join(".github/workflows"), &["yml", "yaml"]);
    assert!(!files.is_empty(), "no workflow files in .github/workflows");
    let out = actionlint(&files);
    assert!(out.status.success(), "actionlint: {}", output_text(&out));
}

/// The linter is really consulted: a broken workflow fails it.
#[test]
fn actionlint_rejects_a_broken_workflow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.nope }}\n",
    )
    .expect("write workflow");
    let out = actionlint(&[bad]);
    assert!(
        !out.status.success(),
        "actionlint accepted an undefined context property"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nope"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn scripts_pass_shellcheck() {
    let mut files = files_in(&repo_root().join("hack"), &["sh"]);
    files.extend(files_in(&repo_root().join("e2e/kind"), &["sh"]));
    assert!(files.len() >= 6, "scripts: {files:?}");
    let shellcheck = path_bin("shellcheck").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(shellcheck)
        .args(&files)
        .current_dir(repo_root())
        .output()
        .expect("run shellcheck");
    assert!(out.status.success(), "shellcheck: {}", output_text(&out));
}
