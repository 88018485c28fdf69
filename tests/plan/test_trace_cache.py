"""The cached trace forms equal a fresh parse, and follow the file's content."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np

from ttlpolicy.sim.workload import programs_from_records, programs_from_trace
from ttlpolicy.traces import read_trace, sample_dir
from ttlpolicy.traces.cache import cache_dir, load_block_trace


def test_block_form_from_cache_equals_the_parse(mooncake_head):
    first = load_block_trace(mooncake_head)
    assert list(cache_dir().glob("blocks-*.npz"))
    again = load_block_trace(mooncake_head)
    for name in ("arrival_s", "input_tokens", "output_tokens", "offsets", "keys"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    recs = list(read_trace(mooncake_head))
    assert len(first) == len(recs) and first.block_tokens == 512
    assert first.keys[: len(recs[0].hash_ids)].tolist() == list(recs[0].hash_ids)
    assert np.all(np.diff(first.arrival_s) >= 0)


def test_a_changed_file_is_parsed_again(tmp_path, mooncake_head):
    copy = tmp_path / "t.jsonl"
    shutil.copy(mooncake_head, copy)
    a = load_block_trace(copy)
    copy.write_text("".join(copy.read_text().splitlines(keepends=True)[:50]))
    b = load_block_trace(copy)
    assert len(a) == 400 and len(b) == 50 and a.digest != b.digest


def test_coarse_blocks_keep_the_last_hash_of_each_group():
    t = load_block_trace(sample_dir(), block_tokens=256)
    assert t.block_tokens == 256
    assert len(t.keys) <= sum(len(r.hash_ids) for r in read_trace(sample_dir())) // 4 + len(t)


def test_cached_programs_equal_a_fresh_build():
    opts: dict[str, Any] = {"max_context": 120_000}
    fresh = programs_from_records(read_trace(sample_dir()), **opts)
    for _ in range(2):  # build + store (or load what an earlier test stored), then load
        assert programs_from_trace(sample_dir(), **opts) == fresh
    assert list(cache_dir().glob("programs-*.npz"))
