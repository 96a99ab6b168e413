/* p4fleet example: a learning L2 switch (P4-16, v1model).
 *
 * smac: source MACs already known; a miss runs `learn`, which sends a
 *       digest (srcAddr, ingress port) to the controller.
 * dmac: destination MAC -> egress port; a miss floods via multicast
 *       group 1 (the controller programs that group with all ports).
 */
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;

const bit<16> BROADCAST_GROUP = 1;

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

struct mac_learn_digest_t {
    macAddr_t srcAddr;
    egressSpec_t ingress_port;
}

struct metadata {
    /* empty */
}

struct headers {
    ethernet_t ethernet;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action learn() {
        digest<mac_learn_digest_t>(1, { hdr.ethernet.srcAddr,
                                        standard_metadata.ingress_port });
    }

    action forward(egressSpec_t port) {
        standard_metadata.egress_spec = port;
    }

    action broadcast() {
        standard_metadata.mcast_grp = BROADCAST_GROUP;
    }

    action drop() {
        mark_to_drop(standard_metadata);
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

    table dmac {
        key = {
            hdr.ethernet.dstAddr: exact;
        }
        actions = {
            forward;
            broadcast;
            drop;
        }
        size = 4096;
        default_action = broadcast();
    }

    apply {
        if (hdr.ethernet.isValid()) {
            smac.apply();
            dmac.apply();
        } else {
            drop();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        /* Do not flood a frame back out of the port it came in on. */
        if (standard_metadata.mcast_grp == BROADCAST_GROUP &&
            standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
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
