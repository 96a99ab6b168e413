//! Adaptive batching (`batchSize: Auto`, `maxInFlight: Auto`): the batch
//! size and requests in flight of one device, tuned from the entries/s
//! its writes achieve. Pure: no I/O and no clock; the caller reports what
//! each write did ([`Tuner::observe`]) and asks what to use next
//! ([`Tuner::current`]).
//!
//! A hill climb over a log-spaced grid (batch sizes a factor √2 apart,
//! in-flight counts 1, 2, 3, 4, 6, 8, …): keep moving while entries/s
//! improves by more than [`GAIN`], go back to the best point when it does
//! not, try the other directions, then smaller steps; once no neighbour
//! is better, stay, and probe the neighbours again every [`PROBE_EVERY`]
//! observations so a device whose latency changes is followed. Only the
//! dimensions that are Auto move.
//!
//! In flight is weighed by the requests a write makes: a write of `n`
//! updates at batch `b` is `⌈n / b⌉` requests, so every in-flight count
//! from that number up sends them all at once and measures alike (a
//! 200,000-update sync at 65,536 per request is four requests). The climb
//! does not try more in flight than that, and a move down starts below
//! it. A move in flight that measures flat (within [`GAIN`] either way)
//! is followed by one trial of that direction's far end (1, or as many as
//! the write's requests): a plateau between neighbours says nothing about
//! its end, where the gain may be (on the emulator without a profile,
//! 65,536 × 3 and × 4 measured alike and × 1 best). Batch sizes get no
//! far-end trial: their far end (a batch of 1, or 65,536 on a slow
//! device) can make one write take many seconds.

use std::collections::HashMap;
use std::time::Duration;

/// Improvement a move must bring to count (measurements are noisy).
pub const GAIN: f64 = 0.03;
/// Observations at a settled point before the neighbours are tried again.
pub const PROBE_EVERY: u32 = 16;
/// Largest batch Auto uses (a request stays well under gRPC's limits).
pub const MAX_BATCH: usize = 65_536;
/// A write smaller than the largest measured by this factor is not
/// measured (a sync's remainder; see [`Tuner::observe`]).
const REMAINDER: usize = 4;
/// In-flight counts Auto chooses from.
const IN_FLIGHT: [usize; 10] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32];
/// Batch level `l` is 2^(l/2): level 20 is 1,024, level 32 is 65,536.
const MAX_BATCH_LEVEL: i32 = 32;
/// How far a first move jumps, in grid levels (×4 in batch size).
const FIRST_STEP: i32 = 4;

/// A grid point: batch level and in-flight index.
type Point = (i32, i32);

/// One direction of a move: which dimension and which way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    BatchUp,
    BatchDown,
    InFlightUp,
    InFlightDown,
}

const DIRS: [Dir; 4] = [
    Dir::BatchUp,
    Dir::InFlightUp,
    Dir::BatchDown,
    Dir::InFlightDown,
];

/// The tuned batch size and requests in flight of one device.
#[derive(Debug, Clone)]
pub struct Tuner {
    auto_batch: bool,
    auto_in_flight: bool,
    /// Where the climb stands (the point being measured).
    at: Point,
    /// The best point so far and the move that led from it to `at`, if
    /// `at` is a trial.
    best: Point,
    trial: Option<Dir>,
    /// Directions tried from `best` at the current step without gain.
    failed: Vec<Dir>,
    step: i32,
    /// Entries/s measured per point (moving average).
    rates: HashMap<Point, f64>,
    /// Observations since the climb settled (None while climbing).
    settled: Option<u32>,
    /// Updates of the largest measured write: how many requests a write
    /// makes at a batch size ([`Tuner::requests`]); 0 before any. The
    /// largest, not the last: a sync's last chunk is a remainder, and
    /// fewer requests than a write really makes would rule out in-flight
    /// counts that help it.
    updates: usize,
    /// Whether `at` is the far end of `trial`'s direction, tried after
    /// its neighbour measured flat.
    far_trial: bool,
    /// Directions whose far end was tried from `best` (once each).
    far_tried: Vec<Dir>,
}

