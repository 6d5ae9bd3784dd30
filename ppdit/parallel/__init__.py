"""Parallel layouts of the Wan DiT: step-split PP (more to come: layer-split, TP, SP)."""
