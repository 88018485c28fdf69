//! Tool-duration history: how long each tool took, over a sliding window.
//!
//! Per tool — a `(tenant, name)` pair, `""` the shared tenant — the last `window` durations;
//! beside them one global window of the last `window` durations of any tool. At most
//! `max_tools` tools are tracked, shared fairly: a new tool of tenant `T` in a full table
//! replaces the table's least recently observed tool, unless `T` holds more tools than that
//! one's tenant, then `T`'s own least recently observed. Windows are kept sorted as well as
//! in arrival order, so a CDF lookup is a binary search and the solver scans a sorted slice.
//! Mirrors `python/ttlpolicy/reference/history.py`, whose doc states the rules.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::id_hash::IdMap;
use crate::index_list::{linked, IndexList, Link};
use crate::solver::fraction_table;
use crate::validate::{check_tenant, int_in, non_negative, tool_key};

/// Largest `window`.
pub const MAX_WINDOW: i64 = 1 << 20;
/// Largest `max_tools`.
pub const MAX_TOOLS: i64 = 1 << 20;

/// The last `capacity` durations, in arrival order and sorted.
#[derive(Debug, Clone)]
pub struct DurationWindow {
    capacity: usize,
    order: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl DurationWindow {
    /// An empty window of `capacity` durations.
    pub fn new(capacity: usize) -> Self {
        DurationWindow {
            capacity,
            order: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    /// Append `x` (already validated), dropping the oldest sample when full.
    pub fn push(&mut self, x: f64) {
        if self.order.len() == self.capacity {
            if let Some(old) = self.order.pop_front() {
                // bisect_left: the first sample equal to `old`.
                let at = self.sorted.partition_point(|&v| v < old);
                self.sorted.remove(at);
            }
        }
        self.order.push_back(x);
        // insort_right: after every sample equal to `x`.
        let at = self.sorted.partition_point(|&v| v <= x);
        self.sorted.insert(at, x);
    }

    /// Durations held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no duration is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The samples, sorted ascending.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    /// Fraction of samples ≤ `t_s` (0.0 when empty).
    pub fn cdf(&self, t_s: f64) -> f64 {
        let n = self.sorted.len();
        if n == 0 {
            return 0.0;
        }
        self.sorted.partition_point(|&v| v <= t_s) as f64 / n as f64
    }

    /// Nearest-rank quantile: the smallest sample x with P(≤ x) ≥ q (`q` in [0, 1]).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.sorted.len();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as usize).max(1);
        Some(self.sorted[rank.min(n) - 1])
    }

    /// Mean in arrival order (the reference's summation order).
    pub fn mean(&self) -> Option<f64> {
        let n = self.order.len();
        if n == 0 {
            return None;
        }
        let mut total = 0.0;
        for &x in &self.order {
            total += x;
        }
        Some(total / n as f64)
    }

    fn clear(&mut self) {
        self.order.clear();
        self.sorted.clear();
    }
}

/// Tag of the recency list of tools.
struct Recency;
/// Tag of a tenant's own recency list of its tools.
struct Own;

/// One tracked tool: its window and its places in the recency lists.
#[derive(Debug, Clone)]
struct Slot {
    tenant: Box<str>,
    key: Box<str>,
    window: DurationWindow,
    recency: Link,
    own: Link,
}

linked!(Slot, Recency, recency);
linked!(Slot, Own, own);

/// A tenant's tools: their slots by name, least recently observed first.
#[derive(Debug, Clone, Default)]
struct TenantTools {
    names: IdMap<Box<str>, u32>,
    own: IndexList<Own>,
}

/// Sliding windows of tool durations, per (tenant, tool) and global, with caps on tracked
/// tools (see the module doc).
///
/// Tools live in a slab linked in recency order (head = least recently observed), and in
/// their tenant's own recency list, so admitting, refreshing and evicting a tool are O(1);
/// an evicted tool's slot (and its window's memory) is reused by the tool that replaces it.
#[derive(Debug, Clone)]
pub struct ToolHistory {
    window: usize,
    max_tools: usize,
    /// The shared tenant's (`""`) tools: kept apart, so its lookups hash one name only.
    shared: TenantTools,
    /// The other tenants' tools; a tenant with none is not kept.
    tenants: IdMap<Box<str>, TenantTools>,
    slots: Vec<Slot>,
    /// Least recently observed first.
    recency: IndexList<Recency>,
    global: DurationWindow,
    /// k / window for k in 0..=window, built once the first window is full: the solver reads
    /// P(τ) of a full window from it instead of dividing.
    fractions: Vec<f64>,
}

impl ToolHistory {
    /// Default `window` (durations kept per tool and globally).
    pub const DEFAULT_WINDOW: i64 = 1024;
    /// Default `max_tools` (tools tracked; least recently observed dropped beyond).
    pub const DEFAULT_MAX_TOOLS: i64 = 1024;
    /// Windows of `window` durations for at most `max_tools` tools.
    pub fn new(window: i64, max_tools: i64) -> Result<Self> {
        let window = int_in("window", window, 1, MAX_WINDOW)? as usize;
        let max_tools = int_in("max_tools", max_tools, 1, MAX_TOOLS)? as usize;
        Ok(ToolHistory {
            window,
            max_tools,
            shared: TenantTools::default(),
            tenants: IdMap::default(),
            slots: Vec::new(),
            recency: IndexList::new(),
            global: DurationWindow::new(window),
            fractions: Vec::new(),
        })
    }

    /// Durations kept per tool and globally.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Tools tracked at most.
    pub fn max_tools(&self) -> usize {
        self.max_tools
    }

    fn tenant(&self, tenant: &str) -> Option<&TenantTools> {
        if tenant.is_empty() {
            Some(&self.shared)
        } else {
            self.tenants.get(tenant)
        }
    }

    /// `tenant`'s tools, mutable (fields apart, so that the slots stay borrowable).
    fn tenant_mut<'a>(
        shared: &'a mut TenantTools,
        tenants: &'a mut IdMap<Box<str>, TenantTools>,
        tenant: &str,
    ) -> Option<&'a mut TenantTools> {
        if tenant.is_empty() {
            Some(shared)
        } else {
            tenants.get_mut(tenant)
        }
    }

