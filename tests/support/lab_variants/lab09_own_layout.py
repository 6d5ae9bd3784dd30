"""Lab 09 gone wrong: the header packed in an order of its own, fields one after another.

Its own ``unpack`` reads it back perfectly, so every round trip passes; a peer built from
the layout table (ppdit's ``decode`` among them) reads other numbers in every slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppdit.runtime.comm.wire import DTYPES, MAX_NDIM
from ppdit.serve.protocol import HEADER_LEN, KINDS, MAGIC, VERSION

V1 = VERSION  # ppdit's envelope version: the header ppdit.serve.protocol.decode reads
V2 = VERSION + 1  # V1 plus the weights generation, in a slot that V1 reserved
DEFAULT_GENERATION = 0  # a V1 sender cannot swap weights: its chunks come from the first ones

# The layout, one int64 per slot, HEADER_LEN (32) slots in all. Slots 0..18 are ppdit's
# envelope header as ``protocol.encode`` writes it; this lab fills the ones named here and
# leaves the others (epoch, seq, num_steps, seed, the field ids) at 0.
SLOT_MAGIC = 0  # MAGIC
SLOT_VERSION = 1
SLOT_TYPE = 2  # TYPES.index("envelope")
SLOT_KIND = 3  # index into KINDS
SLOT_REQUEST = 4
SLOT_CHUNK = 7
SLOT_NUM_FIELDS = 10  # 0: the payload is announced in the slots below, not as a field id
# Slots 19..31, which ppdit's encode leaves at 0: the payload, described as ppdit.runtime.comm.wire
# describes a tensor (a dtype code, ndim, then the shape), and after it the V2 field.
SLOT_DTYPE = 19  # index into DTYPES
SLOT_NDIM = 20
SLOT_SHAPE = 21  # MAX_NDIM slots (21..28); those past ndim hold 0
SLOT_GENERATION = 29  # V2: the generation. V1: reserved (written as 0, never read)
# Slots 30 and 31 are reserved in both versions.


@dataclass(frozen=True)
class ChunkHeader:
    """A header as the wire carries it. Kind and dtype stay integer codes, so that a header
    from a newer or broken peer (an unknown kind, a dtype code past the table) can still be
    unpacked, and refused by ``check`` with a message, instead of failing at a lookup."""

    version: int
    kind_code: int  # KINDS[kind_code]: 0 generate, 1 hard_cut, 2 shutdown
    request_id: int
    chunk_index: int
    dtype_code: int  # DTYPES[dtype_code] is the payload's dtype
    shape: tuple[int, ...]  # the payload's shape
    generation: int = DEFAULT_GENERATION  # V2 only: which weights made this chunk

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))


@dataclass(frozen=True)
class Expected:
    """What a receiver knows before a header arrives: the versions it reads (V1 up to
    ``speaks``), the stream it serves, the chunk it needs next, and the buffer it allocated
    for the payload (the receive of a payload is posted into that buffer, so it must fit)."""

    speaks: int
    request_id: int
    next_chunk: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def header_for(request_id: int, chunk_index: int, payload: torch.Tensor, *,
               kind: str = "generate", version: int = V2,
               generation: int = DEFAULT_GENERATION) -> ChunkHeader:
    """The header a sender writes for ``payload``."""
    return ChunkHeader(version, KINDS.index(kind), request_id, chunk_index,
                       DTYPES.index(payload.dtype), tuple(payload.shape), generation)


def pack(header: ChunkHeader) -> torch.Tensor:
    """The header as a (HEADER_LEN,) int64 tensor laid out as the slot table says. Raise
    ValueError for what the layout cannot hold (a version this writer does not write, more
    than MAX_NDIM dims, a generation in a V1 header) instead of dropping it."""
    if header.version not in (V1, V2):
        raise ValueError(f"version: this writer writes versions {V1} and {V2}, not "
                         f"{header.version}")
    if len(header.shape) > MAX_NDIM:
        raise ValueError(f"shape: {header.shape} has {len(header.shape)} dims, the header has "
                         f"{MAX_NDIM} shape slots")
    if header.version == V1 and header.generation != DEFAULT_GENERATION:
        raise ValueError(f"generation: a version-{V1} header has no slot for generation "
                         f"{header.generation}; write version {V2}")
    generation = header.generation if header.version >= V2 else 0
    slots = [MAGIC, header.version, header.kind_code, header.request_id, header.chunk_index,
             header.dtype_code, generation, len(header.shape), *header.shape]
    return torch.tensor(slots + [0] * (HEADER_LEN - len(slots)), dtype=torch.int64)


def unpack(wire: torch.Tensor) -> ChunkHeader:
    """Read a header back. Raise ValueError only for what is not a chunk header at all (not
    HEADER_LEN int64, wrong magic, an ndim that the shape slots cannot hold); leave every
    other judgement to ``check``. A V1 header gets ``DEFAULT_GENERATION``."""
    if wire.dtype != torch.int64 or tuple(wire.shape) != (HEADER_LEN,):
        raise ValueError(f"not a chunk header: expected ({HEADER_LEN},) int64, got "
                         f"{tuple(wire.shape)} {wire.dtype}")
    slots = wire.tolist()
    if slots[SLOT_MAGIC] != MAGIC:
        raise ValueError(f"not a chunk header: magic {slots[SLOT_MAGIC]:#x}, expected "
                         f"{MAGIC:#x} (sender and receiver disagree on the order of messages)")
    ndim = slots[7]
    if not 0 <= ndim <= MAX_NDIM:
        raise ValueError(f"not a chunk header: ndim {ndim}, the shape slots hold 0 to "
                         f"{MAX_NDIM}")
    version = slots[SLOT_VERSION]
    # The version says what the slots mean: in a V1 header the generation slot is reserved,
    # so whatever it holds, the generation is the documented default.
    generation = slots[6] if version >= V2 else DEFAULT_GENERATION
    return ChunkHeader(version, slots[2], slots[3], slots[4], slots[5],
                       tuple(slots[8:8 + ndim]), generation)


def check(header: ChunkHeader, expected: Expected) -> None:
    """Return if the receiver may post the payload's receive into its buffer; otherwise
    raise ValueError whose message starts with the rule (version, kind, request, chunk,
    dtype, shape) and names both values: the header's and the receiver's."""
    # The version first: until it is known, no other slot means anything.
    if not V1 <= header.version <= expected.speaks:
        raise ValueError(f"version: the header has version {header.version}, this receiver "
                         f"reads versions {V1} to {expected.speaks}")
    if not 0 <= header.kind_code < len(KINDS):
        raise ValueError(f"kind: the header has kind code {header.kind_code}, this receiver "
                         f"knows {len(KINDS)} kinds: {KINDS}")
    if header.request_id != expected.request_id:
        raise ValueError(f"request: the header is for request {header.request_id}, this "
                         f"receiver serves request {expected.request_id}")
    if header.chunk_index != expected.next_chunk:
        what = "a repeat" if header.chunk_index < expected.next_chunk else "a gap"
        raise ValueError(f"chunk: the header carries chunk {header.chunk_index}, this receiver "
                         f"expects chunk {expected.next_chunk} next ({what})")
    known = 0 <= header.dtype_code < len(DTYPES)
    if not known or DTYPES[header.dtype_code] != expected.dtype:
        theirs = DTYPES[header.dtype_code] if known else f"unknown code {header.dtype_code}"
        raise ValueError(f"dtype: the header announces {theirs}, this receiver allocated "
                         f"{expected.dtype}")
    if header.shape != tuple(expected.shape):
        raise ValueError(f"shape: the header announces {header.shape}, this receiver "
                         f"allocated {tuple(expected.shape)}")

