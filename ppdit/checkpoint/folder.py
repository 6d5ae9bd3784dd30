"""Load a local diffusers Wan 2.1 text-to-video pipeline folder, component by component (or a
Wan 2.2 one: two experts, ``transformer_2`` and a ``boundary_ratio`` beside the rest).

The folder is what ``WanPipeline.save_pretrained`` writes, or a snapshot of
``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``::

    model_index.json  transformer/  vae/  text_encoder/  tokenizer/  scheduler/

Not ``WanPipeline.from_pretrained``: ranks need different parts (the caller the VAE, the
encoding rank umT5, every rank the transformer, run through its stage view). Each part loads
with ``local_files_only=True``; the transformer and encoder in the chosen dtype, the VAE in fp32
(low precision shows as banding). ``check_folder`` reads every config and safetensors header
(never a tensor): a cut-off download is refused in one line naming the file.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ppdit.model import build_model, own_memory, torch_dtype
from ppdit.vae.presets import build_vae

COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
# text (and, with expand_timesteps, image: TI2V) to video; image to video (Wan 2.2 I2V)
PIPELINES = ("WanPipeline", "WanImageToVideoPipeline")
CONFIGS = ("transformer/config.json", "vae/config.json", "text_encoder/config.json",
           "tokenizer/tokenizer_config.json", "scheduler/scheduler_config.json")


class PipelineFolderError(ValueError):
    """The folder is not a loadable Wan 2.1 T2V pipeline; the message says which rule failed."""


def check_folder(path: str | Path) -> Path:
    """Validate the folder's layout before loading anything; returns it as a ``Path``."""
    path = Path(path)
    if not path.is_dir():
        raise PipelineFolderError(f"checkpoint={str(path)!r} is not a folder: pass a local "
                                  "diffusers Wan 2.1 pipeline folder (ppdit never downloads)")
    if not (path / "model_index.json").exists():
        raise PipelineFolderError(f"{path} has no model_index.json: a diffusers pipeline folder "
                                  "starts with one (WanPipeline.save_pretrained writes it)")
    index = read_json(path / "model_index.json")
    if index.get("_class_name") not in PIPELINES:
        raise PipelineFolderError(f"{path}/model_index.json names {index.get('_class_name')!r}; "
                                  f"ppdit generates with {' and '.join(PIPELINES)} folders")
    missing = [c for c in COMPONENTS
               if not (path / c).is_dir() or index.get(c) in (None, [None, None])]
    if missing:
        raise PipelineFolderError(f"{path} lacks component(s) {missing}: a Wan 2.1 T2V pipeline "
                                  f"needs all of {list(COMPONENTS)}")
    second = index.get("transformer_2") not in (None, [None, None])
    if second != (index.get("boundary_ratio") is not None):
        raise PipelineFolderError(f"{path}/model_index.json: a transformer_2 and a "
                                  "boundary_ratio come together (Wan 2.2's two experts switch "
                                  f"at it), got transformer_2={index.get('transformer_2')} and "
                                  f"boundary_ratio={index.get('boundary_ratio')}")
    for name in CONFIGS + (("transformer_2/config.json",) if second else ()):
        read_json(path / name)
    for component in ("transformer", "vae", "text_encoder") + (("transformer_2",) * second):
        weight_headers(path / component)
    return path


def conditioning(path: str | Path) -> str | None:
    """What an image does in this folder's pipeline: "first frame" (Wan 2.2 TI2V: the image's
    latent is the first frame, at t = 0), "concat" (Wan 2.2 I2V: its latent video and mask
    beside the noise, in channels), or None (text to video only)."""
    index = read_json(Path(path) / "model_index.json")
    if index.get("expand_timesteps"):
        return "first frame"
    return "concat" if index.get("_class_name") == "WanImageToVideoPipeline" else None


def read_json(file: Path) -> dict:
    """A config file's JSON object (``PipelineFolderError`` naming the file otherwise)."""
    try:
        out = json.loads(file.read_text()) if file.is_file() else "missing"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        out = f"not valid JSON ({e})"
    if not isinstance(out, dict):
        raise PipelineFolderError(f"{file}: {out if isinstance(out, str) else 'not an object'}")
    return out


def weight_headers(folder: Path) -> dict[Path, dict]:
    """Each safetensors file of a component (the shards its index names, else all there) ->
    its header (name -> dtype, shape, data_offsets), checked against the file's size: 8 bytes
    of header length, the header, the data up to the largest end offset, and nothing more."""
    index = next(folder.glob("*.safetensors.index.json"), None)
    files = sorted(folder.glob("*.safetensors")) if index is None else sorted(
        {folder / f for f in read_json(index).get("weight_map", {}).values()})
    out = {}
    for file in files or [folder / "*.safetensors"]:
        if not file.is_file():
            raise PipelineFolderError(f"{file}: missing")
        size, end = file.stat().st_size, None
        with file.open("rb") as f, contextlib.suppress(ValueError, LookupError, TypeError,
                                                       AttributeError):
            n = int.from_bytes(f.read(8), "little")
            out[file] = json.loads(f.read(n)) if 8 + n <= size else {}
            end = 8 + n + max((t["data_offsets"][1] for k, t in out[file].items()
                               if k != "__metadata__"), default=0)
        if end is None:
            raise PipelineFolderError(f"{file}: not safetensors (its header does not parse)")
        if size != end:  # a header cut short tells only its own length
            raise PipelineFolderError(f"{file}: {'truncated' if size < end else 'too long'} "
                                      f"({size:,} of {'at least ' * (8 + n > size)}{end:,} bytes)")
    return out


