"""The waiting queue: requests ordered by the CacheTTL priority tuple

    (not preempted, not pinned, rank_s, program order, request arrival time, request id)

smallest first — preempted requests, then requests whose program's pin they consumed, then
by rank: the program's arrival time (program-level FCFS), or the scheduler's other
``serve_order`` (``scheduler.py``).  Program order is the order in which the scheduler first saw the
programs (0, 1, …): programs that arrive at one instant keep it, so one program's returning
request is not queued behind the first requests of programs seen after it.  The request id
makes every key unique, so the order is total and both backends pop the same request.  A
heap with lazy deletion: ``remove`` forgets the key, and stale heap entries are skipped (and
compacted away so the heap stays bounded).
"""

from __future__ import annotations

import heapq

#: (not preempted, not pinned, rank_s, program_order, arrival_s, request_id)
Key = tuple[bool, bool, float, int, float, str]


class WaitingQueue:
    def __init__(self) -> None:
        self._keys: dict[str, Key] = {}
        self._heap: list[Key] = []

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._keys

    def key(self, request_id: str) -> Key:
        return self._keys[request_id]

    def push(self, key: Key) -> None:
        self._keys[key[-1]] = key
        heapq.heappush(self._heap, key)
        if len(self._heap) > 2 * len(self._keys) + 64:
            self._heap = list(self._keys.values())
            heapq.heapify(self._heap)

    def peek(self) -> str | None:
        heap = self._heap
        while heap:
            top = heap[0]
            if self._keys.get(top[-1]) == top:
                return top[-1]
            heapq.heappop(heap)  # stale: removed, or re-queued with another key
        return None

    def smallest(self, n: int) -> list[str]:
        """The ``n`` live request ids of the smallest keys, smallest first: the heap walked down
        from its top, smallest entry first (a frontier of the entries whose parents were
        read), stale entries and second copies of a live key passed over — not a scan of
        every key."""
        heap, keys = self._heap, self._keys
        out: list[str] = []
        frontier = [(heap[0], 0)] if heap else []
        while frontier and len(out) < n:
            key, i = heapq.heappop(frontier)
            if keys.get(key[-1]) == key and key[-1] not in out:  # (out: at most n ids)
                out.append(key[-1])
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return out

    def pop(self) -> str | None:
        request_id = self.peek()
        if request_id is not None:
            heapq.heappop(self._heap)
            del self._keys[request_id]
        return request_id

    def remove(self, request_id: str) -> bool:
        return self._keys.pop(request_id, None) is not None
