/* p4fleet example: a small leaf "fabric" switch (P4-16, v1model) that uses
 * every P4Runtime entity beyond plain match-action entries.
 *
 * smac:      exact on the source MAC; a miss sends a learning digest
 *            (mac_learn_digest_t) to the controller.
 * l2_fwd:    exact on the destination MAC -> unicast port, a multicast
 *            group, or flood (multicast group 1, the default); a direct
 *            counter counts its hits.
 * ecmp:      IPv4 routing, lpm on the destination plus a 5-tuple hash,
 *            implemented by an action selector (ECMP groups of next hops).
 * acl:       ternary ACL with a direct meter; `mirror` clones the packet
 *            to a clone session (I2E), `deny` drops, red packets drop.
 * port_counter / port_meter: an indirect counter and meter per ingress port.
 * port_last_seen: a register per ingress port (the last source IPv4 address).
 *
 * p4info.txt and fabric.json are p4c's output for this file (see
 * ../README.md for the version and command).
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
/* The multicast group that floods to every port (written by the control
 * plane as a MulticastGroupEntry). */
const bit<16> FLOOD_GROUP = 1;

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;
typedef bit<32> ip4Addr_t;

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

header ipv4_t {
    bit<4>    version;
    bit<4>    ihl;
    bit<8>    diffserv;
    bit<16>   totalLen;
    bit<16>   identification;
    bit<3>    flags;
    bit<13>   fragOffset;
    bit<8>    ttl;
    bit<8>    protocol;
    bit<16>   hdrChecksum;
    ip4Addr_t srcAddr;
    ip4Addr_t dstAddr;
}

header l4_ports_t {
    bit<16> srcPort;
    bit<16> dstPort;
}

struct mac_learn_digest_t {
    macAddr_t srcAddr;
    bit<9>    ingress_port;
}

struct metadata {
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    bit<2>  meter_color;
    bit<2>  port_color;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    l4_ports_t l4;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            PROTO_TCP: parse_l4;
            PROTO_UDP: parse_l4;
            default: accept;
        }
    }
    state parse_l4 {
        packet.extract(hdr.l4);
        meta.l4_src_port = hdr.l4.srcPort;
        meta.l4_dst_port = hdr.l4.dstPort;
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    /* Indirect: one cell per ingress port (bmv2 ports are 9 bits). */
    counter(512, CounterType.packets_and_bytes) port_counter;
    meter(512, MeterType.packets) port_meter;
    register<bit<32>>(512) port_last_seen;

    /* Direct: one cell per entry of the table that names them. */
    direct_counter(CounterType.packets_and_bytes) l2_fwd_counter;
    direct_meter<bit<2>>(MeterType.bytes) acl_meter;

    /* ECMP: 1024 member entries; crc16 over the 5-tuple, 16-bit hash
     * output. The third argument of v1model's action_selector is the
     * hash's output width, not a group size: a group's size limit comes
     * from @max_group_size (P4Info max_group_size), and the annotation
     * below makes a group's size the sum of its members' weights. */
    @max_group_size(16)
    @selector_size_semantics("sum_of_weights")
    action_selector(HashAlgorithm.crc16, 32w1024, 32w16) ecmp_selector;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action learn() {
        digest<mac_learn_digest_t>(1, {hdr.ethernet.srcAddr,
                                       standard_metadata.ingress_port});
    }

    action forward(egressSpec_t port) {
        standard_metadata.egress_spec = port;
    }

    action multicast(bit<16> mcast_grp) {
        standard_metadata.mcast_grp = mcast_grp;
    }

    action flood() {
        standard_metadata.mcast_grp = FLOOD_GROUP;
    }

    action set_nhop(macAddr_t dmac, egressSpec_t port) {
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dmac;
        standard_metadata.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    action permit() {
        acl_meter.read(meta.meter_color);
    }

    action deny() {
        mark_to_drop(standard_metadata);
    }

    action mirror(bit<32> session) {
        acl_meter.read(meta.meter_color);
        clone(CloneType.I2E, session);
    }

    table smac {
        key = {
            hdr.ethernet.srcAddr: exact;
        }
        actions = {
            learn;
            NoAction;
        }
        size = 4096;
        default_action = learn();
    }

    table l2_fwd {
        key = {
            hdr.ethernet.dstAddr: exact;
        }
        actions = {
            forward;
            multicast;
            flood;
            drop;
        }
        size = 4096;
        default_action = flood();
        counters = l2_fwd_counter;
    }

    table ecmp {
        key = {
            hdr.ipv4.dstAddr: lpm;
            /* selector fields feed the hash; P4Info does not list them */
            hdr.ipv4.srcAddr: selector;
            hdr.ipv4.dstAddr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
        }
        actions = {
            set_nhop;
            drop;
        }
        size = 1024;
        default_action = drop();
        implementation = ecmp_selector;
    }

    table acl {
        key = {
            hdr.ipv4.srcAddr: ternary;
            hdr.ipv4.dstAddr: ternary;
            hdr.ipv4.protocol: ternary;
        }
        actions = {
            permit;
            deny;
            mirror;
            @defaultonly NoAction;
        }
        size = 256;
        default_action = NoAction();
        meters = acl_meter;
    }

    apply {
        port_counter.count((bit<32>) standard_metadata.ingress_port);
        port_meter.execute_meter((bit<32>) standard_metadata.ingress_port,
                                 meta.port_color);
        if (meta.port_color == 2w2) {   /* RED */
            drop();
            return;
        }
        smac.apply();
        if (hdr.ipv4.isValid()) {
            port_last_seen.write((bit<32>) standard_metadata.ingress_port,
                                 hdr.ipv4.srcAddr);
            ecmp.apply();
            acl.apply();
            if (meta.meter_color == 2w2) {
                drop();
            }
        } else {
            l2_fwd.apply();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        /* Flooding does not send a packet back where it came from. */
        if (standard_metadata.mcast_grp != 0 &&
            standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.diffserv,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.l4);
    }
}

V1Switch(
    MyParser(),
    MyVerifyChecksum(),
    MyIngress(),
    MyEgress(),
    MyComputeChecksum(),
    MyDeparser()
) main;
