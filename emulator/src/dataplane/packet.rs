//! Packet memory and the built-in traffic source: a preallocated buffer
//! pool (mbuf-like: fixed-size buffers addressed by index, one pool per
//! worker core, a free list that never grows) and a generator that fills
//! buffers with Ethernet [802.1Q] IPv4/UDP frames over a configurable
//! number of flows (distinct source/destination MAC pairs), sizes and rate.
//!
//! The generator is the worker's rx port, polled in bursts like a DPDK PMD
//! (`rte_eth_rx_burst` on a `net_null`/`ring` port): it runs on the worker
//! core, so its cost (a template copy and two MAC writes per packet) is in
//! every measured rate. A generator thread would instead take one of this
//! machine's two cores away from workers and extern cores. Under a rate it
//! is a NIC with an rx queue of [`RX_QUEUE_DEPTH`] packets: what arrives
//! while the queue is full (the worker polls too slowly, or holds back
//! because its externs cannot park more packets) is lost and counted
//! (`rx_missed`, a NIC's `imissed`).

use std::cell::UnsafeCell;

/// Smallest frame the generator builds (Ethernet + IPv4 + UDP headers).
pub const MIN_FRAME: usize = 14 + 20 + 8;
/// Largest frame (one buffer, no chaining).
pub const MAX_FRAME: usize = 9000;
/// First source MAC of the generated flows (locally administered).
pub const SRC_MAC_BASE: u64 = 0x02_00_00_00_00_00;
/// First destination MAC of the generated flows.
pub const DST_MAC_BASE: u64 = 0x02_00_00_01_00_00;
/// Packets a rate-limited source holds for a worker that does not poll
/// (a NIC rx queue of 4,096 descriptors, the largest common size: deep
/// enough that a worker descheduled for a few ms on a shared machine
/// loses nothing at the emulator's default 100,000 packets/s).
pub const RX_QUEUE_DEPTH: u64 = 4096;

/// Fixed-size packet buffers, allocated once. A buffer index is owned by
/// exactly one thread at a time; ownership moves only through the rings
/// between workers and extern cores (which order memory: release on push,
/// acquire on pop), which is what makes handing out raw pointers sound.
pub struct MbufPool {
    mem: Box<[UnsafeCell<u8>]>,
    buf_size: usize,
    count: u32,
}

// SAFETY: see the type's documentation: a buffer is only accessed by the
// thread that owns its index.
unsafe impl Sync for MbufPool {}
unsafe impl Send for MbufPool {}

impl MbufPool {
    /// `count` buffers of `buf_size` bytes (rounded up to 64).
    pub fn new(count: u32, buf_size: usize) -> MbufPool {
        let buf_size = buf_size.div_ceil(64) * 64;
        let bytes = vec![0u8; count as usize * buf_size].into_boxed_slice();
        // SAFETY: UnsafeCell<u8> is repr(transparent) over u8.
        let mem = unsafe { Box::from_raw(Box::into_raw(bytes) as *mut [UnsafeCell<u8>]) };
        MbufPool {
            mem,
            buf_size,
            count,
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// The start of buffer `i`.
    ///
    /// # Safety
    /// The caller owns index `i` (see the type's documentation) and stays
    /// within `buf_size` bytes.
    #[inline]
    pub unsafe fn ptr(&self, i: u32) -> *mut u8 {
        debug_assert!(i < self.count);
        self.mem[i as usize * self.buf_size].get()
    }

    /// All indices, to seed a free list.
    pub fn free_list(&self) -> FreeList {
        FreeList {
            free: (0..self.count).rev().collect(),
        }
    }
}

/// A worker's free buffers: a stack that never grows past the pool size.
pub struct FreeList {
    free: Vec<u32>,
}

impl FreeList {
    #[inline]
    pub fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }

    #[inline]
    pub fn release(&mut self, i: u32) {
        debug_assert!(self.free.len() < self.free.capacity());
        self.free.push(i);
    }

    pub fn available(&self) -> usize {
        self.free.len()
    }
}

/// The generated traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficConfig {
    /// Packets per second over all workers; `None` = as fast as the
    /// workers poll (line rate of an infinitely fast NIC).
    pub rate_pps: Option<u64>,
    /// Stop after this many packets in total; `None` = forever.
    pub total_packets: Option<u64>,
    /// Frame sizes in bytes, used in turn (e.g. `[64]`, an IMIX).
    pub sizes: Vec<u16>,
    /// Distinct flows: flow `i` goes from `src_mac(i)` to `dst_mac(i)`.
    pub flows: u32,
    /// Tag every frame with 802.1Q (VLAN id = flow % 4094 + 1).
    pub vlan: bool,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            rate_pps: None,
            total_packets: None,
            sizes: vec![64],
            flows: 16,
            vlan: false,
        }
    }
}

