"""The contracts between the controller (rank 0) and the generator mesh: PPEnvelopeV1 (work to
do) and PPResultV1 (work done), and how they travel as tensors.

Framing. A message is one fixed-size int64 *header* followed by its payload tensors, each sent
with ``send_tensor`` (which describes its own shape and dtype). The header says what follows::

    [MAGIC, version, type, kind, request_id, epoch, seq, chunk_index, num_steps, seed,
     n_fields, field_id_0, ..., field_id_7, (unused slots, written 0)]

Each payload tensor is a named *field* (``FIELD_IDS``); a field id the receiver does not know
is received (to stay in step with the sender) and ignored: that is forward compatibility — a
V1 reader keeps working when a later V1 writer adds an optional field. A different *version* is
a hard error naming both versions: the meaning of the header itself may have changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ppdit.runtime.comm.wire import PendingSend, Wire, isend_tensor, recv_tensor

MAGIC = 0x50504556  # "PPEV"
VERSION = 1
HEADER_LEN = 32
MAX_FIELDS = 8
KINDS = ("generate", "hard_cut", "shutdown")
TYPES = ("envelope", "result")
# Payload fields by wire id. New optional fields get new ids; old readers skip them.
FIELD_IDS = {"conditioning": 1, "noise": 2, "context_frames_override": 3, "latent": 4,
             "timings": 5}
FIELD_NAMES = {v: k for k, v in FIELD_IDS.items()}


class ProtocolError(RuntimeError):
    """A message that breaks the contract (wrong magic, wrong version, bad field)."""


@dataclass(frozen=True)
class PPEnvelopeV1:
    """Work for the mesh: generate one chunk of one stream (or a hard cut, or shutdown)."""

    request_id: int
    epoch: int  # bumped by every hard cut; results of older epochs are dropped
    seq: int  # per (request, epoch), increasing: identifies a delivery for idempotency
    chunk_index: int  # position of the chunk in the video
    kind: str = "generate"
    num_steps: int = 4
    seed: int = 0  # noise comes from (seed, chunk_index) unless ``noise`` is given
    conditioning: torch.Tensor | None = None  # (1, L, text_dim) prompt embedding
    noise: torch.Tensor | None = None  # optional explicit initial noise
    context_frames_override: torch.Tensor | None = None  # optional clean latent frames
    extra: dict[int, torch.Tensor] = field(default_factory=dict, compare=False)  # unknown ids

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {KINDS}")
        if min(self.request_id, self.epoch, self.seq, self.chunk_index, self.num_steps) < 0:
            raise ValueError("request_id, epoch, seq, chunk_index and num_steps must be >= 0")

    @property
    def key(self) -> tuple[int, int, int]:
        """What makes a delivery unique: (request, epoch, seq)."""
        return self.request_id, self.epoch, self.seq


@dataclass(frozen=True)
class PPResultV1:
    """A generated chunk coming back, with the same ids as its envelope and its timings."""

    request_id: int
    epoch: int
    seq: int
    chunk_index: int
    latent: torch.Tensor | None = None  # (1, C, F_chunk, H, W)
    timings: torch.Tensor | None = None  # float64 seconds: (queue wait, generate)
    extra: dict[int, torch.Tensor] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[int, int, int]:
        """(request, epoch, seq) of the envelope this answers."""
        return self.request_id, self.epoch, self.seq


Message = PPEnvelopeV1 | PPResultV1


def encode(msg: Message, version: int = VERSION) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(header, payload tensors) for a message; payloads in the order the header lists them."""
    is_env = isinstance(msg, PPEnvelopeV1)
    fields = _fields(msg)
    if len(fields) > MAX_FIELDS:
        raise ProtocolError(f"{len(fields)} payload fields, the header has room for {MAX_FIELDS}")
    ids = [fid for fid, _ in fields]
    h = [MAGIC, version, TYPES.index("envelope" if is_env else "result"),
         KINDS.index(msg.kind) if is_env else 0, msg.request_id, msg.epoch, msg.seq,
         msg.chunk_index, msg.num_steps if is_env else 0, msg.seed if is_env else 0,
         len(ids), *ids, *([0] * (MAX_FIELDS - len(ids)))]
    header = torch.tensor(h + [0] * (HEADER_LEN - len(h)), dtype=torch.int64)
    return header, [t.contiguous() for _, t in fields]


