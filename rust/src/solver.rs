//! The TTL solver: one rule serves CacheTTL (per tool) and Kareto (per prefix group).
//!
//! Holding a cache for τ seconds costs `cost_per_s · τ`; it pays `benefit_s` if the owner
//! comes back within τ, which happens with probability P(τ) = fraction of past samples ≤ τ.
//! P is a step function and the cost is linear, so the optimum sits at 0 or on a sample.
//! Mirrors `python/ttlpolicy/reference/solver.py` operation for operation.

use crate::error::Result;
use crate::validate::non_negative;

/// Exact argmax over τ ∈ {0} ∪ {samples ≤ max_ttl_s} of P(τ)·benefit − cost·τ.
///
/// `sorted_samples_s` must be sorted ascending, finite and non-negative, and `benefit_s`,
/// `cost_per_s` non-negative. Returns (τ, value, k) where k is the number of samples ≤ τ
/// (so P(τ) = k / n). Ties go to the smaller τ. Never allocates. The result is bit for bit
/// the reference's: [`scan_in_order`] is its loop; [`scan_lanes`] reaches the same answer
/// without the reference's unpredictable branches, and is used whenever the inputs are
/// finite (always, through the public entry points).
pub fn solve_sorted(
    sorted_samples_s: &[f64],
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> (f64, f64, usize) {
    let n = sorted_samples_s.len() as f64;
    solve_with(
        sorted_samples_s,
        Divide(n),
        benefit_s,
        cost_per_s,
        max_ttl_s,
    )
}

/// [`solve_sorted`] with the fractions k / n read from a table instead of divided:
/// `fractions[k]` must be `k as f64 / n as f64` for k in 0..=n (n = number of samples), as
/// [`fraction_table`] builds it. Same result, about a third faster on a long window.
pub fn solve_sorted_with_fractions(
    sorted_samples_s: &[f64],
    fractions: &[f64],
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> (f64, f64, usize) {
    assert_eq!(
        fractions.len(),
        sorted_samples_s.len() + 1,
        "one fraction per k in 0..=n"
    );
    debug_assert_eq!(fractions.last(), Some(&1.0));
    solve_with(
        sorted_samples_s,
        Table(fractions),
        benefit_s,
        cost_per_s,
        max_ttl_s,
    )
}

/// k / n for k in 0..=n: the probabilities P(τ) a window of n samples can give.
pub fn fraction_table(n: usize) -> Vec<f64> {
    let n_f = n as f64;
    (0..=n).map(|k| k as f64 / n_f).collect()
}

fn solve_with(
    s: &[f64],
    fractions: impl Fractions,
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> (f64, f64, usize) {
    if benefit_s.is_finite() && cost_per_s.is_finite() {
        scan_lanes(s, fractions, benefit_s, cost_per_s, max_ttl_s)
    } else {
        scan_in_order(s, benefit_s, cost_per_s, max_ttl_s)
    }
}

/// P(τ) = k / n as the scan needs it: the very quotient the reference computes.
trait Fractions {
    fn one(&self, k: usize) -> f64;
    /// k0 / n, (k0 + 1) / n, … for one quad of lanes.
    fn quad(&self, k0: usize) -> [f64; LANES];
}

/// Divided on the fly.
struct Divide(f64);

impl Fractions for Divide {
    #[inline(always)]
    fn one(&self, k: usize) -> f64 {
        // Through i64: one instruction on x86-64, and exact (k < 2^53).
        k as i64 as f64 / self.0
    }

    #[inline(always)]
    fn quad(&self, k0: usize) -> [f64; LANES] {
        let k = k0 as i64 as f64;
        [
            k / self.0,
            (k + 1.0) / self.0,
            (k + 2.0) / self.0,
            (k + 3.0) / self.0,
        ]
    }
}

/// Read from a table built by [`fraction_table`].
struct Table<'a>(&'a [f64]);

impl Fractions for Table<'_> {
    #[inline(always)]
    fn one(&self, k: usize) -> f64 {
        self.0[k]
    }

    #[inline(always)]
    fn quad(&self, k0: usize) -> [f64; LANES] {
        let mut q = [0.0; LANES];
        q.copy_from_slice(&self.0[k0..k0 + LANES]);
        q
    }
}

/// The reference's scan, operation for operation: τ = 0 first, then each run of equal
/// samples at its end, keeping the first strict maximum.
pub fn scan_in_order(
    sorted_samples_s: &[f64],
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> (f64, f64, usize) {
    let s = sorted_samples_s;
    let n = s.len();
    if n == 0 {
        return (0.0, 0.0, 0);
    }
    let n_f = n as f64;
    let (mut best_tau, mut best_k) = (0.0, 0usize);
    // τ = 0 still catches samples that are exactly 0.
    while best_k < n && s[best_k] <= 0.0 {
        best_k += 1;
    }
    let mut best_value = (best_k as f64 / n_f) * benefit_s;
    let mut i = best_k;
    while i < n {
        let tau = s[i];
        if tau > max_ttl_s {
            break;
        }
        let held_s = cost_per_s * tau;
        // No later τ' ≥ τ can win: its value is P'·benefit − cost·τ' ≤ benefit − cost·τ, and
        // rounding is monotone, so the float bound holds too. Stopping changes no result.
        if benefit_s - held_s <= best_value {
            break;
        }
        // P(τ) counts every sample equal to τ: jump to the end of the run of equal values.
        while i + 1 < n && s[i + 1] == tau {
            i += 1;
        }
        let k = i + 1;
        let value = (k as f64 / n_f) * benefit_s - held_s;
        if value > best_value {
            best_tau = tau;
            best_value = value;
            best_k = k;
        }
        i += 1;
    }
    (best_tau, best_value, best_k)
}

/// Independent lanes of the scan: no loop-carried branch, so the CPU pipelines it.
const LANES: usize = 4;
/// Positions scanned between two checks of the stopping bound.
const BLOCK: usize = 64;

/// The same answer as [`scan_in_order`] for finite `benefit_s` and `cost_per_s`, found by
/// evaluating the objective at every position i with k = i + 1 — the same operations
/// `(k / n)·benefit − cost·τ` — in [`LANES`] interleaved lanes, each keeping its first strict
/// maximum. Why it agrees: inside a run of equal samples k only grows, so no position beats
/// its run's end (rounding is monotone); the maximum over positions is therefore the
/// reference's maximum over run ends, and the first position reaching it lies in the first
/// run whose end reaches it — the reference's answer once k is moved to that run's end.
/// With finite inputs no value is NaN, so comparisons are a total order. Lanes hold k as a
/// float (exact below 2^53) so that every lane update is a float select.
fn scan_lanes(
    s: &[f64],
    fractions: impl Fractions,
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> (f64, f64, usize) {
    let n = s.len();
    if n == 0 {
        return (0.0, 0.0, 0);
    }
    // τ = 0 catches the samples that are exactly 0; candidates are the samples in (0, max].
    let zeros = s.partition_point(|&x| x <= 0.0);
    let floor = fractions.one(zeros) * benefit_s;
    let end = s.partition_point(|&x| x <= max_ttl_s);
    let mut lane_value = [floor; LANES];
    let mut lane_k = [0.0f64; LANES]; // 0: the lane never beat τ = 0
    let mut i = zeros;
    while i < end {
        // The stopping bound of `scan_in_order`, checked once per block.
        let best = lane_value
            .iter()
            .fold(floor, |m, &v| if v > m { v } else { m });
        if benefit_s - cost_per_s * s[i] <= best {
            break;
        }
        let stop = (i + BLOCK).min(end);
        let mut quads = s[i..stop].chunks_exact(LANES);
        for quad in &mut quads {
            let p = fractions.quad(i + 1);
            let k0 = (i + 1) as i64 as f64;
            for j in 0..LANES {
                let value = p[j] * benefit_s - cost_per_s * quad[j];
                let better = value > lane_value[j];
                lane_value[j] = if better { value } else { lane_value[j] };
                lane_k[j] = if better { k0 + j as f64 } else { lane_k[j] };
            }
            i += LANES;
        }
        for &tau in quads.remainder() {
            let value = fractions.one(i + 1) * benefit_s - cost_per_s * tau;
            if value > lane_value[0] {
                lane_value[0] = value;
                lane_k[0] = (i + 1) as f64;
            }
            i += 1;
        }
    }
    // The overall first maximum: the largest lane value, the smallest k among ties.
    let (mut best_value, mut best_k) = (floor, 0.0);
    for (&v, &k) in lane_value.iter().zip(&lane_k) {
        if v > best_value || (v == best_value && k < best_k) {
            best_value = v;
            best_k = k;
        }
    }
    if best_k == 0.0 {
        return (0.0, floor, zeros);
    }
    let at = best_k as usize - 1;
    let tau = s[at];
    let mut k = at + 1;
    while k < n && s[k] == tau {
        k += 1;
    }
    (tau, best_value, k)
}

/// `(tau_s, value)`: the TTL that maximises P(τ)·benefit_s − cost_per_s·τ, τ ≤ max_ttl_s.
///
/// Empty samples give `(0.0, 0.0)`. NaN, infinite or negative inputs are refused, naming
/// the field (`samples_s[i]` for a sample).
pub fn solve_ttl(
    samples_s: &[f64],
    benefit_s: f64,
    cost_per_s: f64,
    max_ttl_s: f64,
) -> Result<(f64, f64)> {
    let benefit_s = non_negative("benefit_s", benefit_s)?;
    let cost_per_s = non_negative("cost_per_s", cost_per_s)?;
    let max_ttl_s = non_negative("max_ttl_s", max_ttl_s)?;
    check_samples(samples_s)?;
    // Finite non-negative floats order like their bit patterns once -0.0 is made +0.0 (which
    // changes no answer: both count at τ = 0), and integer keys sort 2-3× faster.
    let mut keys: Vec<u64> = samples_s.iter().map(|&x| (x + 0.0).to_bits()).collect();
    keys.sort_unstable();
    let sorted: Vec<f64> = keys.into_iter().map(f64::from_bits).collect();
    let (tau, value, _) = solve_sorted(&sorted, benefit_s, cost_per_s, max_ttl_s);
    Ok((tau, value))
}

/// Every sample finite and non-negative; the error names the first bad index.
pub fn check_samples(samples_s: &[f64]) -> Result<()> {
    for (i, &x) in samples_s.iter().enumerate() {
        if !(x.is_finite() && x >= 0.0) {
            non_negative(&format!("samples_s[{i}]"), x)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every candidate evaluated, no shortcut: the definition itself.
    fn brute(samples: &[f64], b: f64, c: f64, max_ttl: f64) -> (f64, f64) {
        let n = samples.len() as f64;
        let mut cands: Vec<f64> = samples.iter().copied().filter(|&x| x <= max_ttl).collect();
        cands.push(0.0);
        cands.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut best = (0.0, f64::NEG_INFINITY);
        for &t in &cands {
            let k = samples.iter().filter(|&&x| x <= t).count() as f64;
            let v = (k / n) * b - c * t;
            if v > best.1 {
                best = (t, v);
            }
        }
        best
    }

    /// A small deterministic generator: no dev-dependency needed.
    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn empty_samples_give_zero() {
        assert_eq!(solve_ttl(&[], 5.0, 1.0, 10.0).unwrap(), (0.0, 0.0));
        assert_eq!(solve_sorted(&[], 5.0, 1.0, 10.0), (0.0, 0.0, 0));
    }

    #[test]
    fn matches_brute_force_on_random_inputs() {
        let mut seed = 42;
        for round in 0..2000 {
            let n = 1 + (lcg(&mut seed) * 40.0) as usize;
            // Coarse values make ties and repeated samples common.
            let samples: Vec<f64> = (0..n).map(|_| (lcg(&mut seed) * 20.0).floor()).collect();
            let b = (lcg(&mut seed) * 30.0).floor();
            let c = lcg(&mut seed) * 3.0;
            let max_ttl = if round % 3 == 0 {
                1e9
            } else {
                lcg(&mut seed) * 20.0
            };
            let got = solve_ttl(&samples, b, c, max_ttl).unwrap();
            assert_eq!(
                got,
                brute(&samples, b, c, max_ttl),
                "{samples:?} {b} {c} {max_ttl}"
            );
        }
    }

    #[test]
    fn lane_scan_equals_the_reference_scan() {
        let mut seed = 7;
        for round in 0..3000 {
            let n = 1 + (lcg(&mut seed) * 300.0) as usize;
            // Mostly coarse values (long runs of ties), sometimes fine ones.
            let scale = if round % 2 == 0 { 8.0 } else { 1e6 };
            let mut samples: Vec<f64> = (0..n)
                .map(|_| (lcg(&mut seed) * scale).floor() / scale * 20.0)
                .collect();
            samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let b = (lcg(&mut seed) * 40.0).floor() / 4.0;
            let c = if round % 5 == 0 {
                0.0
            } else {
                (lcg(&mut seed) * 16.0).floor() / 8.0
            };
            let max_ttl = if round % 3 == 0 {
                1e9
            } else {
                lcg(&mut seed) * 20.0
            };
            let slow = scan_in_order(&samples, b, c, max_ttl);
            let table = fraction_table(n);
            for fast in [
                solve_sorted(&samples, b, c, max_ttl),
                solve_sorted_with_fractions(&samples, &table, b, c, max_ttl),
            ] {
                let same = fast.0.to_bits() == slow.0.to_bits()
                    && fast.1.to_bits() == slow.1.to_bits()
                    && fast.2 == slow.2;
                assert!(same, "{fast:?} != {slow:?}: {samples:?} {b} {c} {max_ttl}");
            }
        }
    }

    #[test]
    fn non_finite_benefit_follows_the_reference_scan() {
        let s = [1.0, 2.0, 3.0];
        let r = solve_sorted(&s, f64::INFINITY, 1.0, 10.0);
        let expected = scan_in_order(&s, f64::INFINITY, 1.0, 10.0);
        assert_eq!((r.0, r.2), (expected.0, expected.2));
        assert!(r.1.is_nan() && expected.1.is_nan());
    }

    #[test]
    fn negative_zero_samples_count_at_tau_zero() {
        let (tau, value) = solve_ttl(&[-0.0, 3.0, 0.0, 1.0], 8.0, 0.5, 10.0).unwrap();
        assert_eq!((tau, value), (3.0, 8.0 - 1.5));
        assert_eq!(solve_ttl(&[-0.0], 1.0, 1.0, 1.0).unwrap(), (0.0, 1.0));
    }

    #[test]
    fn ties_go_to_the_smaller_tau() {
        // τ=0: 0; τ=1: 0.5·4 − 2·1 = 0; τ=2: 1·4 − 2·2 = 0 → all tie, 0 wins.
        assert_eq!(solve_ttl(&[1.0, 2.0], 4.0, 2.0, 10.0).unwrap(), (0.0, 0.0));
    }

    #[test]
    fn zero_samples_count_at_tau_zero() {
        let (tau, value, k) = solve_sorted(&[0.0, 0.0, 5.0, 9.0], 8.0, 1.0, 10.0);
        assert_eq!((tau, value, k), (0.0, 4.0, 2));
    }

    #[test]
    fn max_ttl_caps_tau() {
        let (tau, _) = solve_ttl(&[1.0, 2.0, 50.0], 100.0, 0.0, 10.0).unwrap();
        assert_eq!(tau, 2.0);
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = solve_ttl(&[1.0, f64::NAN], 1.0, 1.0, 1.0).unwrap_err();
        assert_eq!(e.field(), Some("samples_s[1]"));
        let e = solve_ttl(&[1.0, -2.0], 1.0, 1.0, 1.0).unwrap_err();
        assert_eq!(e.to_string(), "samples_s[1] must be >= 0, got -2.0");
        for (b, c, m, field) in [
            (-1.0, 1.0, 1.0, "benefit_s"),
            (1.0, f64::INFINITY, 1.0, "cost_per_s"),
            (1.0, 1.0, f64::NAN, "max_ttl_s"),
        ] {
            let e = solve_ttl(&[1.0], b, c, m).unwrap_err();
            assert_eq!(e.field(), Some(field));
        }
    }
}
