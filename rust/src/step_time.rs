//! The simulator's step-time model: the time of one engine step, and of a run of steps whose
//! shape grows by the same amounts each step, in closed form.
//!
//! It mirrors `StepModel` and `StepRun` of `ttlpolicy.sim.hardware` (the reference) operation
//! for operation, so that both give the same floats to the bit: the simulator's results must
//! not depend on which backend timed its steps (`tests/sim/test_step_time_native.py`). The
//! simulator asks for a run's time several times per LLM call (its loop's hottest arithmetic),
//! which is why it is here at all.

/// `c0 + c_tok · tokens + c_attn · attn + c_kv · kv + c_seq · seqs` seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    /// Seconds per step.
    pub c0: f64,
    /// Seconds per new token.
    pub c_tok: f64,
    /// Seconds per attention unit (a new token and a context token it attends to).
    pub c_attn: f64,
    /// Seconds per KV token read.
    pub c_kv: f64,
    /// Seconds per sequence in the step.
    pub c_seq: f64,
}

impl Line {
    /// The line at a step's shape, summed left to right as the reference does (no fused
    /// multiply-add: Rust never contracts these on its own).
    pub fn at(&self, tokens: f64, attn: f64, kv: f64, seqs: f64) -> f64 {
        self.c0 + self.c_tok * tokens + self.c_attn * attn + self.c_kv * kv + self.c_seq * seqs
    }
}

/// Step time = max(compute line, memory line); with a `decode` line, a decode-only step
/// (every sequence computes one token: `tokens == seqs`) takes that line instead.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepModel {
    /// The compute-bound line.
    pub compute: Line,
    /// The memory-bound line.
    pub memory: Line,
    /// The line of decode-only steps, if they are priced apart.
    pub decode: Option<Line>,
}

impl StepModel {
    /// The (compute, memory) lines that price a step of `tokens` and `seqs`.
    pub fn lines(&self, tokens: f64, seqs: f64) -> (&Line, &Line) {
        match &self.decode {
            Some(decode) if tokens == seqs => (decode, decode),
            _ => (&self.compute, &self.memory),
        }
    }

    /// Seconds of one step of this shape.
    pub fn step_s(&self, tokens: f64, attn: f64, kv: f64, seqs: f64) -> f64 {
        let (c, m) = self.lines(tokens, seqs);
        let compute = c.at(tokens, attn, kv, seqs);
        let memory = m.at(tokens, attn, kv, seqs);
        if memory > compute {
            memory
        } else {
            compute
        }
    }

    /// The run of steps whose first step has this shape and each further one `d_attn`
    /// attention units and `d_kv` KV tokens more.
    pub fn run(
        &self,
        tokens: f64,
        attn0: f64,
        d_attn: f64,
        kv0: f64,
        d_kv: f64,
        seqs: f64,
    ) -> StepRun {
        let (c, m) = self.lines(tokens, seqs);
        let a0 = c.at(tokens, attn0, kv0, seqs);
        let da = c.c_attn * d_attn + c.c_kv * d_kv;
        let b0 = m.at(tokens, attn0, kv0, seqs);
        let db = m.c_attn * d_attn + m.c_kv * d_kv;
        // the first step index where the order of the two lines may flip (None: never)
        let (diff0, ddiff) = (a0 - b0, da - db);
        let mut split = None;
        if ddiff != 0.0 {
            let cross = -diff0 / ddiff;
            if cross != f64::INFINITY {
                // (a cast saturates: a crossing past u64::MAX steps is past any run)
                split = Some(if cross > 0.0 { cross.ceil() as u64 } else { 0 });
            }
        }
        StepRun {
            a0,
            da,
            b0,
            db,
            split,
        }
    }
}

/// The times of a run of steps (see [`StepModel::run`]): each line is linear in the step
/// index, so their difference changes sign at most once, and a run's time sums the larger
/// line on each side of the crossing as an arithmetic series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRun {
    /// The compute line at the first step, and its growth per step.
    pub a0: f64,
    /// Growth of the compute line per step.
    pub da: f64,
    /// The memory line at the first step.
    pub b0: f64,
    /// Growth of the memory line per step.
    pub db: f64,
    /// The first step index where the larger line may change (None: never).
    pub split: Option<u64>,
}

impl StepRun {
    /// No line starts below zero or falls: then `s(k)`, as computed, never decreases with k.
    pub fn monotone(&self) -> bool {
        self.a0 >= 0.0 && self.b0 >= 0.0 && self.da >= 0.0 && self.db >= 0.0
    }

    /// Time of the first `k` steps.
    pub fn s(&self, k: u64) -> f64 {
        if k == 0 {
            return 0.0;
        }
        let split = match self.split {
            Some(s) if s <= k => s,
            _ => k,
        };
        let (a0, da, b0, db) = (self.a0, self.da, self.b0, self.db);
        let mut total = 0.0;
        if split > 0 {
            let mid = (split - 1) as f64 / 2.0;
            let (va, vb) = (a0 + da * mid, b0 + db * mid);
            total += split as f64 * if va >= vb { va } else { vb };
        }
        let n = k - split;
        if n > 0 {
            let mid = split as f64 + (n - 1) as f64 / 2.0;
            let (va, vb) = (a0 + da * mid, b0 + db * mid);
            total += n as f64 * if va >= vb { va } else { vb };
        }
        total
    }

