//! `Runs`: a sequence of `u64`s kept as runs of consecutive values (each
//! one more than the one before). A text's entries are mostly on
//! consecutive lines, and a set keeps most of each text's entries in
//! order, so their line numbers and their places cost a few bytes per
//! text instead of bytes per entry. Pure.

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Runs {
    /// `(first index, its value)` of each run, by index.
    runs: Vec<(u32, u64)>,
    len: u32,
}

impl Runs {
    pub fn push(&mut self, v: u64) {
        let continues = self
            .runs
            .last()
            .is_some_and(|&(i, s)| s + u64::from(self.len - i) == v);
        if !continues {
            self.runs.push((self.len, v));
        }
        self.len += 1;
    }

    /// `start`, `start + 1`, … `n` values.
    pub fn push_range(&mut self, start: u64, n: usize) {
        if n > 0 {
            self.push(start);
            self.len += n as u32 - 1;
        }
    }

    /// Value `i` (`i < len`).
    pub fn get(&self, i: usize) -> u64 {
        let i = i as u32;
        let r = self.runs.partition_point(|&(first, _)| first <= i) - 1;
        let (first, v) = self.runs[r];
        v + u64::from(i - first)
    }

    /// The values in order; of known length, so that what collects them
    /// (a sync's million entry references) allocates once.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            runs: self,
            run: 0,
            i: 0,
        }
    }

    /// Keeps the values whose `keep` is true.
    pub fn retain(&mut self, keep: &[bool]) {
        let mut kept = Runs::default();
        for (v, _) in self.iter().zip(keep).filter(|(_, k)| **k) {
            kept.push(v);
        }
        *self = kept;
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs, `(first index, its value)`: what identifies the sequence.
    pub fn runs(&self) -> &[(u32, u64)] {
        &self.runs
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    pub fn approx_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<(u32, u64)>()
    }

    pub fn shrink_to_fit(&mut self) {
        self.runs.shrink_to_fit();
    }
}

/// [`Runs::iter`].
pub struct Iter<'a> {
    runs: &'a Runs,
    /// The run of index `i`.
    run: usize,
    i: u32,
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.i >= self.runs.len {
            return None;
        }
        while self
            .runs
            .runs
            .get(self.run + 1)
            .is_some_and(|&(f, _)| f <= self.i)
        {
            self.run += 1;
        }
        let (first, v) = self.runs.runs[self.run];
        self.i += 1;
        Some(v + u64::from(self.i - 1 - first))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.runs.len - self.i) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}
