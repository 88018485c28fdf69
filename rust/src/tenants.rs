//! Tenants: which tenant a program id belongs to, and the tenants' weights. Mirrors
//! `python/ttlpolicy/reference/tenants.py`, whose doc states the rules.
//!
//! The pin budget and load control's working set are shared among the active tenants in
//! proportion to their weights (1 each unless [`TenantWeights`] names them): a tenant's share
//! of `budget` is `budget · weight / W`, `W` the active tenants' summed weight; it is over its
//! share when `blocks · W > budget · weight`, compared exactly in `i128`.

use std::collections::HashMap;

use crate::error::{Error, PyStr, Result};

/// The prefix of a program id namespaced by its tenant: `"\0t:<32 lowercase hex>:<id>"`.
pub const TENANT_PREFIX: &str = "\0t:";
/// Hex digits of a tenant key.
pub const TENANT_KEY_CHARS: usize = 32;
/// The prefix of an engine's inferred program's id, after its tenant's namespace.
pub const INFERRED_PREFIX: &str = "\0linked:";
/// Tenants a weights table may name.
pub const MAX_WEIGHTED_TENANTS: usize = 1024;
/// The largest weight.
pub const MAX_TENANT_WEIGHT: i64 = 1000;
const FIELD: &str = "tenant_weights";

fn is_key(key: &[u8]) -> bool {
    key.len() == TENANT_KEY_CHARS
        && key
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// The tenant key of a namespaced program id, `""` (the shared tenant) for any other id.
pub fn tenant_of(program_id: &str) -> &str {
    let start = TENANT_PREFIX.len();
    let end = start + TENANT_KEY_CHARS;
    let b = program_id.as_bytes();
    if program_id.starts_with(TENANT_PREFIX)
        && b.len() > end
        && b[end] == b':'
        && is_key(&b[start..end])
    {
        return &program_id[start..end];
    }
    ""
}

/// Whether `program_id` names a program an engine inferred from the prompt (the reference's
/// `is_inferred`): its id past its tenant's namespace, if any, starts with
/// [`INFERRED_PREFIX`].
pub fn is_inferred(program_id: &str) -> bool {
    let start = if tenant_of(program_id).is_empty() {
        0
    } else {
        TENANT_PREFIX.len() + TENANT_KEY_CHARS + 1
    };
    program_id.as_bytes()[start..].starts_with(INFERRED_PREFIX.as_bytes())
}

/// A str as the reference's `short_repr` shows it: Python's repr, cut to 80 code points.
fn short_repr(s: &str) -> String {
    let r = PyStr(s).to_string();
    match r.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &r[..cut]),
        None => r,
    }
}

/// A checked table of tenant weights by tenant key; tenants it does not name weigh 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantWeights {
    by_key: HashMap<Box<str>, i64>,
}

impl TenantWeights {
    /// The table of `entries` (tenant key, weight), checked in order: at most
    /// [`MAX_WEIGHTED_TENANTS`] of them, each key a tenant key, each weight in
    /// `[1, MAX_TENANT_WEIGHT]`. A key given twice keeps its last weight.
    pub fn new<S: AsRef<str>>(entries: &[(S, i64)]) -> Result<TenantWeights> {
        if entries.len() > MAX_WEIGHTED_TENANTS {
            return Err(Error::invalid(
                FIELD,
                entries.len(),
                format!("at most {MAX_WEIGHTED_TENANTS} tenants"),
            ));
        }
        let mut by_key = HashMap::with_capacity(entries.len());
        for (key, weight) in entries {
            let key = key.as_ref();
            if !is_key(key.as_bytes()) {
                return Err(Error::invalid(
                    FIELD,
                    short_repr(key),
                    format!(
                        "keyed by tenant keys ({TENANT_KEY_CHARS} lowercase hex digits, \
                         ids.tenant_key)"
                    ),
                ));
            }
            if !(1..=MAX_TENANT_WEIGHT).contains(weight) {
                return Err(Error::invalid(
                    FIELD,
                    weight,
                    format!(
                        "a weight in [1, {MAX_TENANT_WEIGHT}] for tenant {}",
                        short_repr(key)
                    ),
                ));
            }
            by_key.insert(Box::from(key), *weight);
        }
        Ok(TenantWeights { by_key })
    }

    /// The weight of tenant `key`: 1 unless the table names it.
    pub fn weight(&self, key: &str) -> i64 {
        self.by_key.get(key).copied().unwrap_or(1)
    }

    /// Tenants named.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether the table names no tenant.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// Is a tenant with `blocks` of `budget` over its share, weighing `weight` of `total_weight`?
pub fn over_share(blocks: i64, weight: i64, budget: i64, total_weight: i64) -> bool {
    i128::from(blocks) * i128::from(total_weight) > i128::from(budget) * i128::from(weight)
}

/// Orders tenants by blocks per unit of weight (`a_blocks / a_weight` against `b`'s).
pub fn cmp_usage(a: (i64, i64), b: (i64, i64)) -> std::cmp::Ordering {
    (i128::from(a.0) * i128::from(b.1)).cmp(&(i128::from(b.0) * i128::from(a.1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn an_inferred_id_is_read_past_the_tenants_namespace() {
        assert!(is_inferred("\0linked:1"));
        assert!(is_inferred(&format!("{TENANT_PREFIX}{A}:\0linked:1")));
        assert!(!is_inferred("linked:1")); // a client's id
        assert!(!is_inferred(&format!("{TENANT_PREFIX}{A}:linked:1")));
        assert!(!is_inferred("p\0linked:1"));
        assert!(!is_inferred(&format!("{TENANT_PREFIX}{A}:")));
        assert!(!is_inferred(""));
    }

    #[test]
    fn weights_default_to_one_and_are_checked() {
        let w = TenantWeights::new(&[(A, 3)]).unwrap();
        assert_eq!((w.weight(A), w.weight("")), (3, 1));
        let bad = |entries: &[(&str, i64)]| TenantWeights::new(entries).unwrap_err().to_string();
        assert!(bad(&[(A, 0)]).contains("a weight in [1, 1000]"));
        assert!(bad(&[(A, MAX_TENANT_WEIGHT + 1)]).ends_with("got 1001"));
        assert!(bad(&[(&A.to_uppercase(), 2)]).contains("keyed by tenant keys"));
        let many: Vec<(String, i64)> = (0..=MAX_WEIGHTED_TENANTS)
            .map(|i| (format!("{i:032x}"), 1))
            .collect();
        assert!(TenantWeights::new(&many).is_err());
    }

    #[test]
    fn shares_compare_exactly() {
        // 90 blocks of 90 among weights 2 (of 3): the share is 60
        assert!(!over_share(60, 2, 90, 3));
        assert!(over_share(61, 2, 90, 3));
        assert!(!over_share(
            i64::MAX,
            MAX_TENANT_WEIGHT,
            i64::MAX,
            MAX_TENANT_WEIGHT
        ));
        assert_eq!(cmp_usage((30, 1), (60, 3)), std::cmp::Ordering::Greater);
    }
}