impl TrafficConfig {
    /// Checks sizes and flows.
    pub fn validate(&self) -> Result<(), String> {
        let min = MIN_FRAME + if self.vlan { 4 } else { 0 };
        if self.sizes.is_empty() {
            return Err("sizes is empty".into());
        }
        if let Some(s) = self
            .sizes
            .iter()
            .find(|s| (**s as usize) < min || **s as usize > MAX_FRAME)
        {
            return Err(format!("frame size {s} outside {min}..={MAX_FRAME}"));
        }
        if self.flows == 0 {
            return Err("flows must be at least 1".into());
        }
        if self.rate_pps == Some(0) {
            return Err("rate_pps must be at least 1 (or none for line rate)".into());
        }
        Ok(())
    }

    /// Largest frame.
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(64) as usize
    }
}

/// Source MAC of flow `i`.
pub fn src_mac(i: u32) -> [u8; 6] {
    mac(SRC_MAC_BASE + i as u64)
}

/// Destination MAC of flow `i`.
pub fn dst_mac(i: u32) -> [u8; 6] {
    mac(DST_MAC_BASE + i as u64)
}

fn mac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Payload byte `i` of every generated frame (so tests can tell a
/// transformed payload from the original).
pub fn payload_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(3)
}

/// Builds one frame of `size` bytes for flow 0: Ethernet, optional VLAN,
/// IPv4 (with header checksum), UDP, then `payload_byte` pattern.
pub fn build_frame(size: usize, vlan: bool) -> Vec<u8> {
    let mut f = Vec::with_capacity(size);
    f.extend_from_slice(&dst_mac(0));
    f.extend_from_slice(&src_mac(0));
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let l3 = f.len();
    let ip_len = (size - l3) as u16;
    let mut ip = [
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    let udp_len = ip_len - 20;
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]); // 1234 -> 5678
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
    let payload = size - f.len();
    f.extend((0..payload).map(payload_byte));
    f
}

/// The IPv4 header checksum (RFC 1071) of `h` with its checksum field
/// as given.
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A received packet: buffer index, start pointer, length, input port.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket {
    pub mbuf: u32,
    pub ptr: *mut u8,
    pub len: u16,
}

/// One worker's share of the traffic: its own rate and count.
pub struct Generator {
    templates: Vec<Vec<u8>>,
    vlan: bool,
    flows: u32,
    next_flow: u32,
    next_size: usize,
    /// Per-worker rate in packets/s; `None` = unlimited.
    rate: Option<u64>,
    remaining: Option<u64>,
    generated: u64,
    start_ns: Option<u64>,
    /// Lost because the rx queue was full, not yet taken by `take_missed`.
    missed: u64,
}

impl Generator {
    /// The share of worker `index` of `workers`.
    pub fn new(cfg: &TrafficConfig, index: usize, workers: usize) -> Generator {
        let w = workers as u64;
        let share = |total: u64| total / w + u64::from((index as u64) < total % w);
        Generator {
            templates: cfg
                .sizes
                .iter()
                .map(|s| build_frame(*s as usize, cfg.vlan))
                .collect(),
            vlan: cfg.vlan,
            flows: cfg.flows,
            // Workers start on different flows so they do not all hit one
            // table entry at the same time.
            next_flow: (index as u32) % cfg.flows,
            next_size: 0,
            rate: cfg.rate_pps.map(|r| share(r).max(1)),
            remaining: cfg.total_packets.map(share),
            generated: 0,
            start_ns: None,
            missed: 0,
        }
    }

    /// Whether a finite source has produced everything.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Under a rate: nanoseconds from `now_ns` until `n` more packets
    /// are due (0 when they already are). `None` at line rate, before the
    /// first poll, and when a finite source is done.
    pub fn ns_until_due(&self, n: u64, now_ns: u64) -> Option<u64> {
        let rate = self.rate?;
        let start = self.start_ns?;
        let n = match self.remaining {
            Some(0) => return None,
            Some(r) => n.min(r),
            None => n,
        };
        let due = (self.generated + n) as u128 * 1_000_000_000 / rate as u128;
        Some((start + due as u64).saturating_sub(now_ns))
    }

