"""Tensor parallelism: ``layers`` (column/row-parallel linears, distributed RMSNorm),
``parallelize`` (rewriting Wan's blocks), ``comms`` (bytes and graph breaks), ``dtensor``
(the same split through DTensor); the styles side by side on real ranks are a lesson's
measurement, ``ppdit.analysis.tp_styles``.

Why its order is safe under NCCL: TP has no point-to-point traffic; every rank of a TP group
issues the same all-reduces in the same order (the blocks run identically on every rank)."""
