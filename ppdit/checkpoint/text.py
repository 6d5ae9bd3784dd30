"""Prompt -> umT5 embeddings, exactly as ``WanPipeline.encode_prompt`` computes them.

Tokenize to ``max_sequence_length`` (512 for Wan), run the encoder with the attention mask, keep
each prompt's real tokens and zero the padding rows; with guidance the negative prompt ("" by
default, as diffusers) too.

It runs once, in the process that launches the ranks (``t2v.generate``); the (1, 512, 4096)
embeddings travel with the job (4 MB each in bf16). Encoding on every rank would send nothing
but put umT5-XXL (5.7 B parameters, 11.4 GB in bf16) beside the DiT on every GPU, for work done
once per video. The encoder is dropped as soon as the embeddings exist. (Under ``torchrun``
each rank is a caller and encodes itself.)
"""

from __future__ import annotations

import torch

from ppdit.sampler import Conditioning


def text_length(tokenizer, requested: int | None = None) -> int:
    """Tokens each prompt is padded to: ``requested``, else the tokenizer's ``model_max_length``
    capped at Wan's 512 (the real umT5 tokenizer says 512, WanPipeline's default; a folder
    trained shorter, like models/toy_shapes at 16, says so in its tokenizer)."""
    return requested or min(512, tokenizer.model_max_length)


@torch.no_grad()
def encode_text(tokenizer, text_encoder, prompt: str, max_sequence_length: int = 512
                ) -> torch.Tensor:
    """One prompt's embeddings (1, L, D): ``WanPipeline._get_t5_prompt_embeds``'s arithmetic."""
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    inputs = tokenizer([prompt_clean(prompt)], padding="max_length",
                       max_length=max_sequence_length, truncation=True, add_special_tokens=True,
                       return_attention_mask=True, return_tensors="pt")
    ids, mask = inputs.input_ids, inputs.attention_mask
    n = int(mask.gt(0).sum())
    device = next(text_encoder.parameters()).device
    hidden = text_encoder(ids.to(device), mask.to(device)).last_hidden_state
    hidden = hidden.to(text_encoder.dtype)[0, :n]
    return torch.cat([hidden, hidden.new_zeros(max_sequence_length - n, hidden.shape[1])])[None]


def encode_prompts(tokenizer, text_encoder, prompt: str, negative_prompt: str | None,
                   guidance_scale: float, dtype: torch.dtype,
                   max_sequence_length: int = 512) -> Conditioning:
    """The prompt's and (with guidance > 1, as diffusers decides) the negative prompt's
    embeddings, cast to the transformer's ``dtype``, on the CPU."""
    text = encode_text(tokenizer, text_encoder, prompt, max_sequence_length)
    neg = None
    if guidance_scale > 1.0:
        neg = encode_text(tokenizer, text_encoder, negative_prompt or "", max_sequence_length)
    return Conditioning(text, neg).to("cpu", dtype)
