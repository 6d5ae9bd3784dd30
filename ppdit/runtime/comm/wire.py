"""Point-to-point messages between ranks: self-describing tensors and fixed-size frames.

Two rules from experience, enforced here so no caller has to remember them: a tensor on the wire
is contiguous (gloo fails on the sender for a strided one while the receiver waits forever) and
described by a header; every blocking wait has a timeout, so a send that never comes is an
error, not a hang.

``send_tensor`` / ``recv_tensor`` carry any tensor as a 12-int64 header (magic, dtype, ndim,
shape) and the payload. A pipeline hands off the *same* shape thousands of times, so
``FrameSender`` / ``FrameReceiver`` agree on a ``FrameSpec`` once and then send each handoff as
**one** message, the payload plus int64 metadata slots (request id, step index, ...); with
``FrameSender.claim`` the producer writes straight into the outgoing frame: a handoff costs what
a bare ``dist.send`` of the latent costs.

Every operation goes through the rank's ``Wire`` (``ctx.wire``): plain gloo / NCCL, or a gloo rank
queueing per peer as NCCL would (``runtime.comm.nccl_rules``); a rule test
(``tests/unit/test_wire_rule.py``) allows bare ``dist.send``-style calls only in the baselines.
Staged (``runtime.device``), bytes travel through a (pinned) host buffer. Every entry point
checks that its tensors live on the rank's device. The layouts' collectives go through the wire
too (``Wire.all_reduce``, ``all_to_all``, ``all_gather``), so staging is the wire's business:
the algorithms never see it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import cached_property

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from ppdit.runtime.comm.nccl_rules import NcclRules, P2PDeadlock

MAGIC = 0x50504454  # "PPDT": catches a receiver that is reading someone else's message
MAX_NDIM = 8
HEADER_LEN = 4 + MAX_NDIM  # magic, dtype code, ndim, meta slots, shape
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool)
DEFAULT_TIMEOUT_S = 60.0
WORK_SLACK = 3.0  # a bound from the work allows 3x the predicted time (noise, contention)
# torch 2.13 renamed funcol's all_gather_tensor (the old name warns on every call); older
# releases only have the old name.
_ALL_GATHER = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
_ABORTED: list[str] = []  # why this process's communicators are unusable (see wait_for)


def work_bound(floor_s: float, steps: int, step_s: float) -> float:
    """A receive's bound from the work that must happen before its data exists. A fixed
    timeout is wrong at both ends: long enough for 14B at 480p (a stage's share of steps takes
    minutes before its first handoff) it hides a hang for minutes on a tiny model. ``step_s`` is
    measured in warm-up, or predicted; the bound counts from the receive's posting, as NCCL's
    timeout does, so the whole upstream share must fit."""
    if steps < 0 or step_s < 0:
        raise ValueError(f"work_bound needs steps >= 0 and step_s >= 0, got steps={steps}, "
                         f"step_s={step_s}")
    return floor_s + WORK_SLACK * steps * step_s


# Bounds that follow the work start here (loading 14B, compiling, first steps; gloo's default
# timeout; NCCL's 10 minutes is too short for 14B's first handoff at 720p)
START_S = 1800.0


@dataclass(frozen=True)
class WorkBound:
    """A rank's word to its caller: the job's work ends within ``seconds`` (``expect``)."""

    seconds: float


def communicator_aborted() -> str | None:
    """Why this rank's communicators are unusable (``abort``), or None. NCCL aborts the whole
    group when a P2P operation times out: the rank skips the closing barrier and reports."""
    return _ABORTED[0] if _ABORTED else None


def abort(why: str) -> str:
    _ABORTED.append(why)  # this rank's communicators are unusable, and why
    return why


@dataclass(frozen=True)
class Wire:
    """How this rank's point-to-point messages travel: its device, whether they are staged
    through host memory, and NCCL's rules when a gloo rank keeps them (None: plain gloo/NCCL)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    staged: bool = False
    rules: NcclRules | None = None

    def bare(self) -> Wire:
        """The same device and staging without NCCL's rules: for the baselines that time the
        transport itself (the wire rule's allow-list)."""
        return replace(self, rules=None)

    @property
    def buffers(self) -> torch.device:
        """Where a message's bytes live while the backend moves them: the host when staged."""
        return torch.device("cpu") if self.staged else torch.device(self.device)

    def carry(self, tensor: torch.Tensor) -> torch.Tensor:
        """What a collective moves: ``tensor``, or its host copy when staged (gloo moves host
        memory only); contiguous (gloo fails on a strided one). The one place the copy is made."""
        return (tensor.detach().to("cpu") if self.staged else tensor).contiguous()

    def all_to_all(self, tensor: torch.Tensor, out_sizes: Sequence[int],
                   in_sizes: Sequence[int], group) -> torch.Tensor:
        """``funcol.all_to_all_single`` along dim 0: waited for at its first use (so work can
        run while it travels); on the host when staged (``.to(device)`` after the wait)."""
        return funcol.all_to_all_single(self.carry(tensor), list(out_sizes), list(in_sizes),
                                        group)

    def all_gather(self, tensor: torch.Tensor, group) -> torch.Tensor:
        """Every rank's ``tensor`` stacked along dim 0 (rank order), back on its device."""
        return funcol.wait_tensor(_ALL_GATHER(self.carry(tensor), 0, group)).to(tensor.device)

    def all_reduce(self, tensor: torch.Tensor, group, style: str = "funcol") -> torch.Tensor:
        """The sum over ``group`` as ``style`` issues it (``tensor.layers.COLLECTIVES``); staged,
        eagerly on a host copy with c10d, back on the device."""
        if self.staged:
            host = self.carry(tensor)
            dist.all_reduce(host, group=group)
            return host.to(tensor.device)
        if style == "funcol":
            return funcol.all_reduce(tensor, "sum", group)
        work = dist.all_reduce(tensor, group=group, async_op=style == "c10d_async")
        if work is not None:  # a Work handle waited at once: it overlaps nothing, but shows
            work.wait()  # what holding one does to a compiled graph
        return tensor  # in place: a fresh intermediate nobody else holds

    def send(self, tensor: torch.Tensor, dst: int, group=None):
        """``dist.isend``, or the same under NCCL's rules."""
        if self.rules is not None:
            return self.rules.isend(tensor, dst, group)
        return dist.isend(tensor, dst, group=group)

    def recv(self, tensor: torch.Tensor, src: int, group=None):
        """``dist.irecv``, or the same under NCCL's rules."""
        if self.rules is not None:
            return self.rules.irecv(tensor, src, group)
        return dist.irecv(tensor, src, group=group)

    def batch(self, ops: Sequence[tuple[str, torch.Tensor, int]], group=None) -> list:
        """``batch_isend_irecv`` of ("send" | "recv", tensor, peer) triples: NCCL launches them
        as one group, so paired traffic fused this way cannot block itself; under the rules
        the same. Returns the works to wait for: one per operation on gloo and under the
        rules, one for the whole batch on NCCL (wait for every one). NCCL runs a batch on the
        group's collective communicator, not the pairs' (``nccl_rules``)."""
        if self.rules is not None:
            return self.rules.batch([(kind, t, peer, group) for kind, t, peer in ops])
        way = {"send": dist.isend, "recv": dist.irecv}
        return dist.batch_isend_irecv([dist.P2POp(way[kind], t, peer, group)
                                       for kind, t, peer in ops])