impl Tuner {
    /// A tuner starting at `batch_size` × `max_in_flight`; only the Auto
    /// dimensions move (with neither, it never does).
    pub fn new(
        batch_size: usize,
        max_in_flight: usize,
        auto_batch: bool,
        auto_in_flight: bool,
    ) -> Tuner {
        let at = (batch_level(batch_size), in_flight_index(max_in_flight));
        Tuner {
            auto_batch,
            auto_in_flight,
            at,
            best: at,
            trial: None,
            failed: Vec::new(),
            step: FIRST_STEP,
            rates: HashMap::new(),
            settled: None,
            updates: 0,
            far_trial: false,
            far_tried: Vec::new(),
        }
    }

    /// The batch size and requests in flight to use for the next write.
    pub fn current(&self) -> (usize, usize) {
        (batch_of(self.at.0), IN_FLIGHT[self.at.1 as usize])
    }

    /// Whether the climb has settled (no neighbour was better).
    pub fn settled(&self) -> bool {
        self.settled.is_some()
    }

    /// Records a write of `updates` that took `elapsed` at the current
    /// setting, and picks the next setting. A write of fewer than two
    /// batches says nothing about batching or pipelining and is ignored,
    /// unless it is a trial of a larger batch that the best setting's
    /// batch would have measured: the device's writes are too small for
    /// that batch, so the trial fails (else it would wait for a large
    /// write that may never come, and never settle). A write less than a
    /// quarter of the largest measured (a sync's remainder chunk) is
    /// ignored too.
    pub fn observe(&mut self, updates: usize, elapsed: Duration) {
        let (batch, _) = self.current();
        if elapsed.is_zero() {
            return;
        }
        if updates < 2 * batch {
            let best_batch = batch_of(self.best.0);
            if let Some(dir) = self.trial
                && updates >= 2 * best_batch
            {
                self.failed.push(dir);
                self.at = self.best;
                self.trial = None;
                self.try_move(None);
            }
            return;
        }
        if updates.saturating_mul(REMAINDER) < self.updates {
            // A sync's remainder chunk, far smaller than its full ones, is
            // mostly pipeline fill and drain: not compared with them. The
            // largest write decays meanwhile, so a device whose writes
            // shrank for good is measured again after a few.
            self.updates -= self.updates / 8;
            return;
        }
        self.updates = self.updates.max(updates);
        let rate = updates as f64 / elapsed.as_secs_f64();
        let r = self.rates.entry(self.at).or_insert(rate);
        *r = 0.5 * *r + 0.5 * rate;
        if !(self.auto_batch || self.auto_in_flight) {
            return;
        }
        match self.trial {
            Some(dir) => {
                let (now, before) = (self.rate(self.at), self.rate(self.best));
                let far = if now >= before * (1.0 - GAIN) && !self.far_trial {
                    self.far_end(dir)
                } else {
                    None
                };
                if now > before * (1.0 + GAIN) {
                    // Better: keep going the same way from here.
                    self.best = self.at;
                    self.failed.clear();
                    self.far_tried.clear();
                    self.far_trial = false;
                    self.try_move(Some(dir));
                } else if let Some(p) = far {
                    // Flat: a plateau's end may still gain.
                    self.far_tried.push(dir);
                    self.far_trial = true;
                    self.at = p;
                } else {
                    self.failed.push(dir);
                    self.at = self.best;
                    self.trial = None;
                    self.far_trial = false;
                    self.try_move(None);
                }
            }
            None => match self.settled {
                Some(n) if n + 1 < PROBE_EVERY => self.settled = Some(n + 1),
                Some(_) => {
                    // Probe the neighbours again: the device may have changed.
                    self.settled = None;
                    self.failed.clear();
                    self.far_tried.clear();
                    self.step = 1;
                    self.try_move(None);
                }
                None => self.try_move(None),
            },
        }
    }

    /// Requests a write of the largest measured size makes at batch level
    /// `b` (None before any write was measured).
    fn requests(&self, b: i32) -> Option<usize> {
        (self.updates > 0).then(|| self.updates.div_ceil(batch_of(b)))
    }

    /// The far end of in-flight direction `dir` from `best`, when it is
    /// not its neighbour and was not tried yet: 1 going down, as many as
    /// the write's requests (at most the grid's largest) going up. None
    /// for batch directions (see the module docs).
    fn far_end(&self, dir: Dir) -> Option<Point> {
        if self.far_tried.contains(&dir) {
            return None;
        }
        let (b, _) = self.best;
        let next = self.neighbour(self.best, dir)?;
        let end = match dir {
            Dir::InFlightDown => 0,
            Dir::InFlightUp => {
                let r = self.requests(b).unwrap_or(usize::MAX);
                in_flight_index(r)
            }
            Dir::BatchUp | Dir::BatchDown => return None,
        };
        (end != next.1 && end != self.best.1).then_some((b, end))
    }

