//! `PolicyConfig`: every knob of the CacheTTL decision. Mirrors the pydantic model in
//! `python/ttlpolicy/config.py` — same fields, defaults and bounds — so a config that the
//! Python side accepts is accepted here and vice versa.

use crate::error::{Error, Result};
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

    pub fn parse(name: &str) -> Option<PinHandover> {
        [PinHandover::Arrival, PinHandover::Schedule]
            .into_iter()
            .find(|h| h.as_str() == name)
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
    pub eta_window_programs: i64,
    pub eta_min_programs: i64,
    // Out-of-order cost T.
    pub ooo_window: i64,
    // Cache-miss cost model.
    pub prefill_window: i64,
    pub min_prefill_samples: i64,
    pub prefill_base_s: f64,
    pub prefill_s_per_token: f64,
    pub prefill_s_per_token2: f64,
    pub kv_bytes_per_token: i64,
    pub offload_bandwidth_bytes_per_s: Option<f64>,
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
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            window: 1024,
            max_tools: 1024,
            min_tool_samples: 8,
            min_total_samples: 32,
            prior_mean_s: 10.0,
            max_ttl_s: 300.0,
            eta_window_programs: 256,
            eta_min_programs: 8,
            ooo_window: 256,
            prefill_window: 256,
            min_prefill_samples: 8,
            prefill_base_s: 0.01,
            prefill_s_per_token: 1e-4,
            prefill_s_per_token2: 0.0,
            kv_bytes_per_token: 131072,
            offload_bandwidth_bytes_per_s: None,
            scale_cost_by_memory: true,
            prior_mean_from_history: true,
            cold_start_eta: None,
            clip_eta: true,
            pin_handover: PinHandover::Arrival,
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
        if let Some(eta) = self.cold_start_eta {
            finite("cold_start_eta", eta)?;
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
