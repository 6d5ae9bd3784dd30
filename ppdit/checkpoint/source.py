"""``ModelSource``: where every rank's weights come from, as one small value.

Two answers, and every layout, the serving system and the toy ask this one value::

    ModelSource("tiny", seed=0)                  a preset, random weights drawn from the seed
                                                 (the DiT's, and the VAE preset's)
    ModelSource(folder="models/toy_shapes")      a diffusers Wan 2.1 pipeline folder on disk
                                                 (or Wan 2.2's: two experts)

Ranks holding equal ``ModelSource``s build identical weights without talking, so sources are
compared, not models (plans run side by side must have equal ones: ``runtime.rounds``). The value
is frozen and tiny: it travels with every plan; the weights never do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch

from ppdit.model import Experts, build_model, torch_dtype
from ppdit.presets import ModelPreset, get_preset
from ppdit.sampler import Request, prompt_embeddings
from ppdit.vae.presets import build_vae, get_vae_preset


@dataclass(frozen=True)
class ModelSource:
    """A preset with seeded weights, or a pipeline folder (then ``preset`` is ignored)."""

    preset: str = "tiny"  # ppdit.presets.PRESETS
    seed: int = 0  # the preset's weights (a folder's are its files)
    dtype: str = "fp32"  # the DiT's weights and activations; latents stay fp32
    folder: str | None = None  # a local WanPipeline folder (model_index.json, transformer/, ...)
    vae_preset: str = "tiny"  # ppdit.vae.presets, seeded like the DiT (a folder has its own VAE)

    def __post_init__(self) -> None:
        torch_dtype(self.dtype)  # names the dtypes that exist
        if self.folder is None:
            get_preset(self.preset)  # names the presets that exist
            get_vae_preset(self.vae_preset)
        else:
            from ppdit.checkpoint.folder import check_folder

            check_folder(self.folder)

    @property
    def name(self) -> str:
        """How a lesson names it: the preset, or the folder's last part."""
        return self.preset if self.folder is None else Path(self.folder).name

    @cached_property
    def spec(self) -> ModelPreset:
        """The transformer's sizes (no weights loaded); a folder's from its config.json."""
        if self.folder is None:
            return get_preset(self.preset)
        cfg = json.loads((Path(self.folder) / "transformer" / "config.json").read_text())
        heads, head_dim = cfg["num_attention_heads"], cfg["attention_head_dim"]
        base = ModelPreset(self.name, num_layers=cfg["num_layers"], num_heads=heads,
                           head_dim=head_dim, ffn_dim=cfg["ffn_dim"], text_dim=cfg["text_dim"],
                           text_len=self._text_len(), freq_dim=cfg["freq_dim"],
                           in_channels=cfg.get("out_channels") or cfg["in_channels"],
                           condition_channels=cfg["in_channels"] - (cfg.get("out_channels")
                                                                    or cfg["in_channels"]),
                           image_dim=cfg.get("image_dim"),
                           rope_max_seq_len=cfg.get("rope_max_seq_len", 1024),
                           notes=f"the pipeline folder {self.folder}")
        return replace(base, latent_shape=(1, base.in_channels, *base.latent_shape[2:]))

    def _text_len(self) -> int:
        """Tokens per prompt: the folder's tokenizer says (Wan: 512; the toy: 16)."""
        cfg = Path(self.folder) / "tokenizer" / "tokenizer_config.json"
        length = json.loads(cfg.read_text()).get("model_max_length", 512) if cfg.exists() else 512
        return min(512, int(length))

    @cached_property
    def boundary_ratio(self) -> float | None:
        """A Wan 2.2 folder's expert switch (``boundary_ratio``); None: one transformer."""
        if self.folder is None:
            return None
        from ppdit.checkpoint.folder import read_json

        return read_json(Path(self.folder) / "model_index.json").get("boundary_ratio")

    def dit(self, device: str | torch.device = "cpu", experts: Sequence[int] | None = None):
        """The transformer, in eval mode, identical on every rank (``device="meta"``: shapes
        only); of a two-expert folder, ``model.Experts`` holding ``experts`` (None: both)."""
        if self.boundary_ratio is not None:
            return Experts({k: self._transformer(device, ("transformer", "transformer_2")[k])
                            for k in (experts if experts is not None else (0, 1))})
        return self._transformer(device)

    def _transformer(self, device, part: str = "transformer"):
        if self.folder is None or str(device) == "meta":
            if self.folder is not None:
                from ppdit.checkpoint.partial import meta_transformer

                return meta_transformer(self.folder, self.dtype, part)
            return build_model(self.preset, seed=self.seed, dtype=self.dtype, device=device)
        return build_model(checkpoint=Path(self.folder) / part, dtype=self.dtype, device=device)

    def vae(self, device: str | torch.device = "cpu"):
        """The VAE, in fp32 as Wan runs it: the folder's, or the seeded preset's."""
        if self.folder is not None:
            return build_vae(checkpoint=self.folder, device=device)
        return build_vae(self.vae_preset, seed=self.seed, device=device)

    @torch.no_grad()
    def prompts(self, requests: Sequence[Request], texts: Sequence[str] | None = None
                ) -> list[torch.Tensor]:
        """Each request's prompt embedding (1, L, text_dim): a folder encodes ``texts`` with its
        own tokenizer and umT5 (``WanPipeline``'s arithmetic, loaded once for all of them); a
        preset draws the seeded stand-ins (``ppdit.sampler.prompt_embeddings``)."""
        if self.folder is None:
            return [prompt_embeddings(r, self.spec) for r in requests]
        if texts is None or len(texts) != len(requests):
            raise ValueError(f"a pipeline folder encodes text prompts: give one per request "
                             f"({len(requests)}), got {texts!r}")
        from ppdit.checkpoint.folder import load_folder
        from ppdit.checkpoint.text import encode_text, text_length

        parts = load_folder(self.folder, parts=("tokenizer", "text_encoder"))
        length = text_length(parts.tokenizer)
        return [encode_text(parts.tokenizer, parts.text_encoder, t, length) for t in texts]

    def scheduler(self):
        """The folder's scheduler (None for a preset: ppdit's Euler)."""
        if self.folder is None:
            return None
        from ppdit.checkpoint.folder import load_scheduler

        return load_scheduler(self.folder)


