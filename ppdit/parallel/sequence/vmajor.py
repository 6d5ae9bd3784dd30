"""V-Major selective communication (CoCoDiff's third mechanism): send only the V that changed.

Late in sampling a token's value vector changes little from step to step. Each rank remembers,
per layer and conditioning, what every receiver holds of its V (the rows it last sent), and
sends only the rows whose relative change since *then* exceeds a threshold τ::

    send row t to rank j  iff  ||v_t - held_j(t)|| > τ ||held_j(t)||

The receiver patches its copy with the rows that came. Comparing against what was last *sent*
bounds every row's error by τ for good: small changes cannot pile up unseen. τ = 0 is exact; a
request's first step sends everything. On the wire, per V all-to-all: a one-byte-per-row mask
(an all-to-all of its own), then the chosen rows. The paper reports the speed-up (3.6x average)
but no quality ablation; ``ppdit.toy.vmajor`` measures both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed._functional_collectives as funcol


@dataclass
class VMajor:
    """What this rank remembers and counts (one per install; keys: (layer, conditioning))."""

    threshold: float
    sent: dict = field(default_factory=dict)  # key -> rows every receiver holds of my V
    held: dict = field(default_factory=dict)  # key -> every rank's V rows as I hold them
    branch: int = 0  # the conditioning of the forward in progress (set by the runner)
    rows_sent: int = 0  # rows of V sent to other ranks
    rows_total: int = 0  # ... that a plain all-to-all would have sent
    bytes_sent: int = 0  # values and masks
    bytes_full: int = 0  # a plain all-to-all's bytes

    def __post_init__(self) -> None:
        if not self.threshold >= 0:
            raise ValueError(f"V-Major threshold={self.threshold} must be >= 0 (a relative "
                             "change per token row)")

    def reset(self) -> None:
        """Forget every copy (a new request starts from its noise: nothing is held)."""
        self.sent.clear()
        self.held.clear()

    def zero_counts(self) -> None:
        self.rows_sent = self.rows_total = self.bytes_sent = self.bytes_full = 0


def changed_rows(chunks: torch.Tensor, held: torch.Tensor | None, threshold: float
                 ) -> torch.Tensor:
    """(rows,) bool: the rows of ``chunks`` (rows, ...) to send given what the receiver holds."""
    if held is None:
        return torch.ones(chunks.shape[0], dtype=torch.bool, device=chunks.device)
    diff = (chunks - held).flatten(1).float().norm(dim=1)
    ref = held.flatten(1).float().norm(dim=1)
    return diff > threshold * ref  # tau = 0: any change; a held row of zeros: any change


def v_all_to_all(chunks: torch.Tensor, split: Sequence[int], rank: int, group, vm: VMajor,
                 layer: int) -> torch.Tensor:
    """V's all-to-all for (P * S_r, B, H/P, hd) chunks (chunk j for rank j, as in
    ``comms.seq_to_heads``): the (S, B, H/P, hd) rows as this rank holds them."""
    p, s_r = len(split), chunks.shape[0] // len(split)
    key = (layer, vm.branch)
    mask = changed_rows(chunks, vm.sent.get(key), vm.threshold)
    mask[rank * s_r:(rank + 1) * s_r] = True  # my own chunk stays here: always exact
    if key in vm.sent:
        vm.sent[key][mask] = chunks[mask]
    else:
        vm.sent[key] = chunks.clone()
    got_mask = _a2a(mask.to(torch.uint8), list(split), [s_r] * p, group).bool()
    counts_out = [int(m.sum()) for m in mask.split(s_r)]
    counts_in = [int(m.sum()) for m in got_mask.split(list(split))]
    values = _a2a(chunks[mask].contiguous(), counts_in, counts_out, group)
    held = vm.held.get(key)
    if held is None:
        held = vm.held[key] = torch.zeros((sum(split), *chunks.shape[1:]), dtype=chunks.dtype,
                                          device=chunks.device)
    held[got_mask] = values
    _count(vm, counts_out, rank, s_r, chunks)
    return held.clone()


def _a2a(x: torch.Tensor, out_sizes: list[int], in_sizes: list[int], group) -> torch.Tensor:
    return funcol.wait_tensor(funcol.all_to_all_single(x, out_sizes, in_sizes, group))


def _count(vm: VMajor, counts_out: list[int], rank: int, s_r: int, chunks: torch.Tensor
           ) -> None:
    row_bytes = chunks[0].numel() * chunks.element_size()
    others = len(counts_out) - 1
    sent = sum(counts_out) - counts_out[rank]
    vm.rows_sent += sent
    vm.rows_total += others * s_r
    vm.bytes_sent += sent * row_bytes + others * s_r  # the values, and a byte per row of mask
    vm.bytes_full += others * s_r * row_bytes
