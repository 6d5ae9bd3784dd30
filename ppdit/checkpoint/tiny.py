"""A tiny random diffusers Wan 2.1 text-to-video pipeline folder, built offline in seconds.

Why: the real ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` snapshot is ~30 GB (umT5-XXL alone is 11 GB)
and needs a download; tests, notebooks and the CPU demo need a folder with *the same layout and
the same component classes* that costs nothing. ``build_tiny_pipeline(dir)`` writes one::

    dir/model_index.json
       text_encoder/   UMT5EncoderModel (transformers): 2 layers, d_model = the DiT's text_dim
       tokenizer/      a word-level ``tokenizers`` tokenizer as a PreTrainedTokenizerFast
       transformer/    WanTransformer3DModel: ppdit's ``tiny`` preset
       vae/            AutoencoderKLWan: ppdit's ``tiny`` VAE preset (4x time, 4x space)
       scheduler/      UniPCMultistepScheduler with flow sigmas, as Wan 2.1 ships it

about 2.5 MB. Every weight is drawn from one seed, so two builds are byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ppdit.model import build_model
from ppdit.presets import get_preset

# Words the tiny tokenizer knows; anything else maps to <unk> (fine for random weights).
TINY_VOCAB = (
    "a", "the", "cat", "dog", "fox", "runs", "jumps", "over", "on", "in", "of", "and", "with",
    "red", "blue", "green", "small", "big", "video", "river", "forest", "city", "night", "day",
    "sun", "rain", "snow", "wind", "fast", "slow", "white", "black", "blurry", "low", "quality",
    "static", "worst",
)
SPECIAL = ("<pad>", "</s>", "<unk>")  # umT5's special tokens: pad id 0, eos id 1, unk id 2

# What Wan 2.1's own scheduler_config.json holds (flow_shift 3.0 is its 480p setting).
WAN_UNIPC_CONFIG = dict(
    num_train_timesteps=1000, solver_order=2, prediction_type="flow_prediction",
    use_flow_sigmas=True, flow_shift=3.0, predict_x0=True, solver_type="bh2",
    lower_order_final=True, final_sigmas_type="zero", timestep_spacing="linspace",
)


def word_tokenizer(vocab: list[str] | tuple[str, ...]):
    """A ``PreTrainedTokenizerFast`` over a word-level vocabulary (whitespace split), umT5-style:
    ``<pad>`` = 0, ``</s>`` = 1 appended to every sequence, ``<unk>`` = 2 for unknown words.

    Built with the ``tokenizers`` library in memory: no file, no download, milliseconds.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = [*SPECIAL, *dict.fromkeys(w for w in vocab if w not in SPECIAL)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                       special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=512)


