//! Small, fully specified random primitives for the generator.
//!
//! Benchmark datasets must be reproducible byte-for-byte across machines and
//! across dependency upgrades: a query timing is only comparable with an
//! earlier one if both ran over the same data. `rand`'s `SmallRng` (and its
//! range/float sampling algorithms) are explicitly documented as not portable
//! between versions, so the generator uses this tiny SplitMix64 stream and
//! its own sampling helpers, whose output is pinned by this file alone.

/// SplitMix64 finalizer: a high-quality 64-bit bijective mixer.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 pseudo-random stream (Steele, Lea & Flood 2014). Fast, tiny
/// state, passes BigCrush; plenty for synthetic data.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            state: mix64(seed ^ 0x6a09_e667_f3bc_c909),
        }
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform `u32` (the high half of the next word).
    #[inline]
    pub(crate) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)` (multiply-high; bias is < 2^-32 for the small `n`
    /// used here, which is irrelevant for synthetic data).
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal via Box–Muller (one of the pair is discarded).
    #[inline]
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit(); // (0, 1]: ln is finite
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// A bijection on `[0, 2^40)`: maps Zipf ranks to user ids that look random
/// (no small contiguous ranges, hot users scattered) yet stay below 2^40.
#[inline]
pub(crate) fn scramble40(x: u64, key: u64) -> u64 {
    const MASK: u64 = (1 << 40) - 1;
    let mut v = (x ^ key) & MASK;
    for round in 0..3u64 {
        // Odd multiplier mod 2^40 and xor-shift are each invertible.
        v = v.wrapping_mul(0x9e37_79b9_7f4b | 1) & MASK;
        v ^= v >> 19;
        v = (v ^ (key.rotate_left(17 * round as u32 + 7) & MASK)) & MASK;
    }
    v
}

/// Bounded Zipf-like sampler over ranks `0..n` with exponent `s != 1`, by
/// inverting the continuous power-law CDF: one `powf` per draw and no tables,
/// so it works for hundreds of millions of users.
#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    n: u64,
    one_minus_s: f64,
    inv_one_minus_s: f64,
    h_max: f64,
}

impl Zipf {
    pub(crate) fn new(n: u64, s: f64) -> Self {
        assert!(
            n >= 1 && (s - 1.0).abs() > 1e-9,
            "Zipf needs n >= 1, s != 1"
        );
        let one_minus_s = 1.0 - s;
        // Integral of x^-s over [1, n + 1].
        let h_max = (((n + 1) as f64).powf(one_minus_s) - 1.0) / one_minus_s;
        Self {
            n,
            one_minus_s,
            inv_one_minus_s: 1.0 / one_minus_s,
            h_max,
        }
    }

    /// 0-based rank; rank 0 is the most popular.
    #[inline]
    pub(crate) fn sample(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.unit();
        let x = (1.0 + u * self.h_max * self.one_minus_s).powf(self.inv_one_minus_s);
        ((x as u64).saturating_sub(1)).min(self.n - 1)
    }
}

/// Weighted choice among a handful of values, driven by a `u32`.
#[derive(Clone, Debug)]
pub(crate) struct Categorical {
    /// Cumulative upper bounds scaled to 2^32; the last is exactly 2^32.
    cum: Vec<u64>,
}

impl Categorical {
    pub(crate) fn new(weights: &[f64]) -> Self {
        assert!(!weights.is_empty());
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cum: Vec<u64> = weights
            .iter()
            .map(|w| {
                acc += w;
                ((acc / total) * 4_294_967_296.0) as u64
            })
            .collect();
        *cum.last_mut().unwrap() = 1 << 32;
        Self { cum }
    }

    /// Index of the chosen value for a uniform `r`.
    #[inline]
    pub(crate) fn pick(&self, r: u32) -> usize {
        let r = r as u64;
        self.cum
            .iter()
            .position(|&c| r < c)
            .unwrap_or(self.cum.len() - 1)
    }
}
