//! The three live estimators behind the benefit of a pin.
//!
//! * [`EtaEstimator`] — memorability η = −corr(k, N−k) over recently finished programs.
//! * [`OutOfOrderCost`] — T, the mean queueing delay of requests whose cache had been dropped.
//! * [`CacheMissModel`] — what a dropped cache costs to rebuild: prefill time (a fitted
//!   quadratic in tokens) or reload time from an offload tier, whichever is smaller.
//!
//! Float sums are recomputed from the window on each observation, in arrival order, so both
//! backends perform the same floating-point operations and agree exactly. Mirrors
//! `python/ttlpolicy/reference/estimators.py`.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::validate::{int_in, non_negative, positive};

/// Largest `total_turns` observed (a program's turn count).
pub const MAX_TURNS: i64 = 1_000_000;
/// Largest window of any estimator.
pub const MAX_WINDOW: i64 = 1 << 20;
/// Largest token count accepted.
pub const MAX_TOKENS: i64 = 1 << 40;
/// Token counts are fitted in units of 1000 tokens: keeps n⁴ well inside double range.
pub const TOKENS_PER_UNIT: f64 = 1000.0;

/// Exact integer moments of the pairs (k, r = N − k), k = 1..N, over a set of programs.
/// Exact, so adding and removing a program keeps them equal to a fresh recomputation: the
/// reference recomputes, this updates in O(1), and both hold the same integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TurnMoments {
    n: i128,
    sk: i128,
    sr: i128,
    skk: i128,
    srr: i128,
    skr: i128,
}

impl TurnMoments {
    /// Add (`sign` = 1) or remove (`sign` = −1) one program of `big_n` turns.
    fn update(&mut self, big_n: i64, sign: i128) {
        let big_n = big_n as i128;
        let s1 = big_n * (big_n + 1) / 2; // Σk
        let s2 = big_n * (big_n + 1) * (2 * big_n + 1) / 6; // Σk²
        self.n += sign * big_n;
        self.sk += sign * s1;
        self.skk += sign * s2;
        self.sr += sign * (big_n * big_n - s1); // Σ(N − k)
        self.srr += sign * (big_n * big_n * big_n - 2 * big_n * s1 + s2); // Σ(N − k)²
        self.skr += sign * (big_n * s1 - s2); // Σk(N − k)
    }

    /// −corr(k, N − k), clamped to [0, 1] when `clip`; 1.0 when the correlation is undefined.
    fn eta(&self, clip: bool) -> f64 {
        let cov = self.n * self.skr - self.sk * self.sr;
        let var_k = self.n * self.skk - self.sk * self.sk;
        let var_r = self.n * self.srr - self.sr * self.sr;
        if var_k <= 0 || var_r <= 0 {
            return 1.0;
        }
        let corr = cov as f64 / ((var_k as f64) * (var_r as f64)).sqrt();
        if !clip {
            return -corr;
        }
        // min(1, max(0, −corr)) with Python's max/min: the first argument wins unless the
        // second is strictly better.
        let neg = -corr;
        let lo = if neg > 0.0 { neg } else { 0.0 };
        if lo < 1.0 {
            lo
        } else {
            1.0
        }
    }
}

/// η = −corr(k, N−k) over the turns of the last `window` finished programs, in [0, 1].
///
/// A program of N turns contributes the pairs (k, N−k) for k = 1..N. Fixed-length programs
/// give η = 1 (progress predicts the rest), memoryless lengths give η ≈ 0. Until
/// `min_programs` are seen — or when the correlation is undefined — η = 1, as the CacheTTL
/// paper starts.
#[derive(Debug, Clone)]
pub struct EtaEstimator {
    window: usize,
    min_programs: usize,
    clip: bool,
    turns: VecDeque<i64>,
    moments: TurnMoments,
    eta: f64,
}

impl EtaEstimator {
    /// Default `window` (finished programs kept).
    pub const DEFAULT_WINDOW: i64 = 256;
    /// Default `min_programs` (below: η = 1).
    pub const DEFAULT_MIN_PROGRAMS: i64 = 8;

