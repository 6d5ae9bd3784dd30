"""The Wan 2.1 video DiT, built through ``diffusers.WanTransformer3DModel``, and its stage view.

Why a stage view: every parallel layout cuts the same forward pass in a different place::

    latent (B,C,F,H,W) ─ rope ─────────────────────────────┐
                       ─ patch_embedding → tokens h (B,S,D) ┼─ blocks[0..N) ─ epilogue ─ (B,C,F,H,W)
    timestep, text ──── condition_embedder → temb, timestep_proj, text' ┘

Only ``h`` depends on the latent *and* on earlier blocks; the conditioning is cheap for every
rank to compute, so a layer stage needs only ``h`` from its neighbour, a step stage only the
latent. Running the pieces below in order is bitwise equal to ``model(...)`` (``test_model.py``).

Weights: ``build_model(preset, seed=...)`` draws every parameter from one seeded generator, so
ranks agree without communicating; ``build_model(checkpoint=...)`` loads a local diffusers folder
(no downloads: e.g. a snapshot of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from diffusers import WanTransformer3DModel
from torch import nn

from ppdit.presets import ModelPreset, get_preset

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Wan 2.1 I2V: the CLIP image tokens travel in front of the prompt's, zero-padded to its width
# (``t2v.image``); the prompt is the last 512 rows, where diffusers' cross-attention cuts too
WAN_TEXT_LEN = 512


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"fp32"`` / ``"bf16"`` / ``"fp16"`` (what plans and the CLI carry) as a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not one of {list(DTYPES.values())}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def build_model(preset: str | ModelPreset = "tiny", *, seed: int = 0,
                checkpoint: str | Path | None = None, device: str | torch.device = "cpu",
                dtype: str | torch.dtype = torch.float32) -> WanTransformer3DModel:
    """Build the Wan transformer in eval mode, identical on every rank that passes the same args:
    loaded from ``checkpoint`` (a local diffusers folder with ``config.json`` and weights;
    ``preset`` ignored), else random from ``seed`` (``build_seeded``). ``device="meta"`` builds
    shapes only (parameter counts of the 14B model without 57 GB of RAM)."""
    dtype = torch_dtype(dtype)
    if checkpoint is not None:
        path = Path(checkpoint)
        if not (path / "config.json").exists():
            raise ValueError(f"checkpoint={str(path)!r} is not a diffusers model folder "
                             "(it has no config.json); no weights are downloaded at run time")
        model = WanTransformer3DModel.from_pretrained(path, torch_dtype=dtype)
        model = own_memory(model.to(device)).eval().requires_grad_(False)
        return mark_variant(model, path.parent)
    p = get_preset(preset)
    if p.kind == "dummy":
        return DummyDiT().to(device=device, dtype=dtype).eval().requires_grad_(False)
    model = build_seeded(WanTransformer3DModel, p.diffusers_config(), seed, device)
    model.expand_timesteps = p.expand_timesteps
    return cast_like_from_pretrained(model, dtype).eval().requires_grad_(False)


def mark_variant(model: nn.Module, folder: Path) -> nn.Module:
    """Tell a transformer what its pipeline folder says of it: Wan 2.2 TI2V's timestep per
    token (``model_index.json``'s ``expand_timesteps``) is the pipeline's, not in the model's
    config, yet every stage view needs it (``condition``)."""
    index = folder / "model_index.json"
    model.expand_timesteps = index.exists() and bool(
        json.loads(index.read_text()).get("expand_timesteps"))
    return model


def own_memory(module: nn.Module) -> nn.Module:
    """Copy every CPU parameter and buffer into memory of its own, in place. Why:
    ``from_pretrained`` hands back tensors that view the safetensors file, at whatever offset it
    put them (8-byte aligned, not 64); CPU kernels take another vector path on such data, so the
    loaded model differs from the saved one by rounding (7e-7 seen on the tiny model). A copy
    gets freshly allocated, aligned memory (and lets the file go)."""
    for t in [*module.parameters(), *module.buffers()]:
        if t.device.type == "cpu":
            t.data = t.data.clone()
    return module


def build_seeded(cls, config: dict, seed: int, device: str | torch.device) -> nn.Module:
    """``cls(**config)`` with every random initialisation drawn from one generator seeded with
    ``seed`` (inside ``fork_rng``: the caller's RNG is untouched), then moved to ``device``.
    Every rank that passes the same arguments gets the same weights, without communicating.
    ``device="meta"`` builds shapes only."""
    if str(device) == "meta":
        with torch.device("meta"):
            return cls(**config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = cls(**config)
    return module.to(device)


def cast_like_from_pretrained(model: WanTransformer3DModel, dtype: torch.dtype
                              ) -> WanTransformer3DModel:
    """Cast to ``dtype`` but keep the modules Wan needs in fp32 (rope, time embedder, norms...),
    as ``from_pretrained(torch_dtype=...)`` does; a plain ``model.to(bf16)`` would also cast
    those and drift from the reference numerics."""
    if dtype == torch.float32:
        return model
    keep = tuple(model._keep_in_fp32_modules)
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if not any(part in keep for part in name.split(".")):
            tensor.data = tensor.data.to(dtype)
    return model


class DummyDiT(nn.Module):
    """A stand-in with the model's call signature whose velocity costs microseconds. The earlier
    report verified its pipeline with such a model ("identity + small noise"), so its timings
    measured everything *but* the model; ppdit keeps it for the same purpose."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.01))  # a parameter, so .to(device) has a target

    def forward(self, latent: torch.Tensor, timestep: torch.Tensor, text: torch.Tensor
                ) -> torch.Tensor:
        """Velocity = 0.01 x latent: deterministic, shape-preserving, nearly free."""
        return self.scale * latent


class Experts(nn.Module):
    """Wan 2.2's two experts, as much of them as one rank holds: ``transformer`` (expert 0)
    denoises the high-noise steps, ``transformer_2`` (expert 1) the low-noise ones
    (``sampler.expert_steps``). One module, so moving it, counting its bytes and its
    parameters work as for one model; a step-split stage of one expert holds only that one."""

    def __init__(self, held: dict[int, nn.Module]):
        super().__init__()
        self.held = nn.ModuleDict({str(k): m for k, m in sorted(held.items())})

    def expert(self, k: int) -> nn.Module:
        """Expert ``k`` (``ValueError`` naming what this rank holds when it is not here)."""
        if str(k) not in self.held:
            raise ValueError(f"expert {k} is not on this rank, which holds experts "
                             f"{[int(i) for i in self.held]}: a step-split stage loads only "
                             "the experts of its own steps")
        return self.held[str(k)]

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.held.values())).dtype


