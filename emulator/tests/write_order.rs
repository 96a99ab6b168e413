//! p4fleet-client keeps updates of one key in order with several Writes in
//! flight: a request that touches a key of a request still in flight is
//! sent only after that one's answer. Observed at the server as the order
//! of request starts and answers (the Tofino profile makes each answer wait,
//! so independent requests visibly overlap).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use p4fleet_client::{Atomicity, Device, Identity, Target, WriteOptions};
use p4fleet_emulator::{Emulator, EmulatorConfig, LatencyProfile};
use p4fleet_model::entries::{Entry, TableSchema, WriteOp, parse_text};
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

const P4INFO: &str = include_str!("../../examples/firewall/p4info.txt");

/// `Start(n)` / `End(n)`: the n-th Write (or BulkWrite) request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Start(usize),
    End(usize),
}

/// Records when each write request reaches the service and when its
/// answer is ready.
#[derive(Clone)]
struct Recorder<S> {
    inner: S,
    log: Arc<Mutex<Vec<Ev>>>,
}

impl<S: NamedService> NamedService for Recorder<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Recorder<S>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let write = req.uri().path().ends_with("/Write");
        let log = self.log.clone();
        let n = {
            let mut l = log.lock().unwrap();
            let n = l.iter().filter(|e| matches!(e, Ev::Start(_))).count();
            if write {
                l.push(Ev::Start(n));
            }
            n
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            if write {
                log.lock().unwrap().push(Ev::End(n));
            }
            r
        })
    }
}

async fn serve(log: Arc<Mutex<Vec<Ev>>>) -> String {
    let emu = Emulator::new(&EmulatorConfig {
        device_ids: vec![1],
        profile: LatencyProfile::Tofino,
        ..Default::default()
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let router = tonic::transport::Server::builder()
        .add_service(Recorder {
            inner: emu.service(),
            log: log.clone(),
        })
        .add_service(Recorder {
            inner: emu.bulk_service(),
            log,
        });
    tokio::spawn(router.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)));
    addr
}

fn entries() -> Vec<Entry> {
    let schema = schema_of();
    // One line at a time: a set may not hold one key twice.
    [
        "10.0.0.1 10.0.1.1 1",
        "10.0.0.1 10.0.1.1 2",
        "10.0.0.1 10.0.1.1 3",
        "10.0.0.2 10.0.1.1 1",
        "10.0.0.3 10.0.1.1 1",
        "10.0.0.4 10.0.1.1 1",
    ]
    .iter()
    .map(|line| {
        let text =
            format!("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n{line}\n");
        parse_text(&schema, &text).unwrap().remove(0)
    })
    .collect()
}

/// Whether request `b` started only after request `a` had its answer.
fn after(log: &[Ev], a: usize, b: usize) -> bool {
    let pos = |e: Ev| log.iter().position(|x| *x == e).unwrap();
    pos(Ev::End(a)) < pos(Ev::Start(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_updates_wait_for_each_other_distinct_keys_overlap() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = serve(log.clone()).await;
    let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    let id = Identity {
        election_id: 3,
        client_id: 3,
    };
    let dev = Device::connect(Target::p4runtime(addr, 1), id).unwrap();
    dev.set_pipeline(0, &info, b"x".to_vec(), 1).await.unwrap();
    let opts = WriteOptions {
        batch_size: 1,
        max_in_flight: 4,
        atomicity: Atomicity::ContinueOnError,
        distinct_keys: false,
    };
    let e = entries();
    // e[0..3] are one key with three actions.
    assert_eq!(e[0].key, e[2].key);

    for bulk in [false, true] {
        if let Device::P4Runtime(d) = &dev {
            d.set_bulk_enabled(bulk);
        }
        log.lock().unwrap().clear();
        // Insert one key, then modify it twice: three requests in a chain.
        let first = dev
            .write_ops(0, &[WriteOp::insert(&e[0])], opts)
            .await
            .unwrap();
        assert!(first.failures.is_empty(), "{:?}", first.failures);
        let chain = [WriteOp::modify(&e[1]), WriteOp::modify(&e[2])];
        let r = dev.write_ops(0, &chain, opts).await.unwrap();
        assert!(r.failures.is_empty(), "bulk {bulk}: {:?}", r.failures);
        let l = log.lock().unwrap().clone();
        assert!(after(&l, 1, 2), "bulk {bulk}: {l:?}");

        // Three distinct keys: pipelined, the second starts before the
        // first is answered.
        log.lock().unwrap().clear();
        let ops: Vec<WriteOp> = e[3..6].iter().map(WriteOp::insert).collect();
        let r = dev.write_ops(0, &ops, opts).await.unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let l = log.lock().unwrap().clone();
        assert!(!after(&l, 0, 1), "bulk {bulk}: not pipelined: {l:?}");

        // The last MODIFY won.
        let t = dev.read_table(0, e[0].key.table_id).await.unwrap();
        let got = t
            .iter()
            .find(|te| Entry::from_proto(&schema_of(), te).unwrap().key == e[0].key)
            .map(|te| Entry::from_proto(&schema_of(), te).unwrap().action);
        assert_eq!(got, Some(e[2].action.clone()));

        // Clear for the next round.
        let all: Vec<WriteOp> = std::iter::once(&e[0])
            .chain(&e[3..6])
            .map(|x| WriteOp::delete(&x.key))
            .collect();
        let r = dev.write_ops(0, &all, opts).await.unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
    }
}

fn schema_of() -> TableSchema {
    let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    TableSchema::from_p4info(&info, "MyIngress.firewall").unwrap()
}