class ModelPlan:
    """What every layout's plan says about its model, written once: a mixin for the frozen
    dataclass plans that hold a ``source`` and a ``latent_shape`` (and, for generation,
    ``requests``, ``solver`` and ``prompts``: ``check_workload``)."""

    @property
    def preset(self) -> ModelPreset:
        """The model's sizes (``source.spec``)."""
        return self.source.spec

    @property
    def dtype(self) -> str:
        """The model's dtype (weights and activations; latents stay fp32)."""
        return self.source.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The latent shape of every request (the source's default unless given)."""
        return tuple(self.latent_shape or self.preset.latent_shape)

    def check_workload(self) -> None:
        """The solver fits the source, and given prompts are one per request."""
        from ppdit.checkpoint.solver import check_solver

        check_solver(self.solver, self.source)
        two, layout = self.source.boundary_ratio is not None, getattr(self, "layout", None)
        if two != (self.sampling.boundary is not None):
            raise ValueError(f"sampling boundary={self.sampling.boundary} for a source with "
                             f"boundary_ratio={self.source.boundary_ratio}: a two-expert folder "
                             "samples with its boundary (checkpoint.solver.folder_sampling), "
                             "one transformer without")
        if two and (layout is None or layout.splits_blocks
                    or getattr(self, "v_major", None) is not None):  # 0.0 is a threshold
            raise ValueError(f"layout {layout}: two experts run on every layout but layer split "
                             "(its stages hold blocks, not steps) and V-Major (its copies are "
                             "per model)")
        if self.prompts is not None and len(self.prompts) != len(self.requests):
            raise ValueError(f"{len(self.prompts)} prompts for {len(self.requests)} requests: "
                             "give one per request (or None for seeded stand-ins)")
