//! The CacheTTL decision: how long to pin a finished request's KV cache.
//!
//! ```text
//! benefit   = cache-miss cost + η · T
//! cost/s    = request_blocks / mean_active_blocks
//! τ*        = argmax_τ P(τ, tool) · benefit − cost/s · τ,   τ ≤ max_ttl_s
//! ```
//!
//! P comes from the tool's own window when it has `min_tool_samples`, else from the global
//! window when that has `min_total_samples`, else from an exponential prior of mean μ (the
//! global mean if any sample exists, else `prior_mean_s`), which has the closed form
//! τ* = μ · ln(B / (c · μ)) when B > c · μ, else 0. The config's switches
//! (`scale_cost_by_memory`, `prior_mean_from_history`, `cold_start_eta`) select the paper's
//! variant ([`PolicyConfig::published`]). Mirrors `python/ttlpolicy/reference/policy.py`.

use std::fmt;

pub use crate::config::PolicyConfig;
use crate::error::Result;
use crate::estimators::{CacheMissModel, EtaEstimator, OutOfOrderCost, MAX_TOKENS};
use crate::history::ToolHistory;
use crate::solver::{solve_sorted, solve_sorted_with_fractions};
use crate::validate::{check_tenant, finite, int_in, non_negative, positive};

/// Largest block count accepted.
pub const MAX_BLOCKS: i64 = 1 << 40;

/// Which rule produced a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The tool's own duration CDF.
    ToolCdf,
    /// The global CDF (too few samples of this tool).
    GlobalCdf,
    /// The exponential prior (too few samples overall).
    ExponentialPrior,
    /// The prior's τ (or a free hold) cut at `max_ttl_s`.
    Capped,
    /// Nothing to gain: the miss would cost nothing.
    NoBenefit,
}

impl Source {
    /// Every source, in the reference's order.
    pub const ALL: [Source; 5] = [
        Source::ToolCdf,
        Source::GlobalCdf,
        Source::ExponentialPrior,
        Source::Capped,
        Source::NoBenefit,
    ];

    /// The name the Python reference uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::ToolCdf => "tool_cdf",
            Source::GlobalCdf => "global_cdf",
            Source::ExponentialPrior => "exponential_prior",
            Source::Capped => "capped",
            Source::NoBenefit => "no_benefit",
        }
    }

    /// The source of a reference name, None for an unknown one.
    pub fn parse(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pin decision. `ttl_s == 0` means: do not pin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PinDecision {
    /// Seconds to pin; 0: do not pin.
    pub ttl_s: f64,
    /// Seconds saved if the program returns to a kept cache (miss cost + η·T).
    pub benefit_s: f64,
    /// Cost of holding the blocks, per second (request_blocks / mean_active_blocks).
    pub cost_per_s: f64,
    /// P(τ): the probability that the program returns within the pin.
    pub p_return: f64,
    /// Which rule produced the decision.
    pub source: Source,
}

impl PinDecision {
    /// Whether to pin at all (`ttl_s > 0`).
    pub fn pin(&self) -> bool {
        self.ttl_s > 0.0
    }
}

/// Owns the tool history and the η, T and cache-miss estimators; decides pins.
#[derive(Debug, Clone)]
pub struct TTLPolicy {
    config: PolicyConfig,
    history: ToolHistory,
    eta_estimator: EtaEstimator,
    ooo: OutOfOrderCost,
    miss_model: CacheMissModel,
}

/// The arguments of [`TTLPolicy::decide`]: a request that just ended in a call to `tool`.
///
/// `Default` gives the reference's defaults (no tool, 0 blocks, a mean of 1 block, the
/// miss-cost model, no prefix, time 0, nothing offloaded); name only what a call needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecideArgs<'a> {
    /// The tool the request called (`None`: no tool).
    pub tool: Option<&'a str>,
    /// Blocks the request holds (what a pin would keep).
    pub request_blocks: i64,
    /// M̄: the mean blocks of an active request.
    pub mean_active_blocks: f64,
    /// Overrides the miss-cost model when given.
    pub cache_miss_cost_s: Option<f64>,
    /// Prefix tokens the miss-cost model prices.
    pub prefix_tokens: i64,
    /// The caller's clock (validated, reserved for time-dependent rules).
    pub now: f64,
    /// Of `prefix_tokens`, those an offload tier still holds.
    pub offloaded_tokens: i64,
    /// Whose `tool` it is (`""`: the shared tenant; [`ToolHistory`]).
    pub tenant: &'a str,
}

impl Default for DecideArgs<'_> {
    fn default() -> Self {
        DecideArgs {
            tool: None,
            request_blocks: 0,
            mean_active_blocks: 1.0,
            cache_miss_cost_s: None,
            prefix_tokens: 0,
            now: 0.0,
            offloaded_tokens: 0,
            tenant: "",
        }
    }
}

