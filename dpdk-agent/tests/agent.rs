//! The agent end to end, on a real DPDK 22.11 SWX pipeline (no hugepages,
//! no NIC: `--no-huge`, a pcap source port looping 16 flows, counting sink
//! ports): the agent binary as a child process, p4fleet-client for
//! P4Runtime (what the operator uses) and the ExternRuntime stubs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use p4fleet_client::model::entries::{Entry, TableSchema, WriteOp, parse_inline};
use p4fleet_client::model::pipeline_config::BfPipelineConfig;
use p4fleet_client::proto::externs::{self as xpb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_client::proto::p4info::{self, P4Info};
use p4fleet_client::{Device, Identity, Target, UpdateFailure, WriteOptions};
use prost::Message;

const DEVICE: u64 = 1;

fn example(file: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/l2crypt");
    std::fs::read_to_string(root.join(file)).unwrap()
}

/// The frames the emulator's generator sends (Ethernet, IPv4, UDP, the
/// payload pattern), 16 flows: flow i is 02:00:00:00:00:i ->
/// 02:00:00:01:00:i. 60 bytes each (64 on the wire with the FCS).
fn frame(flow: u8) -> Vec<u8> {
    let size = 60usize;
    let mut f = vec![
        0x02, 0, 0, 0x01, 0, flow, 0x02, 0, 0, 0, 0, flow, 0x08, 0x00,
    ];
    let ip_len = (size - 14) as u16;
    let mut ip = [
        0x45u8, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
    f.extend_from_slice(&(ip_len - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    let n = size - f.len();
    f.extend((0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(3)));
    f
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for f in frames {
        for v in [0u32, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// The frames of a pcap file (as DPDK's sink port writes them).
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16;
        if at + caplen > b.len() {
            break;
        }
        out.push(b[at..at + caplen].to_vec());
        at += caplen;
    }
    out
}

/// An agent child process (killed on drop).
struct Agent {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_agent(extra: &[&str]) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let frames: Vec<Vec<u8>> = (0..16).map(frame).collect();
    write_pcap(&path.join("flows.pcap"), &frames);
    let log = std::fs::File::create(path.join("agent.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_p4fleet-dpdk-agent"))
        .args(["--addr", "127.0.0.1:0", "--device-id", &DEVICE.to_string()])
        .arg("--port-in")
        .arg(format!("source:{}", path.join("flows.pcap").display()))
        .args(["--rate-pps", "20000", "--extern-cores", "1"])
        .arg("--workdir")
        .arg(path.join("work"))
        .args(["--stats-interval-ms", "250"])
        .args(extra)
        .current_dir(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn p4fleet-dpdk-agent");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            let log = std::fs::read_to_string(path.join("agent.log")).unwrap_or_default();
            panic!("the agent exited before listening:\n{log}");
        }
        if let Some(a) = line.trim().strip_prefix("p4runtime listening on ") {
            break a.to_string();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Agent {
        child,
        addr,
        dir: path,
        _dir: dir,
    }
}

async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match f().await {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {timeout:?}; last: {last}");
}

struct Session {
    device: Device,
    externs: ExternRuntimeClient<tonic::transport::Channel>,
    p4info: P4Info,
    dmac: TableSchema,
}

fn target() -> Option<xpb::Target> {
    Some(xpb::Target {
        device_id: DEVICE,
        pipeline: String::new(),
    })
}

async fn session(agent: &Agent) -> Session {
    let t = Target::p4runtime(agent.addr.clone(), DEVICE);
    let device = Device::connect(
        t.clone(),
        Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let channel = p4fleet_client::connect_lazy(&t).unwrap();
    let p4info = p4info::parse_text(&example("p4info.txt")).unwrap();
    let dmac = TableSchema::from_p4info(&p4info, "MyIngress.dmac").unwrap();
    Session {
        device,
        externs: ExternRuntimeClient::new(channel),
        p4info,
        dmac,
    }
}

fn packed(spec: &str) -> Vec<u8> {
    BfPipelineConfig::dpdk(
        "l2crypt",
        example("bfrt.json").into_bytes(),
        example("context.json").into_bytes(),
        spec.as_bytes().to_vec(),
    )
    .pack()
}

impl Session {
    async fn stats(&mut self) -> xpb::GetStatsResponse {
        self.externs
            .get_stats(xpb::GetStatsRequest { target: target() })
            .await
            .unwrap()
            .into_inner()
    }

    async fn set_policy(
        &mut self,
        externs: Vec<xpb::ExternPolicy>,
    ) -> Result<Vec<xpb::ExternPolicy>, tonic::Status> {
        self.externs
            .set_policy(xpb::SetPolicyRequest {
                target: target(),
                externs,
            })
            .await
            .map(|r| r.into_inner().externs)
    }

    /// Writes `op` to slot 0: the per-update failures.
    async fn write(&self, op: WriteOp<'_>) -> Vec<UpdateFailure> {
        let ops = [op];
        let r = self.device.write_ops(0, &ops, WriteOptions::default());
        r.await.unwrap().failures
    }

    fn forward(&self, flow: u8, port: u32) -> Entry {
        let mac = format!("0x0200000100{flow:02x}");
        parse_inline(
            &self.dmac,
            &BTreeMap::from([("hdr.ethernet.dstAddr".to_string(), mac)]),
            "forward",
            &BTreeMap::from([("port".to_string(), port.to_string())]),
            None,
        )
        .unwrap()
    }
}

fn tx(s: &xpb::GetStatsResponse, port: u32) -> u64 {
    s.pipeline
        .as_ref()
        .unwrap()
        .tx_ports
        .iter()
        .find(|p| p.port == port)
        .map_or(0, |p| p.packets)
}

fn ext<'a>(s: &'a xpb::GetStatsResponse, name: &str) -> &'a xpb::ExternStats {
    s.externs.iter().find(|x| x.name == name).unwrap()
}

fn policy(name: &str, mode: xpb::Mode) -> xpb::ExternPolicy {
    xpb::ExternPolicy {
        name: name.into(),
        mode: mode as i32,
        executor: if mode == xpb::Mode::Async {
            xpb::Executor::DedicatedCores as i32
        } else {
            0
        },
        ..Default::default()
    }
}

/// The l2crypt pipeline on DPDK: pushed packed as the operator packs it,
/// flooding without entries; a dmac entry steers flow 0 to port 1 and
/// its deletion stops that; Sync -> Async -> Skip each move the
/// pipeline's own counters; read-back, refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2crypt_entries_steer_traffic_and_policies_change_what_the_pipeline_counts() {
    let agent = start_agent(&[]);
    let mut s = session(&agent).await;
    assert!(
        s.device
            .set_pipeline(0, &s.p4info, packed(&example("l2crypt.spec")), 7)
            .await
            .unwrap()
    );
    // The generated C and shared object are gone once the pipeline runs.
    let left: Vec<_> = std::fs::read_dir(agent.dir.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The cookie is the device's answer now: a second push is skipped.
    assert!(
        !s.device
            .set_pipeline(0, &s.p4info, packed(&example("l2crypt.spec")), 7)
            .await
            .unwrap()
    );

    // No entries: dmac misses, the default floods to port 255 (a sink the
    // agent padded the ports with).
    let st = wait_for("flooding", Duration::from_secs(30), async || {
        let st = s.stats().await;
        if tx(&st, 255) > 100 {
            Ok(st)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    assert_eq!(tx(&st, 1), 0);
    let p = st.pipeline.as_ref().unwrap();
    assert_eq!(p.pipeline, "l2crypt");
    assert!(p.running);
    let dmac = p
        .tables
        .iter()
        .find(|t| t.name == "MyIngress.dmac")
        .unwrap();
    assert!(dmac.misses > 0 && dmac.hits == 0, "{dmac:?}");

    // An entry for flow 0 sends it to port 1.
    let e = s.forward(0, 1);
    let failures = s.write(WriteOp::insert(&e)).await;
    assert!(failures.is_empty(), "{failures:?}");
    let st = wait_for("flow 0 on port 1", Duration::from_secs(30), async || {
        let st = s.stats().await;
        if tx(&st, 1) > 50 {
            Ok(st)
        } else {
            Err(format!("{:?}", st.pipeline))
        }
    })
    .await;
    let dmac = st
        .pipeline
        .as_ref()
        .unwrap()
        .tables
        .iter()
        .find(|t| t.name == "MyIngress.dmac")
        .unwrap()
        .clone();
    assert_eq!(dmac.entries, 1);
    assert!(dmac.hits > 0, "{dmac:?}");
    let forward = dmac.actions.iter().find(|a| a.name == "forward").unwrap();
    assert!(forward.packets > 0, "{dmac:?}");
    // Read back as written.
    let back = s.device.read_table(0, s.dmac.id).await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(Entry::from_proto(&s.dmac, &back[0]).unwrap(), e);
    // A second insert is ALREADY_EXISTS, at its index.
    let failures = s.write(WriteOp::insert(&e)).await;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].code, tonic::Code::AlreadyExists as i32);

    // Deleted: port 1 stops growing.
    let failures = s.write(WriteOp::delete(&e.key)).await;
    assert!(failures.is_empty(), "{failures:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = tx(&s.stats().await, 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let st = s.stats().await;
    assert_eq!(tx(&st, 1), before, "port 1 after the delete");
    assert!(s.device.read_table(0, s.dmac.id).await.unwrap().is_empty());

    // Sync (the default): the externs are called inline.
    let names: Vec<String> = s
        .externs
        .list_externs(xpb::ListExternsRequest { target: target() })
        .await
        .unwrap()
        .into_inner()
        .externs
        .into_iter()
        .map(|x| x.name)
        .collect();
    assert_eq!(names, ["async_encrypt", "async_decrypt"]);
    let c0 = ext(&st, "async_encrypt").sync_calls;
    assert!(c0 > 0);

    // Async on a dedicated extern core: submitted and completed grow,
    // sync calls stop, async ops/s measured.
    let eff = s
        .set_policy(vec![
            policy("async_encrypt", xpb::Mode::Async),
            policy("async_decrypt", xpb::Mode::Async),
        ])
        .await
        .unwrap();
    assert!(eff.iter().all(|p| p.mode == xpb::Mode::Async as i32));
    assert_eq!(eff[0].cores, 1);
    let st = wait_for("async ops/s", Duration::from_secs(30), async || {
        let st = s.stats().await;
        let x = ext(&st, "async_encrypt");
        if x.async_completed > 100 && x.async_ops_per_second > 0.0 {
            Ok(st)
        } else {
            Err(format!("{x:?}"))
        }
    })
    .await;
    assert_eq!(st.pipeline.as_ref().unwrap().extern_cores, 1);
    let sync_after = ext(&st, "async_encrypt").sync_calls;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let st = s.stats().await;
    let x = ext(&st, "async_encrypt");
    assert_eq!(x.sync_calls, sync_after, "no sync calls while Async");
    assert_eq!(
        x.policy.as_ref().unwrap().mode,
        xpb::Mode::Async as i32,
        "{x:?}"
    );
    let tx_async = st.pipeline.as_ref().unwrap().tx_packets;
    assert!(tx_async > 0);

    // The e2e scenario's mix: encrypt on an extern core, decrypt on the
    // crypto device (DPDK's OpenSSL PMD, polled by the pipeline's core).
    let mut dec = policy("async_decrypt", xpb::Mode::Async);
    dec.executor = xpb::Executor::InlineCryptoDevice as i32;
    let eff = s
        .set_policy(vec![policy("async_encrypt", xpb::Mode::Async), dec])
        .await
        .unwrap();
    assert_eq!(eff[1].executor, xpb::Executor::InlineCryptoDevice as i32);
    assert_eq!(eff[1].cores, 0);
    let before = ext(&s.stats().await, "async_decrypt").async_completed;
    wait_for(
        "decrypt completed on the crypto device",
        Duration::from_secs(30),
        async || {
            let st = s.stats().await;
            let x = ext(&st, "async_decrypt");
            let e = ext(&st, "async_encrypt");
            if x.async_completed > before + 100 && e.async_completed > tx_async {
                Ok(())
            } else {
                Err(format!("{x:?} {e:?}"))
            }
        },
    )
    .await;
    // `empty` is no crypto operation: a crypto device cannot run it.
    let caps = s
        .externs
        .list_externs(xpb::ListExternsRequest { target: target() })
        .await
        .unwrap()
        .into_inner();
    assert!(
        caps.externs[0]
            .capabilities
            .as_ref()
            .unwrap()
            .executors
            .contains(&(xpb::Executor::InlineCryptoDevice as i32))
    );

    // Skip: skipped grows, nothing else does.
    s.set_policy(vec![
        policy("async_encrypt", xpb::Mode::Skip),
        policy("async_decrypt", xpb::Mode::Skip),
    ])
    .await
    .unwrap();
    let st = wait_for("skips", Duration::from_secs(30), async || {
        let st = s.stats().await;
        let x = ext(&st, "async_encrypt");
        if x.skipped > 100 {
            Ok(st)
        } else {
            Err(format!("{x:?}"))
        }
    })
    .await;
    let x = ext(&st, "async_encrypt").clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let st = s.stats().await;
    let y = ext(&st, "async_encrypt");
    assert!(y.skipped > x.skipped);
    assert_eq!(
        (y.sync_calls, y.async_submitted),
        (x.sync_calls, x.async_submitted)
    );
    assert_eq!(y.queue_depth, 0);

    // An extern the program does not call: refused, named, nothing changes.
    let err = s
        .set_policy(vec![policy("ipsec_encrypt", xpb::Mode::Skip)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let pe = p4fleet_client::proto::rpc::Status::decode(err.details()).unwrap();
    let pe = xpb::PolicyError::decode(pe.details[0].value.as_slice()).unwrap();
    assert_eq!(pe.extern_name, "ipsec_encrypt");
    assert!(
        pe.message.contains("async_encrypt, async_decrypt"),
        "{pe:?}"
    );
    // What DPDK SWX cannot do is refused with the reason.
    let mut ctx = policy("async_encrypt", xpb::Mode::Async);
    ctx.suspend = xpb::SuspendMethod::Context as i32;
    let err = s.set_policy(vec![ctx]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("coroutine"), "{}", err.message());
    let st = s.stats().await;
    assert_eq!(
        ext(&st, "async_encrypt").policy.as_ref().unwrap().mode,
        xpb::Mode::Skip as i32
    );

    // An empty policy is every extern back to Sync.
    let eff = s.set_policy(vec![]).await.unwrap();
    assert!(eff.iter().all(|p| p.mode == xpb::Mode::Sync as i32));
    let before = ext(&s.stats().await, "async_encrypt").sync_calls;
    wait_for("sync calls again", Duration::from_secs(30), async || {
        let n = ext(&s.stats().await, "async_encrypt").sync_calls;
        if n > before {
            Ok(())
        } else {
            Err(n.to_string())
        }
    })
    .await;
}

/// The mailbox variant on DPDK: with async_decrypt skipped, the first 16
/// bytes after the IPv4 header leave encrypted (AES-128-CBC with the
/// emulator's key and IV), on port 1's pcap sink: Sync, Async on an
/// extern core, Async on the crypto device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mailbox_variant_encrypts_the_payload_block_sync_async_and_on_the_crypto_device() {
    let agent = start_agent(&["--port-out", "sink", "--port-out", "sink:port1.pcap"]);
    let mut s = session(&agent).await;
    s.device
        .set_pipeline(0, &s.p4info, packed(&example("l2crypt_mailbox.spec")), 9)
        .await
        .unwrap();
    let e = s.forward(3, 1);
    let failures = s.write(WriteOp::insert(&e)).await;
    assert!(failures.is_empty(), "{failures:?}");
    let want = {
        let f = frame(3);
        let mut block: [u8; 16] = f[34..50].try_into().unwrap();
        p4fleet_dpdk_agent::externs::apply(p4fleet_dpdk_agent::externs::Kind::Encrypt, &mut block);
        let mut out = f.clone();
        out[34..50].copy_from_slice(&block);
        out
    };
    let pcap = agent.dir.join("port1.pcap");
    // Encrypt then decrypt (both Sync): the frame leaves as it came.
    wait_for("flow 3 unchanged", Duration::from_secs(30), async || {
        let frames = read_pcap(&pcap);
        if frames.iter().any(|f| *f == frame(3)) {
            Ok(())
        } else {
            Err(format!("{} frames", frames.len()))
        }
    })
    .await;
    for (mode, executor) in [
        (xpb::Mode::Sync, xpb::Executor::Unspecified),
        (xpb::Mode::Async, xpb::Executor::DedicatedCores),
        (xpb::Mode::Async, xpb::Executor::InlineCryptoDevice),
    ] {
        let mut enc = policy("async_encrypt", mode);
        enc.executor = executor as i32;
        s.set_policy(vec![enc, policy("async_decrypt", xpb::Mode::Skip)])
            .await
            .unwrap();
        let seen = read_pcap(&pcap).len();
        wait_for(
            &format!("flow 3 encrypted ({mode:?}, {executor:?})"),
            Duration::from_secs(30),
            async || {
                let frames = read_pcap(&pcap);
                if frames[seen.min(frames.len())..].contains(&want) {
                    Ok(())
                } else {
                    Err(format!("{:02x?}", frames.last()))
                }
            },
        )
        .await;
    }
    let st = s.stats().await;
    assert!(ext(&st, "async_encrypt").async_completed > 0);
}

/// What the real pipeline refuses, refused with the reason and nothing
/// changed: a .spec DPDK's codegen rejects (with its line), an extern the
/// agent does not implement, a raw .spec, a P4Info that does not fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_the_real_pipeline_refuses_are_refused_with_the_reason() {
    let agent = start_agent(&[]);
    let s = session(&agent).await;
    let spec = example("l2crypt.spec");
    let refused = async |config: Vec<u8>, p4info: &P4Info| {
        let e = s
            .device
            .set_pipeline(0, p4info, config, 1)
            .await
            .unwrap_err();
        format!("{e}")
    };

    let bad = spec.replace("\ttable dmac\n", "\ttable dmac\n\tfrobnicate m.x\n");
    let msg = refused(packed(&bad), &s.p4info).await;
    assert!(msg.contains("codegen refused the .spec at line"), "{msg}");

    let unknown = spec.replace("extern f.async_decrypt", "extern f.compress");
    let msg = refused(packed(&unknown), &s.p4info).await;
    assert!(
        msg.contains("compress") && msg.contains("does not implement"),
        "{msg}"
    );

    let msg = refused(spec.clone().into_bytes(), &s.p4info).await;
    assert!(msg.contains("BfPipelineConfig"), "{msg}");

    let mut other = s.p4info.clone();
    other.tables[0].preamble.as_mut().unwrap().name = "MyIngress.nosuch".into();
    other.tables[0].preamble.as_mut().unwrap().alias = "nosuch".into();
    let msg = refused(packed(&spec), &other).await;
    assert!(msg.contains("MyIngress.nosuch"), "{msg}");

    // Nothing was loaded.
    assert_eq!(s.device.pipeline_cookie(0).await.unwrap(), None);
}
