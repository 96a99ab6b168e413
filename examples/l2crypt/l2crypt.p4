/* p4fleet example: L2 forwarding with asynchronous crypto externs
 * (P4-16, v1model-style), after Figure 1 of "Asynchronous Extern Functions
 * in Programmable Software Data Planes" (T4P4S).
 *
 * smac: source MACs already known; a miss runs `learn` (a controller would
 *       get a digest; the emulator's data plane only counts the action).
 * dmac: destination MAC -> egress port; a miss floods (`broadcast`).
 * Then two extern functions, declared by the architecture, run over the
 * packet's payload (the bytes behind the parsed headers): `async_encrypt`
 * and `async_decrypt` (AES-128-CBC in the emulator). Whether a call runs
 * inline, asynchronously on other cores or not at all is not in the
 * program: an AsyncExternPolicy chooses it per extern at run time. The
 * `@async` blocks carry T4P4S's annotation: which deparser runs before the
 * call and which parser after it.
 */
#include <core.p4>
#include <v1model.p4>

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;

/* Flood port of the emulated DPDK target (its tx counter for floods). */
const egressSpec_t FLOOD_PORT = 255;

/* Target-provided extern functions: encrypt / decrypt the payload behind
 * the headers that the parser extracted, in place, whole 16-byte blocks. */
extern void async_encrypt();
extern void async_decrypt();

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

header vlan_t {
    bit<16> pcp_dei_vid;
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

struct metadata {
    /* empty */
}

struct headers {
    ethernet_t ethernet;
    vlan_t     vlan;
    ipv4_t     ipv4;
}

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x8100: parse_vlan;
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_vlan {
        packet.extract(hdr.vlan);
        transition select(hdr.vlan.etherType) {
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

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action learn() {
        /* A learning switch would send a digest here (see examples/l2switch). */
    }

    action forward(egressSpec_t port) {
        standard_metadata.egress_spec = port;
    }

    action broadcast() {
        standard_metadata.egress_spec = FLOOD_PORT;
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
        smac.apply();
        dmac.apply();
        @async(deparse="MyDeparser", parser="MyParser") {
            async_encrypt();
        }
        @async(deparse="MyDeparser", parser="MyParser") {
            async_decrypt();
        }
    }
}

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.vlan);
        packet.emit(hdr.ipv4);
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