@dataclass
class WanFolder:
    """The loaded parts of a pipeline folder (any of them may be left unloaded: None)."""

    path: Path
    transformer: torch.nn.Module | None = None
    transformer_2: torch.nn.Module | None = None  # Wan 2.2's low-noise expert
    vae: torch.nn.Module | None = None
    text_encoder: torch.nn.Module | None = None
    tokenizer: object | None = None
    scheduler: object | None = None
    image_encoder: torch.nn.Module | None = None  # Wan 2.1 I2V's CLIP vision model
    image_processor: object | None = None

    @property
    def vae_factors(self) -> tuple[int, int]:
        """(temporal, spatial) scale factors of the VAE, read from its config."""
        cfg = read_json(self.path / "vae" / "config.json")
        return cfg.get("scale_factor_temporal", 4), cfg.get("scale_factor_spatial", 8)

    def transformer_config(self) -> dict:
        """The transformer's config.json (heads, patch size, ...) without loading weights."""
        return json.loads((self.path / "transformer" / "config.json").read_text())


def load_folder(path: str | Path, *, dtype: str | torch.dtype = "fp32",
                device: str | torch.device = "cpu",
                parts: tuple[str, ...] = COMPONENTS) -> WanFolder:
    """Load ``parts`` of the pipeline folder at ``path``; never downloads.

    Every CPU weight is copied into aligned memory (``ppdit.model.own_memory``) so that loaded
    weights compute bit for bit like the ones that were saved.
    """
    path = check_folder(path)
    with no_progress_bars():
        return _load(path, dtype, device, parts)


@contextlib.contextmanager
def no_progress_bars():
    """Silence transformers' and diffusers' progress bars ("Loading weights", "Writing model
    shards", "Loading pipeline components"): a rank's output reaches the caller's (a
    notebook's, which nbval compares), and a bar's rate differs on every run."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as hf_logging

    was_on = [(m, m.is_progress_bar_enabled()) for m in (hf_logging, diffusers_logging)]
    for m, _ in was_on:
        m.disable_progress_bar()
    try:
        yield
    finally:
        for m, on in was_on:
            if on:
                m.enable_progress_bar()


def _load(path: Path, dtype: str, device, parts: tuple[str, ...]) -> WanFolder:
    from transformers import AutoTokenizer, UMT5EncoderModel

    unknown = set(parts) - {*COMPONENTS, "transformer_2", "image_encoder", "image_processor"}
    if unknown:
        raise ValueError(f"parts {sorted(unknown)} are not components; choose from {COMPONENTS}, "
                         "transformer_2 or (Wan 2.1 I2V) image_encoder, image_processor")
    dt = torch_dtype(dtype)
    out = WanFolder(path)
    if "transformer" in parts:
        out.transformer = build_model(checkpoint=path / "transformer", dtype=dt, device=device)
    if "transformer_2" in parts:
        out.transformer_2 = build_model(checkpoint=path / "transformer_2", dtype=dt, device=device)
    if "vae" in parts:  # fp32 always, as Wan runs it
        out.vae = build_vae(checkpoint=path / "vae", device=device)
    if "text_encoder" in parts:
        enc = UMT5EncoderModel.from_pretrained(path / "text_encoder", dtype=dt,
                                               local_files_only=True)
        out.text_encoder = own_memory(enc.to(device)).eval().requires_grad_(False)
    if "tokenizer" in parts:
        out.tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", local_files_only=True)
    if "scheduler" in parts:
        out.scheduler = load_scheduler(path)
    if "image_encoder" in parts:  # Wan 2.1 I2V's CLIP, in fp32 as diffusers ships it
        from transformers import CLIPImageProcessor, CLIPVisionModel

        clip = CLIPVisionModel.from_pretrained(path / "image_encoder", local_files_only=True)
        out.image_encoder = own_memory(clip.to(device)).eval().requires_grad_(False)
        out.image_processor = CLIPImageProcessor.from_pretrained(path / "image_processor")
    return out


def load_scheduler(path: str | Path):
    """The folder's scheduler, of the class its config names (UniPC or flow-match Euler)."""
    import diffusers

    cfg = json.loads((Path(path) / "scheduler" / "scheduler_config.json").read_text())
    cls = getattr(diffusers, cfg.get("_class_name", ""), None)
    if cls is None:
        raise PipelineFolderError(f"{path}/scheduler names unknown class {cfg.get('_class_name')}")
    return cls.from_pretrained(Path(path) / "scheduler", local_files_only=True)