    /// η over the last `window` programs, once `min_programs` are in.
    pub fn new(window: i64, min_programs: i64) -> Result<Self> {
        Self::with_clip(window, min_programs, true)
    }

    /// `clip = false`: η = −corr as it is, in [−1, 1] (the paper's).
    pub fn with_clip(window: i64, min_programs: i64, clip: bool) -> Result<Self> {
        Ok(EtaEstimator {
            window: int_in("window", window, 1, MAX_WINDOW)? as usize,
            min_programs: int_in("min_programs", min_programs, 0, MAX_WINDOW)? as usize,
            clip,
            turns: VecDeque::new(),
            moments: TurnMoments::default(),
            eta: 1.0,
        })
    }

    /// Records a finished program of `total_turns` turns.
    pub fn observe(&mut self, total_turns: i64) -> Result<()> {
        let n_turns = int_in("total_turns", total_turns, 1, MAX_TURNS)?;
        if self.turns.len() == self.window {
            if let Some(old) = self.turns.pop_front() {
                self.moments.update(old, -1);
            }
        }
        self.turns.push_back(n_turns);
        self.moments.update(n_turns, 1);
        self.eta = if self.turns.len() < self.min_programs {
            1.0
        } else {
            self.moments.eta(self.clip)
        };
        Ok(())
    }

    /// The current η in [0, 1] (1 until `min_programs` are in).
    pub fn eta(&self) -> f64 {
        self.eta
    }

    /// Programs in the window.
    pub fn count(&self) -> usize {
        self.turns.len()
    }

    /// Programs kept.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Programs needed before η is estimated.
    pub fn min_programs(&self) -> usize {
        self.min_programs
    }

    /// Whether η is clipped to [0, 1] (false: the paper's unclipped −corr).
    pub fn clip(&self) -> bool {
        self.clip
    }
}

/// Arrival-order sum of a window: the reference's summation order.
fn sum_in_order(xs: &VecDeque<f64>) -> f64 {
    let mut total = 0.0;
    for &x in xs {
        total += x;
    }
    total
}

/// T: mean queueing delay over the last `window` requests that returned to a dropped cache.
#[derive(Debug, Clone)]
pub struct OutOfOrderCost {
    window: usize,
    delays: VecDeque<f64>,
    mean: f64,
}

impl OutOfOrderCost {
    /// Default `window` (queueing delays kept).
    pub const DEFAULT_WINDOW: i64 = 256;

    /// T over the last `window` delays.
    pub fn new(window: i64) -> Result<Self> {
        Ok(OutOfOrderCost {
            window: int_in("window", window, 1, MAX_WINDOW)? as usize,
            delays: VecDeque::new(),
            mean: 0.0,
        })
    }

    /// Records one queueing delay.
    pub fn observe(&mut self, delay_s: f64) -> Result<()> {
        let d = non_negative("delay_s", delay_s)?;
        if self.delays.len() == self.window {
            self.delays.pop_front();
        }
        self.delays.push_back(d);
        self.mean = sum_in_order(&self.delays) / self.delays.len() as f64;
        Ok(())
    }

    /// 0.0 until a delay is observed.
    pub fn mean_s(&self) -> f64 {
        self.mean
    }

    /// Delays in the window.
    pub fn count(&self) -> usize {
        self.delays.len()
    }

    /// Delays kept.
    pub fn window(&self) -> usize {
        self.window
    }
}

type Mat3 = [[f64; 3]; 3];

fn det3(a: &Mat3) -> f64 {
    a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
}

/// Cramer's rule for a 3×3 system; None when singular. The reference's very operations.
pub fn solve3(m: &Mat3, v: &[f64; 3]) -> Option<[f64; 3]> {
    let d = det3(m);
    if d == 0.0 || !d.is_finite() {
        return None;
    }
    let mut out = [0.0; 3];
    for (col, x) in out.iter_mut().enumerate() {
        let mut mc = *m;
        for r in 0..3 {
            mc[r][col] = v[r];
        }
        *x = det3(&mc) / d;
    }
    Some(out)
}