def held(model: nn.Module) -> dict[int, nn.Module]:
    """The transformers a rank holds, by expert index: Wan 2.2's, or ``{0: model}`` (one
    transformer is expert 0 of every step). Every forward axis is applied to each of them."""
    if isinstance(model, Experts):
        return {int(k): m for k, m in model.held.items()}
    return {0: model}


def expert(model: nn.Module, k: int) -> nn.Module:
    """Expert ``k`` of what a rank holds (``ValueError`` naming what it holds when not)."""
    if isinstance(model, Experts):
        return model.expert(k)
    if k != 0:
        raise ValueError(f"a step of expert {k}, but the model is one transformer: a "
                         "boundary needs Wan 2.2's two (transformer_2)")
    return model


def like(model: nn.Module, experts: dict[int, nn.Module]) -> nn.Module:
    """``experts`` (``held(model)`` transformed) in ``model``'s form: ``Experts``, or the one."""
    return Experts(experts) if isinstance(model, Experts) else experts[0]


def num_params(module: nn.Module) -> int:
    """Parameter count (what each rank must hold in memory, times bytes per element)."""
    return sum(p.numel() for p in module.parameters())


# -- the stage view ------------------------------------------------------------------------------


@dataclass
class StageContext:
    """What every block needs besides the hidden states; cheap, recomputable on any rank."""

    text: torch.Tensor  # (B, L, D) text after the condition embedder's projection
    # (B, 6, D) per-block modulation (shift/scale/gate x2); (B, S, 6, D) with a timestep per
    # token (Wan 2.2 TI2V: a sequence rank's own tokens' rows only, ``condition(mine=...)``)
    timestep_proj: torch.Tensor
    temb: torch.Tensor  # (B, D) or (B, S, D) time embedding: the epilogue's shift/scale
    rotary_emb: tuple[torch.Tensor, torch.Tensor]  # (1, S, 1, head_dim) cos and sin
    grid: tuple[int, int, int] = field(default=(0, 0, 0))  # post-patch (F, H, W) for unpatchify


