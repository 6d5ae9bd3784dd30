"""Sequence (context) parallelism: ``ulysses`` (all-to-alls to a head split), ``ring`` (K/V
blocks around a ring: any head count), ``usp`` (Ulysses groups joined by a ring, xDiT's USP),
``comms`` (the all-to-alls and what they move), ``run`` (the plan, optionally inside two
CFG-parallel branches: ``runtime.comm.mesh.SPDims``).

Why its order is safe under NCCL: the all-to-alls and all-gathers are collectives every rank
of a group issues in the same order, block after block; the ring's only point-to-point traffic
is one fused send + receive per hop (a batch, which NCCL launches as a group), posted in the
same order on every rank of the ring."""
