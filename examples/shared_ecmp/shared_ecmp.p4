/* shared_ecmp: one action selector shared by two tables (v1model).
 * MyIngress.ecmp_v4 (lpm dstAddr) and MyIngress.ecmp_src (exact srcAddr)
 * both use MyIngress.nhop_selector: P4Info lists one action profile with
 * both table ids, and a member or group can be used by entries of either
 * table. p4c requires the tables' selector inputs to be the same.
 * Written for p4fleet's tests (issue 16). */
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
}

struct metadata {
    bit<1> routed;
}

parser MyParser(packet_in packet, out headers hdr, inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }
    action set_nhop(bit<48> dmac, bit<9> port) {
        hdr.ethernet.dstAddr = dmac;
        standard_metadata.egress_spec = port;
        meta.routed = 1;
    }

    action_selector(HashAlgorithm.crc16, 32w1024, 32w14) nhop_selector;

    table ecmp_v4 {
        key = {
            hdr.ipv4.dstAddr        : lpm;
            hdr.ipv4.identification : selector;
            hdr.ipv4.protocol       : selector;
        }
        actions = { set_nhop; drop; }
        implementation = nhop_selector;
        size = 1024;
    }

    table ecmp_src {
        key = {
            hdr.ipv4.srcAddr        : exact;
            hdr.ipv4.identification : selector;
            hdr.ipv4.protocol       : selector;
        }
        actions = { set_nhop; drop; }
        implementation = nhop_selector;
        size = 256;
    }

    apply {
        if (hdr.ipv4.isValid()) {
            ecmp_src.apply();
            if (meta.routed == 0) {
                ecmp_v4.apply();
            }
        }
    }
}

control MyEgress(inout headers hdr, inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
