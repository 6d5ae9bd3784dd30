"""Parallel inference of the Wan DiT: one layout spine, then one folder per mechanism, every
result checked against one device.

The spine: ``layout.py`` (one ``Layout``: the degree of every axis, the one composition rule,
the mesh it asks for), ``forward.py`` (the forward axes applied to a rank's model in a fixed
order: TP, the sequence axes, FSDP, CFG), ``runner.py`` (one runner: a ``LayoutPlan`` runs its
forward axes inside the loop its pipeline axis picks; the single device is every degree 1).

Inside a mechanism's folder: ``plan.py`` (what every rank agrees on), ``ranks.py`` (what one
rank does), ``run.py`` (launch it, merge results, the single-device reference), ``comms.py``
(what travels between ranks) where it has messages of its own.

* ``step_split/``      stages own contiguous slices of the denoising steps; pipeline filling;
                       each stage runs the forward axes (PP x TP, PP x SP, PP x CFG)
* ``layer_split/``     stages own contiguous blocks; micro-batches, GPipe, wrap, interleaving,
                       and ``torch.distributed.pipelining`` as a baseline
* ``tensor/``          Megatron TP with functional collectives; DTensor for comparison
* ``sequence/``        Ulysses, ring attention and USP; V-first, the two-phase all-to-all and
                       V-Major (CoCoDiff)
* ``fsdp/``            the blocks' weights sharded (FSDP2) and loaded shard by shard
* ``cfg/``             CFG-parallel: the two halves of a guided step on two ranks
* ``decode_overlap/``  decode chunk k while chunk k + 1 is generated
* ``vae_patch/``       the VAE decode split by rows over ranks: halos, per-rank causal caches
* ``partition.py``     contiguous balanced splits shared by the layouts
"""
