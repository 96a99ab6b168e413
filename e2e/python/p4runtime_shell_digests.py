"""p4runtime-shell (unchanged, from PyPI) against the p4fleet emulator:
digests.

Sets the l2switch pipeline, configures its learning digest with the
shell's DigestEntry and reads the config back, starts the shell's
DigestList receiver (which acks each list), sends frames from two
unknown source MACs through the emulator's side channel (POST
/devices/{id}/frames, the L2 frame model) and checks that the digest
data it receives names those MACs and ports.

    python p4runtime_shell_digests.py --grpc-addr 127.0.0.1:9559 \
        --device-id 1 --p4info p4info.txt --config device.json \
        --stats-addr 127.0.0.1:9560
"""

import json
import os
import sys
import urllib.request

import p4runtime_sh.shell as sh
from shell_common import connect


def check(cond, what):
    """shell_common.check, but exits at once: the shell's DigestList
    thread would keep a normal exit waiting."""
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.stdout.flush()
        os._exit(1)
    print("ok:", what)


def main():
    args = connect("--stats-addr")

    de = sh.DigestEntry("mac_learn_digest_t")
    de.max_timeout_ns = 0
    de.max_list_size = 1
    de.ack_timeout_ns = 60 * 10**9
    de.insert()
    read = list(sh.DigestEntry("mac_learn_digest_t").read())
    check(
        len(read) == 1 and read[0].max_list_size == 1
        and read[0].ack_timeout_ns == 60 * 10**9,
        "DigestEntry config read back",
    )

    lists = sh.DigestList()
    frames = [
        {"port": 3, "src": "02:00:00:00:00:01", "dst": "ff:ff:ff:ff:ff:ff"},
        {"port": 4, "src": "02:00:00:00:00:02", "dst": "ff:ff:ff:ff:ff:ff"},
    ]
    req = urllib.request.Request(
        "http://%s/devices/%d/frames" % (args.stats_addr, args.device_id),
        data=json.dumps(frames).encode(),
        headers={"content-type": "application/json"},
    )
    report = json.load(urllib.request.urlopen(req))
    check(report["digests_queued"] == 2, "two learning digests queued: %s" % report)

    got = []
    for msg in lists.sniff(timeout=10):
        for d in msg.digest.data:
            mac = int.from_bytes(d.struct.members[0].bitstring, "big")
            port = int.from_bytes(d.struct.members[1].bitstring, "big")
            got.append((mac, port))
        if len(got) >= 2:
            break
    check(
        sorted(got) == [(0x020000000001, 3), (0x020000000002, 4)],
        "digest lists name the unknown MACs and their ports: %s" % got,
    )
    print("all checks passed")
    sys.stdout.flush()
    # The shell's DigestList thread blocks on the stream forever.
    os._exit(0)


if __name__ == "__main__":
    main()