/// The normal equations `m·x = v` solved with no coefficient below zero; None when a system on
/// the way is singular. The unconstrained solution first; while a coefficient is negative, the
/// most negative one (the first of equals) is fixed at 0 and the rest re-solved — an
/// active-set approximation of non-negative least squares, exact when the unconstrained
/// solution has no negative coefficient. The reference's very operations.
pub fn solve_non_negative(m: &Mat3, v: &[f64; 3]) -> Option<[f64; 3]> {
    // The terms still free (their first `k` entries) and their solution: fixed-size, as the
    // miss model refits at every observed prefill.
    let mut active = [0usize, 1, 2];
    let mut k = 3;
    loop {
        let mut sol = [0.0f64; 3];
        match k {
            3 => sol = solve3(m, v)?,
            2 => {
                let (i, j) = (active[0], active[1]);
                let (a00, a01, a10, a11) = (m[i][i], m[i][j], m[j][i], m[j][j]);
                let d = a00 * a11 - a01 * a10;
                if d == 0.0 || !d.is_finite() {
                    return None;
                }
                sol[0] = (v[i] * a11 - a01 * v[j]) / d;
                sol[1] = (a00 * v[j] - v[i] * a10) / d;
            }
            _ => {
                let i = active[0];
                if m[i][i] == 0.0 || !m[i][i].is_finite() {
                    return None;
                }
                sol[0] = v[i] / m[i][i];
            }
        }
        let sol = &sol[..k];
        if !sol.iter().all(|c| c.is_finite()) {
            return None;
        }
        let mut worst = 0;
        for (i, &c) in sol.iter().enumerate().skip(1) {
            if c < sol[worst] {
                worst = i;
            }
        }
        if sol[worst] >= 0.0 || k == 1 {
            let mut out = [0.0; 3];
            for (&i, &c) in active[..k].iter().zip(sol) {
                out[i] = if c > 0.0 { c } else { 0.0 };
            }
            return Some(out);
        }
        active.copy_within(worst + 1..k, worst);
        k -= 1;
    }
}

/// A quadratic needs three distinct token counts; with fewer the normal equations are
/// singular and only rounding keeps the determinant off zero, giving wild coefficients.
fn has_three_distinct(points: &VecDeque<(f64, f64, f64)>) -> bool {
    let mut seen: [f64; 2] = [f64::NAN; 2];
    let mut distinct = 0;
    for &(x, _, _) in points {
        if !seen[..distinct].contains(&x) {
            if distinct == 2 {
                return true;
            }
            seen[distinct] = x;
            distinct += 1;
        }
    }
    false
}

/// Seconds to rebuild a dropped prefix.
///
/// Prefill: `a + b·n + c·n²` (n tokens), least squares with a, b, c >= 0 (so the price never
/// falls as the prefix grows) over the last `window` measured (tokens, seconds) pairs once
/// `min_samples` are in and the fit is well posed; the configured defaults before that. Reload: `tokens · kv_bytes_per_token / bandwidth` when an
/// offload tier holds the blocks. The miss cost is the smaller of the two. Predictions are
/// never negative.
#[derive(Debug, Clone)]
pub struct CacheMissModel {
    default_coeffs: (f64, f64, f64),
    kv_bytes_per_token: i64,
    offload_bandwidth_bytes_per_s: Option<f64>,
    window: usize,
    min_samples: usize,
    /// The engine's prefill chunk: a prefix costs the fixed term once per chunk (None: once).
    prefill_chunk_tokens: Option<i64>,
    /// (tokens, attention units `tokens·(tokens + 2·cached)`, seconds), in TOKENS_PER_UNIT,
    /// in arrival order.
    points: VecDeque<(f64, f64, f64)>,
    /// Fitted (a, b, c) in per-token units.
    fit: Option<(f64, f64, f64)>,
}