impl TTLPolicy {
    /// Default `mean_active_blocks` of [`TTLPolicy::decide`] (M̄ when the engine knows none).
    pub const DEFAULT_MEAN_ACTIVE_BLOCKS: f64 = 1.0;

    /// A policy with `config`'s settings (validated first).
    pub fn new(config: PolicyConfig) -> Result<TTLPolicy> {
        config.validate()?;
        Ok(TTLPolicy {
            history: ToolHistory::new(config.window, config.max_tools)?,
            eta_estimator: EtaEstimator::with_clip(
                config.eta_window_programs,
                config.eta_min_programs,
                config.clip_eta,
            )?,
            ooo: OutOfOrderCost::new(config.ooo_window)?,
            miss_model: CacheMissModel::new(
                config.prefill_base_s,
                config.prefill_s_per_token,
                config.prefill_s_per_token2,
                config.kv_bytes_per_token,
                config.offload_bandwidth_bytes_per_s,
                config.prefill_window,
                config.min_prefill_samples,
            )?
            .with_prefill_chunk_tokens(config.prefill_chunk_tokens)?,
            config,
        })
    }

    /// The settings, validated.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    // -- observations ----------------------------------------------------------------------

    /// Records `tenant`'s tool call of `duration_s` seconds (None: unknown tool; `tenant`
    /// `""`: the shared namespace, [`ToolHistory`]).
    pub fn observe_tool(
        &mut self,
        tenant: &str,
        tool: Option<&str>,
        duration_s: f64,
    ) -> Result<()> {
        self.history.observe(tenant, tool, duration_s)
    }

    /// Records a finished program of `total_turns` turns (for η).
    pub fn observe_program(&mut self, total_turns: i64) -> Result<()> {
        self.eta_estimator.observe(total_turns)
    }

    /// Records a queueing delay of a request that returned to a dropped cache (for T).
    pub fn observe_queueing_delay(&mut self, delay_s: f64) -> Result<()> {
        self.ooo.observe(delay_s)
    }

    /// Records a measured prefill (for the cache-miss model).
    pub fn observe_prefill(&mut self, tokens: i64, seconds: f64, cached_tokens: i64) -> Result<()> {
        self.miss_model
            .observe_prefill(tokens, seconds, cached_tokens)
    }

    // -- read-only views -------------------------------------------------------------------

    /// The current η.
    pub fn eta(&self) -> f64 {
        self.eta_estimator.eta()
    }

    /// The current out-of-order cost T, in seconds.
    pub fn out_of_order_cost_s(&self) -> f64 {
        self.ooo.mean_s()
    }

    /// Durations recorded for `tenant`'s `tool` (None: all tools).
    pub fn tool_count(&self, tenant: &str, tool: Option<&str>) -> usize {
        self.history.count(tenant, tool)
    }

    /// Seconds to rebuild `prefix_tokens` tokens, `offloaded_tokens` of them reloadable.
    pub fn miss_cost_s(&self, prefix_tokens: i64, offloaded_tokens: i64) -> Result<f64> {
        self.miss_model.miss_cost_s(prefix_tokens, offloaded_tokens)
    }

    /// The tool-duration history.
    pub fn history(&self) -> &ToolHistory {
        &self.history
    }

    /// The η estimator.
    pub fn eta_estimator(&self) -> &EtaEstimator {
        &self.eta_estimator
    }

    /// The out-of-order cost estimator.
    pub fn ooo(&self) -> &OutOfOrderCost {
        &self.ooo
    }

    /// The cache-miss cost model.
    pub fn miss_model(&self) -> &CacheMissModel {
        &self.miss_model
    }

    // -- the decision ----------------------------------------------------------------------

