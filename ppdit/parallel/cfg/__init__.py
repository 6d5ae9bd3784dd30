"""CFG-parallel: the conditional and unconditional halves of a guided step on two ranks
(``halves.py``: the exchange; ``run.py``: the plan and the ranks); the simplest latency layout
for a model run with classifier-free guidance.

Why its order is safe under NCCL: the only traffic is one all-gather per guided step, issued by
both ranks at the same point of the same loop; no point-to-point message exists."""