PLAIN = Wire()  # a CPU rank's: nothing staged, no rules (the default of the collectives' users)


def wait_for(work, timeout_s: float, what: str) -> None:
    """Wait for a P2P op; turn the backend's timeout into a ``TimeoutError`` that says what."""
    try:
        work.wait(timeout=timedelta(seconds=timeout_s))
    except P2PDeadlock:
        abort(f"{what}: deadlock")
        raise
    except TimeoutError:
        abort(f"{what}: timed out")
        raise
    except RuntimeError as e:
        if "imed out" in str(e) or "timeout" in str(e).lower():
            abort(f"{what}: timed out")
            raise TimeoutError(f"{what}: nothing completed within {timeout_s:g} s "
                               "(is the peer alive, and did it post the matching call?)") from e
        raise


def check_on(what: str, tensor: torch.Tensor, device: torch.device | str) -> None:
    """Raise ``ValueError`` unless ``tensor`` is on ``device`` (a CPU tensor handed to a CUDA
    rank's send, or the reverse, is the classic way a GPU port of CPU code fails)."""
    if tensor.device != torch.device(device):
        raise ValueError(f"{what}: the tensor is on {tensor.device}, but this rank computes on "
                         f"{torch.device(device)}: move it first")


def _header(shape: Sequence[int], dtype: torch.dtype, meta_slots: int, device) -> torch.Tensor:
    if len(shape) > MAX_NDIM:
        raise ValueError(f"tensor has {len(shape)} dims; P2P headers carry at most {MAX_NDIM}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype} cannot be sent; supported: {DTYPES}")
    h = [MAGIC, DTYPES.index(dtype), len(shape), meta_slots, *shape]
    h += [0] * (HEADER_LEN - len(h))
    return torch.tensor(h, dtype=torch.int64, device=device)


