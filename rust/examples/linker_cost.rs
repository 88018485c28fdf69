//! `ProgramLinker::link` and `finished` in the core alone (no Python), for `bench/RESULTS.md`:
//! the state of `bench/linker_cost.py` (100,000 programs of one tenant, prompts of 300 to
//! 3,000 blocks beginning with a 269-block prefix they all share), then batches of 2,000 calls,
//! each continuing a random program with 20 new blocks (its prompt built just before the
//! call); prints the median and best batch's mean per-call time of each.
//!
//! An argument `KIB` writes that many KiB of other memory before each call, as a Python
//! caller's own work between two calls does (it evicts what the last call left in the
//! caches): `KIB` 0 (the default) is the core on caches it alone uses.
//!
//! `cargo run --release -p ttlpolicy-core --example linker_cost [KIB]`

use std::time::Instant;

use ttlpolicy_core::linker::ProgramLinker;

// (only `median_best`: each call here changes the state the next one reads)
#[allow(dead_code)]
#[path = "common/timing.rs"]
mod timing;

const PROGRAMS: u64 = 100_000;
const SHARED_BLOCKS: u64 = 269;
const BATCHES: usize = 10;
const BATCH: usize = 2_000;

/// Block `i` of program `p`: chained hashes as the Python bench makes them.
fn block(p: u64, i: u64) -> u64 {
    if i < SHARED_BLOCKS {
        i
    } else {
        (p << 24) | i
    }
}

fn main() {
    let other_kib: usize = std::env::args()
        .nth(1)
        .map_or(0, |a| a.parse().expect("KIB: a whole number of KiB"));
    // (one u64 every 64 bytes: each write dirties one cache line)
    let mut other = vec![0u64; other_kib * 1024 / 8];
    // xorshift64 over a fixed seed (not Python's generator: the same shape, other draws)
    let mut x: u64 = 88_172_645_463_325_252;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut lengths: Vec<u64> = (0..PROGRAMS).map(|_| 300 + next() % 2_700).collect();
    let mut linker = ProgramLinker::new(1 << 20, 86_400.0, 1 << 20, 0.9).expect("bounds");
    for p in 0..PROGRAMS {
        let prompt: Vec<u64> = (0..lengths[p as usize]).map(|i| block(p, i)).collect();
        let link = linker
            .link("tenant", &mut prompt.as_slice(), 0.0, None)
            .expect("link");
        linker
            .finished("tenant", &link.program, &mut prompt.as_slice(), 0.0, None)
            .expect("finished");
    }
    let (mut link_ns, mut finished_ns) = (Vec::new(), Vec::new());
    for batch in 0..BATCHES {
        let now = 1.0 + batch as f64;
        let (mut spent_link, mut spent_finished) = (0u128, 0u128);
        for _ in 0..BATCH {
            let p = next() % PROGRAMS;
            let prompt: Vec<u64> = (0..lengths[p as usize] + 20).map(|i| block(p, i)).collect();
            for word in other.iter_mut().step_by(8) {
                *word = word.wrapping_add(p);
            }
            let t0 = Instant::now();
            let link = linker
                .link("tenant", &mut prompt.as_slice(), now, None)
                .expect("link");
            let t1 = Instant::now();
            linker
                .finished("tenant", &link.program, &mut prompt.as_slice(), now, None)
                .expect("finished");
            spent_link += (t1 - t0).as_nanos();
            spent_finished += t1.elapsed().as_nanos();
            lengths[p as usize] = prompt.len() as u64;
        }
        link_ns.push(spent_link as f64 / BATCH as f64);
        finished_ns.push(spent_finished as f64 / BATCH as f64);
    }
    let (link_median, link_best) = timing::median_best(link_ns);
    let (finished_median, finished_best) = timing::median_best(finished_ns);
    println!(
        "other_kib={} (checksum {}) programs={} turn_ends={} points={}\nlink_us median={:.2} best={:.2} \
         finished_us median={:.2} best={:.2}",
        other_kib,
        other.iter().fold(0u64, |a, w| a.wrapping_add(*w)),
        linker.program_count(),
        linker.turn_end_count(),
        linker.point_count(),
        link_median / 1e3,
        link_best / 1e3,
        finished_median / 1e3,
        finished_best / 1e3,
    )
}
