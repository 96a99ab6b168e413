//! An AsyncExternPolicy as T4P4S launch options, pure.
//!
//! T4P4S (P4ELTE/t4p4s) takes its async-extern settings as `t4p4s.sh`
//! options that `opts_dpdk.cfg` turns into compile flags and EAL options:
//! `async=off|context|pd|skip` (`ASYNC_MODE`, one mode for every crypto
//! extern), `crypto_node=openssl` (`START_CRYPTO_NODE`: the last lcore
//! runs the crypto operations), `crypto_burst_size`,
//! `crypto_context_pool_size` (N: a pool of N*1024-1 contexts or packet
//! descriptors), `cores` (the EAL core mask) and `x_crypto` (links the
//! crypto externs). What a policy says that T4P4S cannot express is an
//! [`Unmappable`] naming the field, never an approximate rendering; sizes
//! are rounded up to T4P4S's units (1024), with a note that says so.
//!
//! The rendering is what a T4P4S deployment mounts ([`Launch::data`]): an
//! `examples.cfg` (for `EXAMPLES_CONFIG_FILE`, then `./t4p4s.sh :PROGRAM`)
//! and `T4P4S_ARGS` (the same options as one command line).

use std::collections::BTreeMap;

use p4fleet_crds::{AsyncExternPolicySpec, ExternExecutor, ExternMode, SuspendMethod};

/// ConfigMap key: an examples.cfg with the program's line.
pub const EXAMPLES_CFG: &str = "examples.cfg";
/// ConfigMap key: the whole `t4p4s.sh` command line.
pub const ARGS: &str = "T4P4S_ARGS";

/// T4P4S makes its pools N*1024-1 entries and its rings N*1024.
const POOL_UNIT: u32 = 1024;
/// `opts_dpdk.cfg` maps `cores=1` .. `cores=16` to a core mask.
const MAX_CORES: u64 = 16;
/// Longest object name Kubernetes takes.
const MAX_NAME: usize = 253;

/// What the rendering needs besides the policy's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The P4Program the VirtualSwitch runs: T4P4S's example name.
    pub program: String,
    /// The Switch's `spec.capacity.cores`: the lcores the switch runs on
    /// (the crypto node included); absent means one worker.
    pub cores: Option<u64>,
}

/// The ConfigMap that holds a policy's rendering.
pub fn config_map_name(policy: &str) -> String {
    format!("{policy}-t4p4s")
}

/// One `t4p4s.sh` option: `name=value`, or `name` alone (value `on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opt {
    pub name: &'static str,
    pub value: Option<String>,
}

impl Opt {
    fn flag(name: &'static str) -> Opt {
        Opt { name, value: None }
    }

    fn set(name: &'static str, value: impl ToString) -> Opt {
        Opt {
            name,
            value: Some(value.to_string()),
        }
    }
}

impl std::fmt::Display for Opt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v}", self.name),
            None => f.write_str(self.name),
        }
    }
}

/// The launch options of one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The ConfigMap it goes into ([`config_map_name`]).
    pub config_map: String,
    /// T4P4S's example (the P4 program's name).
    pub example: String,
    pub options: Vec<Opt>,
    /// Where T4P4S's value differs from the spec's: a size rounded up to
    /// T4P4S's unit, or a field T4P4S fixes in its source.
    pub notes: Vec<String>,
}

impl Launch {
    /// The options after the example, space-separated.
    pub fn option_line(&self) -> String {
        let opts: Vec<String> = self.options.iter().map(ToString::to_string).collect();
        opts.join(" ")
    }

    /// The ConfigMap's data.
    pub fn data(&self, policy: &str) -> BTreeMap<String, String> {
        let mut cfg = format!(
            "; T4P4S options for AsyncExternPolicy {policy}, rendered by p4fleet.\n\
             ; EXAMPLES_CONFIG_FILE=<this file> ./t4p4s.sh :{}\n",
            self.example
        );
        for n in &self.notes {
            cfg.push_str(&format!("; note: {n}\n"));
        }
        cfg.push_str(&format!("{} {}\n", self.example, self.option_line()));
        BTreeMap::from([
            (EXAMPLES_CFG.to_string(), cfg),
            (
                ARGS.to_string(),
                format!(":{} {}", self.example, self.option_line()),
            ),
        ])
    }
}

/// A policy's launch options, or every reason it has none.
pub type Rendering = Result<Launch, Vec<Unmappable>>;

