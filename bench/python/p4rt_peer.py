"""Python P4Runtime peer for p4fleet-bench (the rbfrt paper's experiment).

Uses the official `p4runtime` package's gRPC stubs directly (no
p4runtime-shell layer, which builds entries through its own, slower object
model). Becomes primary on one device via StreamChannel arbitration, then
serves commands, one JSON object per line on stdin, answering one JSON line
on stdout:

    {"cmd": "run", "batch": 300, "entries": 30000}
        re-sets the pipeline (VERIFY_AND_COMMIT clears the tables), then
        inserts `entries` firewall entries in Write requests of `batch`
        updates, one request at a time (send, wait for the answer, next),
        and answers {"elapsed_s", "latency_sum_s", "requests", "entries"}.
        Timing starts before the first request is built and ends with the
        last answer, as in the paper.
    {"cmd": "quit"}

The entries are the same as the Rust paths': entry i has
src = 10.0.0.0 + i, dst = 192.168.0.0 + (i * 7919 mod 2^16),
action MyIngress.allow(port = i mod 512).

    python p4rt_peer.py --grpc-addr 127.0.0.1:9559 --device-id 2 \
        --p4info examples/firewall/p4info.txt
"""

import argparse
import json
import queue
import sys
import time

import grpc
from google.protobuf import text_format
from google.protobuf.internal import api_implementation
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

TABLE = "MyIngress.firewall"
ACTION = "MyIngress.allow"
MAX_MSG = 256 << 20


def ids(info):
    table = next(t for t in info.tables if t.preamble.name == TABLE)
    fields = {f.name: f.id for f in table.match_fields}
    action = next(a for a in info.actions if a.preamble.name == ACTION)
    return (
        table.preamble.id,
        fields["hdr.ipv4.srcAddr"],
        fields["hdr.ipv4.dstAddr"],
        action.preamble.id,
        action.params[0].id,
    )


def arbitrate(stub, device_id, election):
    """Opens the StreamChannel and waits until this client is primary."""
    q = queue.Queue()
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = device_id
    req.arbitration.election_id.high = 0
    req.arbitration.election_id.low = election
    q.put(req)

    def gen():
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    stream = stub.StreamChannel(gen())
    for resp in stream:
        if resp.HasField("arbitration"):
            if resp.arbitration.status.code == 0:
                return q, stream
            raise SystemExit("not primary: %s" % resp.arbitration.status.message)
    raise SystemExit("stream closed before arbitration")


def set_pipeline(stub, device_id, election, info, cookie):
    req = p4runtime_pb2.SetForwardingPipelineConfigRequest()
    req.device_id = device_id
    req.election_id.low = election
    req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    req.config.p4info.CopyFrom(info)
    req.config.p4_device_config = b"bench"
    req.config.cookie.cookie = cookie
    stub.SetForwardingPipelineConfig(req)


def run(stub, device_id, election, t, batch, n):
    table_id, src_id, dst_id, action_id, port_id = t
    insert = p4runtime_pb2.Update.INSERT
    latency = 0.0
    requests = 0
    start = time.perf_counter()
    i = 0
    while i < n:
        req = p4runtime_pb2.WriteRequest()
        req.device_id = device_id
        req.election_id.low = election
        for j in range(i, min(i + batch, n)):
            u = req.updates.add()
            u.type = insert
            te = u.entity.table_entry
            te.table_id = table_id
            m = te.match.add()
            m.field_id = src_id
            m.exact.value = (0x0A000000 + j).to_bytes(4, "big")
            m = te.match.add()
            m.field_id = dst_id
            m.exact.value = (0xC0A80000 + (j * 7919) % 65536).to_bytes(4, "big")
            a = te.action.action
            a.action_id = action_id
            p = a.params.add()
            p.param_id = port_id
            p.value = (j % 512).to_bytes(2, "big")
        t0 = time.perf_counter()
        stub.Write(req)
        latency += time.perf_counter() - t0
        requests += 1
        i += batch
    elapsed = time.perf_counter() - start
    return {
        "elapsed_s": elapsed,
        "latency_sum_s": latency,
        "requests": requests,
        "entries": n,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc-addr", required=True)
    ap.add_argument("--device-id", type=int, default=2)
    ap.add_argument("--election", type=int, default=1)
    ap.add_argument("--p4info", required=True)
    args = ap.parse_args()

    info = p4info_pb2.P4Info()
    with open(args.p4info) as f:
        text_format.Merge(f.read(), info)
    # The bench may need a bigger table than the example's.
    for tbl in info.tables:
        tbl.size = 0
    channel = grpc.insecure_channel(
        args.grpc_addr,
        options=[
            ("grpc.max_send_message_length", MAX_MSG),
            ("grpc.max_receive_message_length", MAX_MSG),
            ("grpc.max_metadata_size", 64 << 20),
        ],
    )
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    q, _stream = arbitrate(stub, args.device_id, args.election)
    t = ids(info)
    out = sys.stdout
    out.write(
        json.dumps(
            {
                "ready": True,
                "python": sys.version.split()[0],
                "grpcio": grpc.__version__,
                "protobuf": api_implementation.Type(),
            }
        )
        + "\n"
    )
    out.flush()
    cookie = 1
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        if cmd["cmd"] == "run":
            cookie += 1
            set_pipeline(stub, args.device_id, args.election, info, cookie)
            res = run(stub, args.device_id, args.election, t, cmd["batch"], cmd["entries"])
            out.write(json.dumps(res) + "\n")
            out.flush()
    q.put(None)


if __name__ == "__main__":
    main()
