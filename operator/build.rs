//! Build metadata for `p4fleet version`: the commit (git, else
//! $P4FLEET_COMMIT, e.g. a container build argument, else "unknown") and
//! the build date (UTC; $SOURCE_DATE_EPOCH for reproducible builds).

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=P4FLEET_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A new commit (HEAD moves, or the branch it names does) reruns this.
    // Only paths that exist are named: cargo counts a missing one as
    // changed on every build (a checkout without packed-refs, a branch
    // whose ref is packed), which rebuilt the operator and everything
    // that depends on it each time a test binary ran `cargo build`. A
    // branch ref not there as a file is watched through its folder.
    let mut watch = Vec::new();
    for path in ["HEAD", "packed-refs"] {
        watch.extend(git(&["rev-parse", "--git-path", path]));
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &r])
    {
        let file = std::path::Path::new(&p);
        let folder = file.parent().map(|f| f.display().to_string());
        if !file.exists() {
            watch.extend(folder);
        }
        watch.push(p);
    }
    for p in watch.iter().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .or_else(|| {
            std::env::var("P4FLEET_COMMIT")
                .ok()
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".into());
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    println!("cargo:rustc-env=P4FLEET_COMMIT={commit}");
    println!("cargo:rustc-env=P4FLEET_BUILD_DATE={}", utc_date(secs));
}

/// `YYYY-MM-DDTHH:MM:SSZ` from Unix seconds (days to civil date after
/// Howard Hinnant's algorithm), so the build script needs no dependency.
fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}
