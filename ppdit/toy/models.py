"""The toy pipeline's components: a small ``AutoencoderKLWan``, a small ``WanTransformer3DModel``,
the frozen tiny random umT5 with a word-level tokenizer, and the block-causal attention the DiT
is trained with. Shapes: 32 x 32 x 13 pixel frames -> the VAE (4x space, 4x time, ``Z_DIM``
channels) -> latents (8, 4, 8, 8) -> (1, 2, 2) patches -> 16 tokens per latent frame, 64 a clip.

Block-causal training (the demo streams chunks with a rolling KV cache, CausVid style,
``ppdit.serve.causal``): a chunk of ``CHUNK_FRAMES`` latent frames is denoised attending to the
*clean* earlier chunks, whose keys/values came from a t = 0 forward that saw only earlier clean
chunks. Teacher forcing trains exactly that in one forward per clip::

    tokens   [clean c0 | clean c1 | noisy c0 | noisy c1]
    t        [   0     |    0     |   t0     |   t1    ]
    rope     frames 0..3             frames 0..3 again (same positions)
    clean ci attends clean c0..ci;  noisy cj attends clean c0..c(j-1) and noisy cj

It is also trained with full attention on whole clips (what ``WanPipeline`` and every parallel
layout run): one set of weights serves both.
"""

from __future__ import annotations

import torch

from ppdit.attention import attend, attention_out, install, project_qk, project_v
from ppdit.model import build_seeded
from ppdit.presets import ModelPreset
from ppdit.vae.presets import VAEPreset

Z_DIM = 8  # latent channels (Wan 2.1 has 16; 8 is plenty for four colours and two shapes)
CHUNK_FRAMES = 2  # latent frames per causal chunk (the demo's chunk_frames)
TEXT_DIM = 32  # umT5 width = the DiT's text_dim
MAX_SEQUENCE_LENGTH = 16  # text tokens (Wan pads to 512; the toy trains and runs at 16, see docs)

VAE = VAEPreset("toy", base_dim=16, z_dim=Z_DIM, dim_mult=(1, 2, 4), num_res_blocks=1,
                temperal_downsample=(True, True),
                notes="the toy shapes VAE: 4x time, 4x space, 8 latent channels")
DIT = ModelPreset("toy", num_layers=4, num_heads=4, head_dim=24, ffn_dim=192,
                  text_dim=TEXT_DIM, text_len=MAX_SEQUENCE_LENGTH, freq_dim=64,
                  in_channels=Z_DIM, latent_shape=(1, Z_DIM, 4, 8, 8), rope_max_seq_len=256,
                  notes="the toy shapes DiT (trained): 4 heads so TP 2 and 4 split it")


def build_vae(seed: int):
    """The untrained toy VAE (latent statistics are set after training)."""
    from diffusers import AutoencoderKLWan

    cfg = {**VAE.diffusers_config(), "latents_mean": [0.0] * Z_DIM, "latents_std": [1.0] * Z_DIM}
    return build_seeded(AutoencoderKLWan, cfg, seed, "cpu")


def build_dit(seed: int):
    """The untrained toy DiT."""
    from diffusers import WanTransformer3DModel

    return build_seeded(WanTransformer3DModel, DIT.diffusers_config(), seed, "cpu")


def build_text(seed: int):
    """(tokenizer, frozen random umT5) over the toy vocabulary (``ppdit.checkpoint.tiny``)."""
    from ppdit.checkpoint.tiny import tiny_text_encoder, word_tokenizer
    from ppdit.toy.data import vocabulary

    tokenizer = word_tokenizer(vocabulary())
    tokenizer.model_max_length = MAX_SEQUENCE_LENGTH  # saved: tells loaders the trained length
    return tokenizer, tiny_text_encoder(TEXT_DIM, len(tokenizer), seed).requires_grad_(False)


def encode_prompts(tokenizer, text_encoder, prompts: list[str],
                   max_sequence_length: int = MAX_SEQUENCE_LENGTH) -> torch.Tensor:
    """(N, L, TEXT_DIM) embeddings, one prompt at a time with ``WanPipeline``'s arithmetic
    (``ppdit.checkpoint.text.encode_text``: real tokens kept, padding rows zeroed)."""
    from ppdit.checkpoint.text import encode_text

    return torch.cat([encode_text(tokenizer, text_encoder, p, max_sequence_length)
                      for p in prompts])


class TrainAttnProcessor:
    """Self-attention with an optional rope override and mask, set before each forward
    (differentiable; the same arithmetic as ``ppdit.serve.causal.CausalAttnProcessor`` without
    the cache)."""

    rope: tuple[torch.Tensor, torch.Tensor] | None = None
    mask: torch.Tensor | None = None  # (S, S) bool, True = may attend

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None,
                 rotary_emb=None):
        q, k = project_qk(attn, hidden_states, self.rope or rotary_emb)
        v = project_v(attn, hidden_states)
        return attention_out(attn, attend(q, k, v, self.mask), q)


def install_train_attention(model) -> TrainAttnProcessor:
    """Route every block's self-attention through one shared ``TrainAttnProcessor``: its rope
    and mask apply to the next forward."""
    processor = TrainAttnProcessor()
    install(model, lambda i: processor)
    return processor


def teacher_forcing_mask(frames: int, tokens_per_frame: int, chunk_frames: int = CHUNK_FRAMES
                         ) -> torch.Tensor:
    """(2S, 2S) bool mask over [clean | noisy] tokens of ``frames`` latent frames (see the
    module docstring)."""
    chunk = (torch.arange(frames) // chunk_frames).repeat_interleave(tokens_per_frame)
    q_clean, k_clean = chunk[:, None] >= chunk[None, :], chunk[:, None] > chunk[None, :]
    same = chunk[:, None] == chunk[None, :]
    none = torch.zeros_like(same)
    return torch.cat([torch.cat([q_clean, none], 1), torch.cat([k_clean, same], 1)], 0)
