#!/usr/bin/env python3
"""How many firewall entries fit in one ConfigMap, plain and gzip-compressed
(docs/entries.md, "Limits and how many entries fit"). Generates 1,000,000
entries in the line format's positional form, compresses them at level 6
(flate2's and gzip's default) and divides the ConfigMap limit (1 MiB of
data + binaryData, less 4 KiB for metadata) by the bytes per entry.

    python3 hack/entries-per-configmap.py
"""
import gzip, random, zlib
def text(n, kind):
    r = random.Random(1)
    out = ["#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n"]
    for i in range(n):
        if kind == "sequential":
            out.append(f"10.{(i>>16)&255}.{(i>>8)&255}.{i&255} 172.16.0.1 {i%500}\n")
        else:
            a = r.getrandbits(32); b = r.getrandbits(32)
            out.append(f"{a>>24}.{(a>>16)&255}.{(a>>8)&255}.{a&255} {b>>24}.{(b>>16)&255}.{(b>>8)&255}.{b&255} {r.randrange(512)}\n")
    return "".join(out).encode()
LIMIT = 1048576 - 4096  # leave room for metadata
for kind in ["sequential", "random"]:
    t = text(1_000_000, kind)
    z = gzip.compress(t, compresslevel=6)
    per = len(z) / 1_000_000
    fit = int(LIMIT / per)
    plain_fit = int(LIMIT / (len(t)/1_000_000))
    print(f"{kind}: 1M entries text {len(t)/1e6:.1f} MB, gzip-6 {len(z)/1e6:.2f} MB (ratio {len(t)/len(z):.1f}); per ConfigMap: plain ~{plain_fit}, gzip ~{fit}; ConfigMaps for 1M: plain {-(-1_000_000//plain_fit)}, gzip {-(-1_000_000//fit)}")