    /// Record one duration of `tenant`'s `tool` (None: unknown tool, global window only).
    pub fn observe(&mut self, tenant: &str, tool: Option<&str>, duration_s: f64) -> Result<()> {
        check_tenant(tenant)?;
        let d = non_negative("duration_s", duration_s)?;
        if let Some(tool) = tool {
            let key = tool_key(tool);
            let found = Self::tenant_mut(&mut self.shared, &mut self.tenants, tenant)
                .and_then(|t| t.names.get(key).copied().map(|slot| (t, slot)));
            let slot = match found {
                Some((t, slot)) => {
                    t.own.move_to_back(&mut self.slots, slot);
                    self.recency.move_to_back(&mut self.slots, slot);
                    slot
                }
                None => self.admit(tenant, key),
            };
            self.slots[slot as usize].window.push(d);
        }
        self.global.push(d);
        // The global window fills first: every observation lands in it.
        if self.fractions.is_empty() && self.global.len() == self.window {
            self.fractions = fraction_table(self.window);
        }
        Ok(())
    }

    /// The table of k / n for a window of `n` samples, when one is kept (full windows).
    pub fn fractions_for(&self, n: usize) -> Option<&[f64]> {
        (n == self.window && !self.fractions.is_empty()).then_some(&self.fractions[..])
    }

    /// A slot for `tenant`'s new tool `key`, linked last in both recency lists, its window
    /// empty: a fresh one while the table has room, else the slot of the tool it replaces
    /// (the module doc's rule).
    fn admit(&mut self, tenant: &str, key: &str) -> u32 {
        let slot = if self.slots.len() < self.max_tools {
            self.slots.push(Slot {
                tenant: Box::default(),
                key: Box::default(),
                window: DurationWindow::new(self.window),
                recency: Link::new(),
                own: Link::new(),
            });
            // max_tools <= MAX_TOOLS < u32::MAX
            (self.slots.len() - 1) as u32
        } else {
            let oldest = self.recency.front().expect("max_tools >= 1 tools tracked");
            let theirs = self
                .tenant(&self.slots[oldest as usize].tenant)
                .map_or(0, |t| t.names.len());
            let victim = match self.tenant(tenant) {
                Some(own) if own.names.len() > theirs => {
                    own.own.front().expect("a tenant with tools")
                }
                _ => oldest,
            };
            self.detach(victim);
            victim
        };
        let s = &mut self.slots[slot as usize];
        s.tenant = tenant.into();
        s.key = key.into();
        self.recency.push_back(&mut self.slots, slot);
        if !tenant.is_empty() && !self.tenants.contains_key(tenant) {
            self.tenants.insert(tenant.into(), TenantTools::default());
        }
        let t = Self::tenant_mut(&mut self.shared, &mut self.tenants, tenant).expect("kept above");
        t.names.insert(key.into(), slot);
        t.own.push_back(&mut self.slots, slot);
        slot
    }

