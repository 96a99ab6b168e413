"""What the p4runtime-shell scripts share: the command line, the connection
(primary, pipeline set from --p4info and --config) and the check helper."""

import argparse
import sys

import p4runtime_sh.shell as sh


def check(cond, what):
    """Prints `ok: what`, or `FAIL: what` and exits non-zero."""
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("ok:", what)


def connect(*extra):
    """Parses --grpc-addr, --device-id, --p4info, --config (and the
    required string options named in `extra`); connects as primary and
    sets the pipeline (VERIFY_AND_COMMIT). Returns the parsed arguments."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpc-addr", required=True)
    ap.add_argument("--device-id", type=int, default=1)
    ap.add_argument("--p4info", required=True)
    ap.add_argument("--config", required=True)
    for flag in extra:
        ap.add_argument(flag, required=True)
    args = ap.parse_args()
    sh.setup(
        device_id=args.device_id,
        grpc_addr=args.grpc_addr,
        election_id=(0, 1),
        config=sh.FwdPipeConfig(args.p4info, args.config),
    )
    return args
