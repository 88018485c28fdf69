//! Tool-duration history: how long each tool took, over a sliding window.
//!
//! Per tool, the last `window` durations; beside them one global window of the last
//! `window` durations of any tool. At most `max_tools` tools are tracked: tool names come
//! from model output, so the least recently observed tool is dropped to admit a new one.
//! Windows are kept sorted as well as in arrival order, so a CDF lookup is a binary search
//! and the solver scans a sorted slice. Mirrors `python/ttlpolicy/reference/history.py`.

use std::collections::VecDeque;

use crate::error::{Error, Result};
use crate::id_hash::IdMap;
use crate::index_list::{linked, IndexList, Link};
use crate::solver::fraction_table;
use crate::validate::{int_in, non_negative, tool_key};

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

/// One tracked tool: its window and its place in the recency list.
#[derive(Debug, Clone)]
struct Slot {
    key: Box<str>,
    window: DurationWindow,
    recency: Link,
}

linked!(Slot, Recency, recency);

/// Sliding windows of tool durations, per tool and global, with a cap on tracked tools.
///
/// Tools live in a slab linked in recency order (head = least recently observed), so
/// admitting, refreshing and evicting a tool are O(1); an evicted tool's slot (and its
/// window's memory) is reused by the tool that replaces it.
#[derive(Debug, Clone)]
pub struct ToolHistory {
    window: usize,
    max_tools: usize,
    index: IdMap<Box<str>, u32>,
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
            index: IdMap::default(),
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

    /// Record one duration of `tool` (None: unknown tool, global window only).
    pub fn observe(&mut self, tool: Option<&str>, duration_s: f64) -> Result<()> {
        let d = non_negative("duration_s", duration_s)?;
        if let Some(tool) = tool {
            let key = tool_key(tool);
            let slot = match self.index.get(key) {
                Some(&slot) => {
                    self.recency.unlink(&mut self.slots, slot);
                    slot
                }
                None => self.admit(key),
            };
            self.recency.push_back(&mut self.slots, slot);
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

    /// A slot for a new tool: a fresh one, or the least recently observed tool's when full.
    /// The slot is returned unlinked.
    fn admit(&mut self, key: &str) -> u32 {
        let slot = if self.slots.len() < self.max_tools {
            self.slots.push(Slot {
                key: key.into(),
                window: DurationWindow::new(self.window),
                recency: Link::new(),
            });
            // max_tools <= MAX_TOOLS < u32::MAX
            (self.slots.len() - 1) as u32
        } else {
            let victim = self.recency.front().expect("max_tools >= 1 tools tracked");
            self.recency.unlink(&mut self.slots, victim);
            let slot = &mut self.slots[victim as usize];
            let old = std::mem::replace(&mut slot.key, key.into());
            slot.window.clear();
            self.index.remove(&old);
            victim
        };
        self.index.insert(key.into(), slot);
        slot
    }

    /// The window of `tool` (None: the global window); None for an untracked tool.
    pub fn window_of(&self, tool: Option<&str>) -> Option<&DurationWindow> {
        match tool {
            None => Some(&self.global),
            Some(t) => self
                .index
                .get(tool_key(t))
                .map(|&slot| &self.slots[slot as usize].window),
        }
    }

    /// The global window (every tool's durations).
    pub fn global(&self) -> &DurationWindow {
        &self.global
    }

    /// Samples held for `tool` (None: the global window).
    pub fn count(&self, tool: Option<&str>) -> usize {
        self.window_of(tool).map_or(0, DurationWindow::len)
    }

    /// Durations in the global window.
    pub fn total_count(&self) -> usize {
        self.global.len()
    }

    /// Tools tracked now.
    pub fn num_tools(&self) -> usize {
        self.index.len()
    }

    /// Tracked tools, least recently observed first.
    pub fn tools(&self) -> Vec<&str> {
        self.recency
            .iter(&self.slots)
            .map(|slot| &*self.slots[slot as usize].key)
            .collect()
    }

    /// Fraction of `tool`'s samples ≤ `t_s` (0.0 with no samples).
    pub fn cdf(&self, tool: Option<&str>, t_s: f64) -> Result<f64> {
        let t = non_negative("t_s", t_s)?;
        Ok(self.window_of(tool).map_or(0.0, |w| w.cdf(t)))
    }

    /// Nearest-rank quantile of `tool`'s samples; None with no samples.
    pub fn quantile(&self, tool: Option<&str>, q: f64) -> Result<Option<f64>> {
        let q = non_negative("q", q)?;
        if q > 1.0 {
            return Err(Error::invalid_f64("q", q, "in [0, 1]"));
        }
        Ok(self.window_of(tool).and_then(|w| w.quantile(q)))
    }

    /// Mean duration of `tool` (None: the global window); None when empty.
    pub fn mean(&self, tool: Option<&str>) -> Option<f64> {
        self.window_of(tool).and_then(DurationWindow::mean)
    }

    /// The window's samples, sorted ascending (empty for an untracked tool).
    pub fn samples(&self, tool: Option<&str>) -> &[f64] {
        self.window_of(tool).map_or(&[], DurationWindow::sorted)
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
            h.observe(Some("a"), i as f64).unwrap();
            h.observe(None, 100.0).unwrap();
        }
        assert_eq!(h.count(Some("a")), 4);
        assert_eq!(h.samples(Some("a")), &[6.0, 7.0, 8.0, 9.0]);
        assert_eq!(h.total_count(), 4);
        assert_eq!(h.samples(None), &[8.0, 9.0, 100.0, 100.0]);
    }

    #[test]
    fn least_recently_observed_tool_is_dropped() {
        let mut h = ToolHistory::new(4, 2).unwrap();
        h.observe(Some("a"), 1.0).unwrap();
        h.observe(Some("b"), 2.0).unwrap();
        h.observe(Some("a"), 3.0).unwrap(); // a is now the most recent
        h.observe(Some("c"), 4.0).unwrap(); // drops b
        assert_eq!(h.tools(), vec!["a", "c"]);
        assert_eq!(h.count(Some("b")), 0);
        assert_eq!(h.samples(Some("c")), &[4.0]); // the reused slot starts empty
        h.observe(Some("b"), 5.0).unwrap(); // drops a
        assert_eq!(h.tools(), vec!["c", "b"]);
        assert_eq!(h.num_tools(), 2);
    }

    #[test]
    fn long_tool_names_share_their_capped_key() {
        let mut h = ToolHistory::new(4, 4).unwrap();
        let base = "x".repeat(128);
        h.observe(Some(&format!("{base}tail1")), 1.0).unwrap();
        h.observe(Some(&format!("{base}tail2")), 2.0).unwrap();
        assert_eq!(h.num_tools(), 1);
        assert_eq!(h.count(Some(&base)), 2);
    }

    #[test]
    fn fraction_table_appears_when_a_window_is_full() {
        let mut h = ToolHistory::new(3, 4).unwrap();
        h.observe(Some("a"), 1.0).unwrap();
        h.observe(None, 1.0).unwrap();
        assert_eq!(h.fractions_for(3), None);
        h.observe(Some("b"), 1.0).unwrap();
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
            assert!(h.observe(Some("a"), bad).is_err());
        }
        assert_eq!((h.num_tools(), h.total_count()), (0, 0));
        assert!(h.quantile(None, 1.5).is_err());
        assert!(h.cdf(None, -1.0).is_err());
        assert!(ToolHistory::new(0, 1).is_err());
        assert!(ToolHistory::new(1, MAX_TOOLS + 1).is_err());
    }
}
