"""Hardware profiles: the file round-trips, bad files are refused naming the field, the fit
recovers a known step model, and ``compare --hardware`` runs on a profile."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ttlpolicy.cli import main
from ttlpolicy.sim import ProfileError, load_profile, roofline, save_profile, simulate
from ttlpolicy.sim.hardware import GPUSpec, Hardware, Line, ModelSpec, StepModel
from ttlpolicy.sim.profile import decode_shape, fit_hardware, prefill_shape

REPO = Path(__file__).resolve().parents[2]


def test_profile_round_trips(tmp_path) -> None:
    hw = roofline("llama-3.1-70b", "h200", efficiency=0.5, cpu_tier_bytes=3e11)
    path = tmp_path / "p.json"
    save_profile(path, hw, {"engine": "test"})
    assert load_profile(path) == hw
    assert json.loads(path.read_text())["calibration"] == {"engine": "test"}


def _profile(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "p.json"
    save_profile(path, roofline("llama-3.1-8b", "h100-80g"))
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(format="v0"), "format"),
        (lambda d: d["model"].update(layers=0), "model.layers"),
        (lambda d: d["model"].update(layers=2.5), "model.layers"),
        (lambda d: d["model"].update(head_dim=True), "model.head_dim"),
        (lambda d: d["model"].pop("params"), "model.params"),
        (lambda d: d["model"].update(name=""), "model.name"),
        (lambda d: d.pop("device"), "device"),
        (lambda d: d["device"].update(pcie_bytes_per_s=0), "device.pcie_bytes_per_s"),
        (lambda d: d["step_s"]["memory"].update(c0=-1.0), "step_s.memory.c0"),
        (lambda d: d["step_s"]["compute"].update(c_tok="fast"), "step_s.compute.c_tok"),
        (lambda d: d["step_s"]["compute"].update(c_attn=-1e-9), "step_s.compute.c_attn"),
        (lambda d: d["step_s"]["memory"].pop("c_seq"), "step_s.memory.c_seq"),
        (lambda d: d["step_s"]["compute"].update(c_seq=-1e-4), "step_s.compute.c_seq"),
        (lambda d: d["step_s"].pop("compute"), "step_s.compute"),
        (lambda d: d.update(kv_capacity_bytes=float("nan")), "kv_capacity_bytes"),
        (lambda d: d.update(cpu_tier_bytes=-5), "cpu_tier_bytes"),
    ],
)
def test_bad_profile_names_the_field(tmp_path, edit, field) -> None:
    path, data = _profile(tmp_path)
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=rf"{path}: {field}\b"):
        load_profile(path)


def test_a_format_1_profile_loads_with_no_per_sequence_cost(tmp_path) -> None:
    """Files written before the per-sequence term (format /1: four coefficients a line) still
    load, with ``c_seq`` 0 — they were fitted without it; a /1 file is read as it was."""
    line = {"c0": 0.02, "c_tok": 3e-5, "c_attn": 1e-9, "c_kv": 2e-7}
    path, data = _profile(tmp_path)
    data["format"] = "ttlpolicy-hardware-profile/1"
    data["step_s"] = {"compute": dict(line), "memory": dict(line)}
    path.write_text(json.dumps(data))
    hw = load_profile(path)
    assert hw.steps.compute == hw.steps.memory == Line(0.02, 3e-5, 1e-9, 2e-7, 0.0)
    assert hw.steps.step_s(100, 5050, 100, 1) == 0.02 + 3e-5 * 100 + 1e-9 * 5050 + 2e-7 * 100
    # written back, it is a /2 file, the term explicit
    save_profile(path, hw)
    saved = json.loads(path.read_text())
    assert saved["format"] == "ttlpolicy-hardware-profile/2"
    assert saved["step_s"]["compute"]["c_seq"] == 0.0
    assert load_profile(path) == hw


def test_the_per_sequence_term_round_trips(tmp_path) -> None:
    model = ModelSpec("tiny", 5e7, 8, 768, 12, 4, 64, dtype_bytes=4)
    device = GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10)
    line = Line(0.01, 2e-5, 1e-9, 0.0, 4e-4)
    hw = Hardware(model, device, StepModel(line, line), 1e9)
    path = tmp_path / "p.json"
    save_profile(path, hw)
    assert load_profile(path).steps.compute.c_seq == 4e-4


def test_unreadable_profile_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="not a JSON hardware profile"):
        load_profile(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="JSON object"):
        load_profile(bad)


def test_fit_recovers_a_quadratic_prefill_and_linear_decode() -> None:
    # A known engine: 5 ms a step, 40 us a token, 2 ns a unit of attention, 1 us a KV token,
    # 300 us a sequence (a decode token costs 340 us, a prefill token 40 us and its chunk 300).
    truth = (5e-3, 4e-5, 2e-9, 1e-6, 3e-4)

    def step_s(shape: tuple[float, ...]) -> float:
        return truth[0] + sum(c * x for c, x in zip(truth[1:], shape, strict=True))

    shapes = [prefill_shape(n) for n in (32, 64, 128, 256, 512)]
    shapes += [prefill_shape(64, 256), decode_shape([300] * 4), decode_shape([100] * 8)]
    shapes += [decode_shape([50] * b) for b in (1, 2, 16)]
    model = ModelSpec("tiny", 5e7, 8, 768, 12, 4, 64, dtype_bytes=4)
    device = GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10)
    hw = fit_hardware(
        model, device, [(*s, step_s(s)) for s in shapes], kv_capacity_blocks=40, block_tokens=32
    )
    assert hw.kv_capacity_blocks(32) == 40
    for shape in (prefill_shape(400), prefill_shape(100, 300), decode_shape([200] * 6)):
        assert hw.steps.step_s(*shape) == pytest.approx(step_s(shape), rel=1e-6)
    # The profile's lone prefill is the engine's, chunk by chunk.
    want = step_s(prefill_shape(256)) + step_s(prefill_shape(144, 256))
    assert hw.prefill_s(400, 256) == pytest.approx(want, rel=1e-6)


def test_compare_runs_on_a_profile(tmp_path, capsys) -> None:
    path = tmp_path / "p.json"
    # A slow machine: the same workload takes longer on it than on the preset.
    hw = roofline("llama-3.1-8b", "h100-80g", efficiency=0.05)
    save_profile(path, hw)
    out = tmp_path / "r.json"
    argv = ["compare", "--policies", "vllm", "--concurrency", "2", "--json", str(out)]
    assert main([*argv, "--hardware", str(path)]) == 0, capsys.readouterr().err
    slow = json.loads(out.read_text())["results"][0]["summary"]
    assert main(argv) == 0
    fast = json.loads(out.read_text())["results"][0]["summary"]
    assert slow["ttft_mean_s"] > fast["ttft_mean_s"]


def test_compare_refuses_a_bad_profile_in_one_line(tmp_path, capsys) -> None:
    path, data = _profile(tmp_path)
    data["model"]["kv_heads"] = -8
    path.write_text(json.dumps(data))
    assert main(["compare", "--policies", "vllm", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err
    assert "model.kv_heads" in err and "-8" in err and "Traceback" not in err


def test_calibrated_profile_changes_simulated_times() -> None:
    """The simulator uses the profile's step line: doubling every coefficient doubles a
    lone program's on-engine time."""
    from ttlpolicy.sim import Program, Turn

    model = ModelSpec("tiny", 5e7, 8, 768, 12, 4, 64, dtype_bytes=4)
    device = GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10)
    shapes = [prefill_shape(n) for n in (32, 128, 512)] + [decode_shape([64] * b) for b in (1, 8)]
    shapes.append(prefill_shape(64, 64))
    times = []
    for k in (1.0, 2.0):
        rows = [(*s, k * (1e-3 + 1e-5 * s[0] + 1e-8 * s[1] + 1e-4 * s[3])) for s in shapes]
        hw = fit_hardware(model, device, rows, kv_capacity_blocks=64, block_tokens=32)
        prog = Program("p", (Turn(300, 10, 0, 0.0, None),))
        m = simulate(hw, "vllm", [prog], concurrency=1)
        times.append(m.summary()["jct_mean_s"])
    assert times[1] == pytest.approx(2 * times[0], rel=1e-6)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: it would run")
