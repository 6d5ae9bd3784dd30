"""CFG-parallel: the conditional and unconditional halves of a guided step on two ranks
(``ranks.py``); the simplest latency layout for a model run with classifier-free guidance."""