def _fields(msg: Message) -> list[tuple[int, torch.Tensor]]:
    names = (("conditioning", "noise", "context_frames_override")
             if isinstance(msg, PPEnvelopeV1) else ("latent", "timings"))
    out = [(FIELD_IDS[n], getattr(msg, n)) for n in names if getattr(msg, n) is not None]
    return out + sorted(msg.extra.items())


def decode(header: torch.Tensor, payloads: list[torch.Tensor]) -> Message:
    """Rebuild a message; unknown field ids land in ``extra`` (ignored by ppdit)."""
    h = header.tolist()
    if h[0] != MAGIC:
        raise ProtocolError(f"not a ppdit message (magic {h[0]:#x}, expected {MAGIC:#x})")
    if h[1] != VERSION:
        raise ProtocolError(f"message version {h[1]} but this reader speaks version {VERSION}: "
                            "upgrade the older side (unknown versions are never guessed at)")
    n = h[10]
    ids = h[11:11 + n]
    if len(payloads) != n:
        raise ProtocolError(f"header lists {n} payload fields but {len(payloads)} arrived")
    known = {FIELD_NAMES[i]: t for i, t in zip(ids, payloads, strict=True) if i in FIELD_NAMES}
    extra = {i: t for i, t in zip(ids, payloads, strict=True) if i not in FIELD_NAMES}
    base = dict(request_id=h[4], epoch=h[5], seq=h[6], chunk_index=h[7], extra=extra)
    if TYPES[_code(h[2], TYPES, "type")] == "envelope":
        return PPEnvelopeV1(**base, kind=KINDS[_code(h[3], KINDS, "kind")], num_steps=h[8],
                            seed=h[9],
                            conditioning=known.get("conditioning"), noise=known.get("noise"),
                            context_frames_override=known.get("context_frames_override"))
    return PPResultV1(**base, latent=known.get("latent"), timings=known.get("timings"))


def _code(value: int, names: tuple[str, ...], what: str) -> int:
    """A header's code, checked: -1 would silently read the last name of a Python tuple."""
    if not 0 <= value < len(names):
        raise ProtocolError(f"header {what} code {value} is not one of 0..{len(names) - 1} "
                            f"({', '.join(names)}): a corrupt or foreign header")
    return value


def isend_message(msg: Message, dst: int, wire: Wire, *, group=None,
                  version: int = VERSION) -> PendingSend:
    """Post a message without waiting (the overlap phase). Tensors go on the wire's device
    first: NCCL only moves GPU tensors (a staged wire then copies them to the host for gloo)."""
    header, payloads = encode(msg, version)
    pending = isend_tensor(header.to(wire.device), dst, wire, group=group)
    for t in payloads:
        isend_tensor(t.to(wire.device), dst, wire, group=group, pending=pending)
    return pending


def recv_message(src: int, wire: Wire, *, group=None, timeout_s: float = 60.0) -> Message:
    """Receive one message from global rank ``src``: the header says how many payloads."""
    header = recv_tensor(src, wire, group=group, timeout_s=timeout_s).cpu()
    if header.shape != (HEADER_LEN,):
        raise ProtocolError(f"expected a {HEADER_LEN}-int header from rank {src}, got shape "
                            f"{tuple(header.shape)}")
    n = int(header[10]) if int(header[0]) == MAGIC else 0
    payloads = [recv_tensor(src, wire, group=group, timeout_s=timeout_s) for _ in range(n)]
    return decode(header, payloads)
