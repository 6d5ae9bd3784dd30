"""Sequence (context) parallelism: ``ulysses`` (all-to-alls to a head split), ``ring`` (K/V
blocks around a ring: any head count), ``usp`` (Ulysses groups joined by a ring, xDiT's USP),
``comms`` (the all-to-alls and what they move), ``topology`` (the two-phase all-to-all over
nodes), ``vmajor`` (V-Major). ``parallel.forward`` applies them, on the mesh's ring and
ulysses axes, inside any other forward axis (CFG x USP is xDiT's layout).

Why its order is safe under NCCL: the all-to-alls and all-gathers are collectives every rank
of a group issues in the same order, block after block; the ring's only point-to-point traffic
is one fused send + receive per hop (a batch, which NCCL launches as a group), posted in the
same order on every rank of the ring."""