    /// The fewest steps `j` in [1, k] after which a clock at `start_s` reaches `until_s`
    /// (`start_s + s(j) >= until_s`), and `s(j)`; `s_k` is `s(k)`, which must reach it.
    ///
    /// A bisection of [1, k]; when `s` never decreases (`monotone`) it starts from the steps
    /// the time left allows, which gives the same answer. `k` must be in [1, 2^53] (an exact
    /// float, as the reference compares it with one).
    pub fn reach(&self, start_s: f64, until_s: f64, k: u64, s_k: f64) -> (u64, f64) {
        let (mut lo, mut hi, mut s_hi) = (1u64, k, s_k);
        if self.monotone() {
            // s(j) ~ j·v0 + dv·j(j−1)/2 = left, solved for j (the stable form of the root)
            let (v0, dv) = if self.a0 >= self.b0 {
                (self.a0, self.da)
            } else {
                (self.b0, self.db)
            };
            let b = v0 - dv / 2.0;
            let left = until_s - start_s;
            let disc = b * b + 2.0 * dv * left;
            let x = if b > 0.0 && disc >= 0.0 {
                2.0 * left / (b + disc.sqrt())
            } else {
                f64::NAN
            };
            // (x NaN or past k: the whole run)
            let guess = if x.is_nan() || x >= k as f64 {
                k
            } else if x < 1.0 {
                1
            } else {
                x.ceil() as u64
            };
            let mut up = false; // the answer is above the guess
            if guess < k {
                let s_g = self.s(guess);
                if start_s + s_g >= until_s {
                    (hi, s_hi) = (guess, s_g);
                } else {
                    (lo, up) = (guess + 1, true);
                }
            }
            // Gallop away from the guess until the answer is bracketed (usually one probe).
            let mut step = 1u64;
            while lo < hi {
                let j = if up {
                    guess + step
                } else {
                    match guess.checked_sub(step) {
                        Some(j) => j,
                        None => break, // (the reference's j < lo: below 1)
                    }
                };
                if j >= hi || j < lo {
                    break;
                }
                let s_j = self.s(j);
                if start_s + s_j >= until_s {
                    (hi, s_hi) = (j, s_j);
                    if up {
                        break;
                    }
                } else {
                    lo = j + 1;
                    if !up {
                        break;
                    }
                }
                step *= 2;
            }
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            let s_mid = self.s(mid);
            if start_s + s_mid >= until_s {
                (hi, s_hi) = (mid, s_mid);
            } else {
                lo = mid + 1;
            }
        }
        (hi, s_hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> StepModel {
        // compute: 1 ms a step + 1 µs a token; memory: 2 ms + 10 ns per KV token
        StepModel {
            compute: Line {
                c0: 1e-3,
                c_tok: 1e-6,
                c_attn: 0.0,
                c_kv: 0.0,
                c_seq: 0.0,
            },
            memory: Line {
                c0: 2e-3,
                c_tok: 0.0,
                c_attn: 0.0,
                c_kv: 1e-8,
                c_seq: 0.0,
            },
            decode: None,
        }
    }

    #[test]
    fn a_run_sums_the_larger_line_of_each_step() {
        let m = model();
        // 1,000 tokens: compute 2 ms a step; memory 2 ms + 1e-8 · kv, kv growing by 100,000
        // a step: from the second step on memory is larger (3 ms, 4 ms, ...)
        let run = m.run(1000.0, 0.0, 0.0, 0.0, 100_000.0, 1.0);
        let by_hand: f64 = (0..5)
            .map(|j| m.step_s(1000.0, 0.0, 100_000.0 * j as f64, 1.0))
            .sum();
        assert!(
            (run.s(5) - by_hand).abs() < 1e-12,
            "{} vs {by_hand}",
            run.s(5)
        );
        assert_eq!(run.s(0), 0.0);
        assert_eq!(run.s(1), m.step_s(1000.0, 0.0, 0.0, 1.0));
    }

    #[test]
    fn a_decode_line_prices_decode_only_steps() {
        let decode = Line {
            c0: 5e-3,
            c_tok: 0.0,
            c_attn: 0.0,
            c_kv: 0.0,
            c_seq: 1e-4,
        };
        let m = StepModel {
            decode: Some(decode),
            ..model()
        };
        // 8 sequences decoding one token each: the decode line; a chunk among them: the others
        assert_eq!(m.step_s(8.0, 1e5, 1e5, 8.0), 5e-3 + 1e-4 * 8.0);
        assert_eq!(
            m.step_s(9.0, 1e5, 1e5, 8.0),
            model().step_s(9.0, 1e5, 1e5, 8.0)
        );
        assert_eq!(
            m.run(8.0, 1e5, 8.0, 1e5, 8.0, 8.0).s(3),
            3.0 * (5e-3 + 1e-4 * 8.0)
        );
    }

    #[test]
    fn reach_finds_the_first_step_past_a_time() {
        let m = model();
        let run = m.run(1000.0, 0.0, 0.0, 0.0, 100_000.0, 1.0);
        let k = 50;
        let s_k = run.s(k);
        for until in [0.001, 0.002, 0.0021, 0.01, 0.05, s_k] {
            let (j, s_j) = run.reach(0.0, until, k, s_k);
            assert!(s_j >= until, "{j} steps take {s_j} < {until}");
            assert!(
                j == 1 || run.s(j - 1) < until,
                "{} steps already reach",
                j - 1
            );
            assert_eq!(s_j, run.s(j));
        }
    }
}
