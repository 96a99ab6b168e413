"""p4runtime-shell (unchanged, from PyPI) against the p4fleet emulator:
counters, meters and registers.

Sets a pipeline whose P4Info has a direct counter on the firewall table, a
meter and a register array (the emulator's P4Info checks), writes a meter
config with the shell's MeterEntry and reads it back, checks that a config
with PIR below CIR is refused with INVALID_ARGUMENT, reads a direct counter
of an inserted entry, and writes and reads back a register value (the
shell has no RegisterEntry class: a raw Write and Read through its
client).

    python p4runtime_shell_resources.py --grpc-addr 127.0.0.1:9559 \
        --device-id 1 --p4info p4info.txt --config device.json
"""

import p4runtime_sh.shell as sh
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeWriteException
from shell_common import check, connect


def main():
    args = connect("--register-id")
    register_id = int(args.register_id)
    try:
        m = sh.MeterEntry("MyIngress.rate")
        m.index = 1
        m.cir, m.cburst, m.pir, m.pburst = 1000, 100, 2000, 200
        m.modify()
        got = list(sh.MeterEntry("MyIngress.rate").read())
        check(len(got) == 4, "wildcard meter read returns every index (%d)" % len(got))
        one = [e for e in got if e.index == 1][0]
        check(
            (one.cir, one.cburst, one.pir, one.pburst) == (1000, 100, 2000, 200),
            "meter config read back",
        )

        bad = sh.MeterEntry("MyIngress.rate")
        bad.index = 2
        bad.cir, bad.cburst, bad.pir, bad.pburst = 5000, 100, 1000, 100
        try:
            bad.modify()
            check(False, "pir below cir is refused")
        except P4RuntimeWriteException as e:
            check("INVALID_ARGUMENT" in str(e), "pir below cir is refused with INVALID_ARGUMENT")

        te = sh.TableEntry("MyIngress.firewall")(action="MyIngress.allow")
        te.match["hdr.ipv4.srcAddr"] = "10.0.0.1"
        te.match["hdr.ipv4.dstAddr"] = "10.0.1.1"
        te.action["port"] = "3"
        te.insert()
        dc = sh.DirectCounterEntry("MyIngress.firewall_hits")
        counted = list(dc.read())
        check(len(counted) == 1, "one direct counter entry per table entry")
        check(counted[0].packet_count == 0, "a new entry's counter reads 0")

        update = p4runtime_pb2.Update()
        update.type = p4runtime_pb2.Update.MODIFY
        reg = update.entity.register_entry
        reg.register_id = register_id
        reg.index.index = 2
        reg.data.bitstring = b"\x00\x0a\xbc"
        sh.client.write_update(update)
        ent = p4runtime_pb2.Entity()
        ent.register_entry.register_id = register_id
        ent.register_entry.index.index = 2
        values = [
            e.register_entry.data.bitstring
            for r in sh.client.read_one(ent)
            for e in r.entities
        ]
        check(values == [b"\x0a\xbc"], "register value read back canonical (%r)" % values)
        reg.data.bitstring = b"\x10\x00"
        try:
            sh.client.write_update(update)
            check(False, "a value wider than bit<12> is refused")
        except P4RuntimeWriteException as e:
            check("OUT_OF_RANGE" in str(e), "a value wider than bit<12> is refused with OUT_OF_RANGE")
    finally:
        sh.teardown()
    print("p4runtime-shell: all checks passed")


if __name__ == "__main__":
    main()
