"""Sharded weights for inference (PyTorch's FSDP2, ``fully_shard``): ``shard`` (per block).

Why its order is safe under NCCL: FSDP's all-gathers are collectives that every rank of the
group issues block after block in the same order; the layouts it composes with (sequence
parallelism, CFG branches) run the same blocks in lockstep on every rank."""
