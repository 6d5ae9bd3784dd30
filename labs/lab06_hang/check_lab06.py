"""Checker for lab 06: run it with ``pytest labs/lab06_hang``.

One launch of 2 real gloo ranks keeping NCCL's point-to-point rules, strictly: every send
waits for its receive (all NCCL promises; a small send finishing early is an optimisation).
On the ranks, ``relay_cases`` runs each part of your file for every (n, max_in_flight) in
``CASES``, and watches the wire:

* every send and receive must go through the rules (``ctx.wire``, which keeps them): a
  ``dist.isend`` behind their back would run on plain gloo, which forgives every hang;
* ``consume`` is wrapped to note how many frame receives rank 1 had posted when it started
  working on each frame (the receive of frame k + 1 must already be posted then);
* after each case both ranks compare how many messages each posted to the other: every message
  needs its receive (a leftover would be read by the next case's first receive).

Back here it checks, per case: no hang (a ``P2PDeadlock`` is shown with both queues), rank 1
consumed every frame in order with the right contents, rank 0 respected the window, rank 1
kept its receives posted ahead, and (part 2) every message went on one communicator.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

HERE = Path(__file__).parent
LIMIT = 0  # the eager limit the ranks keep (bytes): none, as in the test suite
FRAME_NBYTES = 80 * 64 * 4  # a frame's payload (the lab's SPEC): tells frames from acks
CASES = ((6, 1), (6, 2), (5, 3), (3, 5))  # (n, max_in_flight); the last never waits for an ack
# and one more case drawn at each run (``_cases``): a hidden case, in no list to fit
PARTS = (("part 1", "relay_worker"), ("part 2", "relay_one_communicator"))
NOT_DONE = "not implemented"
OUTSIDE = "posted outside NCCL's rules"
UNMATCHED = "a message nobody receives"
DEFAULT = "the default group"
_CASE = re.compile(r"\[lab 06: (.*?)\]")


def expected_sums(n: int) -> list[float]:
    """What rank 1 must return: the checksum of frame k = arange + 1000 k, for k < n."""
    base = torch.arange(FRAME_NBYTES // 4, dtype=torch.float32).view(80, 64)
    return [float((base + 1000 * k).double().sum()) for k in range(n)]


# -- on the ranks ------------------------------------------------------------------------------

@dataclass
class _Posted:
    """One operation the student's code posted: which, how big, to whom, on which group."""

    stamp: int  # the call that posted it (a batch's operations share one)
    kind: str
    nbytes: int
    peer: int
    group: str


class _Recorder:
    """What the student's code sees as ``ctx.rules``: NCCL's rules, every posting noted."""

    def __init__(self, rules):
        self.rules, self.posted, self.calls = rules, [], 0

    def isend(self, tensor: torch.Tensor, dst: int, group=None):
        return self.batch([("send", tensor, dst, group)])[0]

    def irecv(self, tensor: torch.Tensor, src: int, group=None):
        return self.batch([("recv", tensor, src, group)])[0]

    def batch(self, ops: list) -> list:
        works = self.rules.batch(ops)  # the world group and None share one queue there too
        self.calls += 1
        for kind, tensor, peer, group in ops:
            nbytes = tensor.numel() * tensor.element_size()
            self.posted.append(_Posted(self.calls, kind, nbytes, peer, _group_name(group)))
        return works

    def __getattr__(self, name: str):
        return getattr(self.rules, name)

    def frames(self, kind: str) -> int:
        """How many frame-sized operations of ``kind`` were posted so far."""
        return sum(p.kind == kind and p.nbytes >= FRAME_NBYTES for p in self.posted)

    def count(self, kind: str) -> int:
        return sum(p.kind == kind for p in self.posted)


def _group_name(group) -> str:
    """The communicator a P2P call used; ``None`` and the world group are the same one."""
    import torch.distributed as dist

    if group is None or group is dist.group.WORLD:
        return DEFAULT
    return f"group {group.group_name}"