def test_gpu_fidelity_script_refuses_without_a_gpu(tmp_path) -> None:
    """bench/gpu/fidelity.sh stops at its GPU check, before installing anything."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "FIDELITY_OUT": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "bench/gpu/fidelity.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert "needs an NVIDIA GPU" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing installed, nothing written


def test_fit_weighs_relative_error_so_short_steps_stay_accurate() -> None:
    """One long prefill measured 20 % slow (a load spike) must not skew the many short decode
    steps a run is made of: the fit minimises relative, not absolute, error."""
    from ttlpolicy.sim.hardware import fit_line

    def true_s(shape: tuple[float, ...]) -> float:
        return 0.01 + 2e-4 * shape[0] + 1e-9 * shape[1] + 1e-7 * shape[2] + 1e-4 * shape[3]

    short = [decode_shape([ctx] * b) for b in (1, 2, 4, 8) for ctx in (64, 256)]
    long_ = [prefill_shape(n) for n in (128, 256, 512)]
    rows = [(*s, true_s(s)) for s in short] + [(*s, true_s(s)) for s in long_[:2]]
    rows.append((*long_[2], 1.2 * true_s(long_[2])))
    line = fit_line(rows)
    worst = max(abs(line.at(*s) - true_s(s)) / true_s(s) for s in short)
    assert worst < 0.012  # an absolute least-squares fit is off by 1.9 % here


def test_fit_never_returns_a_negative_coefficient() -> None:
    """Noisy steps whose time falls as the context grows (a load spike on the short ones) make
    a free fit's context slope and intercept negative; the fit keeps every term >= 0, so the
    profile it makes loads and no step is predicted to take negative time."""
    from ttlpolicy.sim.hardware import fit_line

    rng = np.random.default_rng(0)
    rows = []
    for ctx in (64, 128, 256, 512):
        shape = decode_shape([ctx] * 4)
        rows.append((*shape, 0.02 * (1.0 + 0.5 * rng.random()) * (600 - ctx) / 500))
    for n in (64, 256):
        rows.append((*prefill_shape(n), 1e-4 * n))
    line = fit_line(rows)
    coef = (line.c0, line.c_tok, line.c_attn, line.c_kv, line.c_seq)
    assert min(coef) >= 0.0
    assert line.at(*decode_shape([4096] * 16)) > 0.0


def test_compare_refuses_a_profile_with_the_paper_workload(tmp_path, capsys) -> None:
    """The paper workload brings its own hardware: a profile beside it would be ignored."""
    path, _ = _profile(tmp_path)
    from ttlpolicy.sim.paper_workloads import WORKLOADS

    workload = sorted(WORKLOADS)[0]
    argv = ["compare", "--workload", workload, "--hardware", str(path)]
    assert main(argv) == 2
    assert "--hardware or --workload" in capsys.readouterr().err


def test_a_fit_in_seconds_keeps_the_total_of_noisy_single_steps() -> None:
    """A replay's own steps are measured once each, and on a shared CPU a third of them run
    several times slower: a relative fit follows the fast ones and predicts far less time than
    the run took; a fit in seconds (with its intercept) keeps the run's total."""
    import random

    from ttlpolicy.sim.hardware import fit_line

    rng = random.Random(5)
    rows = []
    for i in range(300):
        shape = decode_shape([64 + 7 * i] * (1 + i % 4)) if i % 5 else prefill_shape(32 + i)
        base = 0.01 + 2e-4 * shape[0] + 1e-9 * shape[1] + 1e-7 * shape[2] + 1e-4 * shape[3]
        rows.append((*shape, base * (5.0 if rng.random() < 0.3 else 1.0)))
    total = sum(r[4] for r in rows)

    def predicted(line) -> float:
        return sum(line.at(*r[:4]) for r in rows)

    assert predicted(fit_line(rows)) < 0.8 * total
    assert predicted(fit_line(rows, relative=False)) == pytest.approx(total, rel=0.01)
