"""Numbers only, no pictures and no model runs: ``trace_stats`` (busy, handoffs, Little's law),
``bubbles`` (pipeline arithmetic and simulated schedules), ``roofline`` / ``roofline_vae`` (FLOPs
and bytes per op), ``hardware`` (GPU tables, predictions), ``measure`` (this machine's FLOP/s,
bandwidth, links), ``memory`` (peak bytes), ``overhead`` (per-op dispatch cost, capture
hazards), ``gpu_runs`` (the committed GPU measurements, checked against ``gpu_run_schema`` and
labelled with their provenance).
"""
