//! Extern policies as this agent applies them: the ExternRuntime contract
//! (a complete desired set, validated as a whole, unlisted externs Sync,
//! the effective policy reported back), with what DPDK SWX can and cannot
//! do. Pure.

use p4fleet_proto::externs as pb;

use crate::externs::{self, Kind, MODE_ASYNC, MODE_INLINE, MODE_SKIP, MODE_SYNC, Setting};

pub const DEFAULT_BURST: u32 = 64;
pub const DEFAULT_CONTEXT_POOL: u32 = 1023;
pub const DEFAULT_QUEUE_DEPTH: u32 = 1024;
pub const MAX_BURST: u32 = 1024;
pub const MAX_CONTEXT_POOL: u32 = 1 << 20;
pub const MAX_QUEUE_DEPTH: u32 = 1 << 16;
/// Packets one DPDK SWX pipeline can park at once
/// (`RTE_SWX_PIPELINE_THREADS_MAX` in 22.11): whatever the context pool,
/// no more calls are in flight.
pub const SWX_THREADS: u32 = 16;

/// A refused policy: gRPC code and the PolicyError for the details.
pub type Refusal = (tonic::Code, pb::PolicyError);

/// A refusal of extern `name`'s policy for `reason`, naming `field`. The
/// code follows the reason, as the emulator answers: what DPDK SWX or this
/// host lacks is FAILED_PRECONDITION, an extern not in the pipeline
/// NOT_FOUND, the rest INVALID_ARGUMENT.
fn refuse(reason: pb::policy_error::Reason, name: &str, field: &str, message: String) -> Refusal {
    use pb::policy_error::Reason;
    let code = match reason {
        Reason::UnsupportedExecutor | Reason::UnsupportedSuspend => tonic::Code::FailedPrecondition,
        Reason::UnknownExtern => tonic::Code::NotFound,
        _ => tonic::Code::InvalidArgument,
    };
    (
        code,
        pb::PolicyError {
            reason: reason as i32,
            extern_name: name.to_string(),
            field: field.to_string(),
            message,
        },
    )
}

/// A refusal of extern `name`'s `field`, its message prefixed by the
/// extern's name.
fn refuse_field<T>(
    reason: pb::policy_error::Reason,
    name: &str,
    field: &str,
    why: impl std::fmt::Display,
) -> Result<T, Refusal> {
    Err(refuse(
        reason,
        name,
        field,
        format!("extern {name:?}: {why}"),
    ))
}

/// The executors this agent has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Executors {
    /// Most dedicated extern cores one extern may get (0: none).
    pub max_cores: u32,
    /// A DPDK crypto device is started (`--crypto-dev`): the crypto
    /// externs can run on it.
    pub crypto_device: bool,
}

/// What this agent offers to extern `name`.
pub fn capabilities(name: &str, ex: Executors) -> pb::Capabilities {
    let mut executors = Vec::new();
    if ex.crypto_device && is_crypto(name) {
        executors.push(pb::Executor::InlineCryptoDevice as i32);
    }
    if ex.max_cores > 0 {
        executors.push(pb::Executor::DedicatedCores as i32);
    }
    let max_cores = ex.max_cores;
    pb::Capabilities {
        modes: vec![
            pb::Mode::Sync as i32,
            pb::Mode::Async as i32,
            pb::Mode::Skip as i32,
        ],
        suspend_methods: vec![pb::SuspendMethod::PacketDescriptor as i32],
        executors,
        max_cores,
        max_burst_size: MAX_BURST,
        max_context_pool: MAX_CONTEXT_POOL,
        max_queue_depth: MAX_QUEUE_DEPTH,
    }
}

/// Whether `name` is one of the crypto externs (what a crypto device can
/// run).
fn is_crypto(name: &str) -> bool {
    externs::slot_of(name).is_some_and(|i| externs::EXTERNS[i].1 != Kind::Empty)
}

fn range(name: &str, field: &str, v: u32, max: u32) -> Result<(), Refusal> {
    if v == 0 || v > max {
        return refuse_field(
            pb::policy_error::Reason::OutOfRange,
            name,
            field,
            format_args!("{field} = {v} is outside 1..={max}"),
        );
    }
    Ok(())
}

