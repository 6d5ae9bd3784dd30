"""CFG-parallel: the conditional and unconditional halves of a guided step on two ranks
(``halves.py``: the exchange, and the policy a ``Denoiser`` calls); the simplest latency layout
for a model run with classifier-free guidance. The forward stack (``parallel.forward``) applies
it last, around any forward, on the mesh's ``cfg`` axis.

Why its order is safe under NCCL: the only traffic is one all-gather per guided step, issued by
both ranks at the same point of the same loop; no point-to-point message exists."""