    /// Drop the tool in `slot` (its window cleared, unlinked from both lists), forgetting its
    /// tenant when that was the tenant's last tool.
    fn detach(&mut self, slot: u32) {
        self.recency.unlink(&mut self.slots, slot);
        let s = &mut self.slots[slot as usize];
        let (tenant, key) = (std::mem::take(&mut s.tenant), std::mem::take(&mut s.key));
        s.window.clear();
        let t = Self::tenant_mut(&mut self.shared, &mut self.tenants, &tenant)
            .expect("a tracked tool's tenant");
        t.own.unlink(&mut self.slots, slot);
        t.names.remove(&*key);
        if t.names.is_empty() && !tenant.is_empty() {
            self.tenants.remove(&*tenant);
        }
    }

    /// The window of `tenant`'s `tool` (None: the global window); None for an untracked tool.
    pub fn window_of(&self, tenant: &str, tool: Option<&str>) -> Option<&DurationWindow> {
        match tool {
            None => Some(&self.global),
            Some(t) => self
                .tenant(tenant)
                .and_then(|tt| tt.names.get(tool_key(t)))
                .map(|&slot| &self.slots[slot as usize].window),
        }
    }

    /// The global window (every tool's durations).
    pub fn global(&self) -> &DurationWindow {
        &self.global
    }

    /// Samples held for `tenant`'s `tool` (None: the global window).
    pub fn count(&self, tenant: &str, tool: Option<&str>) -> usize {
        self.window_of(tenant, tool).map_or(0, DurationWindow::len)
    }

    /// Durations in the global window.
    pub fn total_count(&self) -> usize {
        self.global.len()
    }

    /// Tools tracked now, of every tenant.
    pub fn num_tools(&self) -> usize {
        self.slots.len()
    }

    /// `tenant`'s tracked tools, least recently observed first.
    pub fn tools(&self, tenant: &str) -> Vec<&str> {
        self.tenant(tenant).map_or_else(Vec::new, |t| {
            t.own
                .iter(&self.slots)
                .map(|slot| &*self.slots[slot as usize].key)
                .collect()
        })
    }

    /// Fraction of `tenant`'s `tool`'s samples ≤ `t_s` (0.0 with no samples).
    pub fn cdf(&self, tenant: &str, tool: Option<&str>, t_s: f64) -> Result<f64> {
        check_tenant(tenant)?;
        let t = non_negative("t_s", t_s)?;
        Ok(self.window_of(tenant, tool).map_or(0.0, |w| w.cdf(t)))
    }

    /// Nearest-rank quantile of `tenant`'s `tool`'s samples; None with no samples.
    pub fn quantile(&self, tenant: &str, tool: Option<&str>, q: f64) -> Result<Option<f64>> {
        check_tenant(tenant)?;
        let q = non_negative("q", q)?;
        if q > 1.0 {
            return Err(Error::invalid_f64("q", q, "in [0, 1]"));
        }
        Ok(self.window_of(tenant, tool).and_then(|w| w.quantile(q)))
    }

    /// Mean duration of `tenant`'s `tool` (None: the global window); None when empty.
    pub fn mean(&self, tenant: &str, tool: Option<&str>) -> Option<f64> {
        self.window_of(tenant, tool).and_then(DurationWindow::mean)
    }

