"""p4runtime-shell (unchanged, from PyPI) against the p4fleet emulator:
action profiles and packet replication on examples/fabric.

Connects as primary, sets the fabric pipeline, writes an ECMP group of four
members and an entry that uses it, a one-shot-free member entry, a
multicast group and a clone session, reads each back, checks the spec's
errors for bad input (a group over max_group_size, a member with an
unknown action, a replica port out of range, deleting a member in use), and
removes everything in reverse order. Exits non-zero on the first failed
check.

    python p4runtime_shell_groups.py --grpc-addr 127.0.0.1:9559 --device-id 1 \
        --p4info examples/fabric/p4info.txt --config device.json
"""

import p4runtime_sh.shell as sh
from p4.v1 import p4runtime_pb2
from p4runtime_sh.context import P4Type
from p4runtime_sh.p4runtime import P4RuntimeWriteException
from shell_common import check, connect

PROFILE = "MyIngress.ecmp_selector"


def fails(fn, code, what):
    try:
        fn()
    except P4RuntimeWriteException as e:
        check(code in str(e), "%s fails with %s (%s)" % (what, code, " ".join(str(e).split())))
        return
    check(False, "%s fails" % what)


def member(mid, port):
    m = sh.ActionProfileMember(PROFILE)(member_id=mid, action="MyIngress.set_nhop")
    m.action["dmac"] = "00:00:00:00:00:%02x" % mid
    m.action["port"] = str(port)
    return m


def route(prefix, **spec):
    te = sh.TableEntry("MyIngress.ecmp")(**spec)
    te.match["hdr.ipv4.dstAddr"] = prefix
    return te


def main():
    connect()
    try:
        for i in range(1, 6):
            member(i, i).insert()
        got = {m.member_id: m for m in sh.ActionProfileMember(PROFILE).read()}
        check(sorted(got) == [1, 2, 3, 4, 5], "five members read back")
        port = int.from_bytes(got[3].action["port"].value, "big")
        check(port == 3, "member 3's port read back (got %d)" % port)

        g = sh.ActionProfileGroup(PROFILE)(group_id=10)
        for i in range(1, 5):
            g.add(i, weight=1 + (i == 4))
        g.insert()
        groups = list(sh.ActionProfileGroup(PROFILE).read())
        check(len(groups) == 1 and groups[0].group_id == 10, "group 10 read back")
        weights = sorted((m.member_id, m.weight) for m in groups[0].members)
        check(weights == [(1, 1), (2, 1), (3, 1), (4, 2)], "its 4 members and weights: %s" % weights)

        route("10.0.0.0/8", group_id=10).insert()
        route("192.168.1.0/24", member_id=5).insert()
        entries = {
            bytes(e.match["hdr.ipv4.dstAddr"].lpm.value): e
            for e in sh.TableEntry("MyIngress.ecmp").read()
        }
        check(len(entries) == 2, "two ECMP entries read back")
        check(entries[bytes([10, 0, 0, 0])].group_id == 10, "10/8 -> group 10")
        check(entries[bytes([192, 168, 1, 0])].member_id == 5, "192.168.1/24 -> member 5")

        # Bad input, each refused without touching what is there.
        big = sh.ActionProfileGroup(PROFILE)(group_id=11)
        for i in range(1, 6):
            big.add(i, weight=4)
        fails(big.insert, "RESOURCE_EXHAUSTED", "a group of weight 20 over max_group_size 16")
        # The shell checks action names itself: send the update as bytes.
        bad = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        bad.entity.action_profile_member.action_profile_id = sh.context.get_obj_id(
            P4Type.action_profile, PROFILE)
        bad.entity.action_profile_member.member_id = 9
        bad.entity.action_profile_member.action.action_id = 12345
        fails(lambda: sh.client.write_update(bad), "INVALID_ARGUMENT",
              "a member with an unknown action")
        forward = sh.context.get_obj_id(P4Type.action, "MyIngress.forward")
        bad.entity.action_profile_member.action.action_id = forward
        fails(lambda: sh.client.write_update(bad), "INVALID_ARGUMENT",
              "a member with an action its table does not have")
        check(len(list(sh.ActionProfileMember(PROFILE).read())) == 5, "still five members")
        fails(member(1, 1).delete, "FAILED_PRECONDITION", "deleting a member in a group")
        fails(sh.ActionProfileGroup(PROFILE)(group_id=10).delete, "FAILED_PRECONDITION",
              "deleting a group an entry uses")
        fails(route("172.16.0.0/12", group_id=99).insert, "NOT_FOUND", "an entry naming no group")
        check(len(list(sh.ActionProfileGroup(PROFILE).read())) == 1, "still one group")

        mc = sh.MulticastGroupEntry(1)
        for port in (1, 2, 3, 4):
            mc.add(port, 0)
        mc.insert()
        cs = sh.CloneSessionEntry(5)
        cs.add(7, 0)
        cs.cos = 1
        cs.packet_length_bytes = 128
        cs.insert()
        mcs = list(sh.MulticastGroupEntry().read())
        check(len(mcs) == 1 and mcs[0].group_id == 1, "multicast group 1 read back")
        ports = sorted(r.egress_port for r in mcs[0].replicas)
        check(ports == [1, 2, 3, 4], "its replicas: %s" % ports)
        css = list(sh.CloneSessionEntry(5).read())
        check(len(css) == 1 and (css[0].cos, css[0].packet_length_bytes) == (1, 128),
              "clone session 5 read back with cos and truncation")
        check([r.egress_port for r in css[0].replicas] == [7], "its replica port 7")
        far = sh.MulticastGroupEntry(2)
        far.add(600, 0)
        fails(far.insert, "OUT_OF_RANGE", "a replica on port 600")
        check(len(list(sh.MulticastGroupEntry().read())) == 1, "still one multicast group")

        # Reverse order: entries, groups, members, replication.
        for e in sh.TableEntry("MyIngress.ecmp").read():
            e.delete()
        sh.ActionProfileGroup(PROFILE)(group_id=10).delete()
        for i in range(1, 6):
            member(i, i).delete()
        sh.MulticastGroupEntry(1).delete()
        sh.CloneSessionEntry(5).delete()
        check(list(sh.ActionProfileMember(PROFILE).read()) == [], "no members left")
        check(list(sh.MulticastGroupEntry().read()) == [], "no multicast groups left")
    finally:
        sh.teardown()
    print("p4runtime-shell: all checks passed")


if __name__ == "__main__":
    main()
