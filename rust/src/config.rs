//! `PolicyConfig`: every knob of the CacheTTL decision. Mirrors the pydantic model in
//! `python/ttlpolicy/config.py` — same fields, defaults and bounds — so a config that the
//! Python side accepts is accepted here and vice versa. Both write the defaults and
//! `published()` (the reference backend runs without this crate): the bindings publish this
//! side's as `POLICY_CONFIG_DEFAULTS`/`_PUBLISHED`, and tests/core/test_public_surface.py
//! compares them with the Python model field by field.

use crate::error::{Error, Result};
use crate::estimators::{CacheMissModel, EtaEstimator, OutOfOrderCost};
use crate::history::ToolHistory;
use crate::validate::{finite, int_in, non_negative, positive};

const MAX: i64 = 1 << 20;
/// The paper's K: a history of at most this many durations is a cold start.
pub const PUBLISHED_COLD_START_SAMPLES: i64 = 100;

/// When a program's next request takes its pin over (read by
/// [`crate::scheduler::ProgramScheduler`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PinHandover {
    /// When the request arrives (this library's default).
    #[default]
    Arrival,
    /// When the request is scheduled (the CacheTTL paper's rule).
    Schedule,
}

impl PinHandover {
    /// The name the Python config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            PinHandover::Arrival => "arrival",
            PinHandover::Schedule => "schedule",
        }
    }

    /// The handover of that name (`"arrival"`, `"schedule"`); None for any other.
    pub fn parse(name: &str) -> Option<PinHandover> {
        [PinHandover::Arrival, PinHandover::Schedule]
            .into_iter()
            .find(|h| h.as_str() == name)
    }
}

/// The order of returning calls in the waiting queue (read by
/// [`crate::scheduler::ProgramScheduler`]; the reference's module doc states the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServeOrder {
    /// By program arrival: program-level FCFS (the default).
    #[default]
    Program,
    /// By request arrival + the program's attained engine seconds: least attained service
    /// with a bounded wait (for engines whose lost cache reloads from a tier).
    Attained,
}

impl ServeOrder {
    /// The name the Python config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ServeOrder::Program => "program",
            ServeOrder::Attained => "attained",
        }
    }

    /// The order of that name (`"program"`, `"attained"`); None for any other.
    pub fn parse(name: &str) -> Option<ServeOrder> {
        [ServeOrder::Program, ServeOrder::Attained]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

/// Settings of [`crate::policy::TTLPolicy`]. Units are in the names.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    // Tool-duration history.
    /// Durations kept per tool and globally.
    pub window: i64,
    /// Tools tracked; least recently observed dropped beyond.
    pub max_tools: i64,
    /// Below: use the global window.
    pub min_tool_samples: i64,
    /// Below: exponential prior.
    pub min_total_samples: i64,
    /// Prior mean tool duration (cold start).
    pub prior_mean_s: f64,
    /// No pin lasts longer.
    pub max_ttl_s: f64,
    // Memorability η.
    /// Finished programs η is computed over.
    pub eta_window_programs: i64,
    /// Below this many programs η = 1.
    pub eta_min_programs: i64,
    // Out-of-order cost T.
    /// Queueing delays T is the mean of.
    pub ooo_window: i64,
    // Cache-miss cost model.
    /// Prefill measurements the quadratic is fitted over.
    pub prefill_window: i64,
    /// Measurements before the fit replaces the defaults.
    pub min_prefill_samples: i64,
    /// Prefill seconds before a fit: constant term.
    pub prefill_base_s: f64,
    /// Prefill seconds before a fit: per token.
    pub prefill_s_per_token: f64,
    /// Prefill seconds before a fit: per token squared.
    pub prefill_s_per_token2: f64,
    /// KV-cache bytes of one token (for the offload reload time).
    pub kv_bytes_per_token: i64,
    /// Offload tier reload bandwidth; None: no offload tier.
    pub offload_bandwidth_bytes_per_s: Option<f64>,
    /// The engine's prefill chunk (most prompt tokens per step); None: one step per prefix.
    pub prefill_chunk_tokens: Option<i64>,
    // Switches between this library's model (the defaults) and the published one.
    /// cost/s = m / M̄; false: 1 (the paper's Eq. 2, where m / M̄ cancels).
    pub scale_cost_by_memory: bool,
    /// Prior mean = the global mean once any sample exists; false: `prior_mean_s`.
    pub prior_mean_from_history: bool,
    /// η used with the exponential prior; None: the estimator's η.
    pub cold_start_eta: Option<f64>,
    /// η clipped to [0, 1]; false: −corr as it is.
    pub clip_eta: bool,
    /// When a program's next request takes its pin over.
    pub pin_handover: PinHandover,
    // Program-level load control (read by engines, not by `TTLPolicy::decide`).
    /// Admit programs by working set ([`crate::admission::AdmissionControl`]).
    pub admission: bool,
    /// Evict the cached context needed latest first (instead of LRU).
    pub evict_by_next_use: bool,
    /// The order of returning calls in the waiting queue.
    pub serve_order: ServeOrder,
    // The working set admission keeps within memory (see `crate::admission`).
    /// Count each admitted program's footprint times its chance of returning within the
    /// horizon; false: whole, when its median return is within it.
    pub expected_working_set: bool,
    /// The working set's horizon, n · rebuild_s, times this.
    pub working_set_horizon_scale: f64,
    /// An inferred program away longer than this quantile of its tool's durations is not
    /// expected back (see `crate::admission`); 1: as any program.
    pub inferred_away_quantile: f64,
}