    fn rate(&self, p: Point) -> f64 {
        self.rates.get(&p).copied().unwrap_or(0.0)
    }

    /// Moves from `best` in `prefer` (if it can), else in the first
    /// direction not yet tried at this step, else at a smaller step;
    /// settles when no move is left.
    fn try_move(&mut self, prefer: Option<Dir>) {
        loop {
            let dirs = prefer
                .into_iter()
                .chain(DIRS.into_iter().filter(|d| !self.failed.contains(d)));
            for dir in dirs {
                if let Some(p) = self.neighbour(self.best, dir) {
                    self.at = p;
                    self.trial = Some(dir);
                    return;
                }
            }
            if self.step > 1 {
                self.step /= 2;
                // In flight moves one index at any step: its neighbours
                // were already measured from this best.
                self.failed
                    .retain(|d| matches!(d, Dir::InFlightUp | Dir::InFlightDown));
                continue;
            }
            self.at = self.best;
            self.trial = None;
            self.settled = Some(0);
            return;
        }
    }

    /// The point one step from `p` in `dir`, if that dimension is Auto and
    /// the point is on the grid.
    fn neighbour(&self, p: Point, dir: Dir) -> Option<Point> {
        let (b, f) = p;
        let q = match dir {
            Dir::BatchUp if self.auto_batch => (b + self.step, f),
            Dir::BatchDown if self.auto_batch => (b - self.step, f),
            // In flight moves one index at a time (its grid is coarse),
            // never above the requests of a write: from there up they all
            // go at once, so every count measures alike.
            Dir::InFlightUp if self.auto_in_flight => {
                let r = self.requests(b).unwrap_or(usize::MAX);
                if IN_FLIGHT[f as usize] >= r {
                    return None;
                }
                (b, f + 1)
            }
            Dir::InFlightDown if self.auto_in_flight => {
                let k = self
                    .requests(b)
                    .map_or(IN_FLIGHT[f as usize], |r| IN_FLIGHT[f as usize].min(r));
                let below = IN_FLIGHT.iter().rposition(|&c| c < k)?;
                (b, below as i32)
            }
            _ => return None,
        };
        let on_grid =
            (0..=MAX_BATCH_LEVEL).contains(&q.0) && (0..IN_FLIGHT.len() as i32).contains(&q.1);
        on_grid.then_some(q)
    }
}

/// The batch size of grid level `l`: 2^(l/2), rounded.
fn batch_of(l: i32) -> usize {
    (2f64.powf(l as f64 / 2.0))
        .round()
        .clamp(1.0, MAX_BATCH as f64) as usize
}

/// The grid level nearest to `batch`.
fn batch_level(batch: usize) -> i32 {
    let l = (2.0 * (batch.max(1) as f64).log2()).round() as i32;
    l.clamp(0, MAX_BATCH_LEVEL)
}

