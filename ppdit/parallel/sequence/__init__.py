"""Ulysses sequence parallelism: ``ulysses`` (the attention processor, the SP forward and
generation), ``comms`` (the two all-to-alls and what they move)."""
