"""The adapters' environment knobs (``ttlpolicy.serving.EngineKnobs``): defaults, ranges,
and a refusal that names the knob and the value."""

from __future__ import annotations

import pytest

from ttlpolicy.ids import Tenancy, tenant_key
from ttlpolicy.serving import EngineKnobs, env_float
from ttlpolicy.serving.knobs import TENANT_WEIGHTS

KNOBS = (
    "TTLPOLICY_PIN_BUDGET_FRACTION",
    "TTLPOLICY_LOG_INTERVAL_S",
    "TTLPOLICY_POLICY",
    "TTLPOLICY_METRICS",
    "TTLPOLICY_TENANT_WEIGHTS",
    "TTLPOLICY_SKIP_DEPTH",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_unset_knobs_take_their_defaults_and_load_control_is_on() -> None:
    knobs = EngineKnobs.from_env()
    assert knobs.pin_budget_fraction == 0.5 and knobs.log_interval_s == 10.0
    assert knobs.policy.admission and knobs.policy.evict_by_next_use
    assert knobs.policy.prefill_chunk_tokens is None and knobs.policy.serve_order == "program"
    assert knobs.skip_depth == 0  # (no reload tier: the skip was measured with one)


def test_the_engine_passes_its_chunk_and_tier_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLPOLICY_POLICY", '{"admission": false}')
    monkeypatch.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", " 0.25 ")
    knobs = EngineKnobs.from_env(2048, reload_tier=True)
    assert knobs.pin_budget_fraction == 0.25
    assert not knobs.policy.admission and knobs.policy.evict_by_next_use  # the JSON wins
    assert knobs.policy.prefill_chunk_tokens == 2048 and knobs.policy.serve_order == "attained"
    assert knobs.skip_depth == 8  # (skip_ahead.SKIP_DEPTH with a reload tier)
    monkeypatch.setenv("TTLPOLICY_SKIP_DEPTH", " 0 ")
    assert EngineKnobs.from_env(2048, reload_tier=True).skip_depth == 0  # the knob wins
    monkeypatch.setenv("TTLPOLICY_SKIP_DEPTH", "3")
    assert EngineKnobs.from_env().skip_depth == 3


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("TTLPOLICY_PIN_BUDGET_FRACTION", "1.5", "must be in [0.0, 1.0], got 1.5"),
        ("TTLPOLICY_PIN_BUDGET_FRACTION", "half", "must be a number in [0.0, 1.0], got 'half'"),
        ("TTLPOLICY_PIN_BUDGET_FRACTION", "nan", "must be in [0.0, 1.0], got nan"),
        ("TTLPOLICY_LOG_INTERVAL_S", "-1", "must be in [0.0, 1000000000.0], got -1.0"),
        ("TTLPOLICY_SKIP_DEPTH", "65", "must be an integer in [0, 64], got '65'"),
        ("TTLPOLICY_SKIP_DEPTH", "2.5", "must be an integer in [0, 64], got '2.5'"),
        ("TTLPOLICY_SKIP_DEPTH", "-1", "must be an integer in [0, 64], got '-1'"),
    ],
)
def test_a_bad_value_is_refused_with_the_knob_and_the_value(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, says: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError) as e:
        EngineKnobs.from_env()
    assert str(e.value) == f"{name} {says}"


def test_a_bad_policy_json_names_its_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLPOLICY_POLICY", '{"max_ttl_s": -3}')
    with pytest.raises(ValueError, match="max_ttl_s"):
        EngineKnobs.from_env()


def test_blank_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_KNOB", "   ")
    assert env_float("X_KNOB", 3.0, 0.0, 5.0) == 3.0


@pytest.mark.parametrize(("raw", "on"), [(None, True), (" ", True), ("1", True), (" 0 ", False)])
def test_the_metrics_knob_is_0_or_1_and_on_by_default(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, on: bool
) -> None:
    if raw is not None:
        monkeypatch.setenv("TTLPOLICY_METRICS", raw)
    assert EngineKnobs.from_env().metrics is on


@pytest.mark.parametrize("raw", ["yes", "true", "2", "-1"])
def test_a_bad_metrics_knob_names_itself(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("TTLPOLICY_METRICS", raw)
    with pytest.raises(ValueError, match=f"TTLPOLICY_METRICS must be 0 or 1, got '{raw}'"):
        EngineKnobs.from_env()


# -- tenant weights ----------------------------------------------------------------------------
def test_tenant_weights_name_raw_tenants_hashed_as_requests_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert EngineKnobs.from_env().tenant_weights is None  # unset: equal shares
    monkeypatch.setenv(TENANT_WEIGHTS, " tenantA=2, team=b=1 ,salt 7=1000")
    weights = EngineKnobs.from_env().tenant_weights
    assert weights == {tenant_key("tenantA"): 2, tenant_key("team=b"): 1,
                       tenant_key("salt 7"): 1000}  # fmt: skip
    # the key a request with that cache_salt (or trusted field) gets
    assert Tenancy().tenant("tenantA", {}) in weights
    assert Tenancy("x-tenant").tenant(None, {"x-tenant": "team=b"}) in weights


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("tenantA", "'tenantA'"),
        ("tenantA=0", "'tenantA=0'"),
        ("tenantA=1001", "'tenantA=1001'"),
        ("tenantA=1.5", "'tenantA=1.5'"),
        ("tenantA=²", "'tenantA=²'"),
        ("=2", "'=2'"),
        ("a=1,,b=2", "''"),
        ("a=1,a=2", "'a=2' (named twice)"),
        (",".join(f"t{i}=1" for i in range(1025)), "at most 1024 tenants, got 1025"),
    ],
)
def test_bad_tenant_weights_fail_the_start_naming_the_knob_and_item(
    monkeypatch: pytest.MonkeyPatch, raw: str, shown: str
) -> None:
    monkeypatch.setenv(TENANT_WEIGHTS, raw)
    with pytest.raises(ValueError, match=TENANT_WEIGHTS) as e:
        EngineKnobs.from_env()
    assert shown in str(e.value)
