//! Per-call timing shared by the cost examples (included with `#[path]`; not an example).

use std::time::Instant;

/// `op` run in `rounds` rounds of `ops` calls: (median, best) nanoseconds per call.
pub fn per_call_ns(rounds: usize, ops: usize, mut op: impl FnMut()) -> (f64, f64) {
    median_best(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..ops {
                    op();
                }
                t.elapsed().as_nanos() as f64 / ops as f64
            })
            .collect(),
    )
}

/// (median, best) of per-call times.
pub fn median_best(mut per_call_ns: Vec<f64>) -> (f64, f64) {
    per_call_ns.sort_by(f64::total_cmp);
    (per_call_ns[per_call_ns.len() / 2], per_call_ns[0])
}
