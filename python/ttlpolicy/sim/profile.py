"""Hardware profiles: a ``Hardware`` as a JSON file, and the fit that makes one from measured
engine steps.

A profile lets the simulator run on what a real engine measured rather than on a roofline
over spec sheets (``ttlpolicy compare --hardware profile.json``).  The measuring needs the
engine (``python bench/vllm_calibrate.py`` for vLLM); the format, the step shapes and the
fit live here so the simulator's side needs no engine.  Format (``FORMAT``)::

    {"format": "ttlpolicy-hardware-profile/3",
     "model":  {"name", "params", "layers", "hidden", "heads", "kv_heads", "head_dim",
                "tp", "dtype_bytes"},
     "device": {"name", "peak_flops", "hbm_bytes_per_s", "memory_bytes", "pcie_bytes_per_s"},
     "step_s": {"compute": {"c0", "c_tok", "c_attn", "c_kv", "c_seq"}, "memory": {...same...},
                "decode": {...same...}},   # optional
     "kv_capacity_bytes": ..., "cpu_tier_bytes": ...,
     "calibration": {...}}          # optional, free-form: how it was measured

``step_s`` holds the two lines of ``hardware.StepModel`` (a step takes the larger), every
coefficient >= 0; a calibrated profile has one line written twice, and, fitted to steps of
both kinds, a ``decode`` line for decode-only steps (``hardware.fit_steps``).

``/2`` added ``c_seq``, the seconds each sequence in a step costs.  It is a new format rather
than an optional field of ``/1`` so that a reader that does not know the term refuses the
file by its format instead of silently dropping a term that can be a third of a decode step.
``/1`` files still load, with ``c_seq`` 0: they were fitted without the term, so 0 is what
they mean.  ``/3`` added the ``decode`` line, for the same reason a new format: an older reader
would price decode steps by the other line.  A profile without a ``decode`` line is written
as ``/2``, which every reader since ``/2`` loads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .hardware import GPUSpec, Hardware, Line, ModelSpec, StepModel, fit_steps

FORMAT = "ttlpolicy-hardware-profile/3"
#: The format of a profile without a ``decode`` line (what ``/2`` readers load).
FORMAT_ONE_LINE = "ttlpolicy-hardware-profile/2"
#: Formats ``load_profile`` reads, and each one's step-line fields (a field a format lacks
#: is 0: ``/1`` had no per-sequence term).
_LINE_FIELDS_BY_FORMAT = {
    "ttlpolicy-hardware-profile/1": ("c0", "c_tok", "c_attn", "c_kv"),
    FORMAT_ONE_LINE: ("c0", "c_tok", "c_attn", "c_kv", "c_seq"),
    FORMAT: ("c0", "c_tok", "c_attn", "c_kv", "c_seq"),
}

_MODEL_INTS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "tp", "dtype_bytes")
_DEVICE_FLOATS = ("peak_flops", "hbm_bytes_per_s", "memory_bytes", "pcie_bytes_per_s")
_LINE_FIELDS = _LINE_FIELDS_BY_FORMAT[FORMAT]


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the field and its value."""


# -- step shapes: what the simulator's step-time model is a function of ---------------------
#: A step's shape: (tokens, attn, kv, seqs), the arguments of ``StepModel.step_s``.
StepShape = tuple[float, float, float, float]


def prefill_shape(chunk_tokens: int, start_tokens: int = 0) -> StepShape:
    """(tokens, attn, kv, seqs) of a step prefilling ``chunk_tokens`` after ``start_tokens``
    cached ones, as ``Engine._plan`` and ``Hardware.prefill_s`` count them: one sequence."""
    c, s = chunk_tokens, start_tokens
    return float(c), c * s + c * (c + 1) / 2.0, float(s + c), 1.0


def step_shape(chunks: Iterable[tuple[int, int]]) -> StepShape:
    """The shape of a step in which each request computes ``new`` tokens after ``before``
    ones, ``(new, before)`` per request (a decode is a chunk of one): the sum of their
    ``prefill_shape``s, as ``Engine._plan`` sums its decodes and chunks."""
    tokens = attn = kv = seqs = 0.0
    for n, before in chunks:
        t, a, k, q = prefill_shape(n, before)
        tokens, attn, kv, seqs = tokens + t, attn + a, kv + k, seqs + q
    return tokens, attn, kv, seqs


def decode_shape(context_tokens: Sequence[int]) -> StepShape:
    """(tokens, attn, kv, seqs) of a decode step over requests holding ``context_tokens``
    each: one token and one sequence per request."""
    ctx = float(sum(context_tokens))
    n = float(len(context_tokens))
    return n, ctx, ctx, n


def fit_hardware(
    model: ModelSpec,
    device: GPUSpec,
    rows: Iterable[Sequence[float]],
    *,
    kv_capacity_blocks: int,
    block_tokens: int,
    relative: bool = True,
) -> Hardware:
    """A ``Hardware`` whose step time is the least-squares fit through ``rows``
    ((tokens, attn, kv, seqs, seconds) per measured step; ``hardware.fit_steps``: decode-only
    steps on a line of their own when there are enough of both kinds) and whose KV room is
    exactly ``kv_capacity_blocks`` blocks of ``block_tokens`` (what the engine allocated)."""
    if kv_capacity_blocks <= 0 or block_tokens <= 0:
        raise ValueError(
            f"kv_capacity_blocks and block_tokens must be > 0, "
            f"got {kv_capacity_blocks!r}, {block_tokens!r}"
        )
    steps = fit_steps(rows, relative=relative)
    kv_bytes = float(kv_capacity_blocks * block_tokens * model.kv_bytes_per_token)
    return Hardware(model, device, steps, kv_bytes)