def tiny_text_encoder(d_model: int, vocab_size: int, seed: int = 0):
    """A 2-layer ``UMT5EncoderModel`` with random weights whose output width is ``d_model``."""
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(vocab_size=vocab_size, d_model=d_model, d_kv=8, d_ff=64, num_layers=2,
                        num_heads=4, relative_attention_num_buckets=8,
                        relative_attention_max_distance=32, dropout_rate=0.0,
                        feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1,
                        decoder_start_token_id=0, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return UMT5EncoderModel(config).eval()


def tiny_unipc_scheduler(flow_shift: float = 3.0):
    """``UniPCMultistepScheduler`` configured as Wan 2.1's pipeline folder configures it (Wan 2.2
    T2V A14B's: ``flow_shift`` 12)."""
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(**{**WAN_UNIPC_CONFIG, "flow_shift": flow_shift})


def tiny_scheduler(name: str = "unipc"):
    """``"unipc"``: Wan 2.1's UniPC; ``"flow_match"``: ``FlowMatchEulerDiscreteScheduler`` on
    the same flow shift (the other scheduler Wan pipelines are run with)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    if name == "unipc":
        return tiny_unipc_scheduler()
    if name == "flow_match":
        return FlowMatchEulerDiscreteScheduler(shift=WAN_UNIPC_CONFIG["flow_shift"])
    raise ValueError(f"scheduler={name!r} is not 'unipc' or 'flow_match'")


def build_tiny_pipeline(out: str | Path, *, seed: int = 0, preset: str = "tiny",
                        vae_preset: str | None = None, scheduler: str = "unipc",
                        stored: torch.dtype = torch.float32, boundary_ratio: float | None = None
                        ) -> Path:
    """Write a tiny random Wan 2.1 T2V pipeline folder to ``out`` and return its path.
    ``stored``: the dtype of the transformer's and text encoder's weights (the VAE's: fp32).
    ``boundary_ratio``: a Wan 2.2 folder instead, two experts (``transformer_2`` from
    ``seed + 1``) switching there, with A14B's UniPC (flow shift 12). A preset with a timestep
    per token (``tiny-ti2v``) makes a Wan 2.2 TI2V folder (``expand_timesteps``, its VAE); one
    with condition channels a ``WanImageToVideoPipeline`` folder (Wan 2.2 I2V; with an
    ``image_dim``, Wan 2.1 I2V's: a 2-layer CLIP vision model beside it)."""
    from ppdit.vae.presets import build_vae

    p = get_preset(preset)
    tokenizer = word_tokenizer(TINY_VOCAB)
    text_encoder = tiny_text_encoder(p.text_dim, len(tokenizer), seed)
    experts = [build_model(preset, seed=seed + k) for k in range(1 + (boundary_ratio is not None))]
    if stored != torch.float32:  # (diffusers warns at any .to(), fp32 included)
        text_encoder, experts = text_encoder.to(stored), [m.to(stored) for m in experts]
    sched = tiny_unipc_scheduler(12.0) if boundary_ratio is not None else tiny_scheduler(scheduler)
    return save_pipeline(out, tokenizer=tokenizer, text_encoder=text_encoder,
                         transformer=experts[0], vae=build_vae(vae_preset or p.vae, seed=seed),
                         scheduler=sched, transformer_2=experts[1] if experts[1:] else None,
                         boundary_ratio=boundary_ratio, expand_timesteps=p.expand_timesteps,
                         image_to_video=p.condition_channels > 0,
                         **(tiny_clip(p.image_dim, seed) if p.image_dim else {}))


def tiny_clip(width: int, seed: int = 0) -> dict:
    """A 2-layer ``CLIPVisionModel`` of ``width`` on 32 x 32 pictures in 8 x 8 patches (17
    tokens) and its processor: Wan 2.1 I2V's image encoder, small."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(hidden_size=width, intermediate_size=2 * width,
                              num_hidden_layers=2, num_attention_heads=2, image_size=32,
                              patch_size=8)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        encoder = CLIPVisionModel(config).eval()
    processor = CLIPImageProcessor(size={"shortest_edge": 32},
                                   crop_size={"height": 32, "width": 32})
    return {"image_encoder": encoder, "image_processor": processor}


def save_pipeline(out: str | Path, *, tokenizer, text_encoder, transformer, vae,
                  scheduler=None, transformer_2=None, boundary_ratio: float | None = None,
                  expand_timesteps: bool = False, image_to_video: bool = False,
                  **clip) -> Path:
    """``WanPipeline(...).save_pretrained(out)`` (``scheduler`` None: Wan 2.1's UniPC), so
    diffusers' own ``from_pretrained`` loads it: exactly what a real snapshot looks like, only
    small. Returns the folder's path."""
    import diffusers

    from ppdit.checkpoint.folder import no_progress_bars

    out = Path(out)  # (the image pipeline's import warns of a missing torchvision: only if used)
    pipeline = getattr(diffusers, "WanImageToVideoPipeline" if image_to_video else "WanPipeline")
    with no_progress_bars():  # transformers' "Writing model shards" bar: not in an output
        pipeline(tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer,
                    vae=vae, scheduler=tiny_unipc_scheduler() if scheduler is None else scheduler,
                    transformer_2=transformer_2, boundary_ratio=boundary_ratio,
                    expand_timesteps=expand_timesteps, **clip).save_pretrained(out)
    return out
