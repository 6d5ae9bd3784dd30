"""Tensor parallelism: ``layers`` (column/row-parallel linears, distributed RMSNorm),
``parallelize`` (rewriting Wan's blocks), ``comms`` (bytes and graph breaks), ``dtensor``
(the same split through DTensor), ``compare`` (variants side by side on real ranks)."""
