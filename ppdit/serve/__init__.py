"""The bring-up system: a rank-0 controller and a generator mesh (PP0 -> PP1). Draws nothing.

``config`` (phases, faults), ``protocol`` (PPEnvelopeV1 / PPResultV1 framing), ``queues``
(bounded queues, dedup), ``controller`` (rank 0), ``generator`` (a rank of the generator mesh),
``causal`` (KV cache, recompute), ``pp1`` (TP inside the mesh), ``system`` (launch + reference).

Why its order is safe under NCCL: envelopes (posted ahead, not waited for) travel from the
controller to the leader on one communicator, results back on another (``runtime.comm.mesh.Lanes``);
inside the mesh the leader shares each envelope by broadcast, the same collectives in the same
order on every mesh rank, and rank 0 joins none of them.
"""
