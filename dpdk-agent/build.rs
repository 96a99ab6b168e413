//! Builds the C shim (shim/p4fa.c) against Debian's DPDK 22.11 and links
//! the DPDK libraries it uses. No bindgen: the shim's ABI is small and
//! declared by hand in src/ffi.rs.
//!
//! Fails with a message naming `hack/install-deps.sh` when DPDK, its
//! version or the two internal pipeline headers (from Debian's source
//! package, needed at run time to compile generated pipelines) are
//! missing: there is no stub build.

use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL: &str = "run `hack/install-deps.sh` (as root) on Debian 12: it installs dpdk, \
    libdpdk-dev, pkg-config and gcc, and puts DPDK's internal pipeline headers from Debian's \
    source package into .local/dpdk-src/<version>/ (docs/dpdk.md, \"The DPDK host agent\")";

fn fail(what: &str) -> ! {
    panic!("\n\np4fleet-dpdk-agent: {what}\n  -> {INSTALL}\n\n");
}

fn pkg_config(args: &[&str]) -> String {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run pkg-config ({e})")));
    if !out.status.success() {
        fail(&format!(
            "pkg-config {} libdpdk failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn main() {
    println!("cargo:rerun-if-changed=shim/p4fa.c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=P4FLEET_DPDK_PIPELINE_INCLUDE");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    // Presence and version through the pkg-config crate (its error names
    // the missing .pc file); its link output is not used: it lists every
    // DPDK library, and the shim needs a few.
    let lib = pkg_config::Config::new()
        .cargo_metadata(false)
        .probe("libdpdk")
        .unwrap_or_else(|e| fail(&format!("DPDK (pkg-config libdpdk) not found: {e}")));
    if !lib.version.starts_with("22.11") {
        fail(&format!(
            "libdpdk {} found; the agent is written against DPDK 22.11 (Debian 12's), whose SWX \
             pipeline API and generated code it uses",
            lib.version
        ));
    }

    // The generated C of a pipeline includes rte_swx_pipeline_internal.h and
    // rte_swx_pipeline_spec.h, which must be of this very version.
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let include = std::env::var("P4FLEET_DPDK_PIPELINE_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join(".local/dpdk-src").join(&lib.version));
    for h in ["rte_swx_pipeline_internal.h", "rte_swx_pipeline_spec.h"] {
        if !Path::new(&include).join(h).is_file() {
            fail(&format!(
                "{} has no {h} (DPDK {}'s internal pipeline header, from Debian's source package; \
                 or set P4FLEET_DPDK_PIPELINE_INCLUDE to a directory holding both)",
                include.display(),
                lib.version
            ));
        }
    }
    println!("cargo:rerun-if-changed={}", include.display());

    // libdpdk's cflags as pkg-config prints them: the pkg-config crate
    // drops `-include rte_config.h -march=corei7`, which DPDK's headers
    // need. The same flags compile generated pipelines at run time.
    let cflags = pkg_config(&["--cflags"]);
    println!("cargo:rustc-env=P4FLEET_DPDK_CFLAGS={cflags}");
    println!("cargo:rustc-env=P4FLEET_DPDK_VERSION={}", lib.version);
    println!(
        "cargo:rustc-env=P4FLEET_DPDK_PIPELINE_INCLUDE={}",
        include.display()
    );

    let mut cc = cc::Build::new();
    cc.file("shim/p4fa.c")
        .define("ALLOW_EXPERIMENTAL_API", None)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(false);
    let mut words = cflags.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-include" {
            if let Some(h) = words.next() {
                cc.flag("-include").flag(h);
            }
        } else {
            cc.flag(w);
        }
    }
    cc.compile("p4fa_shim");

    for dir in pkg_config(&["--libs-only-L"]).split_whitespace() {
        if let Some(d) = dir.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={d}");
        }
    }
    for l in [
        "rte_pipeline",
        "rte_table",
        "rte_port",
        "rte_ethdev",
        "rte_cryptodev",
        "rte_mbuf",
        "rte_mempool",
        "rte_ring",
        "rte_eal",
    ] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    // The shim's rte_swx_pipeline_config must be visible to
    // librte_pipeline.so (symbol interposition; shim/p4fa.c explains why).
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=rte_swx_pipeline_config");
}
