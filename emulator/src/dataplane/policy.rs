//! How each extern runs (the AsyncExternPolicy's per-extern settings, as
//! the target applies them): validation of a desired policy set against
//! the program's externs and the target's capabilities, and the effective
//! (normalized) policy reported back. Pure.

/// Execution mode of an extern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Mode {
    /// Inline on the worker, the packet waits.
    Sync,
    /// Handed to an executor; the worker goes on with other packets and
    /// resumes the packet when the call completes.
    Async,
    /// Not called at all.
    Skip,
}

/// How a packet waits for an async call (T4P4S's two methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SuspendMethod {
    /// Park the packet descriptor (program counter, metadata, header
    /// offsets); resume from the saved program counter. Cheap.
    PacketDescriptor,
    /// Save and restore a coroutine context (ucontext), see `context.rs`
    /// for what is modelled.
    Context,
}

/// Where async calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Executor {
    /// An emulated crypto device whose queue the worker polls: the work is
    /// done on the worker's core in bursts (like DPDK's software crypto
    /// PMDs).
    InlineCryptoDevice,
    /// Threads set aside for extern work, fed through lock-free rings.
    DedicatedCores,
    /// A hardware accelerator (none in the emulator: refused).
    Accelerator,
}

/// Default burst handed to an executor (T4P4S's default).
pub const DEFAULT_BURST: u32 = 64;
/// Default context pool per worker (T4P4S: N*1024-1).
pub const DEFAULT_CONTEXT_POOL: u32 = 1023;
/// Default executor queue depth.
pub const DEFAULT_QUEUE_DEPTH: u32 = 1024;
/// Largest accepted burst.
pub const MAX_BURST: u32 = 1024;
/// Largest accepted context pool (per worker).
pub const MAX_CONTEXT_POOL: u32 = 1 << 20;
/// Largest accepted queue depth.
pub const MAX_QUEUE_DEPTH: u32 = 1 << 16;

/// The settings of one extern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct ExternPolicy {
    pub mode: Mode,
    /// Async only.
    pub suspend: Option<SuspendMethod>,
    /// Async only; required then.
    pub executor: Option<Executor>,
    /// DedicatedCores only (0 = 1).
    pub cores: u32,
    pub burst_size: u32,
    pub context_pool: u32,
    pub queue_depth: u32,
}

impl Default for ExternPolicy {
    /// What a target runs when no policy names the extern: Sync.
    fn default() -> Self {
        ExternPolicy {
            mode: Mode::Sync,
            suspend: None,
            executor: None,
            cores: 0,
            burst_size: DEFAULT_BURST,
            context_pool: DEFAULT_CONTEXT_POOL,
            queue_depth: DEFAULT_QUEUE_DEPTH,
        }
    }
}

impl ExternPolicy {
    /// An Async policy with defaults (PacketDescriptor, given executor,
    /// one core when dedicated).
    pub fn asynchronous(executor: Executor) -> ExternPolicy {
        ExternPolicy {
            mode: Mode::Async,
            suspend: Some(SuspendMethod::PacketDescriptor),
            executor: Some(executor),
            cores: u32::from(executor == Executor::DedicatedCores),
            ..ExternPolicy::default()
        }
    }

    pub fn with_mode(mode: Mode) -> ExternPolicy {
        ExternPolicy {
            mode,
            ..ExternPolicy::default()
        }
    }
}

/// What a target can do with its externs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    pub modes: Vec<Mode>,
    pub suspend_methods: Vec<SuspendMethod>,
    pub executors: Vec<Executor>,
    /// Most dedicated cores one extern may get.
    pub max_cores: u32,
}

impl Capabilities {
    /// The emulated DPDK target: no accelerator; up to `max_cores`
    /// dedicated extern cores (none: no DedicatedCores executor).
    pub fn emulated(max_cores: u32) -> Capabilities {
        let mut executors = vec![Executor::InlineCryptoDevice];
        if max_cores > 0 {
            executors.push(Executor::DedicatedCores);
        }
        Capabilities {
            modes: vec![Mode::Sync, Mode::Async, Mode::Skip],
            suspend_methods: vec![SuspendMethod::PacketDescriptor, SuspendMethod::Context],
            executors,
            max_cores,
        }
    }
}

