"""Wan's causal video VAE: ``presets`` (tiny random ones, the real config), ``streaming``
(chunk-by-chunk decode that equals the full decode); its measurements (time to first frame,
memory) are ``ppdit.analysis.vae_decode``."""