# -- the file -------------------------------------------------------------------------------
def profile_dict(hw: Hardware, calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    m, g = hw.model, hw.gpu

    def line(ln: Line) -> dict[str, float]:
        return {f: getattr(ln, f) for f in _LINE_FIELDS}

    step_s = {"compute": line(hw.steps.compute), "memory": line(hw.steps.memory)}
    if hw.steps.decode is not None:
        step_s["decode"] = line(hw.steps.decode)
    out: dict[str, Any] = {
        "format": FORMAT if hw.steps.decode is not None else FORMAT_ONE_LINE,
        "model": {"name": m.name, "params": m.params} | {f: getattr(m, f) for f in _MODEL_INTS},
        "device": {"name": g.name} | {f: getattr(g, f) for f in _DEVICE_FLOATS},
        "step_s": step_s,
        "kv_capacity_bytes": hw.kv_capacity_bytes,
        "cpu_tier_bytes": hw.cpu_tier_bytes,
    }
    if calibration is not None:
        out["calibration"] = calibration
    return out


def save_profile(path: str | Path, hw: Hardware, calibration: dict[str, Any] | None = None) -> None:
    Path(path).write_text(json.dumps(profile_dict(hw, calibration), indent=1) + "\n")


def load_profile(path: str | Path) -> Hardware:
    """The ``Hardware`` a profile file describes; ``ProfileError`` naming the bad field."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ProfileError(f"{path}: cannot read hardware profile: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: not a JSON hardware profile: {e}") from None
    return hardware_from_profile(data, str(path))


def _section(data: dict[str, Any], key: str, where: str, parent: str = "") -> dict[str, Any]:
    v = data.get(key)
    if not isinstance(v, dict):
        raise ProfileError(f"{where}: {parent}{key} must be an object, got {_show(v)}")
    return v


def _show(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _number(v: Any, label: str, *, positive: bool, integer: bool = False) -> Any:
    """``v`` if it is a finite number of the right kind and sign; else an error naming
    ``label`` (``<file>: <section>.<field>``) and the value."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer:
        ok = isinstance(v, int)
    if ok:
        ok = v > 0 if positive else v >= 0
    if not ok:
        kind = "integer" if integer else "number"
        bound = "> 0" if positive else ">= 0"
        raise ProfileError(f"{label} must be a finite {kind} {bound}, got {_show(v)}")
    return v


def hardware_from_profile(data: Any, where: str = "profile") -> Hardware:
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a hardware profile is a JSON object, got {_show(data)}")
    fmt = data.get("format")
    line_fields = _LINE_FIELDS_BY_FORMAT.get(fmt) if isinstance(fmt, str) else None
    if line_fields is None:
        known = " or ".join(map(repr, _LINE_FIELDS_BY_FORMAT))
        raise ProfileError(f"{where}: format must be {known}, got {_show(fmt)}")
    msec = _section(data, "model", where)
    name = msec.get("name")
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ProfileError(f"{where}: model.name must be a non-empty string, got {_show(name)}")
    ints = {
        f: _number(msec.get(f), f"{where}: model.{f}", positive=True, integer=True)
        for f in _MODEL_INTS
    }
    params = float(_number(msec.get("params"), f"{where}: model.params", positive=True))
    model = ModelSpec(name, params, **ints)
    dsec = _section(data, "device", where)
    dname = dsec.get("name")
    if not isinstance(dname, str) or not dname or len(dname) > 200:
        raise ProfileError(f"{where}: device.name must be a non-empty string, got {_show(dname)}")
    # peak FLOP/s and bandwidth may be 0 (unknown: a calibrated profile does not use them);
    # the host link divides a transfer, so it must be > 0.
    dev = {
        f: float(_number(dsec.get(f), f"{where}: device.{f}", positive=f == "pcie_bytes_per_s"))
        for f in _DEVICE_FLOATS
    }
    device = GPUSpec(dname, **dev)
    ssec = _section(data, "step_s", where)
    lines = []
    parts = ("compute", "memory", "decode") if fmt == FORMAT and "decode" in ssec else ()
    for part in parts or ("compute", "memory"):
        lsec = _section(ssec, part, where, "step_s.")
        # A step never takes negative time nor gets faster with more work (``fit_line``).
        coef = [
            float(_number(lsec.get(f), f"{where}: step_s.{part}.{f}", positive=False))
            for f in line_fields
        ]
        lines.append(Line(*coef))
    kv = float(_number(data.get("kv_capacity_bytes"), f"{where}: kv_capacity_bytes", positive=True))
    cpu = float(
        _number(data.get("cpu_tier_bytes", 0.0), f"{where}: cpu_tier_bytes", positive=False)
    )
    return Hardware(model, device, StepModel(*lines), kv, cpu)