    /// How long to pin the `request_blocks` of a request that just called `tool`.
    ///
    /// `cache_miss_cost_s` overrides the miss-cost model (which otherwise prices
    /// `prefix_tokens`, `offloaded_tokens` of them held by an offload tier). `now` is
    /// validated and reserved for time-dependent rules; no clock is read. Never allocates
    /// unless it returns an error.
    pub fn decide(&self, args: &DecideArgs<'_>) -> Result<PinDecision> {
        let DecideArgs {
            tool,
            request_blocks,
            mean_active_blocks,
            cache_miss_cost_s,
            prefix_tokens,
            now,
            offloaded_tokens,
            tenant,
        } = *args;
        // Validate everything before using any state, in the reference's order.
        check_tenant(tenant)?;
        let tool_window = tool.and_then(|t| self.history.window_of(tenant, Some(t)));
        let count = tool_window.map_or(0, |w| w.len());
        let blocks = int_in("request_blocks", request_blocks, 0, MAX_BLOCKS)?;
        let mean_active = positive("mean_active_blocks", mean_active_blocks)?;
        finite("now", now)?;
        let miss = match cache_miss_cost_s {
            None => self
                .miss_model
                .miss_cost_s(prefix_tokens, offloaded_tokens)?,
            Some(m) => {
                let m = non_negative("cache_miss_cost_s", m)?;
                int_in("prefix_tokens", prefix_tokens, 0, MAX_TOKENS)?;
                int_in("offloaded_tokens", offloaded_tokens, 0, MAX_TOKENS)?;
                m
            }
        };
        let cfg = &self.config;
        let total = self.history.total_count();
        let cdf = match tool_window {
            Some(w) if count as i64 >= cfg.min_tool_samples && count > 0 => {
                Some((w.sorted(), Source::ToolCdf))
            }
            _ if total as i64 >= cfg.min_total_samples && total > 0 => {
                Some((self.history.global().sorted(), Source::GlobalCdf))
            }
            _ => None,
        };
        let eta = match (cdf, cfg.cold_start_eta) {
            (None, Some(eta)) => eta,
            _ => self.eta_estimator.eta(),
        };
        let benefit = miss + eta * self.ooo.mean_s();
        // Eq. 2 of the paper multiplies the benefit by m / M̄ as well: the share cancels.
        let cost = if cfg.scale_cost_by_memory {
            blocks as f64 / mean_active
        } else {
            1.0
        };
        // The reference's `not benefit > 0.0`: NaN counts as no benefit too.
        if benefit.is_nan() || benefit <= 0.0 {
            return Ok(PinDecision {
                ttl_s: 0.0,
                benefit_s: benefit,
                cost_per_s: cost,
                p_return: 0.0,
                source: Source::NoBenefit,
            });
        }
        let Some((samples, source)) = cdf else {
            return Ok(self.exponential(benefit, cost));
        };
        let (tau, _value, k) = match self.history.fractions_for(samples.len()) {
            Some(table) => {
                solve_sorted_with_fractions(samples, table, benefit, cost, cfg.max_ttl_s)
            }
            None => solve_sorted(samples, benefit, cost, cfg.max_ttl_s),
        };
        Ok(PinDecision {
            ttl_s: tau,
            benefit_s: benefit,
            cost_per_s: cost,
            p_return: k as f64 / samples.len() as f64,
            source,
        })
    }

