"""``CallLog`` on real vLLM ``Request`` objects, without an engine: what the scheduler's thread
buffers (references, the fields derived in the writer thread) is written byte for byte as
the call's fields handed to ``Recorder.call`` would be, and the cached tokens are the ones
vLLM reports in ``usage`` (its ``PrefillStats``, taken from the request at the first token)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ttlpolicy.ids import Tenancy
from ttlpolicy.serving import Recorder, RecordSettings
from ttlpolicy.traces.recording import record_files
from ttlpolicy_vllm.compat import Request, RequestStatus
from ttlpolicy_vllm.identity import program_of
from ttlpolicy_vllm.recording import CallLog

KEY = b"k" * 32
BLOCK = 16


def request(i: int, prompt: int, extra: dict[str, Any], salt: str | None) -> Any:
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    init_none_hash(sha256_cbor)
    params = SamplingParams(max_tokens=8, extra_args=extra)
    tokens = [3 + (i * 7 + t) % 200 for t in range(prompt)]
    hasher = get_request_block_hasher(BLOCK, sha256_cbor)
    return Request(f"r{i}", tokens, params, None, block_hasher=hasher, cache_salt=salt)


def served(r: Any, cached: int, outputs: int, status: Any) -> None:
    """What vLLM does to a request between its arrival and its free: its first scheduling
    fills the prefill stats, its first token takes them, tokens are appended, it stops."""
    assert r.prefill_stats is not None
    r.prefill_stats.set(
        num_prompt_tokens=r.num_prompt_tokens,
        num_local_cached_tokens=cached,
        num_external_cached_tokens=0,
    )
    assert r.take_prefill_stats() is not None and r.prefill_stats is None
    for t in range(outputs):
        r.append_output_token_ids(5 + t)
    r.status = status


CALLS = [  # (program id, tenant salt, prompt tokens, cached tokens, outputs, tool, last turn)
    ("agent-1", None, 96, 0, 4, "bash", False),
    ("agent-1", None, 160, 96, 6, None, True),
    (None, "tenant-x", 64, 32, 2, None, False),
    ("agent-2", "tenant-x", 130, 0, 3, "grep", False),
]


@pytest.mark.parametrize("tenancy", [Tenancy(), Tenancy(tenant_field="tenant")])
def test_the_buffered_references_are_written_as_the_calls_fields_would_be(
    tmp_path: Path, tenancy: Tenancy
) -> None:
    log = CallLog(RecordSettings(tmp_path / "log"), BLOCK, tenancy, lambda: 0.0, key=KEY)
    direct = Recorder(
        RecordSettings(tmp_path / "direct"),
        engine_block_tokens=BLOCK,
        clock=lambda: 0.0,
        key=KEY,
        background=False,
    )
    for i, (pid, salt, prompt, cached, outputs, tool, last) in enumerate(CALLS):
        extra: dict[str, Any] = {"tenant": f"gw-{i % 2}"}
        if pid is not None:
            extra |= {"program_id": pid, "tool": tool, "last_turn": last}
        r = request(i, prompt, extra, salt)
        log.arrived(r, 10.0 * i)
        served(r, cached, outputs, RequestStatus.FINISHED_STOPPED)
        info = program_of(r, tenancy)
        log.finished(r, info, None if info is None else info.tool, 10.0 * i + 2.5)
        direct.call(
            program_id=None if info is None else info.program_id,
            tenant=tenancy.tenant(salt, extra),
            arrival_s=10.0 * i,
            finish_s=10.0 * i + 2.5,
            prompt_tokens=prompt,
            output_tokens=outputs,
            cached_tokens=cached,
            block_hashes=list(r.block_hashes),
            tool=tool,
            last_turn=last,
        )
    log.close()
    direct.close()

    def lines(folder: Path) -> list[str]:
        return [x for f in record_files(folder) for x in f.read_text().splitlines()[1:]]

    written = lines(tmp_path / "log")
    assert len(written) == len(CALLS) and written == lines(tmp_path / "direct")
    assert [json.loads(x)["cached"] for x in written] == [c[3] for c in CALLS]


def test_aborted_and_unannounced_requests_are_not_recorded(tmp_path: Path) -> None:
    log = CallLog(RecordSettings(tmp_path), BLOCK, Tenancy(), lambda: 0.0, key=KEY)
    aborted = request(0, 64, {"program_id": "a"}, None)
    log.arrived(aborted, 1.0)
    served(aborted, 0, 1, RequestStatus.FINISHED_ABORTED)
    log.finished(aborted, program_of(aborted), None, 2.0)
    unseen = request(1, 64, {}, None)  # freed without an arrival noted
    served(unseen, 0, 1, RequestStatus.FINISHED_STOPPED)
    log.finished(unseen, None, None, 2.0)
    never_scheduled = request(2, 64, {}, None)  # stopped before its first scheduling
    log.arrived(never_scheduled, 1.0)
    never_scheduled.status = RequestStatus.FINISHED_LENGTH_CAPPED
    log.finished(never_scheduled, None, None, 3.0)
    log.close()
    lines = [x for f in record_files(tmp_path) for x in f.read_text().splitlines()[1:]]
    assert [(json.loads(x)["t"], json.loads(x)["cached"]) for x in lines] == [(1.0, 0)]
