"""Formulas, simulations, and the measurements that run them; no pictures (those are ``viz/``).

Formulas and simulations: ``trace_stats`` (busy, handoffs, Little's law), ``bubbles``
(pipeline arithmetic), ``roofline`` / ``roofline_vae`` (FLOPs and bytes per op), ``hardware``
(GPU tables, predictions), ``layouts_latency``, ``memory_model`` (bytes per GPU), ``plan``
(``ppdit plan``), ``alltoall`` (the α-β all-to-all), ``gpu_runs`` (the committed GPU
measurements, checked against ``gpu_run_schema``).

Measurements (these run models, on this machine or on live ranks): ``measure`` (FLOP/s,
bandwidth, links), ``memory_measure`` (each layout's ranks), ``memory_opts``, ``overhead``
(dispatch cost, capture hazards, CUDA graphs), ``vae_decode``, ``live_effects``."""