    /// Cold start: exponential durations of mean μ, closed-form optimum.
    fn exponential(&self, benefit: f64, cost: f64) -> PinDecision {
        let from_history = if self.config.prior_mean_from_history {
            self.history.global().mean()
        } else {
            None
        };
        let mu = match from_history {
            Some(mean) if mean > 0.0 => mean,
            _ => self.config.prior_mean_s,
        };
        let max_ttl = self.config.max_ttl_s;
        let (tau, source) = if cost == 0.0 {
            (max_ttl, Source::Capped) // holding is free: keep it as long as allowed
        } else if benefit > cost * mu {
            let tau = mu * (benefit / (cost * mu)).ln();
            if tau > max_ttl {
                (max_ttl, Source::Capped)
            } else {
                (tau, Source::ExponentialPrior)
            }
        } else {
            (0.0, Source::ExponentialPrior)
        };
        PinDecision {
            ttl_s: tau,
            benefit_s: benefit,
            cost_per_s: cost,
            p_return: 1.0 - (-tau / mu).exp(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> TTLPolicy {
        TTLPolicy::new(PolicyConfig::default()).unwrap()
    }

    fn decide(p: &TTLPolicy, tool: Option<&str>, blocks: i64, miss: f64) -> PinDecision {
        p.decide(&DecideArgs {
            tool,
            request_blocks: blocks,
            mean_active_blocks: 100.0,
            cache_miss_cost_s: Some(miss),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn cold_start_uses_the_exponential_prior() {
        let p = policy();
        let d = decide(&p, Some("search"), 10, 5.0);
        // c = 0.1, μ = 10: τ = 10 · ln(5 / 1)
        assert_eq!(d.source, Source::ExponentialPrior);
        assert!((d.ttl_s - 10.0 * 5f64.ln()).abs() < 1e-12);
        assert!((d.p_return - (1.0 - (-d.ttl_s / 10.0).exp())).abs() < 1e-15);
        let d = decide(&p, Some("search"), 100, 5.0); // B = c·μ: no pin
        assert_eq!((d.ttl_s, d.pin()), (0.0, false));
        let d = decide(&p, None, 0, 5.0); // free hold: capped at max_ttl
        assert_eq!((d.ttl_s, d.source), (300.0, Source::Capped));
    }

    #[test]
    fn falls_back_from_tool_to_global_cdf() {
        let mut p = policy();
        for i in 0..40 {
            p.observe_tool(
                "",
                Some(if i < 35 { "a" } else { "b" }),
                1.0 + i as f64 * 0.1,
            )
            .unwrap();
        }
        assert_eq!(decide(&p, Some("a"), 1, 5.0).source, Source::ToolCdf);
        assert_eq!(decide(&p, Some("b"), 1, 5.0).source, Source::GlobalCdf);
        assert_eq!(decide(&p, Some("zzz"), 1, 5.0).source, Source::GlobalCdf);
        let d = decide(&p, Some("a"), 1, 5.0);
        let (tau, _, k) = solve_sorted(p.history().samples("", Some("a")), 5.0, 0.01, 300.0);
        assert_eq!((d.ttl_s, d.p_return), (tau, k as f64 / 35.0));
    }

    #[test]
    fn no_benefit_means_no_pin() {
        let p = policy();
        let d = decide(&p, Some("a"), 1, 0.0);
        assert_eq!(
            (d.ttl_s, d.source, d.p_return),
            (0.0, Source::NoBenefit, 0.0)
        );
    }

    #[test]
    fn benefit_adds_eta_times_t() {
        let mut p = policy();
        p.observe_queueing_delay(2.0).unwrap();
        let d = decide(&p, None, 1, 0.5);
        assert_eq!(d.benefit_s, 0.5 + 1.0 * 2.0);
        assert_eq!(d.cost_per_s, 0.01);
    }

    #[test]
    fn bad_input_names_the_field_and_changes_nothing() {
        let mut p = policy();
        let cases: [(&str, Result<PinDecision>); 6] = [
            (
                "request_blocks",
                p.decide(&DecideArgs {
                    request_blocks: -1,
                    ..Default::default()
                }),
            ),
            (
                "mean_active_blocks",
                p.decide(&DecideArgs {
                    request_blocks: 1,
                    mean_active_blocks: 0.0,
                    ..Default::default()
                }),
            ),
            (
                "now",
                p.decide(&DecideArgs {
                    request_blocks: 1,
                    now: f64::NAN,
                    ..Default::default()
                }),
            ),
            (
                "cache_miss_cost_s",
                p.decide(&DecideArgs {
                    request_blocks: 1,
                    cache_miss_cost_s: Some(-1.0),
                    ..Default::default()
                }),
            ),
            (
                "prefix_tokens",
                p.decide(&DecideArgs {
                    request_blocks: 1,
                    cache_miss_cost_s: Some(1.0),
                    prefix_tokens: -5,
                    ..Default::default()
                }),
            ),
            (
                "offloaded_tokens",
                p.decide(&DecideArgs {
                    request_blocks: 1,
                    prefix_tokens: 5,
                    offloaded_tokens: 6,
                    ..Default::default()
                }),
            ),
        ];
        for (field, r) in cases {
            assert_eq!(r.unwrap_err().field(), Some(field));
        }
        assert!(p.observe_tool("", Some("a"), f64::NAN).is_err());
        assert!(p.observe_program(0).is_err());
        assert!(p.observe_queueing_delay(f64::INFINITY).is_err());
        assert!(p.observe_prefill(-1, 1.0, 0).is_err());
        assert_eq!(p.tool_count("", None), 0);
        assert_eq!((p.eta(), p.out_of_order_cost_s()), (1.0, 0.0));
        let bad = PolicyConfig {
            max_ttl_s: -1.0,
            ..Default::default()
        };
        assert!(TTLPolicy::new(bad).is_err());
    }

    #[test]
    fn published_model_cold_start_is_ln_b_and_size_free() {
        let p = TTLPolicy::new(PolicyConfig::published()).unwrap();
        for (blocks, mean) in [(1, 1.0), (500, 20.0), (3, 9000.0)] {
            let d = p
                .decide(&DecideArgs {
                    tool: Some("ls"),
                    request_blocks: blocks,
                    mean_active_blocks: mean,
                    cache_miss_cost_s: Some(7.0),
                    ..Default::default()
                })
                .unwrap();
            assert!((d.ttl_s - 7f64.ln()).abs() < 1e-12);
            assert_eq!((d.cost_per_s, d.source), (1.0, Source::ExponentialPrior));
        }
        let d = p
            .decide(&DecideArgs {
                request_blocks: 1,
                cache_miss_cost_s: Some(0.9),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(d.ttl_s, 0.0); // B ≤ 1 s: no pin
    }

    #[test]
    fn source_names_round_trip() {
        for s in Source::ALL {
            assert_eq!(Source::parse(s.as_str()), Some(s));
        }
        assert_eq!(Source::parse("nope"), None);
    }
}