/// A policy setting T4P4S has no option for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmappable {
    #[error(
        "spec.externs: T4P4S runs every crypto extern in one mode (async=); this policy has {modes}"
    )]
    MixedModes { modes: String },
    #[error(
        "spec.externs[*].{field}: T4P4S has one {option} for every extern; this policy has {values}"
    )]
    DifferentSettings {
        field: &'static str,
        option: &'static str,
        values: String,
    },
    #[error(
        "spec.externs[{index}].executor ({name}): Accelerator: T4P4S creates a software crypto device (crypto_openssl0); no option selects a hardware one"
    )]
    Accelerator { index: usize, name: String },
    #[error(
        "spec.externs[{index}].cores ({name}): {cores}: T4P4S runs one crypto node (crypto_node=openssl)"
    )]
    CryptoNodeCores {
        index: usize,
        name: String,
        cores: u32,
    },
    #[error(
        "Switch spec.capacity.cores: {cores}: T4P4S's cores= option takes 1 to {MAX_CORES}{extra}"
    )]
    Cores { cores: u64, extra: &'static str },
    #[error("metadata.name: the ConfigMap name {name} is longer than {MAX_NAME} characters")]
    NameTooLong { name: String },
}

/// Renders `spec` of policy `policy` for `host`, or says every setting
/// that has no T4P4S equivalent.
pub fn render(policy: &str, spec: &AsyncExternPolicySpec, host: &Host) -> Rendering {
    let mut problems = Vec::new();
    let name = config_map_name(policy);
    if name.len() > MAX_NAME {
        problems.push(Unmappable::NameTooLong { name: name.clone() });
    }
    let mut options = vec![Opt::flag("x_crypto")];
    let mut notes = Vec::new();
    let first = spec.externs.first().map_or(ExternMode::Sync, |e| e.mode);
    let mut crypto_node = false;
    if spec.externs.iter().any(|e| e.mode != first) {
        let modes: Vec<String> = spec
            .externs
            .iter()
            .map(|e| format!("{}={:?}", e.name, e.mode))
            .collect();
        problems.push(Unmappable::MixedModes {
            modes: modes.join(", "),
        });
    } else {
        match first {
            ExternMode::Sync => options.push(Opt::set("async", "off")),
            ExternMode::Skip => options.push(Opt::set("async", "skip")),
            ExternMode::Async => {
                crypto_node = render_async(spec, &mut options, &mut notes, &mut problems);
            }
        }
    }
    let cores = host.cores.unwrap_or(1 + u64::from(crypto_node));
    if !(1..=MAX_CORES).contains(&cores) {
        problems.push(Unmappable::Cores { cores, extra: "" });
    } else if crypto_node && cores < 2 {
        problems.push(Unmappable::Cores {
            cores,
            extra: ", and a crypto node needs a second core besides the worker",
        });
    }
    options.push(Opt::set("cores", cores));
    if problems.is_empty() {
        Ok(Launch {
            config_map: name,
            example: host.program.clone(),
            options,
            notes,
        })
    } else {
        Err(problems)
    }
}