def _recv_header(wire: Wire, src: int, group, timeout_s: float, what: str
                 ) -> tuple[tuple[int, ...], torch.dtype, int]:
    """Receive and check a header from ``src``: (shape, dtype, meta slots)."""
    h = torch.empty(HEADER_LEN, dtype=torch.int64, device=wire.buffers)
    wait_for(wire.recv(h, src, group), timeout_s, f"receiving {what} from rank {src}")
    return _parse_header(h, src)


def _parse_header(h: torch.Tensor, src: int) -> tuple[tuple[int, ...], torch.dtype, int]:
    vals = h.tolist()
    if vals[0] != MAGIC:
        raise RuntimeError(f"message from rank {src} is not a ppdit header (magic {vals[0]:#x}); "
                           "sender and receiver disagree on the order of messages")
    ndim = vals[2]
    if not 0 <= vals[1] < len(DTYPES) or not 0 <= ndim <= MAX_NDIM:
        raise RuntimeError(f"message from rank {src}: dtype code {vals[1]} or ndim {ndim} out of "
                           f"range (0..{len(DTYPES) - 1}, 0..{MAX_NDIM}): a corrupt header")
    return tuple(vals[4:4 + ndim]), DTYPES[vals[1]], vals[3]


def send_tensor(tensor: torch.Tensor, dst: int, wire: Wire, *, group=None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Send any tensor (header, then contiguous payload) to global rank ``dst``; blocks."""
    isend_tensor(tensor, dst, wire, group=group).wait(timeout_s)


class PendingSend:
    """Sends in flight and the tensors they read (kept alive until ``wait``)."""

    def __init__(self, dst: int, wire: Wire):
        self.dst, self.wire = dst, wire
        self.works: list = []
        self.tensors: list[torch.Tensor] = []

    def add(self, tensor: torch.Tensor, group=None) -> PendingSend:
        self.tensors.append(tensor)
        self.works.append(self.wire.send(tensor, self.dst, group))
        return self

    def done(self) -> bool:
        """Whether every send completed (never blocks)."""
        return all(w.is_completed() for w in self.works)

    def wait(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Block until every send completed, or raise ``TimeoutError``."""
        for w in self.works:
            wait_for(w, timeout_s, f"sending to rank {self.dst}")


def isend_tensor(tensor: torch.Tensor, dst: int, wire: Wire, *, group=None,
                 pending: PendingSend | None = None) -> PendingSend:
    """Post the header and the contiguous payload without waiting; ``wait()`` on the result.
    The tensor must be on the wire's device; a staged wire sends a host copy."""
    check_on(f"sending a tensor to rank {dst}", tensor, wire.device)
    payload = (tensor.detach().to("cpu") if wire.staged else tensor).contiguous()
    pending = pending or PendingSend(dst, wire)
    pending.add(_header(payload.shape, payload.dtype, 0, payload.device), group)
    return pending.add(payload, group)


def recv_tensor(src: int, wire: Wire, *, group=None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> torch.Tensor:
    """Receive a tensor sent with ``send_tensor`` from global rank ``src``, on the wire's device."""
    shape, dtype, _ = _recv_header(wire, src, group, timeout_s, "a header")
    out = torch.empty(shape, dtype=dtype, device=wire.buffers)
    wait_for(wire.recv(out, src, group), timeout_s, f"receiving a tensor from rank {src}")
    return out.to(wire.device)


def broadcast_tensor(tensor: torch.Tensor | None, src: int, wire: Wire, *,
                     group=None) -> torch.Tensor:
    """Collective over ``group``: every rank returns global rank ``src``'s tensor on the wire's
    device (header, then contiguous payload, as ``send_tensor``); the other ranks pass
    ``None``. (A collective: NCCL's point-to-point rules do not apply to it.)"""
    if dist.get_rank() == src:
        payload = tensor.to(wire.buffers).contiguous()
        dist.broadcast(_header(payload.shape, payload.dtype, 0, wire.buffers), src=src, group=group)
        dist.broadcast(payload, src=src, group=group)
        return payload.to(wire.device)
    h = torch.empty(HEADER_LEN, dtype=torch.int64, device=wire.buffers)
    dist.broadcast(h, src=src, group=group)
    shape, dtype, _ = _parse_header(h, src)
    out = torch.empty(shape, dtype=dtype, device=wire.buffers)
    dist.broadcast(out, src=src, group=group)
    return out.to(wire.device)


@dataclass(frozen=True)
class FrameSpec:
    """One handoff frame's fixed layout, one contiguous uint8 buffer:
    ``[ payload bytes | pad to 8 | meta_slots x int64 ]``."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    meta_slots: int = 4

    @cached_property
    def raw_payload_nbytes(self) -> int:
        return torch.Size(self.shape).numel() * torch.empty((), dtype=self.dtype).element_size()

    @cached_property
    def payload_nbytes(self) -> int:
        """Payload bytes, padded to 8 so the int64 slots that follow are aligned."""
        return (self.raw_payload_nbytes + 7) // 8 * 8

    @property
    def nbytes(self) -> int:
        """Bytes on the wire per frame."""
        return self.payload_nbytes + 8 * self.meta_slots

    def new_frame(self, wire: Wire) -> Frame:
        """An empty frame buffer with its payload and metadata views made once (making them costs
        more Python time per handoff than the copy they would avoid). Staged: the buffer is on
        the host (pinned for a GPU rank), and ``compute`` is a tensor of the payload's shape on
        the wire's device to produce into."""
        device, staged = wire.device, wire.staged
        buf = torch.empty(self.nbytes, dtype=torch.uint8, device=wire.buffers,
                          pin_memory=staged and torch.device(device).type == "cuda")
        payload = buf[:self.raw_payload_nbytes].view(self.dtype).view(self.shape)
        meta = buf[self.payload_nbytes:].view(torch.int64)
        compute = torch.empty(self.shape, dtype=self.dtype, device=device) if staged else payload
        return Frame(buf, payload, meta, meta.numpy() if meta.device.type == "cpu" else None,
                     compute)


@dataclass
class Frame:
    """One reusable frame buffer and views into it."""

    buf: torch.Tensor  # (nbytes,) uint8: what goes on the wire
    payload: torch.Tensor  # view of shape ``spec.shape``
    meta: torch.Tensor  # (meta_slots,) int64 view
    meta_np: object  # numpy view of ``meta`` on CPU (cheap writes), else None
    compute: torch.Tensor  # where a producer writes: ``payload`` itself, or a device tensor

    def fill(self, spec: FrameSpec, tensor: torch.Tensor, meta: Sequence[int]) -> None:
        """Put ``tensor`` (copied unless it already is the payload) and ``meta`` in the frame."""
        if tuple(tensor.shape) != spec.shape or tensor.dtype != spec.dtype:
            raise ValueError(f"frame expects {spec.shape} {spec.dtype}, "
                             f"got {tuple(tensor.shape)} {tensor.dtype}")
        if len(meta) > spec.meta_slots:
            raise ValueError(f"{len(meta)} metadata values but the frame has {spec.meta_slots}")
        if tensor.data_ptr() != self.payload.data_ptr():
            self.payload.copy_(tensor)
        slots = [*meta, *([0] * (spec.meta_slots - len(meta)))]
        if self.meta_np is not None:
            self.meta_np[:] = slots
        else:
            self.meta.copy_(torch.tensor(slots, dtype=torch.int64))

    def read_meta(self) -> list[int]:
        return self.meta_np.tolist() if self.meta_np is not None else self.meta.tolist()

    def arrived(self, device: torch.device, copy: bool) -> torch.Tensor:
        """The payload on ``device``: a view of the buffer, or (``copy``, or a staged frame on
        another device) a tensor of its own."""
        if self.payload.device != device:
            return self.payload.to(device)
        return self.payload.clone() if copy else self.payload


class FrameSender:
    """Sends frames of one ``FrameSpec`` to one peer, one message each, without blocking. Up to
    ``max_in_flight`` sends stay outstanding (the next ``send`` waits for the oldest); buffers are
    recycled once their send completes.

    Zero-copy: a producer that writes into ``claim()``'s view of the next outgoing buffer
    (``torch.add(..., out=claimed)``) makes ``send`` skip the copy, on this CPU ~30% of a 256 KB
    latent's handoff. (Staged, ``claim`` returns a device tensor that ``send`` copies to the host
    buffer: one copy either way.)
    """

    def __init__(self, spec: FrameSpec, dst: int, wire: Wire, *, group=None,
                 max_in_flight: int = 2, announce: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight={max_in_flight} must be >= 1")
        self.spec, self.dst, self.wire, self.group = spec, dst, wire, group
        self.max_in_flight, self.timeout_s = max_in_flight, timeout_s
        # (work, Frame to recycle or None, tensor the transport is still reading)
        self._pending: deque = deque()
        self._free: list[Frame] = []
        self._claimed: Frame | None = None
        self._announced = not announce  # announce=False: the receiver knows the spec already

    def claim(self) -> torch.Tensor:
        """The payload view of the buffer the next ``send`` will use: write the outgoing tensor
        here to avoid a copy. Waits for a send slot if ``max_in_flight`` are outstanding."""
        if self._claimed is None:
            self._reap()
            while len(self._pending) >= self.max_in_flight:
                self._wait_oldest()
            self._claimed = self._free.pop() if self._free else self.spec.new_frame(self.wire)
        return self._claimed.compute

    def send(self, tensor: torch.Tensor, meta: Sequence[int]) -> None:
        """Queue one frame for ``dst``; returns once the send is posted."""
        check_on(f"sending a frame to rank {self.dst}", tensor, self.wire.device)
        if not self._announced:
            h = _header(self.spec.shape, self.spec.dtype, self.spec.meta_slots, self.wire.buffers)
            self._pending.append((self.wire.send(h, self.dst, self.group), None, h))
            self._announced = True
        self.claim()
        frame, self._claimed = self._claimed, None
        frame.fill(self.spec, tensor, meta)
        self._pending.append((self.wire.send(frame.buf, self.dst, self.group), frame, frame.buf))

    def _reap(self) -> None:
        """Recycle the buffers of sends that have completed, without waiting for any."""
        while self._pending and self._pending[0][0].is_completed():
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        work, frame, _ = self._pending.popleft()
        wait_for(work, self.timeout_s, f"sending a frame to rank {self.dst}")
        if frame is not None:
            self._free.append(frame)

    def flush(self) -> None:
        """Wait until every queued frame has been handed to the transport."""
        while self._pending:
            self._wait_oldest()


class FrameReceiver:
    """Receives frames of one ``FrameSpec`` from one peer; checks the spec on the first one.
    Frames land in a ring of reused buffers: ``recv``'s payload view stays valid until ``depth``
    more frames have arrived (``copy=True`` keeps it longer, for a stage holding several requests).

    With ``count`` (the frames to come in all), the next receive is posted as soon as one
    completes, so the transfer overlaps this rank's compute: a receive posted only when the data
    is needed waits for the sender's side to respond (~0.3 ms on this CPU, more when both cores
    are busy).
    """

    def __init__(self, spec: FrameSpec, src: int, wire: Wire, *, group=None, depth: int = 2,
                 count: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.spec, self.src, self.wire, self.group = spec, src, wire, group
        self.timeout_s, self.count = timeout_s, count
        self.ahead = 1 if count is not None else 0  # never post a receive that may not come
        self._ring = [spec.new_frame(wire) for _ in range(depth + self.ahead)]
        self._posted: deque = deque()  # (frame, work) in arrival order
        self._next_post = self._received = 0  # receives posted, frames handed out
        self._checked = False

    def recv(self, timeout_s: float | None = None, copy: bool = False
             ) -> tuple[torch.Tensor, list[int]]:
        """The next frame's payload on this rank's device (a ring-buffer view unless ``copy``
        or staged) and its metadata."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        if self.count is not None and self._received >= self.count:
            raise RuntimeError(f"all {self.count} frames from rank {self.src} were received")
        if not self._checked:
            self._check_header(timeout_s)
        self._post_until(self._received + 1)
        frame, work = self._posted.popleft()
        wait_for(work, timeout_s, f"receiving a frame from rank {self.src}")
        self._received += 1
        self._post_until(self._received + self.ahead)
        return frame.arrived(self.wire.device, copy), frame.read_meta()

    def _post_until(self, upto: int) -> None:
        if self.count is not None:
            upto = min(upto, self.count)
        while self._next_post < upto:
            frame = self._ring[self._next_post % len(self._ring)]
            self._posted.append((frame, self.wire.recv(frame.buf, self.src, self.group)))
            self._next_post += 1

    def _check_header(self, timeout_s: float) -> None:
        theirs = FrameSpec(*_recv_header(self.wire, self.src, self.group, timeout_s,
                                         "the frame header"))
        if theirs != self.spec:
            raise RuntimeError(f"rank {self.src} sends frames {theirs} but this rank expects "
                               f"{self.spec}: both sides must build the same FrameSpec")
        self._checked = True
