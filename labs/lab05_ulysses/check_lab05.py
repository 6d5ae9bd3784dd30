"""Checker for lab 05: run it with ``pytest labs/lab05_ulysses``."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).parent
WORLD, B, S, H, HD = 3, 2, 11, 6, 8
SPLIT = (4, 4, 3)  # uneven, earlier ranks first: no padding token ever enters attention
# SDPA over H/P heads against SDPA over all H: the same per-head arithmetic, but the CPU
# kernel may block its loops differently for another head count, so allow a few ulps.
ATTN_TOL = {"rtol": 1e-5, "atol": 1e-6}


def _full(seed: int) -> torch.Tensor:
    """A (B, S, H, hd) tensor every rank can rebuild: all tokens, all heads."""
    return torch.randn(B, S, H, HD, generator=torch.Generator().manual_seed(seed))


def mine(t: torch.Tensor, rank: int) -> torch.Tensor:
    """Rank ``rank``'s tokens, all heads."""
    start = sum(SPLIT[:rank])
    return t[:, start:start + SPLIT[rank]].contiguous()


def my_heads(t: torch.Tensor, rank: int) -> torch.Tensor:
    """All tokens, rank ``rank``'s heads."""
    hp = H // WORLD
    return t[:, :, rank * hp:(rank + 1) * hp].contiguous()


def a2a_worker(ctx, impl_path: str) -> dict[str, torch.Tensor]:
    """On every rank: run the student's swaps and attention on this rank's slices."""
    import torch.distributed as dist

    from ppdit.teaching.labkit import load_module

    impl, r, group = load_module(impl_path), ctx.rank, dist.group.WORLD
    q, k, v, y = (_full(seed) for seed in range(4))
    return {
        "to_heads": impl.seq_to_heads(mine(q, r), SPLIT, group, r),
        "to_seq": impl.heads_to_seq(my_heads(y, r), SPLIT, group, r),
        "attention": impl.ulysses_attention(mine(q, r), mine(k, r), mine(v, r), SPLIT, group, r),
    }


def check(impl, pool=None) -> None:
    """3 real gloo ranks: swaps bit for bit, attention to ``ATTN_TOL`` against one device.
    ``pool``: live ranks to reuse (the test suite's); a student's run starts fresh ones."""
    from ppdit.runtime import RankError, launch

    try:
        outs = launch(a2a_worker, WORLD, args=(impl.__file__,), timeout_s=300,
                      threads_per_rank=1, echo=False, device="cpu",  # gloo ranks anywhere
                      pool=pool)
    except RankError as err:
        if "NotImplementedError" in str(err):
            raise NotImplementedError("lab 05 is not implemented yet") from err
        raise
    q, k, v, y = (_full(seed) for seed in range(4))
    attention = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
    attention = attention.transpose(1, 2)  # (B, S, H, hd) on one device
    for r, out in enumerate(outs):
        got, want = out["to_heads"], my_heads(q, r)
        assert got.shape == want.shape, f"rank {r}: seq_to_heads gave {tuple(got.shape)}, " \
            f"expected (B, S, H/P, hd) = {tuple(want.shape)}"
        assert torch.equal(got, want), (f"rank {r}: seq_to_heads moved the right amount of data "
                                        "but not the right numbers: check which piece goes to "
                                        "which rank, and the order of tokens and heads in it")
        got, want = out["to_seq"], mine(y, r)
        assert got.shape == want.shape, f"rank {r}: heads_to_seq gave {tuple(got.shape)}, " \
            f"expected (B, S_r, H, hd) = {tuple(want.shape)}"
        assert torch.equal(got, want), f"rank {r}: heads_to_seq does not invert the layout swap"
        torch.testing.assert_close(out["attention"], mine(attention, r), **ATTN_TOL,
                                   msg=lambda m, r=r: f"rank {r}: ulysses_attention: {m}")


def test_lab05():
    from ppdit.teaching.labkit import lab_implementation

    check(lab_implementation(HERE / "lab05_ulysses.py"))
