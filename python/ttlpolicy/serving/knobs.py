"""The adapters' environment knobs, one parser for both engines.

Read once, when the engine builds its scheduler or cache: a bad value fails the server's
start with the knob's name and the value, not a request later.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import PolicyConfig
from ..ids import OPEN_TENANCY, Tenancy, tenant_key
from ..reference.tenants import MAX_TENANT_WEIGHT, check_tenant_weights
from .record import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, RecordSettings
from .skip_ahead import MAX_SKIP_DEPTH, skip_depth_for

#: the knobs' names
PIN_BUDGET_FRACTION = "TTLPOLICY_PIN_BUDGET_FRACTION"
LOG_INTERVAL_S = "TTLPOLICY_LOG_INTERVAL_S"
POLICY = "TTLPOLICY_POLICY"
METRICS = "TTLPOLICY_METRICS"
TENANT_FIELD = "TTLPOLICY_TENANT_FIELD"
CLIENT_IDS = "TTLPOLICY_CLIENT_IDS"
TENANT_WEIGHTS = "TTLPOLICY_TENANT_WEIGHTS"
INFER_PROGRAMS = "TTLPOLICY_INFER_PROGRAMS"
RECORD = "TTLPOLICY_RECORD"
RECORD_MAX_BYTES = "TTLPOLICY_RECORD_MAX_BYTES"
RECORD_FILES = "TTLPOLICY_RECORD_FILES"
SKIP_DEPTH = "TTLPOLICY_SKIP_DEPTH"


def env_float(name: str, default: float, low: float, high: float) -> float:
    """The environment variable ``name`` as a number in ``[low, high]``; unset or blank:
    ``default``.  Anything else is refused with the name and the value."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {raw!r}") from None
    if not low <= value <= high:  # (NaN fails too)
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return value


def env_int(name: str, default: int, low: int, high: int) -> int:
    """The environment variable ``name`` as an integer in ``[low, high]``; unset or blank:
    ``default``.  Anything else is refused with the name and the value."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {raw[:64]!r}")
    return int(text)


def env_bool(name: str, default: bool) -> bool:
    """The environment variable ``name`` as ``0`` or ``1``; unset or blank: ``default``."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip() not in ("0", "1"):
        raise ValueError(f"{name} must be 0 or 1, got {raw!r}")
    return raw.strip() == "1"


@dataclass(frozen=True, slots=True)
class EngineKnobs:
    pin_budget_fraction: float  # TTLPOLICY_PIN_BUDGET_FRACTION: share of KV blocks pinned at most
    policy: PolicyConfig  # TTLPOLICY_POLICY: a PolicyConfig as JSON (PolicyConfig.for_engine)
    log_interval_s: float  # TTLPOLICY_LOG_INTERVAL_S: 0 disables the periodic log line
    metrics: bool = True  # TTLPOLICY_METRICS: 0 keeps the ttlpolicy_* Prometheus metrics off
    # TTLPOLICY_TENANT_FIELD (unset: the request's cache_salt names its tenant; else the
    # request field a trusted gateway sets), TTLPOLICY_CLIENT_IDS (0: ignore client ids)
    tenancy: Tenancy = OPEN_TENANCY
    # TTLPOLICY_TENANT_WEIGHTS ("tenantA=2,tenantB=1": raw tenant values, as the tenant field
    # or cache_salt carries them): the tenants' weights in their shares of the pin budget and
    # of load control's working set, by tenant key (``tenant_weights=`` of ProgramScheduler
    # and AdmissionControl); unnamed tenants weigh 1
    tenant_weights: dict[str, int] | None = None
    # TTLPOLICY_INFER_PROGRAMS: 1 tells a request's program from its prompt when it names
    # none (ttlpolicy.ProgramLinker); 0 (default for now): such requests are stock
    infer_programs: bool = False
    # TTLPOLICY_RECORD (a directory; unset: no recording), TTLPOLICY_RECORD_MAX_BYTES,
    # TTLPOLICY_RECORD_FILES: ``ttlpolicy.serving.record``
    record: RecordSettings | None = None
    # TTLPOLICY_SKIP_DEPTH: waiting requests asked past a head too large for memory
    # (``skip_ahead``; 0: never); default ``SKIP_DEPTH`` with a reload tier, else 0
    skip_depth: int = 0

    @classmethod
    def from_env(
        cls, prefill_chunk_tokens: int | None = None, reload_tier: bool = False
    ) -> EngineKnobs:
        """The knobs as the environment sets them.  The policy is
        ``PolicyConfig.for_engine`` of ``TTLPOLICY_POLICY`` with the engine's prefill chunk
        and reload tier: load control on unless the JSON says ``"admission": false``."""
        return cls(
            pin_budget_fraction=env_float(PIN_BUDGET_FRACTION, 0.5, 0.0, 1.0),
            policy=PolicyConfig.for_engine(
                os.environ.get(POLICY), prefill_chunk_tokens, reload_tier=reload_tier
            ),
            log_interval_s=env_float(LOG_INTERVAL_S, 10.0, 0.0, 1e9),
            metrics=env_bool(METRICS, True),
            tenancy=tenancy_from_env(),
            tenant_weights=tenant_weights_from_env(),
            infer_programs=env_bool(INFER_PROGRAMS, False),
            record=record_from_env(),
            skip_depth=env_int(SKIP_DEPTH, skip_depth_for(reload_tier), 0, MAX_SKIP_DEPTH),
        )


