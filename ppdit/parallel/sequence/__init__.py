"""Ulysses sequence parallelism: ``ulysses`` (the attention processor, the SP forward and
generation), ``comms`` (the two all-to-alls and what they move).

Why its order is safe under NCCL: SP has no point-to-point traffic; every rank issues the same
all-to-alls (and the final all-gather) in the same order, block after block."""
