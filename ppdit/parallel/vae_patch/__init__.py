"""Patch-parallel VAE decode: the latent split by rows over ranks, each decoding its patch.

Why: after a parallel DiT, the VAE decode runs on one rank and becomes the tail that bounds
latency and memory — Wan's decoder holds activations of 96 to 384 channels per frame chunk,
96 of them at full resolution, far more than the 3-channel video itself. Split by rows, each
rank holds about 1/P of them; a 3x3 convolution needs only one row from each neighbour (the
halo), the norms are per position, and only the mid block's attention, at the latent's
resolution where it is cheap, sees the whole frame. xDiT's DistVAE splits image VAEs this way.

* ``halo.py``    the row split, halo exchange, gathering rows (P2P, one batch per exchange)
* ``decode.py``  which layers need neighbours, their wrappers, ``decode_patch_parallel`` and the
                 streaming ``PatchStreamingDecoder`` (per-rank causal caches)
* ``run.py``     launch it on ranks and compare with the one-process decode
"""