    /// Under a rate: the packets due by `now_ns` (0 before the first
    /// poll starts the clock), after losing what overflows the rx queue.
    #[inline]
    fn expire(&mut self, now_ns: u64) -> Option<u64> {
        let rate = self.rate?;
        let start = *self.start_ns.get_or_insert(now_ns);
        let due = ((now_ns - start) as u128 * rate as u128 / 1_000_000_000) as u64;
        let waiting = due.saturating_sub(self.generated);
        if waiting > RX_QUEUE_DEPTH {
            let mut lost = waiting - RX_QUEUE_DEPTH;
            if let Some(r) = &mut self.remaining {
                lost = lost.min(*r);
                *r -= lost;
            }
            self.generated += lost;
            self.missed += lost;
        }
        Some(due.saturating_sub(self.generated))
    }

    /// Counts what the rx queue lost by `now_ns` without taking packets
    /// (a worker holding back still sees its NIC drop).
    #[inline]
    pub fn idle_poll(&mut self, now_ns: u64) {
        self.expire(now_ns);
    }

    /// Packets lost to a full rx queue since the last call.
    #[inline]
    pub fn take_missed(&mut self) -> u64 {
        std::mem::take(&mut self.missed)
    }

    /// Fills up to `out.len()` buffers; returns how many. Takes buffers from
    /// `free`; stops early when it runs out (the NIC's "no mbuf").
    #[inline]
    pub fn rx_burst(
        &mut self,
        pool: &MbufPool,
        free: &mut FreeList,
        out: &mut [RxPacket],
        now_ns: u64,
    ) -> usize {
        let mut n = out.len() as u64;
        if let Some(due) = self.expire(now_ns) {
            n = n.min(due);
        }
        if let Some(r) = self.remaining {
            n = n.min(r);
        }
        let mut got = 0;
        while (got as u64) < n {
            let Some(mbuf) = free.alloc() else { break };
            let t = &self.templates[self.next_size];
            self.next_size += 1;
            if self.next_size == self.templates.len() {
                self.next_size = 0;
            }
            let flow = self.next_flow;
            self.next_flow += 1;
            if self.next_flow == self.flows {
                self.next_flow = 0;
            }
            // SAFETY: `mbuf` came off this worker's free list, so the worker
            // owns it; templates are at most the pool's buffer size.
            let ptr = unsafe {
                let p = pool.ptr(mbuf);
                std::ptr::copy_nonoverlapping(t.as_ptr(), p, t.len());
                let d = dst_mac(flow);
                let s = src_mac(flow);
                std::ptr::copy_nonoverlapping(d.as_ptr(), p, 6);
                std::ptr::copy_nonoverlapping(s.as_ptr(), p.add(6), 6);
                if self.vlan {
                    let vid = (flow % 4094 + 1) as u16;
                    std::ptr::copy_nonoverlapping(vid.to_be_bytes().as_ptr(), p.add(14), 2);
                }
                p
            };
            out[got] = RxPacket {
                mbuf,
                ptr,
                len: t.len() as u16,
            };
            got += 1;
        }
        self.generated += got as u64;
        if let Some(r) = &mut self.remaining {
            *r -= got as u64;
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receive slots for a burst of 8, none filled.
    fn empty_burst() -> [RxPacket; 8] {
        [RxPacket {
            mbuf: 0,
            ptr: std::ptr::null_mut(),
            len: 0,
        }; 8]
    }

    #[test]
    fn frame_layout() {
        let f = build_frame(64, false);
        assert_eq!(f.len(), 64);
        assert_eq!(&f[0..6], &dst_mac(0));
        assert_eq!(&f[6..12], &src_mac(0));
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[14], 0x45);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        // A correct checksum sums to zero.
        assert_eq!(ipv4_checksum(&f[14..34]), 0);
        assert_eq!(f[42], payload_byte(0));
        let v = build_frame(128, true);
        assert_eq!(&v[12..14], &[0x81, 0x00]);
        assert_eq!(&v[16..18], &[0x08, 0x00]);
        assert_eq!(ipv4_checksum(&v[18..38]), 0);
    }

    #[test]
    fn validation() {
        let mut c = TrafficConfig::default();
        assert!(c.validate().is_ok());
        c.sizes = vec![40];
        assert!(c.validate().unwrap_err().contains("40"));
        c.sizes = vec![45];
        c.vlan = true;
        assert!(c.validate().is_err());
        c.vlan = false;
        c.flows = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn pool_and_free_list_accounting() {
        let pool = MbufPool::new(4, 100);
        assert_eq!(pool.buf_size(), 128);
        let mut free = pool.free_list();
        let got: Vec<u32> = (0..5).filter_map(|_| free.alloc()).collect();
        assert_eq!(got, [0, 1, 2, 3]);
        free.release(2);
        assert_eq!(free.available(), 1);
        assert_eq!(free.alloc(), Some(2));
    }

    #[test]
    fn generator_flows_count_and_rate() {
        let cfg = TrafficConfig {
            total_packets: Some(5),
            flows: 2,
            sizes: vec![64, 100],
            ..TrafficConfig::default()
        };
        let pool = MbufPool::new(8, 128);
        let mut free = pool.free_list();
        let mut g = Generator::new(&cfg, 0, 1);
        let mut out = empty_burst();
        let n = g.rx_burst(&pool, &mut free, &mut out, 0);
        assert_eq!(n, 5);
        assert!(g.done());
        let lens: Vec<u16> = out[..n].iter().map(|p| p.len).collect();
        assert_eq!(lens, [64, 100, 64, 100, 64]);
        let dst = |p: &RxPacket| unsafe { std::slice::from_raw_parts(p.ptr, 6).to_vec() };
        assert_eq!(dst(&out[0]), dst_mac(0));
        assert_eq!(dst(&out[1]), dst_mac(1));
        assert_eq!(dst(&out[2]), dst_mac(0));

        // 1000 pps: nothing at t=0, one packet per ms after.
        let cfg = TrafficConfig {
            rate_pps: Some(1000),
            ..TrafficConfig::default()
        };
        let mut free = pool.free_list();
        let mut g = Generator::new(&cfg, 0, 1);
        assert_eq!(g.ns_until_due(1, 0), None, "before the first poll");
        assert_eq!(g.rx_burst(&pool, &mut free, &mut out, 1_000_000), 0);
        // Started at 1 ms: the 4th packet is due at 5 ms.
        assert_eq!(g.ns_until_due(4, 2_000_000), Some(3_000_000));
        assert_eq!(g.rx_burst(&pool, &mut free, &mut out, 4_000_000), 3);
        assert_eq!(g.ns_until_due(1, 5_000_000), Some(0));
        let line = Generator::new(&TrafficConfig::default(), 0, 1);
        assert_eq!(line.ns_until_due(32, 0), None);
    }

    #[test]
    fn a_full_rx_queue_loses_packets_and_counts_them() {
        let cfg = TrafficConfig {
            rate_pps: Some(1_000_000),
            total_packets: Some(10_000),
            ..TrafficConfig::default()
        };
        let pool = MbufPool::new(8, 128);
        let mut free = pool.free_list();
        let mut g = Generator::new(&cfg, 0, 1);
        let mut out = empty_burst();
        assert_eq!(g.rx_burst(&pool, &mut free, &mut out, 0), 0);
        // 5 ms unpolled at 1 Mpps: 5,000 due, the queue holds 4,096.
        g.idle_poll(5_000_000);
        assert_eq!(g.take_missed(), 5_000 - RX_QUEUE_DEPTH);
        assert_eq!(g.take_missed(), 0);
        assert_eq!(g.rx_burst(&pool, &mut free, &mut out, 5_000_000), 8);
        // Lost packets count against the total: 10,000 - 904 - 8 left.
        assert_eq!(g.remaining, Some(10_000 - 904 - 8));
        // Within the queue's depth nothing is lost; past it, again.
        g.idle_poll(5_000_500);
        assert_eq!(g.take_missed(), 0);
        g.idle_poll(6_000_000);
        assert_eq!(g.take_missed(), 6_000 - 912 - RX_QUEUE_DEPTH);
    }

    #[test]
    fn shares_split_totals() {
        let cfg = TrafficConfig {
            total_packets: Some(7),
            ..TrafficConfig::default()
        };
        let rem: Vec<_> = (0..3)
            .map(|i| Generator::new(&cfg, i, 3).remaining.unwrap())
            .collect();
        assert_eq!(rem, [3, 2, 2]);
    }
}