impl CacheMissModel {
    /// Default `prefill_base_s` (a of the prefill quadratic before a fit).
    pub const DEFAULT_PREFILL_BASE_S: f64 = 0.01;
    /// Default `prefill_s_per_token` (b).
    pub const DEFAULT_PREFILL_S_PER_TOKEN: f64 = 1e-4;
    /// Default `prefill_s_per_token2` (c).
    pub const DEFAULT_PREFILL_S_PER_TOKEN2: f64 = 0.0;
    /// Default `kv_bytes_per_token`.
    pub const DEFAULT_KV_BYTES_PER_TOKEN: i64 = 131072;
    /// Default `window` (prefill measurements kept).
    pub const DEFAULT_WINDOW: i64 = 256;
    /// Default `min_samples` (measurements before the fit replaces the defaults).
    pub const DEFAULT_MIN_SAMPLES: i64 = 8;

    /// Arguments in the reference's order (defaults: the `DEFAULT_*` constants; no offload).
    pub fn new(
        prefill_base_s: f64,
        prefill_s_per_token: f64,
        prefill_s_per_token2: f64,
        kv_bytes_per_token: i64,
        offload_bandwidth_bytes_per_s: Option<f64>,
        window: i64,
        min_samples: i64,
    ) -> Result<Self> {
        let default_coeffs = (
            non_negative("prefill_base_s", prefill_base_s)?,
            non_negative("prefill_s_per_token", prefill_s_per_token)?,
            non_negative("prefill_s_per_token2", prefill_s_per_token2)?,
        );
        let kv_bytes_per_token = int_in("kv_bytes_per_token", kv_bytes_per_token, 0, 1 << 40)?;
        let offload_bandwidth_bytes_per_s = match offload_bandwidth_bytes_per_s {
            None => None,
            Some(bw) => Some(positive("offload_bandwidth_bytes_per_s", bw)?),
        };
        Ok(CacheMissModel {
            default_coeffs,
            kv_bytes_per_token,
            offload_bandwidth_bytes_per_s,
            window: int_in("window", window, 1, MAX_WINDOW)? as usize,
            min_samples: int_in("min_samples", min_samples, 3, MAX_WINDOW)? as usize,
            prefill_chunk_tokens: None,
            points: VecDeque::new(),
            fit: None,
        })
    }

    /// The same model for an engine that prefills in chunks of at most `chunk` tokens (None:
    /// in one step): a prefix's price counts the fixed term once per chunk (the reference's
    /// `prefill_chunk_tokens` argument).
    pub fn with_prefill_chunk_tokens(mut self, chunk: Option<i64>) -> Result<Self> {
        self.prefill_chunk_tokens = match chunk {
            None => None,
            Some(c) => Some(int_in("prefill_chunk_tokens", c, 1, MAX_TOKENS)?),
        };
        Ok(self)
    }

    /// Records one measured prefill chunk of `tokens` new tokens after `cached_tokens`
    /// already computed, taking `seconds`, and refits. Its attention term is
    /// `c·tokens·(tokens + 2·cached)` — the part of `c·(cached + tokens)²` it adds — so the
    /// chunks of one prefix sum to `c·prefix²`.
    pub fn observe_prefill(&mut self, tokens: i64, seconds: f64, cached_tokens: i64) -> Result<()> {
        let n = int_in("tokens", tokens, 0, MAX_TOKENS)?;
        let s = non_negative("seconds", seconds)?;
        let k = int_in("cached_tokens", cached_tokens, 0, MAX_TOKENS)?;
        if self.points.len() == self.window {
            self.points.pop_front();
        }
        let x = n as f64 / TOKENS_PER_UNIT;
        let q = x * (x + 2.0 * (k as f64 / TOKENS_PER_UNIT));
        self.points.push_back((x, q, s));
        self.fit = self.refit();
        Ok(())
    }

