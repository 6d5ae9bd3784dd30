"""ppdit: pipeline and tensor parallel inference of a video DiT (Wan 2.1), taught by running it.

The folders are the map, in layers: a module imports its own layer or lower ones, never higher,
and no cycle (``tests/test_layout.py`` checks every import). Each module's docstring says why it
is built the way it is.

* L0 ``model.py``, ``attention.py``  Wan 2.1 through diffusers (presets, the stage view, the
     ``sampler.py``, ``vae/``       self-attention in pieces); the one sampling loop every layout
     ``checkpoint/``                drives (``Denoiser``); Wan's VAE (presets, streaming
                                    decode); where weights come from (``ModelSource``: a preset
                                    or a pipeline folder, its text encoder and scheduler)
* L1 ``runtime/``, ``cuda_graph``   launching ranks, device/backend, rank arrangement and groups
                                    (``mesh``), P2P, tracing, plans side by side (``rounds``);
                                    one denoising step as a CUDA graph
* L2 ``parallel/``                  one folder per layout: ``step_split/`` (PP x TP and TP too),
                                    ``layer_split/``, ``tensor/``, ``sequence/``, ``cfg/``,
                                    ``decode_overlap/``; ``compare`` runs layouts side by side
* L3 ``serve/``, ``t2v/``           the bring-up system (controller + generator mesh, PP0 ->
                                    PP1); one prompt -> one video on any layout
* L4 ``analysis/``, ``viz/``,       formulas, simulations and the measurements that run them;
     ``teaching/``                  every picture and explorer; the claims ledger, lab helpers
* L5 ``toy/``, ``gpu_check/``,      the trained toy world; ``make gpu-check``; the command line
     ``jobs.py``, ``cli.py``        (argument parsing; the jobs it runs)
"""

__version__ = "0.1.0"
