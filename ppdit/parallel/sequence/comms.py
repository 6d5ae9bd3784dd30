"""The two all-to-alls of Ulysses sequence parallelism, and what they move.

With P ranks each holding a slice of the S tokens (sizes ``split``, uneven allowed), attention
needs every token but only H_r of the heads (``heads``: ``head_split``, H/P when P divides H).
``seq_to_heads`` goes there, ``heads_to_seq`` comes back::

    (B, S_r, H, hd) on rank r --seq_to_heads--> (B, S, H_r, hd) --heads_to_seq--> (B, S_r, H, hd)

Each is one ``all_to_all_single``: a functional collective (it traces, and its wait is deferred
to first use, which lets V's all-to-all run while Q and K are computed), over a flat buffer when
the heads split unevenly (chunk j: S_r x B x H_j x hd elements; any degree runs, nothing
padded). Issued on the rank's ``wire``, which stages it on a host copy when ranks share a GPU
over gloo; the result is back on the device when waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed._functional_collectives as funcol

from ppdit.parallel.partition import even_sizes
from ppdit.parallel.sequence.topology import Hierarchy
from ppdit.runtime.comm.wire import PLAIN, Wire


@dataclass
class A2ACounter:
    """Counts all-to-alls and the bytes this rank sends to other ranks (its own chunk stays)."""

    calls: int = 0
    bytes_sent: int = 0

    def add(self, nbytes: int) -> None:
        """Record one all-to-all that sent ``nbytes`` off this rank."""
        self.calls += 1
        self.bytes_sent += nbytes


def head_split(heads: int, degree: int) -> tuple[int, ...]:
    """Whole heads per Ulysses rank, differing by at most one (earlier ranks take the extra).

    Why any degree: users meet Ulysses first as a refusal (Wan 1.3B's 12 heads: no 8-way). 12
    heads on 8 ranks attend with 2, 2, 2, 2, 1, 1, 1, 1 heads: the busiest rank sets the pace
    (as 6-way would), and every rank still holds 1/8 of the tokens. A rank past the head count
    attends with none and only trades its tokens. Nothing is padded, so no zero head is computed
    or sent (diffusers' "Ulysses anything" pads the last rank's heads instead)."""
    if degree < 1:
        raise ValueError(f"Ulysses degree {degree} must be >= 1")
    return tuple(even_sizes(heads, degree))


def seq_to_heads(x: torch.Tensor, split: Sequence[int], group, rank: int,
                 counter: A2ACounter | None = None, wire: Wire = PLAIN,
                 hier: Hierarchy | None = None) -> _LazyPermute:
    """(B, S_r, H, hd) local tokens, all heads -> (B, S, H_r, hd) all tokens, my heads, once
    ``wait()``-ed. ``hier``: the two-phase all-to-all over nodes (``topology``), waited for here."""
    b, s_r, h, hd = x.shape
    p = len(split)
    heads = head_split(h, p)
    if counter is not None:
        counter.add(s_r * b * (h - heads[rank]) * hd * x.element_size())
    if h % p:  # uneven heads: one flat buffer, chunk j = my tokens x rank j's heads
        out = wire.all_to_all(_flat_head_chunks(x, heads), [n * b * heads[rank] * hd
                                                            for n in split],
                              [s_r * b * n * hd for n in heads], group)
        return _LazyPermute(out, (1, 0, 2, 3), x.device, shape=(sum(split), b, heads[rank], hd))
    chunks = head_chunks(x, p)
    if hier is not None:  # rank i sends split[i] rows to every rank
        out = hier.all_to_all(wire.carry(chunks), [[n] * p for n in split])
        return _LazyPermute(out, (1, 0, 2, 3), x.device, ready=True)
    out = wire.all_to_all(chunks, split, [s_r] * p, group)
    # (S, B, H/P, hd) -> (B, S, H/P, hd) once waited
    return _LazyPermute(out, (1, 0, 2, 3), x.device)


def _flat_head_chunks(x: torch.Tensor, heads: Sequence[int]) -> torch.Tensor:
    """(B, S_r, H, hd) -> flat: rank j's heads of my tokens as (S_r, B, H_j, hd), j = 0..P-1."""
    starts = [sum(heads[:j]) for j in range(len(heads))]
    return torch.cat([x[:, :, a:a + n].permute(1, 0, 2, 3).reshape(-1)
                      for a, n in zip(starts, heads, strict=True)])


def head_chunks(x: torch.Tensor, p: int) -> torch.Tensor:
    """(B, S_r, H, hd) -> (P * S_r, B, H/P, hd): chunk j of dim 0 = my tokens, rank j's heads
    (what an all-to-all over dim 0 sends rank j)."""
    b, s_r, h, hd = x.shape
    return x.view(b, s_r, p, h // p, hd).permute(2, 1, 0, 3, 4).reshape(p * s_r, b, h // p, hd)


def heads_to_seq(y: torch.Tensor, split: Sequence[int], group, rank: int,
                 counter: A2ACounter | None = None, wire: Wire = PLAIN,
                 hier: Hierarchy | None = None, heads: Sequence[int] | None = None
                 ) -> torch.Tensor:
    """(B, S, H_r, hd) all tokens, my heads -> (B, S_r, H, hd) my tokens, all heads
    (``heads``: every rank's H_r when they differ; None: H_r each)."""
    b, s, hp, hd = y.shape
    p, s_r = len(split), split[rank]
    rows = y.permute(1, 0, 2, 3).contiguous()  # (S, B, H_r, hd): chunk j = rank j's tokens
    if counter is not None:
        counter.add((s - s_r) * b * hp * hd * y.element_size())
    if heads is not None and len(set(heads)) > 1:
        out = funcol.wait_tensor(wire.all_to_all(
            rows.reshape(-1), [s_r * b * n * hd for n in heads], [n * b * hp * hd for n in split],
            group)).to(y.device)
        parts = out.split([s_r * b * n * hd for n in heads])
        whole = torch.cat([t.view(s_r, b, n, hd) for t, n in zip(parts, heads, strict=True)], 2)
        return whole.permute(1, 0, 2, 3)
    if hier is not None:  # rank i sends split[j] rows to rank j
        out = hier.all_to_all(wire.carry(rows), [list(split)] * p)
    else:
        out = funcol.wait_tensor(wire.all_to_all(rows, [s_r] * p, split, group))
    out = out.to(y.device)
    # (P * S_r, B, H/P, hd): chunk j = my tokens, heads of rank j
    return out.view(p, s_r, b, hp, hd).permute(2, 1, 0, 3, 4).reshape(b, s_r, p * hp, hd)


class _LazyPermute:
    """An all-to-all result not yet waited for, with the permute to apply once it is."""

    def __init__(self, tensor: torch.Tensor, dims: tuple[int, ...], device: torch.device,
                 ready: bool = False, shape: tuple[int, ...] | None = None):
        self.tensor, self.dims, self.device, self.ready = tensor, dims, device, ready
        self.shape = shape  # a flat buffer's (S, B, H_r, hd)

    def wait(self) -> torch.Tensor:
        """Block until the data is here; return it in (B, S, H_r, hd) layout, on the device."""
        here = self.tensor if self.ready else funcol.wait_tensor(self.tensor)
        here = here.view(self.shape) if self.shape is not None else here
        return here.to(self.device).permute(*self.dims)


def a2a_bytes_per_layer(*, batch: int, tokens: int, dim: int, degree: int,
                        bytes_per_element: int, heads: int | None = None) -> int:
    """Bytes one rank sends per self-attention layer with an even split: Q, K, V to heads and
    the output back — 4 all-to-alls, each keeping 1/P of its (B, S/P, D) slice at home.
    ``heads`` given: rank 0's exact bytes under ``even_split`` and ``head_split`` (the most
    tokens and heads: Q, K, V send its tokens' other heads, the output its heads' other tokens)."""
    if heads is None:
        per_rank = batch * (tokens // degree) * dim * bytes_per_element
        return 4 * per_rank * (degree - 1) // degree
    s0, h0, hd = even_split(tokens, degree)[0], head_split(heads, degree)[0], dim // heads
    return (3 * s0 * (heads - h0) + (tokens - s0) * h0) * batch * hd * bytes_per_element


def even_split(tokens: int, degree: int) -> tuple[int, ...]:
    """Tokens per rank, differing by at most one (earlier ranks take the extra): an uneven
    split, no padding — attention never sees a fake token."""
    return tuple(even_sizes(tokens, degree))