/// The in-flight index nearest to `n` (from below).
fn in_flight_index(n: usize) -> i32 {
    IN_FLIGHT.iter().rposition(|&k| k <= n.max(1)).unwrap_or(0) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device like the emulator's latency profiles: a per-request cost
    /// that overlaps between requests in flight, a per-entry cost that does
    /// not, and (beyond what the profiles model) a cost growing with the
    /// square of the batch (encoding and copying of large messages) and with
    /// requests in flight (contention), so the best setting is interior.
    struct Model {
        per_request: f64,
        per_entry: f64,
        quadratic: f64,
        per_in_flight: f64,
    }

    impl Model {
        /// Seconds to write `n` updates at `batch` × `k`. A write has
        /// no more requests in flight than it has requests.
        fn time(&self, n: usize, batch: usize, k: usize) -> f64 {
            let k = k.min(n.div_ceil(batch));
            let b = batch as f64;
            let serial =
                self.per_entry * b + self.quadratic * b * b + self.per_in_flight * k as f64;
            let round = self.per_request + serial;
            let per_batch = serial.max(round / k as f64);
            (n as f64 / b).ceil() * per_batch
        }

        /// Entries/s of the writes the tests make ([`CHUNK`]).
        fn rate(&self, batch: usize, k: usize) -> f64 {
            CHUNK as f64 / self.time(CHUNK, batch, k)
        }

        /// The best static setting over the grid Auto uses.
        fn best(&self, auto_in_flight: bool, k0: usize) -> f64 {
            let ks: Vec<usize> = if auto_in_flight {
                IN_FLIGHT.to_vec()
            } else {
                vec![k0]
            };
            (0..=MAX_BATCH_LEVEL)
                .flat_map(|l| ks.iter().map(move |&k| (batch_of(l), k)))
                .map(|(b, k)| self.rate(b, k))
                .fold(0.0, f64::max)
        }
    }

    /// Updates per write in the tests (a chunk of a large sync).
    const CHUNK: usize = 262_144;

    /// The tofino profile (emulator/src/profile.rs): 863 µs per request,
    /// 18.93 µs per entry.
    const TOFINO: Model = Model {
        per_request: 863e-6,
        per_entry: 18.93e-6,
        quadratic: 0.0,
        per_in_flight: 0.0,
    };

    /// No added latency: what is left is the software's own costs (a
    /// round trip, encoding), with an optimum inside the grid in both batch
    /// size and in flight.
    const NONE: Model = Model {
        per_request: 1e-3,
        per_entry: 0.45e-6,
        quadratic: 5e-12,
        per_in_flight: 50e-6,
    };

    /// Runs writes of `chunk` updates through the tuner; the rate of
    /// the last `tail` writes, with a noise of ±`noise` per write.
    fn run(model: &Model, t: &mut Tuner, writes: usize, chunk: usize, noise: f64) -> f64 {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut total = (0, 0.0);
        for i in 0..writes {
            let (b, k) = t.current();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let jitter = 1.0 + noise * ((seed % 2001) as f64 / 1000.0 - 1.0);
            let secs = model.time(chunk, b, k) * jitter;
            t.observe(chunk, Duration::from_secs_f64(secs));
            if i >= writes - 20 {
                total = (total.0 + chunk, total.1 + model.time(chunk, b, k));
            }
        }
        total.0 as f64 / total.1
    }

    #[test]
    fn auto_gets_within_ten_percent_of_the_best_static_setting() {
        let starts = [(1, 1), (64, 1), (1000, 4), (65_536, 32)];
        for (name, model) in [("tofino", TOFINO), ("none", NONE)] {
            let mut worst_start: f64 = 1.0;
            for (auto_in_flight, k0) in [(true, 4), (false, 4), (false, 1)] {
                let best = model.best(auto_in_flight, k0);
                for (b0, k) in starts {
                    let k = if auto_in_flight { k } else { k0 };
                    let mut t = Tuner::new(b0, k, true, auto_in_flight);
                    let (b, k) = t.current();
                    worst_start = worst_start.min(model.rate(b, k) / best);
                    let got = run(&model, &mut t, 120, CHUNK, 0.05);
                    assert!(
                        got >= 0.9 * best,
                        "{name}, from {b0} x {k}, auto in flight {auto_in_flight}: \
                         {got:.0}/s vs best {best:.0}/s, at {:?}",
                        t.current()
                    );
                }
            }
            // The starts are far enough off for the climb to matter.
            assert!(worst_start < 0.5, "{name}: {worst_start}");
        }
    }

    #[test]
    fn fixed_dimensions_never_move_and_small_writes_are_ignored() {
        let mut t = Tuner::new(1000, 4, false, false);
        run(&NONE, &mut t, 40, CHUNK, 0.0);
        assert_eq!(t.current(), (1024, 4));
        let mut t = Tuner::new(5000, 6, true, false);
        run(&NONE, &mut t, 40, CHUNK, 0.0);
        assert_eq!(t.current().1, 6, "in flight is not Auto");
        let mut t = Tuner::new(1000, 4, true, true);
        for _ in 0..10 {
            t.observe(2047, Duration::from_millis(1));
        }
        assert_eq!(t.current(), (1024, 4), "fewer than two batches");
    }

    #[test]
    fn a_settled_tuner_follows_a_device_that_changed() {
        let mut t = Tuner::new(1000, 4, true, true);
        run(&NONE, &mut t, 120, CHUNK, 0.0);
        assert!(t.settled(), "{:?}", t.current());
        let got = run(&TOFINO, &mut t, 200, CHUNK, 0.0);
        let best = TOFINO.best(true, 4);
        assert!(
            got >= 0.9 * best,
            "{got:.0}/s vs {best:.0}/s at {:?}",
            t.current()
        );
    }

    #[test]
    fn a_trial_batch_too_large_for_the_writes_fails_and_the_climb_settles() {
        // Writes of 20,000 updates, always: batches above 10,000 can never
        // be measured. Larger batches are better, so the climb goes up.
        let mut t = Tuner::new(1000, 4, true, true);
        let mut batches = Vec::new();
        for _ in 0..200 {
            let (b, k) = t.current();
            batches.push(b);
            t.observe(20_000, Duration::from_secs_f64(NONE.time(20_000, b, k)));
            if t.settled() {
                break;
            }
        }
        assert!(t.settled(), "{:?} after {batches:?}", t.current());
        assert!(t.current().0 <= 10_000, "{:?}", t.current());
        assert!(
            batches.iter().any(|&b| b > 10_000),
            "a larger batch was tried"
        );
        // A write too small even for the best setting tells nothing.
        let mut t = Tuner::new(1000, 4, true, true);
        t.observe(1_000_000, Duration::from_secs(1));
        let trial = t.current();
        t.observe(100, Duration::from_millis(1));
        assert_eq!(t.current(), trial);
    }

    /// A device whose requests in flight at once contend more than they
    /// overlap (the emulator without a profile on two shared cores): each
    /// round of up to `k` requests costs one round trip plus the entry
    /// work of the round, `contention` slower when more than one request
    /// is in it. With few requests per write, every count from 2 up to the
    /// requests measures alike, and 1 is best.
    struct Contended {
        per_request: f64,
        per_entry: f64,
        contention: f64,
    }

    impl Contended {
        fn time(&self, n: usize, batch: usize, k: usize) -> f64 {
            let mut left = n;
            let mut t = 0.0;
            while left > 0 {
                let round = left.min(batch * k);
                let slow = if round > batch {
                    1.0 + self.contention
                } else {
                    1.0
                };
                t += self.per_request + self.per_entry * round as f64 * slow;
                left -= round;
            }
            t
        }

        fn best(&self, n: usize) -> (f64, (usize, usize)) {
            (0..=MAX_BATCH_LEVEL)
                .flat_map(|l| IN_FLIGHT.iter().map(move |&k| (batch_of(l), k)))
                .map(|(b, k)| (n as f64 / self.time(n, b, k), (b, k)))
                .fold((0.0, (0, 0)), |a, x| if x.0 > a.0 { x } else { a })
        }
    }

    /// 1 ms per round trip, 0.375 µs per entry (a 200,000-entry write
    /// alone is 75 ms), 40 % slower entry work with requests overlapping.
    const CONTENDED: Contended = Contended {
        per_request: 1e-3,
        per_entry: 0.375e-6,
        contention: 0.4,
    };

    /// Writes of `n` through `t` on `model`; the settings used, in order.
    fn climb(model: &Contended, t: &mut Tuner, writes: usize, n: usize) -> Vec<(usize, usize)> {
        let mut used = Vec::new();
        for _ in 0..writes {
            let (b, k) = t.current();
            used.push((b, k));
            t.observe(n, Duration::from_secs_f64(model.time(n, b, k)));
        }
        used
    }

    #[test]
    fn in_flight_is_not_tried_above_the_requests_of_a_write() {
        // 200,000 updates at 65,536 per request: four requests, so 6, 8,
        // … in flight send them exactly as 4 does.
        let n = 200_000;
        let (b, k) = (65_536, 4);
        let model = &CONTENDED;
        assert_eq!(model.time(n, b, 4), model.time(n, b, 32));
        let mut t = Tuner::new(b, k, true, true);
        let used = climb(model, &mut t, 40, n);
        assert!(
            used.iter().all(|&(b, k)| k <= n.div_ceil(b)),
            "more in flight than requests: {used:?}"
        );
        // From above the requests, a move down starts below them.
        let mut t = Tuner::new(b, 32, false, true);
        t.observe(n, Duration::from_secs_f64(model.time(n, b, 32)));
        assert_eq!(t.current(), (b, 3), "down from 32 of 4 requests");
    }

    #[test]
    fn a_flat_in_flight_direction_is_tried_at_its_far_end() {
        let n = 200_000;
        let model = &CONTENDED;
        let (best, at) = model.best(n);
        assert_eq!(at, (65_536, 1));
        // The plateau the climb used to stop on: 4 and 3 within GAIN.
        let rate = |b, k| n as f64 / model.time(n, b, k);
        let (r4, r3) = (rate(65_536, 4), rate(65_536, 3));
        assert!((r3 / r4 - 1.0).abs() < GAIN, "{r3} vs {r4}");
        assert!(r4 < 0.8 * best, "the plateau is well below the best");
        for (b0, k0) in [(65_536, 4), (1000, 4), (16_384, 8)] {
            let mut t = Tuner::new(b0, k0, true, true);
            let used = climb(model, &mut t, 40, n);
            let (b, k) = t.current();
            assert!(
                rate(b, k) >= 0.9 * best,
                "from {b0} x {k0}: at {b} x {k}, {:.0}/s vs best {best:.0}/s; tried {used:?}",
                rate(b, k)
            );
            assert!(t.settled(), "from {b0} x {k0}: {used:?}");
        }
        // A batch dimension alone gets no far-end trial: a batch of 1 (or
        // 65,536 on a slow device) can make one write take many seconds.
        let mut t = Tuner::new(1000, 4, true, false);
        let used = climb(&CONTENDED, &mut t, 40, n);
        assert!(used.iter().all(|&(b, _)| b >= 64), "{used:?}");
    }

    #[test]
    fn a_syncs_remainder_does_not_shrink_the_requests_in_flight_is_weighed_by() {
        // A sync of 200,000 at 1,024 × 4 is written in chunks of 65,536
        // and a remainder of 3,392: four requests at 1,024, which alone
        // would rule out more in flight. The largest write counts.
        let mut t = Tuner::new(1024, 4, false, true);
        let rate = 50_000.0;
        let took = |n: usize| Duration::from_secs_f64(n as f64 / rate);
        t.observe(65_536, took(65_536));
        assert_eq!(t.current(), (1024, 6), "more in flight is tried");
        // The remainder is not measured (pipeline fill and drain).
        t.observe(3_392, took(3_392) * 3);
        assert_eq!(t.current(), (1024, 6), "a remainder decides nothing");
        // Flat at 6: the far end, as many in flight as the 64 requests of
        // a chunk allow.
        t.observe(65_536, took(65_536));
        assert_eq!(t.current(), (1024, 32));
        let mut t = Tuner::new(1024, 4, false, true);
        t.observe(3_392, took(3_392));
        assert_eq!(t.current(), (1024, 3), "four requests: nothing above 4");
    }

    #[test]
    fn a_far_end_that_is_no_better_is_left() {
        // The tofino profile: in flight from 3 up measures alike at 1,024
        // (entry work serializes), and 1 is worse: the climb tries 1 once
        // and stays on the plateau.
        let mut t = Tuner::new(1000, 4, true, true);
        let chunk = 65_536;
        let mut used = Vec::new();
        for _ in 0..60 {
            let (b, k) = t.current();
            used.push((b, k));
            t.observe(chunk, Duration::from_secs_f64(TOFINO.time(chunk, b, k)));
        }
        let (b, k) = t.current();
        let best = TOFINO.best(true, 4);
        assert!(TOFINO.rate(b, k) >= 0.97 * best, "at {b} x {k}: {used:?}");
        assert!(used.contains(&(1024, 1)), "the far end was tried: {used:?}");
        assert!(k > 1, "and left: {used:?}");
    }

    #[test]
    fn the_grid_maps_both_ways() {
        assert_eq!(batch_of(batch_level(1000)), 1024);
        assert_eq!(batch_of(0), 1);
        assert_eq!(batch_of(MAX_BATCH_LEVEL), MAX_BATCH);
        assert_eq!(batch_level(10_000_000), MAX_BATCH_LEVEL);
        assert_eq!(IN_FLIGHT[in_flight_index(5) as usize], 4);
        assert_eq!(IN_FLIGHT[in_flight_index(0) as usize], 1);
        assert_eq!(IN_FLIGHT[in_flight_index(100) as usize], 32);
    }
}