/// The options of an all-Async policy; true when it runs a crypto node.
fn render_async(
    spec: &AsyncExternPolicySpec,
    options: &mut Vec<Opt>,
    notes: &mut Vec<String>,
    problems: &mut Vec<Unmappable>,
) -> bool {
    let e = &spec.externs;
    // The emulator's (and ExternRuntime's) default suspend method.
    let suspend = |s: Option<SuspendMethod>| s.unwrap_or(SuspendMethod::PacketDescriptor);
    let same = |field, option, values: Vec<String>| {
        (values.iter().any(|v| *v != values[0])).then(|| Unmappable::DifferentSettings {
            field,
            option,
            values: e
                .iter()
                .zip(&values)
                .map(|(x, v)| format!("{}={v}", x.name))
                .collect::<Vec<_>>()
                .join(", "),
        })
    };
    let differ = [
        same(
            "suspend",
            "async=",
            e.iter()
                .map(|x| format!("{:?}", suspend(x.suspend)))
                .collect(),
        ),
        same(
            "executor",
            "crypto_node=",
            e.iter()
                .map(|x| x.executor.map_or("none".into(), |v| format!("{v:?}")))
                .collect(),
        ),
        same(
            "burstSize",
            "crypto_burst_size=",
            e.iter().map(|x| x.burst_size.to_string()).collect(),
        ),
        same(
            "contextPool",
            "crypto_context_pool_size=",
            e.iter().map(|x| x.context_pool.to_string()).collect(),
        ),
        same(
            "queueDepth",
            "FAKE_CRYPTO_COMMAND_RING_SIZE",
            e.iter().map(|x| x.queue_depth.to_string()).collect(),
        ),
    ];
    problems.extend(differ.into_iter().flatten());
    for (index, x) in e.iter().enumerate() {
        match x.executor {
            Some(ExternExecutor::Accelerator) => problems.push(Unmappable::Accelerator {
                index,
                name: x.name.clone(),
            }),
            Some(ExternExecutor::DedicatedCores) if x.cores.unwrap_or(1) > 1 => {
                problems.push(Unmappable::CryptoNodeCores {
                    index,
                    name: x.name.clone(),
                    cores: x.cores.unwrap_or(1),
                })
            }
            _ => {}
        }
    }
    let Some(x) = e.first() else {
        return false;
    };
    let mode = match suspend(x.suspend) {
        SuspendMethod::Context => "context",
        SuspendMethod::PacketDescriptor => "pd",
    };
    options.push(Opt::set("async", mode));
    options.push(Opt::set("crypto_burst_size", x.burst_size));
    let pool_units = (x.context_pool + 1).div_ceil(POOL_UNIT);
    if (x.context_pool + 1) % POOL_UNIT != 0 {
        notes.push(format!(
            "contextPool {} rounded up to T4P4S's {} (crypto_context_pool_size={pool_units}: N*1024-1)",
            x.context_pool,
            pool_units * POOL_UNIT - 1
        ));
    }
    options.push(Opt::set("crypto_context_pool_size", pool_units));
    let crypto_node = x.executor == Some(ExternExecutor::DedicatedCores);
    if crypto_node {
        options.push(Opt::set("crypto_node", "openssl"));
        // opts_dpdk.cfg's fake_crypto_command_ring_size line substitutes
        // ${crypto_ring_size}, which t4p4s.sh never expands (it only
        // expands the option's own name): the macro option sets it.
        let ring_units = x.queue_depth.div_ceil(POOL_UNIT);
        if x.queue_depth % POOL_UNIT != 0 {
            notes.push(format!(
                "queueDepth {} rounded up to T4P4S's {} (FAKE_CRYPTO_COMMAND_RING_SIZE={ring_units}: N*1024)",
                x.queue_depth,
                ring_units * POOL_UNIT
            ));
        }
        options.push(Opt::set(
            "macro",
            format!("FAKE_CRYPTO_COMMAND_RING_SIZE={ring_units}"),
        ));
    } else {
        notes.push(format!(
            "queueDepth {}: no T4P4S option; the inline crypto device's queue pair has 2048 descriptors (fixed in T4P4S's source)",
            x.queue_depth
        ));
    }
    crypto_node
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn spec(externs: serde_json::Value) -> AsyncExternPolicySpec {
        serde_json::from_value(serde_json::json!({"virtualSwitchRef": "l2", "externs": externs}))
            .unwrap()
    }

    fn host(cores: Option<u64>) -> Host {
        Host {
            program: "l2crypt".into(),
            cores,
        }
    }

    fn line(l: &Launch) -> String {
        l.option_line()
    }

    #[test]
    fn modes_map_onto_async() {
        let sync = spec(serde_json::json!([
            {"name": "async_encrypt", "mode": "Sync"}, {"name": "async_decrypt", "mode": "Sync"}
        ]));
        let l = render("p", &sync, &host(None)).unwrap();
        assert_eq!(line(&l), "x_crypto async=off cores=1");
        let skip = spec(serde_json::json!([{"name": "async_encrypt", "mode": "Skip"}]));
        assert_eq!(
            line(&render("p", &skip, &host(Some(4))).unwrap()),
            "x_crypto async=skip cores=4"
        );
        let ctx = spec(
            serde_json::json!([{"name": "async_encrypt", "mode": "Async",
            "executor": "InlineCryptoDevice", "suspend": "Context", "burstSize": 32}]),
        );
        let l = render("p", &ctx, &host(None)).unwrap();
        assert_eq!(
            line(&l),
            "x_crypto async=context crypto_burst_size=32 crypto_context_pool_size=1 cores=1"
        );
        assert!(l.notes[0].contains("queueDepth 1024: no T4P4S option"));
    }

    #[test]
    fn dedicated_cores_are_the_crypto_node_on_its_own_core() {
        let s = spec(
            serde_json::json!([{"name": "async_encrypt", "mode": "Async",
            "executor": "DedicatedCores", "cores": 1, "contextPool": 4095, "queueDepth": 2048}]),
        );
        let l = render("p", &s, &host(None)).unwrap();
        assert_eq!(
            line(&l),
            "x_crypto async=pd crypto_burst_size=64 crypto_context_pool_size=4 \
             crypto_node=openssl macro=FAKE_CRYPTO_COMMAND_RING_SIZE=2 cores=2"
        );
        assert!(l.notes.is_empty(), "{:?}", l.notes);
        // A one-core switch has no core left for the crypto node.
        let e = render("p", &s, &host(Some(1))).unwrap_err();
        assert!(
            matches!(e[..], [Unmappable::Cores { cores: 1, .. }]),
            "{e:?}"
        );
        let two = spec(
            serde_json::json!([{"name": "async_encrypt", "mode": "Async",
            "executor": "DedicatedCores", "cores": 2}]),
        );
        let e = render("p", &two, &host(Some(8))).unwrap_err();
        assert!(
            e[0].to_string().starts_with("spec.externs[0].cores"),
            "{e:?}"
        );
    }

    #[test]
    fn pools_round_up_to_whole_kibi_units_and_say_so() {
        let s = spec(
            serde_json::json!([{"name": "async_encrypt", "mode": "Async",
            "executor": "DedicatedCores", "contextPool": 2000, "queueDepth": 100}]),
        );
        let l = render("p", &s, &host(Some(3))).unwrap();
        assert!(line(&l).contains("crypto_context_pool_size=2"));
        assert!(line(&l).contains("FAKE_CRYPTO_COMMAND_RING_SIZE=1"));
        assert_eq!(l.notes.len(), 2, "{:?}", l.notes);
        assert!(l.notes[0].contains("contextPool 2000 rounded up to T4P4S's 2047"));
    }

    #[test]
    fn what_t4p4s_cannot_express_is_named() {
        let mixed = spec(serde_json::json!([
            {"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores"},
            {"name": "async_decrypt", "mode": "Skip"}
        ]));
        let e = render("p", &mixed, &host(None)).unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "spec.externs: T4P4S runs every crypto extern in one mode (async=); \
             this policy has async_encrypt=Async, async_decrypt=Skip"
        );
        let executors = spec(serde_json::json!([
            {"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores"},
            {"name": "async_decrypt", "mode": "Async", "executor": "Accelerator", "burstSize": 8}
        ]));
        let e = render("p", &executors, &host(None)).unwrap_err();
        let all: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert!(all[0].starts_with("spec.externs[*].executor"), "{all:?}");
        assert!(all[1].starts_with("spec.externs[*].burstSize"), "{all:?}");
        assert!(
            all[1].contains("async_encrypt=64, async_decrypt=8"),
            "{all:?}"
        );
        assert!(all[2].starts_with("spec.externs[1].executor"), "{all:?}");
        let many = spec(serde_json::json!([{"name": "async_encrypt", "mode": "Sync"}]));
        let e = render("p", &many, &host(Some(17))).unwrap_err();
        assert!(matches!(e[..], [Unmappable::Cores { cores: 17, .. }]));
        let e = render(&"x".repeat(250), &many, &host(None)).unwrap_err();
        assert!(matches!(e[..], [Unmappable::NameTooLong { .. }]));
    }

    // Golden files: testdata/t4p4s/<case>.yaml (policy name, host, spec)
    // is rendered and compared with <case>.golden. Regenerate with
    // `P4FLEET_UPDATE_GOLDEN=1 cargo test --workspace --lib t4p4s`.

    #[derive(serde::Deserialize)]
    struct Case {
        policy: String,
        program: String,
        #[serde(default)]
        cores: Option<u64>,
        spec: AsyncExternPolicySpec,
    }

    fn golden_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controllers/extern_policy/testdata/t4p4s")
    }

    /// The rendering as the golden file holds it: the ConfigMap's data, or
    /// the problems, one a line.
    fn golden_text(case: &Case) -> String {
        let host = Host {
            program: case.program.clone(),
            cores: case.cores,
        };
        match render(&case.policy, &case.spec, &host) {
            Ok(l) => {
                let mut out = format!("# ConfigMap {}\n", config_map_name(&case.policy));
                for (k, v) in l.data(&case.policy) {
                    out.push_str(&format!("--- {k}\n{v}\n"));
                }
                out
            }
            Err(problems) => {
                let mut out = "# not rendered\n".to_string();
                for p in problems {
                    out.push_str(&format!("{p}\n"));
                }
                out
            }
        }
    }

    #[test]
    fn golden_files() {
        let update = std::env::var_os("P4FLEET_UPDATE_GOLDEN").is_some();
        let mut cases: Vec<PathBuf> = std::fs::read_dir(golden_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        cases.sort();
        assert!(cases.len() >= 6, "{} cases", cases.len());
        for path in cases {
            let case: Case =
                serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let got = golden_text(&case);
            let golden = path.with_extension("golden");
            if update {
                std::fs::write(&golden, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (P4FLEET_UPDATE_GOLDEN=1 writes it)",
                    golden.display()
                )
            });
            assert_eq!(
                got,
                want,
                "{} differs from its golden file (P4FLEET_UPDATE_GOLDEN=1 rewrites it)",
                path.display()
            );
        }
    }
}
