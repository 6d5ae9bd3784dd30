"""Parallel layouts of the Wan DiT, one folder each, every one checked against one device.

Inside a layout's folder: ``plan.py`` (what every rank agrees on), ``ranks.py`` (what one rank
does), ``run.py`` (launch it, merge results, the single-device reference), ``comms.py`` (what
travels between ranks) where the layout has messages of its own.

* ``step_split/``      stages own contiguous slices of the denoising steps; pipeline filling;
                       stages of ``tp`` ranks are PP x TP, one such stage plain TP
* ``layer_split/``     stages own contiguous blocks; micro-batches, GPipe, wrap, interleaving,
                       and ``torch.distributed.pipelining`` as a baseline
* ``tensor/``          Megatron TP with functional collectives; DTensor for comparison
* ``sequence/``        Ulysses, ring attention and USP; V-first, the two-phase all-to-all and
                       V-Major (CoCoDiff); CFG x SP
* ``fsdp/``            the blocks' weights sharded (FSDP2) and loaded shard by shard
* ``cfg/``             CFG-parallel: the two halves of a guided step on two ranks
* ``decode_overlap/``  decode chunk k while chunk k + 1 is generated
* ``vae_patch/``       the VAE decode split by rows over ranks: halos, per-rank causal caches
* ``compare.py``       one forward, several layouts, side by side
* ``partition.py``     contiguous balanced splits shared by the layouts
"""