@contextmanager
def _only_through_the_rules():
    """Make a P2P call that bypasses ``ctx.rules`` from the worker's thread an error (the
    rules' own threads still reach gloo)."""
    import torch.distributed as dist

    main = threading.main_thread()
    names = ("isend", "irecv", "send", "recv", "batch_isend_irecv")
    saved = {name: getattr(dist, name) for name in names}

    def guarded(name):
        def call(*args, **kwargs):
            if threading.current_thread() is main:
                raise RuntimeError(
                    f"{OUTSIDE}: dist.{name} was called around ctx.wire, so gloo ran it as it "
                    "is, and gloo forgives the hangs this lab is about. Pass ctx.wire to every "
                    "P2P helper and post single operations with ctx.wire.send / .recv; to fuse "
                    "operations, use ctx.wire.batch(...), batch_isend_irecv under the rules.")
            return saved[name](*args, **kwargs)
        return call

    for name in names:
        setattr(dist, name, guarded(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


def _run_case(ctx, impl, function: str, n: int, max_in_flight: int) -> dict:
    """One call of the student's ``function`` with a recorder for rules and a watched
    ``consume``."""
    worker = getattr(impl, function)
    home = worker.__globals__  # the module whose ``consume`` the worker calls
    recorder, ahead, consume = _Recorder(ctx.rules), [], home["consume"]

    def watched(frame):
        ahead.append(recorder.frames("recv"))
        return consume(frame)

    home["consume"] = watched
    try:
        with _only_through_the_rules():
            result = worker(replace(ctx, rules=recorder), n, max_in_flight)
    finally:
        home["consume"] = consume
    return {"result": result, "ahead": ahead, "sends": recorder.count("send"),
            "recvs": recorder.count("recv"),
            "groups": sorted({p.group for p in recorder.posted})}


def _every_message_received(ctx, mine: dict) -> None:
    """Both ranks compare their counts (a collective, outside the rules)."""
    import torch.distributed as dist

    counts = [None, None]
    dist.all_gather_object(counts, (mine["sends"], mine["recvs"]))
    for src in (0, 1):
        sent, received = counts[src][0], counts[1 - src][1]
        if sent != received:
            raise RuntimeError(
                f"{UNMATCHED}: rank {src} posted {sent} send(s) to rank {1 - src}, which posted "
                f"{received} receive(s) from it. Every message needs its receive: one left over "
                "would be read by the next run's first receive on that communicator.")


def relay_cases(ctx, impl_path: str, cases: tuple[tuple[int, int], ...]) -> dict:
    """On each rank: every part, every case; a part whose stub is untouched is marked."""
    from ppdit.teaching.labkit import load_module

    impl, out = load_module(impl_path), {}
    for part, function in PARTS:
        out[part] = []
        for n, max_in_flight in cases:
            try:
                mine = _run_case(ctx, impl, function, n, max_in_flight)
                _every_message_received(ctx, mine)
            except NotImplementedError:
                out[part] = NOT_DONE
                break
            except Exception as err:
                err.add_note(f"[lab 06: {part}, n={n}, max_in_flight={max_in_flight}]")
                raise
            out[part].append(mine)
    return out


# -- back here ---------------------------------------------------------------------------------

def _explain(text: str) -> str:
    """A failed launch, in the lab's terms: which case, and what went wrong."""
    found = _CASE.search(text)
    where = f" ({found.group(1)})" if found else ""
    if "P2PDeadlock" in text:
        start = text.find("P2PDeadlock:") + len("P2PDeadlock:")
        end = text.find("Fix:", start)
        return (f"your order hangs under NCCL's rules{where}:{text[start:end].rstrip()}\n"
                "Read the two queues head first: each rank's head waits for something queued "
                "behind the other rank's head. On GPUs both would spin until the timeout.")
    for marker in (OUTSIDE, UNMATCHED):
        if marker in text:
            start = text.find(marker)
            return f"{text[start:text.find(chr(10), start)]}{where}"
    if "TimeoutError" in text:
        start = text.rfind("TimeoutError")
        return (f"a wait never completed{where} (a receive nobody sends, or a send nobody "
                f"receives?):\n{text[start:]}")
    return f"a rank failed{where}:\n{text}"


def _run(impl, cases) -> dict:
    from ppdit.runtime import RankError, launch

    try:
        outs = launch(relay_cases, 2, args=(str(impl.__file__), cases), nccl_rules=LIMIT,
                      device="cpu", threads_per_rank=1, echo=False, timeout_s=120)
    except RankError as err:
        raise AssertionError(_explain(str(err))) from None
    return {part: (outs[0][part], outs[1][part]) for part, _ in PARTS}


def _check_frames(where: str, n: int, rank1: dict) -> None:
    got, want = rank1["result"], expected_sums(n)
    assert len(rank1["ahead"]) == n, (
        f"{where}: rank 1 called consume() {len(rank1['ahead'])} times for {n} frames: call it "
        "once per frame, as soon as the frame has arrived")
    assert list(got) == want, (
        f"{where}: rank 1 returned {got}, expected consume(frame k) for k = 0..{n - 1}: {want}. "
        "Did every frame arrive, in order, and was it consumed before its buffer was reused?")


def _check_ahead(where: str, n: int, ahead: list[int]) -> None:
    for k in range(n - 1):
        assert ahead[k] >= k + 2, (
            f"{where}: rank 1 started consume(frame {k}) with {ahead[k]} frame receive(s) "
            f"posted: the receive of frame {k + 1} must be posted ahead, before the work on "
            f"frame {k}, so that its transfer overlaps that work. Keep the receives posted "
            "ahead; make the rest of the order safe instead.")


def _check_window(where: str, n: int, max_in_flight: int, acks_before) -> None:
    assert len(acks_before) == n, (
        f"{where}: rank 0 must return one count per frame ({n}), got {acks_before}")
    for k, acked in enumerate(acks_before):
        assert 0 <= acked <= k and acked >= (acks_before[k - 1] if k else 0), (
            f"{where}: rank 0 says it had {acked} acknowledgement(s) before frame {k} "
            f"({acks_before}): a count never falls, and frame k can follow at most k of them")
        assert k - acked < max_in_flight, (
            f"{where}: rank 0 sent frame {k} while {k - acked} frame(s) were unacknowledged "
            f"(acks_before = {acks_before}): with it, {k - acked + 1} in flight, more than the "
            f"window of max_in_flight = {max_in_flight}. Frame k may go out only once frame "
            f"k - max_in_flight is acknowledged.")


def _check_one_communicator(where: str, ranks: tuple[dict, dict]) -> None:
    used = sorted(set(ranks[0]["groups"]) | set(ranks[1]["groups"]))
    assert len(used) == 1, (
        f"{where}: part 2 is about one communicator, but your messages used {used}. Part 1 may "
        "add a group; here, make the order itself safe.")


def _check_part(part: str, outs: tuple, cases) -> None:
    for k, ((n, max_in_flight), rank0, rank1) in enumerate(zip(cases, *outs, strict=True)):
        where = f"{part}, n={n}, max_in_flight={max_in_flight}" + (
            " (the hidden case)" if k >= len(CASES) else "")
        _check_frames(where, n, rank1)
        _check_ahead(where, n, rank1["ahead"])
        _check_window(where, n, max_in_flight, rank0["result"])
        if part == "part 2":
            _check_one_communicator(where, (rank0, rank1))


class _NoRanksHere:
    """A ``ctx`` for the pre-flight: any use of it ends the call."""

    def __getattr__(self, name: str):
        raise LookupError(f"pre-flight: ctx.{name}")


def _untouched(function) -> bool:
    """Whether ``function`` is still the stub: called here, without ranks, it raises
    ``NotImplementedError`` before anything else (an implementation fails at its first use of
    ``ctx`` or of the process group). Saves a launch (~5-15 s) on an unstarted lab."""
    try:
        function(_NoRanksHere(), 1, 1)
    except NotImplementedError:
        return True
    except Exception:
        return False
    return False


def check(impl) -> None:
    """Both parts on 2 real gloo ranks keeping NCCL's rules (always fresh ranks: the rules and
    their eager limit are set when a rank starts)."""
    if _untouched(impl.relay_worker):
        raise NotImplementedError("lab 06: part 1 (relay_worker) is not implemented yet")
    from ppdit.teaching.labkit import hidden_cases

    with hidden_cases() as rng:  # CASES, and one drawn now (n frames, a window)
        cases = (*CASES, (rng.randint(2, 8), rng.randint(1, 4)))
        outs = _run(impl, cases)
        for part, function in PARTS:
            if NOT_DONE in outs[part]:
                done = "" if part == "part 1" else "part 1 passes; "
                raise NotImplementedError(f"lab 06: {done}{part} ({function}) is not "
                                          "implemented yet")
            _check_part(part, outs[part], cases)


def test_lab06():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab06_hang.py"))
