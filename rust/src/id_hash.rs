//! The hasher of every table keyed by client input: request, program and tool ids.
//!
//! A fixed-seed hash such as FxHash would let a client pick ids that all collide and make
//! every probe linear: a denial of service. std's SipHash resists that too, but on the short
//! ids here it was a seventh of the library's instructions per LLM call in the
//! simulator (bench/RESULTS.md, "Loop speed, fourth round"). foldhash is fast on short
//! strings and is keyed here by 64 bits from the OS's randomness (through std's
//! `RandomState`, per table) plus its own per-process seed, so colliding ids cannot be
//! chosen without knowing the key.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use foldhash::fast::{FoldHasher, SeedableRandomState};
use foldhash::SharedSeed;

/// A randomly keyed foldhash, one key per table (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct IdHasher(SeedableRandomState);

impl Default for IdHasher {
    fn default() -> Self {
        let key = std::hash::RandomState::new().hash_one(0x7474_6c70_6f6c_6963_u64);
        IdHasher(SeedableRandomState::with_seed(
            key,
            SharedSeed::global_random(),
        ))
    }
}

impl BuildHasher for IdHasher {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// A `HashMap` keyed by client ids.
pub(crate) type IdMap<K, V> = HashMap<K, V, IdHasher>;
/// A `HashSet` of client ids.
pub(crate) type IdSet<K> = HashSet<K, IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_has_its_own_key() {
        // Two tables hash the same ids differently (a key per table, not one per process or a
        // fixed seed): ids that collide in one table were not chosen to collide in another.
        let (a, b) = (IdHasher::default(), IdHasher::default());
        let differ = (0..16)
            .filter(|i| {
                let id = format!("program-{i}");
                a.hash_one(&id) != b.hash_one(&id)
            })
            .count();
        assert_eq!(differ, 16);
        // One table hashes an id the same way every time.
        assert_eq!(a.hash_one("req-1"), a.hash_one("req-1"));
    }
}