    /// The window's samples, sorted ascending (empty for an untracked tool).
    pub fn samples(&self, tenant: &str, tool: Option<&str>) -> &[f64] {
        self.window_of(tenant, tool)
            .map_or(&[], DurationWindow::sorted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keeps_the_last_samples_sorted() {
        let mut w = DurationWindow::new(3);
        for x in [5.0, 1.0, 3.0, 2.0] {
            w.push(x);
        }
        assert_eq!(w.sorted(), &[1.0, 2.0, 3.0]);
        assert_eq!(w.len(), 3);
        assert_eq!(w.cdf(2.0), 2.0 / 3.0);
        assert_eq!(w.quantile(0.0), Some(1.0));
        assert_eq!(w.quantile(0.5), Some(2.0));
        assert_eq!(w.quantile(1.0), Some(3.0));
        assert_eq!(w.mean(), Some((1.0 + 3.0 + 2.0) / 3.0));
    }

    #[test]
    fn windows_and_global_are_capped() {
        let mut h = ToolHistory::new(4, 8).unwrap();
        for i in 0..10 {
            h.observe("", Some("a"), i as f64).unwrap();
            h.observe("", None, 100.0).unwrap();
        }
        assert_eq!(h.count("", Some("a")), 4);
        assert_eq!(h.samples("", Some("a")), &[6.0, 7.0, 8.0, 9.0]);
        assert_eq!(h.total_count(), 4);
        assert_eq!(h.samples("", None), &[8.0, 9.0, 100.0, 100.0]);
    }

    #[test]
    fn least_recently_observed_tool_is_dropped() {
        let mut h = ToolHistory::new(4, 2).unwrap();
        h.observe("", Some("a"), 1.0).unwrap();
        h.observe("", Some("b"), 2.0).unwrap();
        h.observe("", Some("a"), 3.0).unwrap(); // a is now the most recent
        h.observe("", Some("c"), 4.0).unwrap(); // drops b
        assert_eq!(h.tools(""), vec!["a", "c"]);
        assert_eq!(h.count("", Some("b")), 0);
        assert_eq!(h.samples("", Some("c")), &[4.0]); // the reused slot starts empty
        h.observe("", Some("b"), 5.0).unwrap(); // drops a
        assert_eq!(h.tools(""), vec!["c", "b"]);
        assert_eq!(h.num_tools(), 2);
    }

    #[test]
    fn tenants_keep_their_own_windows() {
        let mut h = ToolHistory::new(4, 8).unwrap();
        h.observe("a", Some("bash"), 1.0).unwrap();
        h.observe("b", Some("bash"), 9.0).unwrap();
        h.observe("", Some("bash"), 5.0).unwrap();
        assert_eq!(h.samples("a", Some("bash")), &[1.0]);
        assert_eq!(h.samples("b", Some("bash")), &[9.0]);
        assert_eq!(h.samples("", Some("bash")), &[5.0]);
        assert_eq!(h.samples("c", Some("bash")), &[] as &[f64]);
        assert_eq!(h.samples("c", None), &[1.0, 5.0, 9.0]);
        assert_eq!(h.num_tools(), 3);
        assert!(h.observe(&"x".repeat(1025), Some("bash"), 1.0).is_err());
        assert_eq!(h.total_count(), 3);
    }

    #[test]
    fn a_tenant_holding_the_most_replaces_its_own_tools() {
        let mut h = ToolHistory::new(4, 6).unwrap();
        h.observe("b", Some("bash"), 1.0).unwrap();
        for (i, name) in ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]
            .iter()
            .enumerate()
        {
            h.observe("a", Some(name), i as f64).unwrap();
        }
        // The table full, a (5 tools) holds more than b (1), whose bash is the oldest: a's
        // new names replace its own.
        assert_eq!(h.tools("a"), vec!["t2", "t3", "t4", "t5", "t6"]);
        assert_eq!(h.tools("b"), vec!["bash"]);
        // The shared tenant is a tenant like the others: its first name, holding none, takes
        // the table's oldest (b's bash); its next, holding 1 against a's 4, a's oldest.
        h.observe("", Some("s0"), 1.0).unwrap();
        assert_eq!(h.tools("b"), Vec::<&str>::new());
        h.observe("", Some("s1"), 1.0).unwrap();
        assert_eq!(h.tools("a"), vec!["t3", "t4", "t5", "t6"]);
        assert_eq!(h.tools(""), vec!["s0", "s1"]);
        assert_eq!(h.tenants.len(), 1); // (a; b forgotten, the shared tenant kept apart)
    }

    #[test]
    fn long_tool_names_share_their_capped_key() {
        let mut h = ToolHistory::new(4, 4).unwrap();
        let base = "x".repeat(128);
        h.observe("", Some(&format!("{base}tail1")), 1.0).unwrap();
        h.observe("", Some(&format!("{base}tail2")), 2.0).unwrap();
        assert_eq!(h.num_tools(), 1);
        assert_eq!(h.count("", Some(&base)), 2);
    }

    #[test]
    fn fraction_table_appears_when_a_window_is_full() {
        let mut h = ToolHistory::new(3, 4).unwrap();
        h.observe("", Some("a"), 1.0).unwrap();
        h.observe("", None, 1.0).unwrap();
        assert_eq!(h.fractions_for(3), None);
        h.observe("", Some("b"), 1.0).unwrap();
        assert_eq!(
            h.fractions_for(3),
            Some(&[0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0][..])
        );
        assert_eq!(h.fractions_for(2), None);
    }

    #[test]
    fn bad_duration_changes_nothing() {
        let mut h = ToolHistory::new(4, 4).unwrap();
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            assert!(h.observe("", Some("a"), bad).is_err());
        }
        assert_eq!((h.num_tools(), h.total_count()), (0, 0));
        assert!(h.quantile("", None, 1.5).is_err());
        assert!(h.cdf("", None, -1.0).is_err());
        assert!(ToolHistory::new(0, 1).is_err());
        assert!(ToolHistory::new(1, MAX_TOOLS + 1).is_err());
    }
}
