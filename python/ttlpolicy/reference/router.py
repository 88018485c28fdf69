"""Which engine instance serves a program's next call, when many serve one workload.

A pin is worth nothing when the program's next call lands on another instance.  The router
keeps, for each instance, the state it last reported, and for each program its *home* (the
instance that served its last call) and the live pin it holds there; it answers ``route``
from them, pricing a call with the TTL model's own terms, read from a ``TTLPolicy`` (used,
not copied): ``miss`` = ``policy.miss_cost_s(prefix_tokens)`` (rebuilding the context),
``T`` = ``policy.out_of_order_cost_s`` (the queueing delay of a return that lost its cache,
and of a call that waits for memory) and ``η`` = ``policy.eta``; a lost context costs what
the TTL model says a pin saves, ``loss`` = ``miss + η · T``.

* **Wait at an instance** for a call needing ``need`` blocks:
  ``queue_s + (0 if it fits else T)``, where ``queue_s`` = ``n · miss_cost_s(tokens // n)``
  over the calls it waits behind (their prefill, each call priced by the miss model at their
  mean size; 0 for none).  A call waits behind the whole queue (``queue_len`` calls,
  ``queued_tokens``) except a returning call at its home, which waits behind the *return
  queue* only (``return_queue_len``, ``return_queued_tokens``): under program-level FCFS a
  program's later call runs ahead of every program that arrived after it — first calls,
  and programs waiting for admission, rank last — while the same call sent elsewhere is a
  new program there, behind that instance's whole queue.  An instance that does not report
  a return queue (a FCFS engine) has it equal to its whole queue.  The call *fits* when
  ``need <= free_blocks`` and ``working_set_blocks + grow <= total_blocks`` (beside load
  control's working set), ``grow`` = ``need`` but at the program's home, where the working
  set counts it already: there ``grow`` is what the call adds to its last call's blocks
  (``blocks_needed`` − those, at least 0), and a live pin's blocks are its own, so ``need``
  there is ``blocks_needed − pin blocks`` (at least 0).
* **A returning call** (its home routable) costs, at its home, the wait there, plus
  ``(1 − cached_fraction) · loss`` without a live pin (the chance its context was evicted,
  from the instance's reported hit fraction); anywhere else, the wait there plus ``loss``.
  It stays home unless another instance costs strictly less.
* **A new program** (or one whose home was drained) costs the wait at each instance.
* **Ties**: the home first, then the most room (``total − working set − grow``), then the
  instance registered first.
* After a choice, until the instance reports again, the router counts the call there:
  queue length + 1, ``queued_tokens`` + ``prefix_tokens`` (unless a live pin kept its
  context), and at its home the return queue likewise; free blocks − ``need`` (not below
  0), working set + ``grow``.  The program's
  pin is consumed (it stayed) or left behind (it moved): either way the router forgets it.
* A pin is live while ``now < deadline_s`` (``pinned`` reports it).
* ``evicted``: the program's home evicted its context, all of it or all but
  ``held_blocks`` (a KV-cache event).  When the home holds at most half of the program's
  last call's blocks, the program is forgotten and its next call routes as a new program's.
  Its return would still run ahead of the home's queue, but that saves the fleet nothing (it
  only delays the calls it passes), while as new it goes where the queue and the working
  set are lightest: the programs whose contexts were lost are spread again (as the
  prefix-affinity router does with a call whose prefix no instance holds).  The half: of
  none, a tenth and a half, the best on the tuning folds (bench/RESULTS.md, "Many engines
  behind a router").
* ``drain`` takes an instance out of routing (dead, or draining): its programs are released
  (they route as new) and its later reports and pins are ignored (answer False) until
  ``add_instance`` registers it again.  ``remove_instance`` forgets it: its programs are
  released likewise and its slot is free (its id, registered again, is a new instance, last
  in registration order): a fleet whose instances come and go stays within
  ``max_instances``.
* **Costs are numbers**: a cost that is not a number (``0 · inf``, as when a policy whose
  miss model overflows prices a call at an instance with ``cached_fraction`` = 1) counts as
  ``+inf``, so it never wins by scan order; costs all infinite fall to the ties.
* **A pin is a claim** the router checks against its own record: ``pinned`` sets no home
  (answer False) when the pin has expired (``deadline_s <= now``: the caller's ``now``, by
  default the router's clock, the last route's ``now``), when the router homes the program
  at another instance (it sent the program's last call there, or accepted a pin there: a
  replica cannot take a program routed elsewhere), or when the program is unknown to the
  router and its table is full (a claim never makes it forget a program).  A pin for an
  unknown program is accepted otherwise: another router (another handle of the same fleet)
  may have sent it there.

Bounded state: at most ``max_instances`` instances (registering one more is refused) and
``max_programs`` programs, shared fairly among tenants (``tenant_of`` a program id) as the
linker's tables are: a new program in a full table makes the least recently routed (or
pinned) program forgotten — unless its tenant holds more programs than that one's tenant,
then its own least recent.  A forgotten program routes as new, so no call is refused; a
tenant flooding new program ids pushes out only those of tenants holding at least as many.
Clear errors before any change: ``KeyError`` (an unknown instance), ``ValueError`` (NaN,
negative or out-of-range figures, time going backwards, no routable instance), ``TypeError``
(wrong types).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .._validate import check_id, finite, int_in
from ._sync import synchronized
from .fair_order import FairOrder
from .policy import MAX_BLOCKS, TTLPolicy
from .tenants import tenant_of

__all__ = ["DEFAULT_MAX_INSTANCES", "DEFAULT_MAX_PROGRAMS", "ProgramRouter"]

DEFAULT_MAX_INSTANCES = 1024
DEFAULT_MAX_PROGRAMS = 1 << 20
#: The largest bounds one may ask for (tables are sized by them).
MAX_INSTANCES = 1 << 16
MAX_PROGRAMS = 1 << 30


class _Instance:
    __slots__ = (
        "cached_fraction",
        "free_blocks",
        "id",
        "queue_len",
        "queued_tokens",
        "reported",
        "return_queue_len",
        "return_queued_tokens",
        "routable",
        "total_blocks",
        "working_set_blocks",
    )

    def __init__(self, instance_id: str) -> None:
        self.id = instance_id
        self.routable = True  # registered and not drained
        self.reported = False
        self.free_blocks = 0
        self.total_blocks = 0
        self.queue_len = 0
        self.queued_tokens = 0
        self.return_queue_len = 0
        self.return_queued_tokens = 0
        self.working_set_blocks = 0
        self.cached_fraction = 0.0


class _Program:
    __slots__ = ("blocks", "home", "pin_blocks", "pin_deadline_s")

    def __init__(self, home: int) -> None:
        self.home = home
        self.blocks = 0  # its last call's blocks_needed (at its home)
        self.pin_deadline_s: float | None = None
        self.pin_blocks = 0


@synchronized
class ProgramRouter:
    """Routes programs' calls over engine instances (see the module doc)."""

    def __init__(
        self,
        policy: Any,
        max_instances: Any = DEFAULT_MAX_INSTANCES,
        max_programs: Any = DEFAULT_MAX_PROGRAMS,
    ) -> None:
        if not isinstance(policy, TTLPolicy):
            raise TypeError(f"policy must be a TTLPolicy, got {type(policy).__name__}")
        self._policy = policy
        self._max_instances = int_in("max_instances", max_instances, 1, MAX_INSTANCES)
        self._max_programs = int_in("max_programs", max_programs, 1, MAX_PROGRAMS)
        self._instances: list[_Instance] = []
        self._index: dict[str, int] = {}
        self._programs: OrderedDict[str, _Program] = OrderedDict()  # least recent first
        # the same programs with each tenant's own order (the bound's fair share: fair_order.py)
        self._order = FairOrder()
        self._now = -float("inf")

    # -- instances ------------------------------------------------------------------------
    def add_instance(self, instance_id: Any) -> None:
        """Registers an instance (or one drained before, again); it is routed to once it
        reports."""
        iid = check_id("instance_id", instance_id)
        i = self._index.get(iid)
        if i is not None:
            inst = self._instances[i]
            if inst.routable:
                raise ValueError(f"instance_id must be new or drained, got {iid!r} (registered)")
            self._instances[i] = _Instance(iid)
            return
        if len(self._instances) >= self._max_instances:
            raise ValueError(
                f"instance_id must be within max_instances ({self._max_instances}), got {iid!r} "
                "(one more)"
            )
        self._index[iid] = len(self._instances)
        self._instances.append(_Instance(iid))

    def remove_instance(self, instance_id: Any) -> list[str]:
        """Forgets the instance (dead, gone for good): as ``drain``, and its slot is free.
        Returns the programs it released (homed there; least recently routed first)."""
        inst = self._instance(instance_id)
        released = self.drain(inst.id)
        i = self._index.pop(inst.id)
        del self._instances[i]
        for later in self._instances[i:]:
            self._index[later.id] -= 1
        for prog in self._programs.values():  # (none is homed at i: drained)
            if prog.home > i:
                prog.home -= 1
        return released

    def report(
        self,
        instance_id: Any,
        free_blocks: Any,
        total_blocks: Any,
        queue_len: Any,
        queued_tokens: Any,
        working_set_blocks: Any,
        cached_fraction: Any,
        return_queue_len: Any = None,
        return_queued_tokens: Any = None,
    ) -> bool:
        """An instance's state: free and total KV blocks, calls waiting and their uncached
        prompt tokens, load control's working set (blocks), the fraction of returning calls'
        prefixes it found cached; optionally the part of the queue a returning call of a
        program it serves waits behind, calls and their uncached prompt tokens (given
        together; default: the whole queue).  False: ignored (the instance is drained)."""
        inst = self._instance(instance_id)
        free = int_in("free_blocks", free_blocks, 0, MAX_BLOCKS)
        total = int_in("total_blocks", total_blocks, 0, MAX_BLOCKS)
        queue = int_in("queue_len", queue_len, 0, MAX_BLOCKS)
        tokens = int_in("queued_tokens", queued_tokens, 0, MAX_BLOCKS)
        working = int_in("working_set_blocks", working_set_blocks, 0, MAX_BLOCKS)
        cached = finite("cached_fraction", cached_fraction)
        returns = (
            None
            if return_queue_len is None
            else int_in("return_queue_len", return_queue_len, 0, MAX_BLOCKS)
        )
        return_tokens = (
            None
            if return_queued_tokens is None
            else int_in("return_queued_tokens", return_queued_tokens, 0, MAX_BLOCKS)
        )
        if not 0.0 <= cached <= 1.0:
            raise ValueError(f"cached_fraction must be in [0, 1], got {cached!r}")
        if free > total:
            raise ValueError(f"free_blocks must be <= total_blocks ({total}), got {free}")
        if (returns is None) != (return_tokens is None):
            field = "return_queued_tokens" if return_tokens is None else "return_queue_len"
            other = "return_queue_len" if return_tokens is None else "return_queued_tokens"
            raise ValueError(f"{field} must be given with {other}, got None")
        if returns is not None and returns > queue:
            raise ValueError(f"return_queue_len must be <= queue_len ({queue}), got {returns}")
        if return_tokens is not None and return_tokens > tokens:
            raise ValueError(
                f"return_queued_tokens must be <= queued_tokens ({tokens}), got {return_tokens}"
            )
        if not inst.routable:
            return False
        inst.reported = True
        inst.free_blocks = free
        inst.total_blocks = total
        inst.queue_len = queue
        inst.queued_tokens = tokens
        inst.return_queue_len = queue if returns is None else returns
        inst.return_queued_tokens = tokens if return_tokens is None else return_tokens
        inst.working_set_blocks = working
        inst.cached_fraction = cached
        return True

    def pinned(
        self, instance_id: Any, program_id: Any, deadline_s: Any, blocks: Any, now: Any = None
    ) -> bool:
        """The instance pinned the program's context (``blocks``) until ``deadline_s``: it is
        the program's home now.  False: refused, nothing changed (the instance is drained;
        the pin expired by ``now``, default the router's clock; the program is homed at
        another instance; or it is unknown and the table is full: see the module doc)."""
        iid = check_id("instance_id", instance_id)
        pid = check_id("program_id", program_id)
        inst = self._instance(iid)
        deadline = finite("deadline_s", deadline_s)
        n = int_in("blocks", blocks, 0, MAX_BLOCKS)
        t = self._now if now is None else finite("now", now)
        if not inst.routable or deadline <= t:
            return False
        i = self._index[inst.id]
        prog = self._programs.get(pid)
        if prog is None and len(self._programs) >= self._max_programs:
            return False  # a claim never forgets a program
        if prog is not None and prog.home != i:
            return False  # homed elsewhere: the router's own record wins
        prog = self._touch(pid, i)
        # its footprint there: at least the pinned context
        prog.blocks = max(prog.blocks, n)
        prog.pin_deadline_s = deadline
        prog.pin_blocks = n
        return True

    def drain(self, instance_id: Any) -> list[str]:
        """The instance is dead or draining: no call goes there any more.  Returns the
        programs it released (homed there; least recently routed first)."""
        inst = self._instance(instance_id)
        i = self._index[inst.id]
        inst.routable = False
        inst.reported = False
        released = [pid for pid, prog in self._programs.items() if prog.home == i]
        for pid in released:
            self._forget(pid)
        return released

    def evicted(self, instance_id: Any, program_id: Any, held_blocks: Any = 0) -> bool:
        """The instance evicted the program's context but ``held_blocks`` of it: if it is
        the program's home and holds at most half of its last call's blocks, the program is
        forgotten (it routes as new).  False: nothing changed (an unknown program, another
        home, more than half held, or a drained instance)."""
        iid = check_id("instance_id", instance_id)
        pid = check_id("program_id", program_id)
        inst = self._instance(iid)
        held = int_in("held_blocks", held_blocks, 0, MAX_BLOCKS)
        prog = self._programs.get(pid)
        if prog is None or not inst.routable or prog.home != self._index[iid]:
            return False
        if 2 * held > prog.blocks:
            return False  # most of it is still there
        self._forget(pid)
        return True

    def end_program(self, program_id: Any) -> bool:
        """The program is done: forgotten.  False: it was not known."""
        pid = check_id("program_id", program_id)
        if pid not in self._programs:
            return False
        self._forget(pid)
        return True

    # -- the decision ---------------------------------------------------------------------
    def route(self, program_id: Any, now: Any, blocks_needed: Any, prefix_tokens: Any) -> str:
        """The instance for the program's call needing ``blocks_needed`` KV blocks, whose
        context to rebuild elsewhere is ``prefix_tokens`` long (see the module doc)."""
        pid = check_id("program_id", program_id)
        t = finite("now", now)
        if t < self._now:
            raise ValueError(f"now must be >= the last route's now ({self._now!r}), got {t!r}")
        need_all = int_in("blocks_needed", blocks_needed, 0, MAX_BLOCKS)
        prefix = int_in("prefix_tokens", prefix_tokens, 0, MAX_BLOCKS)
        policy = self.policy  # (the property: a subclass may price with another policy)
        wait_memory_s = policy.out_of_order_cost_s
        loss = policy.miss_cost_s(prefix) + policy.eta * wait_memory_s
        prog = self._programs.get(pid)
        home = prog.home if prog is not None else -1
        live_pin = prog is not None and prog.pin_deadline_s is not None and t < prog.pin_deadline_s

        def need_grow(i: int) -> tuple[int, int]:
            """(blocks needed, working-set growth) at instance ``i``: for its cost and, once
            chosen, its commit."""
            if i != home:
                return need_all, need_all
            assert prog is not None
            need = max(0, need_all - prog.pin_blocks) if live_pin else need_all
            return need, max(0, need_all - prog.blocks)

        best: tuple[float, int, int, int] | None = None
        for i, inst in enumerate(self._instances):
            if not inst.reported:
                continue
            need, grow = need_grow(i)
            if i == home:  # a return here: behind the return queue only
                ahead, ahead_tokens = inst.return_queue_len, inst.return_queued_tokens
            else:  # a new program here: behind the whole queue
                ahead, ahead_tokens = inst.queue_len, inst.queued_tokens
            queue_s = ahead * policy.miss_cost_s(ahead_tokens // ahead) if ahead else 0.0
            # (load control never holds back a program it admitted: at its home only memory)
            fits = need <= inst.free_blocks and (
                i == home or inst.working_set_blocks + grow <= inst.total_blocks
            )
            cost = queue_s if fits else queue_s + wait_memory_s
            if home >= 0:
                if i != home:
                    cost += loss
                elif not live_pin:
                    cost += (1.0 - inst.cached_fraction) * loss
            if cost != cost:  # NaN (0 · inf): never the best by scan order
                cost = float("inf")
            room = inst.total_blocks - inst.working_set_blocks - grow
            key = (cost, 0 if i == home else 1, -room, i)
            if best is None or key < best:
                best = key
        if best is None:
            raise ValueError(
                "routable instances must be >= 1 (registered, reported, not drained), got 0"
            )
        self._now = t
        chosen = best[3]
        inst = self._instances[chosen]
        kept = chosen == home and live_pin
        need, grow = need_grow(chosen)
        inst.queue_len += 1
        if not kept:
            inst.queued_tokens = min(MAX_BLOCKS, inst.queued_tokens + prefix)
        if chosen == home:
            inst.return_queue_len += 1
            if not kept:
                inst.return_queued_tokens = min(MAX_BLOCKS, inst.return_queued_tokens + prefix)
        inst.free_blocks = max(0, inst.free_blocks - need)
        inst.working_set_blocks = min(MAX_BLOCKS, inst.working_set_blocks + grow)
        prog = self._touch(pid, chosen)
        prog.home = chosen
        prog.blocks = need_all
        prog.pin_deadline_s = None
        prog.pin_blocks = 0
        return inst.id

    # -- views ----------------------------------------------------------------------------
    @property
    def policy(self) -> TTLPolicy:
        """The ``TTLPolicy`` it prices pins and rebuilt contexts with."""
        return self._policy

    def home(self, program_id: Any) -> str | None:
        """The instance that served the program's last call (None: unknown program)."""
        prog = self._programs.get(check_id("program_id", program_id))
        return None if prog is None else self._instances[prog.home].id

    def routable(self, instance_id: Any) -> bool:
        """Is the instance routed to: registered, reported since, not drained."""
        return self._instance(instance_id).reported

    @property
    def instance_ids(self) -> list[str]:
        """Registered instances, drained ones included, in registration order."""
        return [inst.id for inst in self._instances]

    @property
    def program_count(self) -> int:
        """Programs tracked."""
        return len(self._programs)

    @property
    def max_instances(self) -> int:
        """The most instances registered at once."""
        return self._max_instances

    @property
    def max_programs(self) -> int:
        """The most programs tracked (shared fairly among tenants: the module doc)."""
        return self._max_programs

    # -- internals ------------------------------------------------------------------------
    def _instance(self, instance_id: Any) -> _Instance:
        iid = check_id("instance_id", instance_id)
        i = self._index.get(iid)
        if i is None:
            raise KeyError(f"unknown instance_id: {iid!r}")
        return self._instances[i]

    def _touch(self, pid: str, home: int) -> _Program:
        """The program's entry, most recent now (made, forgetting one when the table is full:
        the module doc's "Bounded state")."""
        prog = self._programs.get(pid)
        if prog is not None:
            self._programs.move_to_end(pid)
            self._order.touch(pid)
            return prog
        if len(self._programs) >= self._max_programs:
            self._forget(self._order.victim(tenant_of(pid)))
        prog = self._programs[pid] = _Program(home)
        self._order.touch(pid)
        return prog

    def _forget(self, pid: str) -> None:
        del self._programs[pid]
        self._order.discard(pid)
