"""CFG-parallel: the conditional and unconditional halves of a guided step on two ranks
(``halves.py``: the exchange; ``run.py``: the plan and the ranks); the simplest latency layout
for a model run with classifier-free guidance."""
