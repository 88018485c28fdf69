"""Tenants: which tenant a program id belongs to, and the tenants' weights; whether an id is
an inferred program's.

A program id namespaced by its tenant (``ids.program_key``) reads
``"\\x00t:<TENANT_KEY_CHARS lowercase hex digits>:<client id>"``; ``tenant_of`` reads the key
back ("" for any other id: the shared tenant).  The pin budget (``pins``) and load control's
working set (``admission``) are shared among the active tenants in proportion to their
weights: a tenant's share of ``budget`` is ``budget · weight / W``, ``W`` the summed weight of
the active tenants.  Every tenant weighs 1 unless ``tenant_weights`` says otherwise, so by
default the shares are equal.  Weights are integers so that both backends compare shares
exactly (``blocks · W > budget · weight``: over its share).

An engine names a program it inferred from the prompt (``serving.inferred``, for requests
without an id) ``"\\x00linked:<key>"`` within the request's tenant, a control character no
client id may hold: ``is_inferred`` reads that back, so load control can treat such programs
apart (``admission``: an inferred program away long is not expected back) with no field of
its own.

``tenant_weights`` is keyed by tenant key (``ids.tenant_key`` of the raw tenant value — the
``cache_salt``, or the trusted field — as the engine knobs write it); the table is bounded
(``MAX_WEIGHTED_TENANTS``) and each weight is in ``[1, MAX_TENANT_WEIGHT]``.
"""

from __future__ import annotations

from typing import Any

from .._validate import as_int, short_repr

__all__ = [
    "INFERRED_PREFIX",
    "MAX_TENANT_WEIGHT",
    "MAX_WEIGHTED_TENANTS",
    "TENANT_KEY_CHARS",
    "TENANT_PREFIX",
    "check_tenant_weights",
    "is_inferred",
    "tenant_of",
]

#: The prefix of a program id namespaced by its tenant (``ids.program_key``).
TENANT_PREFIX = "\x00t:"
TENANT_KEY_CHARS = 32
#: The prefix of an engine's inferred program's id, after its tenant's namespace (module doc).
INFERRED_PREFIX = "\x00linked:"
#: Tenants a weights table may name, and the largest weight.
MAX_WEIGHTED_TENANTS = 1024
MAX_TENANT_WEIGHT = 1000
_HEX = frozenset("0123456789abcdef")
_FIELD = "tenant_weights"


def tenant_of(program_id: str) -> str:
    """The tenant key of a namespaced program id, "" (the shared tenant) for any other id."""
    start = len(TENANT_PREFIX)
    end = start + TENANT_KEY_CHARS
    key = program_id[start:end]
    if program_id.startswith(TENANT_PREFIX) and program_id[end : end + 1] == ":" and _is_key(key):
        return key
    return ""


def is_inferred(program_id: str) -> bool:
    """Whether ``program_id`` names a program an engine inferred (module doc): its id past its
    tenant's namespace, if any, starts with ``INFERRED_PREFIX``."""
    start = len(TENANT_PREFIX) + TENANT_KEY_CHARS + 1 if tenant_of(program_id) else 0
    return program_id.startswith(INFERRED_PREFIX, start)


def _is_key(key: str) -> bool:
    return len(key) == TENANT_KEY_CHARS and _HEX.issuperset(key)


def check_tenant_weights(value: Any) -> dict[str, int]:
    """``value`` (None: no table) as a checked table of tenant key to weight.  Types first
    (``TypeError``: not a dict, a key not a str, a weight not an integer), then the values in
    order (``ValueError``: more than ``MAX_WEIGHTED_TENANTS`` tenants, a key that is not a
    tenant key, a weight out of range) — the order the native binding and core check in."""
    if value is None:
        return {}
    kind = "a dict of str tenant keys to integer weights"
    if not isinstance(value, dict):
        raise TypeError(f"{_FIELD} must be {kind}, got {short_repr(value)}")
    # a snapshot of the dict's own entries (a weight's __index__ may change it), each weight
    # read once
    items = []
    for key, weight in list(dict.items(value)):
        if not isinstance(key, str):
            raise TypeError(f"{_FIELD} must be {kind}, got {short_repr(key)}")
        items.append((key, as_int(_FIELD, weight)))
    if len(items) > MAX_WEIGHTED_TENANTS:
        raise ValueError(
            f"{_FIELD} must be at most {MAX_WEIGHTED_TENANTS} tenants, got {len(items)}"
        )
    out: dict[str, int] = {}
    for key, w in items:
        if not _is_key(key):
            raise ValueError(
                f"{_FIELD} must be keyed by tenant keys ({TENANT_KEY_CHARS} lowercase hex "
                f"digits, ids.tenant_key), got {short_repr(key)}"
            )
        if not 1 <= w <= MAX_TENANT_WEIGHT:
            raise ValueError(
                f"{_FIELD} must be a weight in [1, {MAX_TENANT_WEIGHT}] for tenant "
                f"{short_repr(key)}, got {w}"
            )
        out[key] = w
    return out