/// A mutable view of one [`PolicyConfig`] field, by kind (see [`PolicyConfig::fields_mut`]).
#[derive(Debug)]
pub enum FieldMut<'a> {
    /// An integer field.
    Int(&'a mut i64),
    /// A float field.
    Float(&'a mut f64),
    /// An optional integer field (None allowed).
    OptionalInt(&'a mut Option<i64>),
    /// An optional float field (None allowed).
    OptionalFloat(&'a mut Option<f64>),
    /// A switch.
    Bool(&'a mut bool),
    /// When a pin passes to the program's next request (by name: `PinHandover::parse`).
    Handover(&'a mut PinHandover),
    /// The order of returning calls (by name: `ServeOrder::parse`).
    Order(&'a mut ServeOrder),
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            window: ToolHistory::DEFAULT_WINDOW,
            max_tools: ToolHistory::DEFAULT_MAX_TOOLS,
            min_tool_samples: 8,
            min_total_samples: 32,
            prior_mean_s: 10.0,
            max_ttl_s: 300.0,
            eta_window_programs: EtaEstimator::DEFAULT_WINDOW,
            eta_min_programs: EtaEstimator::DEFAULT_MIN_PROGRAMS,
            ooo_window: OutOfOrderCost::DEFAULT_WINDOW,
            prefill_window: CacheMissModel::DEFAULT_WINDOW,
            min_prefill_samples: CacheMissModel::DEFAULT_MIN_SAMPLES,
            prefill_base_s: CacheMissModel::DEFAULT_PREFILL_BASE_S,
            prefill_s_per_token: CacheMissModel::DEFAULT_PREFILL_S_PER_TOKEN,
            prefill_s_per_token2: CacheMissModel::DEFAULT_PREFILL_S_PER_TOKEN2,
            kv_bytes_per_token: CacheMissModel::DEFAULT_KV_BYTES_PER_TOKEN,
            offload_bandwidth_bytes_per_s: None,
            prefill_chunk_tokens: None,
            scale_cost_by_memory: true,
            prior_mean_from_history: true,
            cold_start_eta: None,
            clip_eta: true,
            pin_handover: PinHandover::Arrival,
            admission: false,
            evict_by_next_use: false,
            serve_order: ServeOrder::Program,
            // (chosen on folds 0-2, kept for helping on fold 3: see config.py)
            expected_working_set: true,
            working_set_horizon_scale: 1.5,
            inferred_away_quantile: 0.9,
        }
    }
}

impl PolicyConfig {
    /// The CacheTTL paper's model (Continuum, arXiv 2511.02230); mirrors
    /// `PolicyConfig.published()` in `python/ttlpolicy/config.py`, whose doc states it.
    pub fn published() -> PolicyConfig {
        PolicyConfig {
            window: MAX,
            min_tool_samples: PUBLISHED_COLD_START_SAMPLES + 1,
            min_total_samples: PUBLISHED_COLD_START_SAMPLES + 1,
            prior_mean_s: 1.0,
            max_ttl_s: f64::MAX,
            scale_cost_by_memory: false,
            prior_mean_from_history: false,
            cold_start_eta: Some(1.0),
            clip_eta: false,
            pin_handover: PinHandover::Schedule,
            ..Default::default()
        }
    }

    /// Every field by name, in declaration order: the one field table the bindings read a
    /// Python config through (a new field is added here too, or the parity test fails).
    pub fn fields_mut(&mut self) -> Vec<(&'static str, FieldMut<'_>)> {
        use FieldMut::{Bool, Float, Handover, Int, OptionalFloat, OptionalInt};
        vec![
            ("window", Int(&mut self.window)),
            ("max_tools", Int(&mut self.max_tools)),
            ("min_tool_samples", Int(&mut self.min_tool_samples)),
            ("min_total_samples", Int(&mut self.min_total_samples)),
            ("prior_mean_s", Float(&mut self.prior_mean_s)),
            ("max_ttl_s", Float(&mut self.max_ttl_s)),
            ("eta_window_programs", Int(&mut self.eta_window_programs)),
            ("eta_min_programs", Int(&mut self.eta_min_programs)),
            ("ooo_window", Int(&mut self.ooo_window)),
            ("prefill_window", Int(&mut self.prefill_window)),
            ("min_prefill_samples", Int(&mut self.min_prefill_samples)),
            ("prefill_base_s", Float(&mut self.prefill_base_s)),
            ("prefill_s_per_token", Float(&mut self.prefill_s_per_token)),
            (
                "prefill_s_per_token2",
                Float(&mut self.prefill_s_per_token2),
            ),
            ("kv_bytes_per_token", Int(&mut self.kv_bytes_per_token)),
            (
                "offload_bandwidth_bytes_per_s",
                OptionalFloat(&mut self.offload_bandwidth_bytes_per_s),
            ),
            (
                "prefill_chunk_tokens",
                OptionalInt(&mut self.prefill_chunk_tokens),
            ),
            ("scale_cost_by_memory", Bool(&mut self.scale_cost_by_memory)),
            (
                "prior_mean_from_history",
                Bool(&mut self.prior_mean_from_history),
            ),
            ("cold_start_eta", OptionalFloat(&mut self.cold_start_eta)),
            ("clip_eta", Bool(&mut self.clip_eta)),
            ("pin_handover", Handover(&mut self.pin_handover)),
            ("admission", FieldMut::Bool(&mut self.admission)),
            (
                "evict_by_next_use",
                FieldMut::Bool(&mut self.evict_by_next_use),
            ),
            ("serve_order", FieldMut::Order(&mut self.serve_order)),
            ("expected_working_set", Bool(&mut self.expected_working_set)),
            (
                "working_set_horizon_scale",
                Float(&mut self.working_set_horizon_scale),
            ),
            (
                "inferred_away_quantile",
                Float(&mut self.inferred_away_quantile),
            ),
        ]
    }

    /// The pydantic model's bounds, field by field in declaration order.
    pub fn validate(&self) -> Result<()> {
        int_in("window", self.window, 1, MAX)?;
        int_in("max_tools", self.max_tools, 1, MAX)?;
        int_in("min_tool_samples", self.min_tool_samples, 0, MAX)?;
        int_in("min_total_samples", self.min_total_samples, 0, MAX)?;
        positive("prior_mean_s", self.prior_mean_s)?;
        non_negative("max_ttl_s", self.max_ttl_s)?;
        int_in("eta_window_programs", self.eta_window_programs, 1, MAX)?;
        int_in("eta_min_programs", self.eta_min_programs, 0, MAX)?;
        int_in("ooo_window", self.ooo_window, 1, MAX)?;
        int_in("prefill_window", self.prefill_window, 1, MAX)?;
        int_in("min_prefill_samples", self.min_prefill_samples, 3, MAX)?;
        non_negative("prefill_base_s", self.prefill_base_s)?;
        non_negative("prefill_s_per_token", self.prefill_s_per_token)?;
        non_negative("prefill_s_per_token2", self.prefill_s_per_token2)?;
        int_in("kv_bytes_per_token", self.kv_bytes_per_token, 0, 1 << 40)?;
        if let Some(bw) = self.offload_bandwidth_bytes_per_s {
            positive("offload_bandwidth_bytes_per_s", bw)?;
        }
        if let Some(chunk) = self.prefill_chunk_tokens {
            int_in("prefill_chunk_tokens", chunk, 1, 1 << 40)?;
        }
        if let Some(eta) = self.cold_start_eta {
            finite("cold_start_eta", eta)?;
        }
        positive("working_set_horizon_scale", self.working_set_horizon_scale)?;
        let q = non_negative("inferred_away_quantile", self.inferred_away_quantile)?;
        if q > 1.0 {
            return Err(Error::invalid_f64("inferred_away_quantile", q, "<= 1"));
        }
        if self.min_tool_samples > self.window {
            return Err(Error::invalid(
                "min_tool_samples",
                self.min_tool_samples,
                format!("<= window ({}) to ever be reached", self.window),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        PolicyConfig::default().validate().unwrap();
    }

    #[test]
    fn published_is_valid_and_differs_from_default() {
        let p = PolicyConfig::published();
        p.validate().unwrap();
        assert_eq!(p.min_total_samples, 101);
        assert_eq!(p.pin_handover, PinHandover::Schedule);
        assert_eq!(PinHandover::parse("schedule"), Some(PinHandover::Schedule));
        assert_eq!(PinHandover::parse("later"), None);
        assert_eq!(p.serve_order, ServeOrder::Program);
        assert_eq!(ServeOrder::parse("attained"), Some(ServeOrder::Attained));
        assert_eq!(ServeOrder::parse("las"), None);
        let bad = PolicyConfig {
            cold_start_eta: Some(f64::NAN),
            ..PolicyConfig::published()
        };
        assert_eq!(bad.validate().unwrap_err().field(), Some("cold_start_eta"));
    }

    #[test]
    fn bounds_name_the_field() {
        let cases: [(&str, PolicyConfig); 5] = [
            (
                "window",
                PolicyConfig {
                    window: 0,
                    ..Default::default()
                },
            ),
            (
                "prior_mean_s",
                PolicyConfig {
                    prior_mean_s: 0.0,
                    ..Default::default()
                },
            ),
            (
                "max_ttl_s",
                PolicyConfig {
                    max_ttl_s: f64::INFINITY,
                    ..Default::default()
                },
            ),
            (
                "offload_bandwidth_bytes_per_s",
                PolicyConfig {
                    offload_bandwidth_bytes_per_s: Some(-1.0),
                    ..Default::default()
                },
            ),
            (
                "min_tool_samples",
                PolicyConfig {
                    window: 4,
                    ..Default::default()
                },
            ),
        ];
        for (field, cfg) in cases {
            assert_eq!(cfg.validate().unwrap_err().field(), Some(field));
        }
    }
}