def tenancy_from_env() -> Tenancy:
    """``Tenancy`` as ``TTLPOLICY_TENANT_FIELD`` and ``TTLPOLICY_CLIENT_IDS`` set it."""
    raw = os.environ.get(TENANT_FIELD)
    field = raw.strip() if raw is not None and raw.strip() else None
    try:
        return Tenancy(field, env_bool(CLIENT_IDS, True))
    except ValueError as e:
        raise ValueError(f"{TENANT_FIELD}: {e}") from None


def tenant_weights_from_env() -> dict[str, int] | None:
    """``TTLPOLICY_TENANT_WEIGHTS`` as a ``tenant_weights`` table (unset or blank: None, equal
    shares): comma-separated ``tenant=weight`` items, ``tenant`` the raw value of the tenant
    field (or ``cache_salt``; it may hold ``=`` but no ``,``), hashed as requests' tenants are
    (``ids.tenant_key``), ``weight`` an integer in [1, 1000]; a tenant named twice, or any
    other bad item, is refused with the item."""
    raw = os.environ.get(TENANT_WEIGHTS)
    if raw is None or raw.strip() == "":
        return None
    table: dict[str, int] = {}
    names: set[str] = set()
    for item in raw.split(","):
        name, _, text = item.strip().rpartition("=")
        weight = int(text) if text.isascii() and text.isdigit() else 0
        key = tenant_key(name)
        if key is None or not 1 <= weight <= MAX_TENANT_WEIGHT or name in names:
            why = "named twice" if name in names else f"weight in [1, {MAX_TENANT_WEIGHT}]"
            raise ValueError(
                f"{TENANT_WEIGHTS} must be comma-separated tenant=weight items, got "
                f"{item.strip()[:80]!r} ({why})"
            )
        names.add(name)
        table[key] = weight
    try:
        return check_tenant_weights(table)
    except ValueError as e:  # (too many tenants)
        raise ValueError(f"{TENANT_WEIGHTS}: {e}") from None


def record_from_env() -> RecordSettings | None:
    """Where to record the calls served (``TTLPOLICY_RECORD``, a directory; unset or blank: no
    recording), at most ``TTLPOLICY_RECORD_MAX_BYTES`` bytes (default 1 GiB) in
    ``TTLPOLICY_RECORD_FILES`` rotating files (default 16)."""
    raw = os.environ.get(RECORD)
    if raw is None or raw.strip() == "":
        return None
    directory = Path(raw.strip())
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{RECORD} must name a directory, got {raw!r} (a file)")
    max_files = env_int(RECORD_FILES, DEFAULT_MAX_FILES, 1, 1_000_000)
    max_bytes_f = env_float(RECORD_MAX_BYTES, DEFAULT_MAX_BYTES, 0, 1 << 50)  # ("1e9" reads)
    if max_bytes_f != int(max_bytes_f):  # (not cut silently: 2.9 files or bytes is a typo)
        raise ValueError(f"{RECORD_MAX_BYTES} must be a whole number, got {max_bytes_f!r}")
    max_bytes = int(max_bytes_f)
    try:
        return RecordSettings(directory, max_bytes, max_files)
    except ValueError as e:
        raise ValueError(f"{RECORD_MAX_BYTES}/{RECORD_FILES}: {e}") from None