/// Why a policy set is refused (nothing of it is applied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("extern {name:?} is not in the pipeline (it has: {known})")]
    UnknownExtern { name: String, known: String },
    #[error("extern {name:?} is named twice")]
    Duplicate { name: String },
    #[error("extern {name:?}: mode Async needs an executor")]
    MissingExecutor { name: String },
    #[error("extern {name:?}: executor {executor:?} is not available on this target")]
    UnsupportedExecutor { name: String, executor: Executor },
    #[error("extern {name:?}: cores is only valid with executor DedicatedCores")]
    CoresWithoutDedicatedCores { name: String },
    #[error("extern {name:?}: {field} = {value} is outside {min}..={max}")]
    OutOfRange {
        name: String,
        field: &'static str,
        value: u32,
        min: u32,
        max: u32,
    },
    #[error("extern {name:?}: burst_size {burst} exceeds queue_depth {queue_depth}")]
    BurstOverQueue {
        name: String,
        burst: u32,
        queue_depth: u32,
    },
}

impl PolicyError {
    /// The extern the error is about.
    pub fn extern_name(&self) -> &str {
        match self {
            PolicyError::UnknownExtern { name, .. }
            | PolicyError::Duplicate { name }
            | PolicyError::MissingExecutor { name }
            | PolicyError::UnsupportedExecutor { name, .. }
            | PolicyError::CoresWithoutDedicatedCores { name }
            | PolicyError::OutOfRange { name, .. }
            | PolicyError::BurstOverQueue { name, .. } => name,
        }
    }
}

fn range(name: &str, field: &'static str, value: u32, max: u32) -> Result<(), PolicyError> {
    if value == 0 || value > max {
        return Err(PolicyError::OutOfRange {
            name: name.to_string(),
            field,
            value,
            min: 1,
            max,
        });
    }
    Ok(())
}

/// Checks one extern's settings and normalizes them: fields that do not
/// apply to the mode are cleared; zero sizes take the defaults.
pub fn normalize(
    name: &str,
    p: &ExternPolicy,
    caps: &Capabilities,
) -> Result<ExternPolicy, PolicyError> {
    let mut out = *p;
    if out.burst_size == 0 {
        out.burst_size = DEFAULT_BURST;
    }
    if out.context_pool == 0 {
        out.context_pool = DEFAULT_CONTEXT_POOL;
    }
    if out.queue_depth == 0 {
        out.queue_depth = DEFAULT_QUEUE_DEPTH;
    }
    range(name, "burst_size", out.burst_size, MAX_BURST)?;
    range(name, "context_pool", out.context_pool, MAX_CONTEXT_POOL)?;
    range(name, "queue_depth", out.queue_depth, MAX_QUEUE_DEPTH)?;
    if out.executor != Some(Executor::DedicatedCores) && out.cores != 0 {
        return Err(PolicyError::CoresWithoutDedicatedCores {
            name: name.to_string(),
        });
    }
    match out.mode {
        Mode::Sync | Mode::Skip => {
            out.suspend = None;
            out.executor = None;
            out.cores = 0;
        }
        Mode::Async => {
            let ex = out.executor.ok_or_else(|| PolicyError::MissingExecutor {
                name: name.to_string(),
            })?;
            if !caps.executors.contains(&ex) {
                return Err(PolicyError::UnsupportedExecutor {
                    name: name.to_string(),
                    executor: ex,
                });
            }
            out.suspend.get_or_insert(SuspendMethod::PacketDescriptor);
            if ex == Executor::DedicatedCores {
                if out.cores == 0 {
                    out.cores = 1;
                }
                range(name, "cores", out.cores, caps.max_cores)?;
            }
            if out.burst_size > out.queue_depth {
                return Err(PolicyError::BurstOverQueue {
                    name: name.to_string(),
                    burst: out.burst_size,
                    queue_depth: out.queue_depth,
                });
            }
        }
    }
    Ok(out)
}

