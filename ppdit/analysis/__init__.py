"""Formulas, simulations, and the measurements that run them; no pictures (those are ``viz/``).

Formulas and simulations: ``trace_stats`` (busy, handoffs, Little's law), ``bubbles``
(pipeline arithmetic and simulated schedules), ``roofline`` / ``roofline_vae`` (FLOPs and bytes
per op), ``hardware`` (GPU tables, predictions), ``layouts_latency`` (one request's latency per
layout), ``gpu_runs`` (the committed GPU measurements, checked against ``gpu_run_schema`` and
labelled with their provenance).

Measurements (these run models, on this machine or on live ranks): ``measure`` (FLOP/s,
bandwidth, links), ``memory`` (peak bytes), ``rank_memory`` (each layout's ranks),
``overhead`` (per-op dispatch cost, capture hazards, what a CUDA graph saves), ``vae_decode``
(streaming vs full decode), ``live_effects``.
"""