/// One extern's effective policy, or why not.
pub fn normalize(p: &pb::ExternPolicy, ex: Executors) -> Result<pb::ExternPolicy, Refusal> {
    let max_cores = ex.max_cores;
    use pb::policy_error::Reason;
    let name = p.name.as_str();
    let mut out = p.clone();
    let mode = pb::Mode::try_from(p.mode).unwrap_or(pb::Mode::Unspecified);
    if mode == pb::Mode::Unspecified {
        return refuse_field(
            Reason::UnknownMode,
            name,
            "mode",
            format_args!("mode {} is not SYNC, ASYNC or SKIP", p.mode),
        );
    }
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
    let executor = pb::Executor::try_from(p.executor).unwrap_or(pb::Executor::Unspecified);
    if executor != pb::Executor::DedicatedCores && out.cores != 0 {
        return refuse_field(
            Reason::CoresWithoutDedicatedCores,
            name,
            "cores",
            format_args!("cores is only valid with executor DedicatedCores"),
        );
    }
    match mode {
        pb::Mode::Async => {
            // Why the executor cannot run this extern, if it cannot.
            let unusable = match executor {
                pb::Executor::Unspecified => Some((
                    Reason::MissingExecutor,
                    "mode Async needs an executor".to_string(),
                )),
                pb::Executor::DedicatedCores if max_cores > 0 => None,
                pb::Executor::DedicatedCores => Some((
                    Reason::UnsupportedExecutor,
                    "executor DedicatedCores is not available: the agent runs with \
                     --extern-cores 0"
                        .to_string(),
                )),
                pb::Executor::InlineCryptoDevice if ex.crypto_device && is_crypto(name) => None,
                pb::Executor::InlineCryptoDevice => {
                    let why = if ex.crypto_device {
                        "it is not a crypto extern (a crypto device runs AES operations)"
                    } else {
                        "the agent runs without a crypto device (--crypto-dev none)"
                    };
                    Some((
                        Reason::UnsupportedExecutor,
                        format!("executor InlineCryptoDevice: {why}"),
                    ))
                }
                pb::Executor::Accelerator => Some((
                    Reason::UnsupportedExecutor,
                    "executor Accelerator: this host has none".to_string(),
                )),
            };
            if let Some((reason, why)) = unusable {
                return refuse_field(reason, name, "executor", why);
            }
            match pb::SuspendMethod::try_from(p.suspend) {
                Ok(pb::SuspendMethod::Unspecified | pb::SuspendMethod::PacketDescriptor) => {
                    out.suspend = pb::SuspendMethod::PacketDescriptor as i32;
                }
                _ => {
                    return refuse_field(
                        Reason::UnsupportedSuspend,
                        name,
                        "suspend",
                        format_args!(
                            "suspend {} is not available: DPDK SWX parks a \
                             packet on one of its pipeline threads (a packet descriptor, \
                             nothing copied); it has no coroutine contexts",
                            p.suspend
                        ),
                    );
                }
            }
            if executor == pb::Executor::DedicatedCores {
                if out.cores == 0 {
                    out.cores = 1;
                }
                range(name, "cores", out.cores, max_cores)?;
            }
            if out.burst_size > out.queue_depth {
                return refuse_field(
                    Reason::BurstOverQueueDepth,
                    name,
                    "burst_size",
                    format_args!(
                        "burst_size {} exceeds queue_depth {}",
                        out.burst_size, out.queue_depth
                    ),
                );
            }
        }
        _ => {
            out.suspend = 0;
            out.executor = 0;
            out.cores = 0;
        }
    }
    Ok(out)
}

/// The default of an extern no policy names.
pub fn sync(name: &str) -> pb::ExternPolicy {
    pb::ExternPolicy {
        name: name.to_string(),
        mode: pb::Mode::Sync as i32,
        burst_size: DEFAULT_BURST,
        context_pool: DEFAULT_CONTEXT_POOL,
        queue_depth: DEFAULT_QUEUE_DEPTH,
        ..Default::default()
    }
}

/// Validates a complete desired set for a program calling `externs`;
/// returns one effective policy per extern, in program order.
pub fn resolve(
    externs: &[String],
    desired: &[pb::ExternPolicy],
    ex: Executors,
) -> Result<Vec<pb::ExternPolicy>, Refusal> {
    use pb::policy_error::Reason;
    let mut out: Vec<Option<pb::ExternPolicy>> = vec![None; externs.len()];
    for p in desired {
        let Some(i) = externs.iter().position(|e| *e == p.name) else {
            return Err(refuse(
                Reason::UnknownExtern,
                &p.name,
                "",
                format!(
                    "extern {:?} is not in the pipeline (it has: {})",
                    p.name,
                    if externs.is_empty() {
                        "no externs".to_string()
                    } else {
                        externs.join(", ")
                    }
                ),
            ));
        };
        if out[i].is_some() {
            return Err(refuse(
                Reason::DuplicateExtern,
                &p.name,
                "name",
                format!("extern {:?} is named twice", p.name),
            ));
        }
        out[i] = Some(normalize(p, ex)?);
    }
    Ok(out
        .into_iter()
        .zip(externs)
        .map(|(p, n)| p.unwrap_or_else(|| sync(n)))
        .collect())
}