/// Validates a complete desired policy set for a program whose externs
/// are `externs` (in program order). Unlisted externs get the default
/// (Sync). Returns one effective policy per extern, in program order.
pub fn resolve(
    externs: &[String],
    desired: &[(String, ExternPolicy)],
    caps: &Capabilities,
) -> Result<Vec<ExternPolicy>, PolicyError> {
    let mut out = vec![None; externs.len()];
    for (name, p) in desired {
        let i =
            externs
                .iter()
                .position(|e| e == name)
                .ok_or_else(|| PolicyError::UnknownExtern {
                    name: name.clone(),
                    known: if externs.is_empty() {
                        "no externs".to_string()
                    } else {
                        externs.join(", ")
                    },
                })?;
        if out[i].is_some() {
            return Err(PolicyError::Duplicate { name: name.clone() });
        }
        out[i] = Some(normalize(name, p, caps)?);
    }
    Ok(out.into_iter().map(|p| p.unwrap_or_default()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Capabilities {
        Capabilities::emulated(2)
    }

    fn names() -> Vec<String> {
        vec!["async_encrypt".into(), "async_decrypt".into()]
    }

    #[test]
    fn unlisted_externs_get_the_default() {
        let got = resolve(
            &names(),
            &[("async_decrypt".into(), ExternPolicy::with_mode(Mode::Skip))],
            &caps(),
        )
        .unwrap();
        assert_eq!(got[0], ExternPolicy::default());
        assert_eq!(got[1].mode, Mode::Skip);
    }

    #[test]
    fn unknown_extern_is_named() {
        let e = resolve(
            &names(),
            &[("compress".into(), ExternPolicy::default())],
            &caps(),
        )
        .unwrap_err();
        assert_eq!(e.extern_name(), "compress");
        assert!(matches!(e, PolicyError::UnknownExtern { .. }));
        assert!(
            e.to_string().contains("async_encrypt, async_decrypt"),
            "{e}"
        );
    }

    #[test]
    fn async_needs_a_supported_executor() {
        let mut p = ExternPolicy::with_mode(Mode::Async);
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::MissingExecutor { .. })
        ));
        p.executor = Some(Executor::Accelerator);
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::UnsupportedExecutor {
                executor: Executor::Accelerator,
                ..
            })
        ));
    }

    #[test]
    fn normalization() {
        // Sync clears async-only fields.
        let p = ExternPolicy {
            suspend: Some(SuspendMethod::Context),
            ..ExternPolicy::default()
        };
        assert_eq!(normalize("x", &p, &caps()).unwrap().suspend, None);
        // Async defaults: PacketDescriptor, one dedicated core, zero sizes.
        let p = ExternPolicy {
            mode: Mode::Async,
            executor: Some(Executor::DedicatedCores),
            burst_size: 0,
            context_pool: 0,
            queue_depth: 0,
            ..ExternPolicy::default()
        };
        let n = normalize("x", &p, &caps()).unwrap();
        assert_eq!(n.suspend, Some(SuspendMethod::PacketDescriptor));
        assert_eq!(n.cores, 1);
        assert_eq!(
            (n.burst_size, n.context_pool, n.queue_depth),
            (DEFAULT_BURST, DEFAULT_CONTEXT_POOL, DEFAULT_QUEUE_DEPTH)
        );
    }

    #[test]
    fn limits() {
        let mut p = ExternPolicy::asynchronous(Executor::DedicatedCores);
        p.cores = 3;
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::OutOfRange {
                field: "cores",
                value: 3,
                max: 2,
                ..
            })
        ));
        let mut p = ExternPolicy::asynchronous(Executor::InlineCryptoDevice);
        p.cores = 1;
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::CoresWithoutDedicatedCores { .. })
        ));
        let mut p = ExternPolicy::asynchronous(Executor::InlineCryptoDevice);
        p.burst_size = 128;
        p.queue_depth = 64;
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::BurstOverQueue { .. })
        ));
        p.burst_size = MAX_BURST + 1;
        assert!(matches!(
            normalize("x", &p, &caps()),
            Err(PolicyError::OutOfRange {
                field: "burst_size",
                ..
            })
        ));
    }

    #[test]
    fn duplicates_are_refused() {
        let e = resolve(
            &names(),
            &[
                ("async_encrypt".into(), ExternPolicy::default()),
                ("async_encrypt".into(), ExternPolicy::with_mode(Mode::Skip)),
            ],
            &caps(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            PolicyError::Duplicate {
                name: "async_encrypt".into()
            }
        );
    }
}
