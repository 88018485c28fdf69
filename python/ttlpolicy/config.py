"""``PolicyConfig``: every knob of the CacheTTL decision, validated, JSON round-trips.

Both backends read the same object: the pure-Python policy uses it directly, the native
policy copies its fields when constructed (through the core's field table).

Numbers are taken as the policy's methods take them (``_validate.as_int``/``as_float``): a
str such as ``"8"`` is refused with a ``TypeError``, as ``decide`` refuses it, instead of
being parsed; out-of-range values raise pydantic's ``ValidationError`` (a ``ValueError``).
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ._validate import as_float, as_int

_MAX = 1 << 20
#: The paper's K: a history of at most this many durations is a cold start.
PUBLISHED_COLD_START_SAMPLES = 100


class PolicyConfig(BaseModel):
    """Settings of :class:`ttlpolicy.TTLPolicy`.  Units are in the names."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # Tool-duration history.
    window: int = Field(1024, ge=1, le=_MAX, description="durations kept per tool and globally")
    max_tools: int = Field(1024, ge=1, le=_MAX, description="tools tracked; LRU beyond")
    min_tool_samples: int = Field(8, ge=0, le=_MAX, description="below: use the global window")
    min_total_samples: int = Field(32, ge=0, le=_MAX, description="below: exponential prior")
    prior_mean_s: float = Field(10.0, gt=0, description="prior mean tool duration (cold start)")
    max_ttl_s: float = Field(300.0, ge=0, description="no pin lasts longer")
    # Memorability η.
    eta_window_programs: int = Field(256, ge=1, le=_MAX)
    eta_min_programs: int = Field(8, ge=0, le=_MAX)
    # Out-of-order cost T.
    ooo_window: int = Field(256, ge=1, le=_MAX)
    # Cache-miss cost model.
    prefill_window: int = Field(256, ge=1, le=_MAX)
    min_prefill_samples: int = Field(8, ge=3, le=_MAX)
    prefill_base_s: float = Field(0.01, ge=0)
    prefill_s_per_token: float = Field(1e-4, ge=0)
    prefill_s_per_token2: float = Field(0.0, ge=0)
    kv_bytes_per_token: int = Field(131072, ge=0, le=1 << 40)
    offload_bandwidth_bytes_per_s: float | None = Field(None, gt=0)
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, le=1 << 40, description="the engine's prefill chunk; None: one step"
    )
    # Switches between this library's model (the defaults) and the published one
    # (``published()``); appended so that existing configs keep their meaning.
    scale_cost_by_memory: bool = Field(
        True, description="cost/s = m / M̄; False: 1 (Eq. 2: m / M̄ scales cost and benefit alike)"
    )
    prior_mean_from_history: bool = Field(
        True, description="prior mean = global mean once any sample exists; False: prior_mean_s"
    )
    cold_start_eta: float | None = Field(
        None, description="η used with the exponential prior; None: the estimator's η"
    )
    clip_eta: bool = Field(True, description="η clipped to [0, 1]; False: −corr as it is")
    pin_handover: Literal["arrival", "schedule"] = Field(
        "arrival",
        description="when a program's next request takes its pin over (read by ProgramScheduler)",
    )

    # Program-level load control (``AdmissionControl``; read by engines and the simulator,
    # not by ``TTLPolicy.decide``).  Off by default: today's behaviour.
    admission: bool = Field(False, description="admit programs by working set (Denning)")
    evict_by_next_use: bool = Field(False, description="evict the latest-needed cache first")
    serve_order: Literal["program", "attained"] = Field(
        "program",
        description="order of returning calls (read by ProgramScheduler): program arrival, or "
        "arrival + the program's attained engine seconds (for engines whose lost cache reloads)",
    )
    # The working set admission keeps within memory (``AdmissionControl``'s module doc).
    # Chosen on folds 0–2 of the agentic sessions, kept for helping on fold 3
    # (bench/RESULTS.md, "How close to the limit"); False and 1.0: the median rule before it.
    expected_working_set: bool = Field(
        True,
        description="count each admitted program's footprint times its chance of returning "
        "within the horizon; False: whole, when its median return is within it",
    )
    working_set_horizon_scale: float = Field(
        1.5, gt=0, description="the working set's horizon, n · rebuild_s, times this"
    )
    # Programs an engine inferred from the prompt (``AdmissionControl``'s module doc, "Next
    # use"): a session that compacts links anew and never returns to its old program.
    inferred_away_quantile: float = Field(
        0.9,
        ge=0,
        le=1,
        description="an inferred program away longer than this quantile of its tool's "
        "durations is not expected back; 1: as any program",
    )

    @classmethod
    def published(cls, **overrides: object) -> PolicyConfig:
        """The CacheTTL paper's model (Continuum, arXiv 2511.02230, §4, Eq. 2, Algorithm 1).

        * τ* = argmax_τ P(τ, f)·(η·T + miss) − τ: the request's memory share m / M̄ multiplies
          cost and benefit alike and cancels, so the cost rate is 1.
        * Candidates: τ = 0 and every recorded duration (window 2²⁰, no TTL cap).
        * Cold start (K = 100): while the whole history holds ≤ 100 durations, an exponential
          prior of mean 1 s with η = 1, i.e. τ = ln(B) when B > 1 s, else 0; then the global
          CDF while the tool has ≤ 100 durations; then the tool's own.
        * η = −corr(k, N − k), unclipped; T a sliding mean starting at 0.
        * Pins (``ProgramScheduler`` reads ``pin_handover``): handed over when the program's
          next request is *scheduled*; expire only when now > deadline and no request of the
          program waits.  No pin budget: pass ``pin_budget_blocks=total_blocks``.

        ``overrides`` replace fields (e.g. ``kv_bytes_per_token``, prefill coefficients).
        """
        fields: dict[str, object] = {
            "window": _MAX,
            "min_tool_samples": PUBLISHED_COLD_START_SAMPLES + 1,
            "min_total_samples": PUBLISHED_COLD_START_SAMPLES + 1,
            "prior_mean_s": 1.0,
            "max_ttl_s": sys.float_info.max,
            "scale_cost_by_memory": False,
            "prior_mean_from_history": False,
            "cold_start_eta": 1.0,
            "clip_eta": False,
            "pin_handover": "schedule",
        }
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def for_engine(
        cls,
        raw_json: str | None,
        prefill_chunk_tokens: int | None = None,
        reload_tier: bool = False,
    ) -> PolicyConfig:
        """The config an engine adapter runs with: ``raw_json`` (its ``TTLPOLICY_POLICY``
        knob; None or empty: the defaults), with load control (``admission``,
        ``evict_by_next_use``) on where the JSON does not set it — the fields' own defaults
        stay off, so existing configs keep their meaning — and the engine's prefill chunk
        (``prefill_chunk_tokens``: the most prompt tokens one step computes, None when it does
        not chunk) where the JSON does not set it, so a lost prefix is priced as the steps
        that rebuild it.  ``reload_tier``: the engine keeps evicted KV in a tier it reloads
        from (vLLM's offloading connector); returning calls are then served by attained
        service (``serve_order="attained"``) where the JSON does not set the order."""
        cfg = cls.model_validate_json(raw_json) if raw_json else cls()
        update: dict[str, Any] = {
            k: True for k in ("admission", "evict_by_next_use") if k not in cfg.model_fields_set
        }
        if prefill_chunk_tokens is not None and "prefill_chunk_tokens" not in cfg.model_fields_set:
            # (validated as the field is: model_copy does not validate)
            chunk = cls(prefill_chunk_tokens=prefill_chunk_tokens).prefill_chunk_tokens
            update["prefill_chunk_tokens"] = chunk
        if reload_tier and "serve_order" not in cfg.model_fields_set:
            update["serve_order"] = "attained"
        return cfg.model_copy(update=update) if update else cfg

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_not_text(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        kind = cls.model_fields[name].annotation
        if kind is int or (kind == int | None and value is not None):
            return as_int(name, value)
        if kind is float or (kind == float | None and value is not None):
            return as_float(name, value)
        return value

    @model_validator(mode="after")
    def _window_fits(self) -> PolicyConfig:
        if self.min_tool_samples > self.window:
            raise ValueError(
                f"min_tool_samples ({self.min_tool_samples}) can never be reached "
                f"with window={self.window}"
            )
        return self