    fn refit(&self) -> Option<(f64, f64, f64)> {
        if self.points.len() < self.min_samples || !has_three_distinct(&self.points) {
            return None;
        }
        // Features 1, x and q (q = x² for a chunk with nothing cached before it).
        let (mut s0, mut s1, mut sxx, mut sq, mut sxq, mut sqq) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        let (mut y0, mut y1, mut y2) = (0.0, 0.0, 0.0);
        for &(x, q, y) in &self.points {
            s0 += 1.0;
            s1 += x;
            sxx += x * x;
            sq += q;
            sxq += q * x;
            sqq += q * q;
            y0 += y;
            y1 += x * y;
            y2 += q * y;
        }
        // No coefficient below zero: the measured prefills are first chunks of at most one
        // token budget, and a concave free fit of them (c < 0) extrapolates the price of a
        // long context down to 0 s — the contexts most worth keeping would look free to lose.
        let m = [[s0, s1, sq], [s1, sxx, sxq], [sq, sxq, sqq]];
        let [a, b, c] = solve_non_negative(&m, &[y0, y1, y2])?;
        Some((
            a,
            b / TOKENS_PER_UNIT,
            c / (TOKENS_PER_UNIT * TOKENS_PER_UNIT),
        ))
    }

    /// Whether the fit replaced the default coefficients.
    pub fn fitted(&self) -> bool {
        self.fit.is_some()
    }

    /// (a, b, c) of prefill_s = a + b·tokens + c·tokens², fitted or default.
    pub fn coefficients(&self) -> (f64, f64, f64) {
        self.fit.unwrap_or(self.default_coeffs)
    }

    /// The configured (a, b, c), used until a fit.
    pub fn default_coeffs(&self) -> (f64, f64, f64) {
        self.default_coeffs
    }

    /// KV-cache bytes of one token.
    pub fn kv_bytes_per_token(&self) -> i64 {
        self.kv_bytes_per_token
    }

