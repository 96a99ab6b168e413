"""p4runtime-shell (unchanged, from PyPI) against the p4fleet emulator.

Connects as primary, sets the firewall pipeline, inserts, reads back,
modifies and deletes entries, and checks that a duplicate insert fails with
a per-update error. Exits non-zero on the first failed check.

    python p4runtime_shell_test.py --grpc-addr 127.0.0.1:9559 --device-id 1 \
        --p4info examples/firewall/p4info.txt --config device.json
"""

import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException
from shell_common import check, connect


def entry(src, dst, action="MyIngress.allow", port=None):
    te = sh.TableEntry("MyIngress.firewall")(action=action)
    te.match["hdr.ipv4.srcAddr"] = src
    te.match["hdr.ipv4.dstAddr"] = dst
    if port is not None:
        te.action["port"] = str(port)
    return te


def read_all():
    return list(sh.TableEntry("MyIngress.firewall").read())


def main():
    connect()
    try:
        check(read_all() == [], "table starts empty")

        n = 20
        for i in range(n):
            entry("10.0.0.%d" % (i + 1), "10.0.1.1", port=i % 8).insert()
        entry("10.0.9.9", "10.0.1.1", action="MyIngress.drop").insert()
        got = read_all()
        check(len(got) == n + 1, "read back %d entries (got %d)" % (n + 1, len(got)))

        srcs = {bytes(e.match["hdr.ipv4.srcAddr"].exact.value) for e in got}
        want = {bytes([10, 0, 0, i + 1]) for i in range(n)} | {bytes([10, 0, 9, 9])}
        check(srcs == want, "match values read back")

        try:
            entry("10.0.0.1", "10.0.1.1", port=1).insert()
            check(False, "duplicate insert fails")
        except P4RuntimeWriteException as e:
            check("ALREADY_EXISTS" in str(e), "duplicate insert fails with ALREADY_EXISTS")

        entry("10.0.0.1", "10.0.1.1", port=7).modify()
        te = sh.TableEntry("MyIngress.firewall")
        te.match["hdr.ipv4.srcAddr"] = "10.0.0.1"
        te.match["hdr.ipv4.dstAddr"] = "10.0.1.1"
        one = list(te.read())
        check(len(one) == 1, "read one entry by key")
        port = int.from_bytes(one[0].action["port"].value, "big")
        check(port == 7, "modify changed the port (got %d)" % port)

        for e in read_all():
            e.delete()
        check(read_all() == [], "all entries deleted")
    finally:
        sh.teardown()
    print("p4runtime-shell: all checks passed")


if __name__ == "__main__":
    main()
