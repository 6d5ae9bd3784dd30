"""ppdit: pipeline and tensor parallel inference of a video DiT (Wan 2.1), taught by running it.

The folders are the map, in layers: a module imports its own layer or lower ones, never higher,
and no cycle (``tests/unit/test_layout.py`` checks every import and each layer's line budget).
Each module's docstring says why it is built the way it is.

* L0 ``presets``, ``model``,        the model's sizes (no torch), Wan 2.1 through diffusers and
     ``attention``, ``sampler``,    its stage view, self-attention in pieces, the one sampling
     ``vae/``, ``checkpoint/``      loop (``Denoiser``), the VAE (the one decode, streaming),
                                    where weights come from (``ModelSource``)
* L1 ``runtime/``, ``cuda_graph``   ranks: ``processes/`` (launch, pools, start), ``comm/`` (the
                                    one mesh, the one wire), ``observe/`` (traces, timing,
                                    memory), placement, plans side by side (``rounds``); one
                                    denoising step as a CUDA graph
* L2 ``parallel/``                  the spine (``layout``: one ``Layout`` and its rule;
                                    ``forward``: the forward axes on a rank; ``runner``: one
                                    runner), then one folder per mechanism
* L3 ``serve/``, ``t2v/``           the bring-up system (controller + generator mesh, PP0 ->
                                    PP1); one prompt -> one video on any layout
* L4 ``analysis/``, ``viz/``,       formulas, simulations and the measurements that run them;
     ``teaching/``                  every picture and explorer; the claims ledger, lab helpers
* L5 ``toy/``, ``gpu_check/``,      the trained toy world; ``make gpu-check``; the command line
     ``jobs.py``, ``cli.py``        (argument parsing; the jobs it runs)
"""

__version__ = "0.1.0"