def condition(model: WanTransformer3DModel, latent_shape: tuple[int, ...], timestep: torch.Tensor,
              text: torch.Tensor, mine: slice = slice(None)) -> StageContext:
    """Everything a block needs except ``h``: rope tables, timestep projection, projected text.
    It needs only the latent's *shape*: a layer stage receives nothing but the hidden states.
    ``mine``: with a timestep per token, the tokens whose modulation to embed (a sequence
    rank's: it is sharded with its tokens, as diffusers' context-parallel plan splits
    ``timestep``; each token's rows are the same bits, embedded alone or with the rest)."""
    image = None
    if model.condition_embedder.image_embedder is not None:  # Wan 2.1 I2V: CLIP tokens first
        n = text.shape[1] - WAN_TEXT_LEN
        image, text = text[:, :n, :model.config.image_dim].contiguous(), text[:, n:]
    per_token = getattr(model, "expand_timesteps", False)
    if timestep.ndim != 1 and not (per_token and timestep.ndim == 2):
        raise ValueError(f"timestep must be (B,), or (B, F) a latent frame each for a model "
                         f"with a timestep per token; got shape {tuple(timestep.shape)}")
    p_t, p_h, p_w = model.config.patch_size
    _, _, f, h, w = latent_shape
    grid = (f // p_t, h // p_h, w // p_w)
    # rope reads only its input's shape; a meta tensor of that shape costs nothing.
    cos, sin = model.rope(torch.empty(latent_shape, device="meta"))  # (1, S, 1, head_dim) each
    seq = None
    if per_token:  # TI2V: WanPipeline(expand_timesteps=True)'s timestep per token, frame-major
        frames = timestep[:, :, None] if timestep.ndim == 2 else timestep[:, None, None]
        tokens = frames.expand(-1, grid[0], grid[1] * grid[2]).flatten(1)[:, mine]  # (B, S)
        timestep, seq = tokens.flatten(), tokens.shape[1]
    temb, timestep_proj, text, image = model.condition_embedder(timestep, text, image,
                                                                timestep_seq_len=seq)
    timestep_proj = timestep_proj.unflatten(-1, (6, -1))  # (B, 6, D), per token (B, S, 6, D)
    if image is not None:  # as WanTransformer3DModel.forward orders the context
        text = torch.cat([image, text], dim=1)
    return StageContext(text, timestep_proj, temb, (cos, sin), grid)


def embed_patches(model: WanTransformer3DModel, latent: torch.Tensor) -> torch.Tensor:
    """Patchify the latent into tokens: (B, C, F, H, W) -> (B, S, D), contiguous."""
    hidden = model.patch_embedding(latent)  # (B, D, F', H', W')
    return hidden.flatten(2).transpose(1, 2).contiguous()  # (B, S, D)


def prologue(model: WanTransformer3DModel, latent: torch.Tensor, timestep: torch.Tensor,
             text: torch.Tensor, mine: slice = slice(None)) -> tuple[torch.Tensor, StageContext]:
    """Everything before the first block: tokens ``h`` (B, S, D) and the shared context
    (``mine``: see ``condition``)."""
    ctx = condition(model, tuple(latent.shape), timestep, text, mine)
    return embed_patches(model, latent), ctx


def run_blocks(model: WanTransformer3DModel, hidden: torch.Tensor, ctx: StageContext,
               blocks: range | None = None) -> torch.Tensor:
    """Run ``model.blocks[i]`` for i in ``blocks`` (all of them by default) on (B, S, D) tokens."""
    for i in blocks if blocks is not None else range(len(model.blocks)):
        hidden = model.blocks[i](hidden, ctx.text, ctx.timestep_proj, ctx.rotary_emb)
    return hidden


def project_out(model: WanTransformer3DModel, hidden: torch.Tensor, ctx: StageContext
                ) -> torch.Tensor:
    """The per-token part of the epilogue: output norm modulated by ``scale_shift_table +
    temb``, then ``proj_out``. (B, S, D) -> (B, S, C * p_t * p_h * p_w); works on any subset
    of tokens (sequence parallelism runs it on each rank's slice)."""
    if ctx.temb.ndim == 3:  # a timestep per token: (B, S, D)
        shift, scale = (model.scale_shift_table.unsqueeze(0) + ctx.temb.unsqueeze(2)).chunk(2, 2)
        shift, scale = shift.squeeze(2), scale.squeeze(2)
    else:
        shift, scale = (model.scale_shift_table + ctx.temb.unsqueeze(1)).chunk(2, dim=1)
    hidden = (model.norm_out(hidden.float()) * (1 + scale) + shift).type_as(hidden)
    return model.proj_out(hidden)


def unpatchify(model: WanTransformer3DModel, tokens: torch.Tensor, grid: tuple[int, int, int]
               ) -> torch.Tensor:
    """(B, S, C * p_t * p_h * p_w) tokens of the whole latent -> (B, C, F, H, W)."""
    f, h, w = grid
    p_t, p_h, p_w = model.config.patch_size
    tokens = tokens.reshape(tokens.shape[0], f, h, w, p_t, p_h, p_w, -1)
    tokens = tokens.permute(0, 7, 1, 4, 2, 5, 3, 6)  # (B, C, F, p_t, H, p_h, W, p_w)
    return tokens.flatten(6, 7).flatten(4, 5).flatten(2, 3)


def epilogue(model: WanTransformer3DModel, hidden: torch.Tensor, ctx: StageContext) -> torch.Tensor:
    """``project_out``, then ``unpatchify``: (B, S, D) -> (B, C, F, H, W), the velocity
    prediction of flow matching."""
    return unpatchify(model, project_out(model, hidden, ctx), ctx.grid)


def forward_by_stages(model: WanTransformer3DModel, latent: torch.Tensor, timestep: torch.Tensor,
                      text: torch.Tensor, cache=None) -> torch.Tensor:
    """prologue -> all blocks -> epilogue: the stage view run end to end (== ``model(...)``);
    ``cache`` (a ``cache.BlockCache``) may skip the blocks after the first."""
    hidden, ctx = prologue(model, latent, timestep, text)
    run = run_blocks if cache is None else cache.run
    return epilogue(model, run(model, hidden, ctx), ctx)


def describe(preset: str | ModelPreset) -> str:
    """A one-line summary: layers, width, parameters (counted on the meta device), tokens."""
    p = get_preset(preset)
    if p.kind == "dummy":
        return f"{p.name}: latent {p.latent_shape}; {p.notes}"
    n = num_params(build_model(p, device="meta"))
    return (f"{p.name}: {p.num_layers} blocks, D={p.dim} ({p.num_heads}x{p.head_dim}), "
            f"ffn {p.ffn_dim}, {n / 1e6:,.1f} M params, {p.num_tokens():,} tokens/sample "
            f"at latent {p.latent_shape}; {p.notes}")