    /// Reload bandwidth of the offload tier (None: no tier).
    pub fn offload_bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.offload_bandwidth_bytes_per_s
    }

    /// Measurements kept.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Measurements needed before fitting.
    pub fn min_samples(&self) -> usize {
        self.min_samples
    }

    /// The engine's prefill chunk (None: a prefix is priced as one step).
    pub fn prefill_chunk_tokens(&self) -> Option<i64> {
        self.prefill_chunk_tokens
    }

    /// Measurements in the window.
    pub fn count(&self) -> usize {
        self.points.len()
    }

    /// Predicted prefill seconds of `tokens` tokens (never negative).
    pub fn prefill_s(&self, tokens: i64) -> Result<f64> {
        let n = int_in("tokens", tokens, 0, MAX_TOKENS)?;
        Ok(self.prefill_unchecked(n))
    }

    fn prefill_unchecked(&self, tokens: i64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        let n = tokens as f64;
        let (a, b, c) = self.coefficients();
        // The fixed term once per step that rebuilds the prefix: ⌈tokens / chunk⌉ steps.
        let steps = match self.prefill_chunk_tokens {
            None => 1.0,
            Some(chunk) => (tokens + chunk - 1).div_euclid(chunk) as f64,
        };
        let s = a * steps + b * n + c * n * n;
        // Python's max(0.0, s): 0.0 unless s is strictly greater (NaN → 0.0).
        if s > 0.0 {
            s
        } else {
            0.0
        }
    }

    /// Seconds to load `tokens` of KV back from the offload tier; None without a tier.
    pub fn reload_s(&self, tokens: i64) -> Result<Option<f64>> {
        let n = int_in("tokens", tokens, 0, MAX_TOKENS)?;
        Ok(self.reload_unchecked(n))
    }

    fn reload_unchecked(&self, tokens: i64) -> Option<f64> {
        // Up to 2^80 bytes: exact in i128, then one correctly rounded conversion (as Python).
        let bytes = tokens as i128 * self.kv_bytes_per_token as i128;
        self.offload_bandwidth_bytes_per_s
            .map(|bw| bytes as f64 / bw)
    }

    /// Cost of losing `prefix_tokens` of cache, of which `offloaded_tokens` are still held by
    /// the offload tier: recompute all, or reload those and recompute the rest.
    pub fn miss_cost_s(&self, prefix_tokens: i64, offloaded_tokens: i64) -> Result<f64> {
        let p = int_in("prefix_tokens", prefix_tokens, 0, MAX_TOKENS)?;
        let o = int_in("offloaded_tokens", offloaded_tokens, 0, MAX_TOKENS)?;
        if o > p {
            return Err(Error::invalid(
                "offloaded_tokens",
                o,
                format!("<= prefix_tokens ({p})"),
            ));
        }
        let recompute = self.prefill_unchecked(p);
        match self.reload_unchecked(o) {
            Some(reload) if o != 0 => {
                let partial = reload + self.prefill_unchecked(p - o);
                // Python's min(recompute, partial).
                Ok(if partial < recompute {
                    partial
                } else {
                    recompute
                })
            }
            _ => Ok(recompute),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's recomputation, to check the O(1) update against.
    fn moments_of(turns: &[i64]) -> TurnMoments {
        let mut m = TurnMoments::default();
        for &t in turns {
            m.update(t, 1);
        }
        m
    }

    #[test]
    fn eta_is_one_for_fixed_length_programs() {
        let mut e = EtaEstimator::new(64, 8).unwrap();
        for _ in 0..20 {
            e.observe(12).unwrap();
        }
        assert!((e.eta() - 1.0).abs() < 1e-12, "{}", e.eta());
    }

    /// Pearson correlation over the explicit pairs (k, N − k), in floats.
    fn corr_of_pairs(turns: &[i64]) -> f64 {
        let pairs: Vec<(f64, f64)> = turns
            .iter()
            .flat_map(|&n| (1..=n).map(move |k| (k as f64, (n - k) as f64)))
            .collect();
        let m = pairs.len() as f64;
        let (mk, mr) = pairs
            .iter()
            .fold((0.0, 0.0), |a, p| (a.0 + p.0 / m, a.1 + p.1 / m));
        let (mut c, mut vk, mut vr) = (0.0, 0.0, 0.0);
        for &(k, r) in &pairs {
            c += (k - mk) * (r - mr);
            vk += (k - mk) * (k - mk);
            vr += (r - mr) * (r - mr);
        }
        c / (vk * vr).sqrt()
    }

    #[test]
    fn eta_starts_at_one_then_follows_the_correlation() {
        let turns = [1, 50, 2, 80, 7];
        let mut e = EtaEstimator::new(64, 4).unwrap();
        for &t in &turns[..4] {
            assert_eq!(e.eta(), 1.0);
            e.observe(t).unwrap();
        }
        e.observe(turns[4]).unwrap();
        let expected = -corr_of_pairs(&turns);
        assert!(expected > 0.0 && expected < 1.0);
        assert!(
            (e.eta() - expected).abs() < 1e-12,
            "{} vs {expected}",
            e.eta()
        );
    }

    #[test]
    fn eta_window_update_equals_recomputation() {
        let mut e = EtaEstimator::new(5, 0).unwrap();
        let turns = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5];
        for (i, &t) in turns.iter().enumerate() {
            e.observe(t).unwrap();
            let lo = (i + 1).saturating_sub(5);
            assert_eq!(e.moments, moments_of(&turns[lo..=i]));
        }
        assert_eq!(e.count(), 5);
    }

    #[test]
    fn eta_sums_do_not_overflow_at_the_limits() {
        let mut e = EtaEstimator::new(MAX_WINDOW, 0).unwrap();
        for i in 0..2000 {
            e.observe(if i % 2 == 0 { MAX_TURNS } else { 1 }).unwrap();
        }
        assert!((0.0..=1.0).contains(&e.eta()));
        assert!(e.observe(0).is_err() && e.observe(MAX_TURNS + 1).is_err());
        assert_eq!(e.count(), 2000);
    }

    #[test]
    fn out_of_order_cost_is_a_windowed_mean() {
        let mut t = OutOfOrderCost::new(2).unwrap();
        assert_eq!(t.mean_s(), 0.0);
        for d in [1.0, 2.0, 6.0] {
            t.observe(d).unwrap();
        }
        assert_eq!(t.mean_s(), 4.0);
        assert!(t.observe(-1.0).is_err());
        assert_eq!((t.count(), t.mean_s()), (2, 4.0));
    }

    fn model() -> CacheMissModel {
        CacheMissModel::new(0.01, 1e-4, 0.0, 131072, None, 256, 8).unwrap()
    }

    #[test]
    fn miss_model_recovers_a_quadratic() {
        let mut m = model();
        let (a, b, c) = (0.02, 3e-5, 2e-9);
        for i in 0..20 {
            let n = 500 * (i + 1);
            let x = n as f64;
            m.observe_prefill(n, a + b * x + c * x * x, 0).unwrap();
        }
        assert!(m.fitted());
        let (fa, fb, fc) = m.coefficients();
        assert!((fa - a).abs() < 1e-9 && (fb - b).abs() < 1e-12 && (fc - c).abs() < 1e-15);
    }

    #[test]
    fn a_chunked_prefix_pays_the_fixed_term_per_chunk() {
        // a = 0.01 s per step, b = 1e-4 s per token; chunks of 512 tokens
        let chunked = model().with_prefill_chunk_tokens(Some(512)).unwrap();
        let one = model();
        assert_eq!(chunked.prefill_chunk_tokens(), Some(512));
        // 512 tokens: one step either way; 513: two steps, one more fixed term
        assert_eq!(chunked.prefill_s(512).unwrap(), one.prefill_s(512).unwrap());
        let extra = chunked.prefill_s(513).unwrap() - one.prefill_s(513).unwrap();
        assert!((extra - 0.01).abs() < 1e-12, "{extra}");
        // 100,000 tokens: ⌈100000 / 512⌉ = 196 steps
        let extra = chunked.prefill_s(100_000).unwrap() - one.prefill_s(100_000).unwrap();
        assert!((extra - 195.0 * 0.01).abs() < 1e-9, "{extra}");
        assert!(model().with_prefill_chunk_tokens(Some(0)).is_err());
        assert!(model().with_prefill_chunk_tokens(None).is_ok());
    }

    #[test]
    fn miss_cost_takes_the_cheaper_path() {
        let m = CacheMissModel::new(0.0, 1e-3, 0.0, 1000, Some(1e6), 256, 8).unwrap();
        // recompute 1000 tokens: 1 s; reload 1000: 1 s + recompute 0 → equal, recompute kept.
        assert_eq!(m.miss_cost_s(1000, 1000).unwrap(), 1.0);
        // reload 500 tokens: 0.5 s + recompute 500: 0.5 s.
        assert_eq!(m.miss_cost_s(1000, 500).unwrap(), 1.0);
        let fast = CacheMissModel::new(0.0, 1e-3, 0.0, 1000, Some(1e8), 256, 8).unwrap();
        assert_eq!(fast.miss_cost_s(1000, 1000).unwrap(), 0.01);
        assert_eq!(m.prefill_s(0).unwrap(), 0.0);
        assert_eq!(model().reload_s(10).unwrap(), None);
        let e = m.miss_cost_s(10, 11).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offloaded_tokens must be <= prefix_tokens (10), got 11"
        );
    }

    #[test]
    fn fewer_than_three_token_counts_keep_defaults() {
        let mut m = model();
        for i in 0..10 {
            // Two token counts: singular in exact arithmetic, not quite in floats.
            m.observe_prefill(100 + i % 2, 1.0 + 1e-3 * i as f64, 0)
                .unwrap();
        }
        assert!(!m.fitted());
        assert_eq!(m.coefficients(), (0.01, 1e-4, 0.0));
        m.observe_prefill(5000, 2.0, 0).unwrap();
        assert!(m.fitted());
    }
}
