"""``PolicyConfig``: every knob of the CacheTTL decision, validated, JSON round-trips.

Both backends read the same object: the pure-Python policy uses it directly, the native
policy copies its fields when constructed (through the core's field table).

Numbers are taken as the policy's methods take them (``_validate.as_int``/``as_float``): a
str such as ``"8"`` is refused with a ``TypeError``, as ``decide`` refuses it, instead of
being parsed; out-of-range values raise pydantic's ``ValidationError`` (a ``ValueError``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ._validate import as_float, as_int

_MAX = 1 << 20


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

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_not_text(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        kind = cls.model_fields[name].annotation
        if kind is int:
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