/// An effective policy as the extern runtime runs it.
pub fn setting(p: &pb::ExternPolicy) -> Setting {
    match pb::Mode::try_from(p.mode) {
        Ok(pb::Mode::Async) => Setting {
            mode: if p.executor == pb::Executor::InlineCryptoDevice as i32 {
                MODE_INLINE
            } else {
                MODE_ASYNC
            },
            cores: p.cores,
            burst: p.burst_size,
            pool: p.context_pool,
            queue_depth: p.queue_depth,
        },
        Ok(pb::Mode::Skip) => Setting {
            mode: MODE_SKIP,
            ..Setting::SYNC
        },
        _ => Setting {
            mode: MODE_SYNC,
            ..Setting::SYNC
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EX: Executors = Executors {
        max_cores: 2,
        crypto_device: true,
    };

    fn names() -> Vec<String> {
        vec!["async_encrypt".into(), "async_decrypt".into()]
    }

    fn p(name: &str, mode: pb::Mode, executor: pb::Executor) -> pb::ExternPolicy {
        pb::ExternPolicy {
            name: name.into(),
            mode: mode as i32,
            executor: executor as i32,
            ..Default::default()
        }
    }

    #[test]
    fn unlisted_externs_are_sync_and_async_gets_its_defaults() {
        let got = resolve(
            &names(),
            &[p(
                "async_decrypt",
                pb::Mode::Async,
                pb::Executor::DedicatedCores,
            )],
            EX,
        )
        .unwrap();
        assert_eq!(got[0], sync("async_encrypt"));
        assert_eq!(got[1].mode, pb::Mode::Async as i32);
        assert_eq!(got[1].cores, 1);
        assert_eq!(got[1].suspend, pb::SuspendMethod::PacketDescriptor as i32);
        assert_eq!(
            (got[1].burst_size, got[1].context_pool, got[1].queue_depth),
            (64, 1023, 1024)
        );
        assert_eq!(setting(&got[1]).mode, MODE_ASYNC);
    }

    #[test]
    fn the_crypto_device_runs_crypto_externs_only() {
        let inline = p(
            "async_encrypt",
            pb::Mode::Async,
            pb::Executor::InlineCryptoDevice,
        );
        let n = normalize(&inline, EX).unwrap();
        assert_eq!(n.cores, 0);
        assert_eq!(setting(&n).mode, MODE_INLINE);
        let caps = capabilities("async_encrypt", EX);
        assert!(
            caps.executors
                .contains(&(pb::Executor::InlineCryptoDevice as i32))
        );
        let e = normalize(
            &p("empty", pb::Mode::Async, pb::Executor::InlineCryptoDevice),
            EX,
        )
        .unwrap_err();
        assert!(e.1.message.contains("not a crypto extern"), "{e:?}");
        assert!(
            !capabilities("empty", EX)
                .executors
                .contains(&(pb::Executor::InlineCryptoDevice as i32))
        );
        let none = Executors {
            crypto_device: false,
            ..EX
        };
        let e = normalize(&inline, none).unwrap_err();
        assert_eq!(e.0, tonic::Code::FailedPrecondition);
        assert!(e.1.message.contains("--crypto-dev none"), "{e:?}");
    }

    #[test]
    fn what_dpdk_cannot_do_is_refused_with_the_reason() {
        let e = resolve(
            &names(),
            &[p("compress", pb::Mode::Skip, pb::Executor::Unspecified)],
            EX,
        )
        .unwrap_err();
        assert_eq!(e.0, tonic::Code::NotFound);
        assert!(e.1.message.contains("async_encrypt, async_decrypt"));
        let mut ctx = p("x", pb::Mode::Async, pb::Executor::DedicatedCores);
        ctx.suspend = pb::SuspendMethod::Context as i32;
        let e = normalize(&ctx, EX).unwrap_err();
        assert_eq!(
            e.1.reason,
            pb::policy_error::Reason::UnsupportedSuspend as i32
        );
        let mut many = p("x", pb::Mode::Async, pb::Executor::DedicatedCores);
        many.cores = 3;
        assert_eq!(normalize(&many, EX).unwrap_err().1.field, "cores");
        let no_cores = Executors { max_cores: 0, ..EX };
        assert_eq!(
            normalize(
                &p("x", pb::Mode::Async, pb::Executor::DedicatedCores),
                no_cores
            )
            .unwrap_err()
            .0,
            tonic::Code::FailedPrecondition
        );
        let e = normalize(&p("x", pb::Mode::Async, pb::Executor::Accelerator), EX).unwrap_err();
        assert_eq!(e.1.field, "executor");
    }
}
