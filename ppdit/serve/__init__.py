"""The bring-up system: a rank-0 controller and a generator mesh (PP0 -> PP1). Draws nothing.

``config`` (phases, faults), ``protocol`` (PPEnvelopeV1 / PPResultV1 framing), ``queues``
(bounded queues, dedup), ``controller`` (rank 0), ``generator`` (a rank of the generator mesh),
``causal`` (KV cache, recompute), ``pp1`` (TP inside the mesh), ``system`` (launch + reference).
"""
