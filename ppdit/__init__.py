"""ppdit: pipeline and tensor parallel inference of a video DiT (Wan 2.1), taught by running it.

The folders are the map (each module's docstring says why it is built the way it is):

* ``model.py``, ``sampler.py``  Wan 2.1 through diffusers (presets, the stage view); the one
                                sampling loop every layout drives (``Denoiser``)
* ``cuda_graph.py``             one denoising step as a CUDA graph (eager on CPU, same buffers)
* ``vae/``                      Wan's VAE: presets, streaming causal decode, its measurements
* ``runtime/``                  launching ranks, device/backend, rank arrangement and groups
                                (``mesh``), P2P, tracing, plans side by side (``rounds``)
* ``parallel/``                 one folder per layout: ``step_split/``, ``layer_split/``,
                                ``tensor/``, ``sequence/``, ``decode_overlap/``; ``pp_tp``
                                composes, ``compare`` runs layouts side by side
* ``serve/``                    the bring-up system: controller + generator mesh, PP0 -> PP1
* ``analysis/``                 numbers only: traces, bubbles, rooflines, hardware, memory
* ``viz/``                      every picture and explorer, and the files a job writes
* ``teaching/``                 the claims ledger, lab helpers
* ``cli.py``, ``jobs.py``       the command line: argument parsing; the jobs it runs
* ``gpu_check/``                ``make gpu-check``: the GPU tests and measurements, written to
                                ``gpu_runs/`` with their provenance
"""

__version__ = "0.1.0"
