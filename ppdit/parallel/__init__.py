"""Parallel layouts of the Wan DiT, each checked against one device.

Step split (``step_split``), layer split (``layer_split`` with its pure schedule in
``layer_schedule``), tensor parallelism with functional collectives (``tensor``), PP x TP
(``pp_tp``), Ulysses sequence parallelism (``sequence``), the decode-overlap pattern
(``decode_overlap``) and PyTorch's own pipelining as a baseline (``torch_pipelining``).
"""
