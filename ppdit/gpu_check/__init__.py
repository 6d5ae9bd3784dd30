"""``make gpu-check``: on a CUDA machine, the GPU test suite, then the GPU measurements, written
to ``gpu_runs/<gpu>-<date>.json`` with where they were measured.

Why one command: ppdit is developed on CPUs, and most of what it says about GPUs was measured
once, somewhere. A GPU user runs this to check that every layout works on their machine and to
produce numbers the notebooks can quote with their provenance (``ppdit.analysis.gpu_runs``).

What runs, in order (``run.gpu_check``; 8 minutes on one H100, most unknown first: a stage
that would overrun the time left is skipped with the reason):

1. ``suite``     ``pytest -m gpu tests`` in a subprocess: its pass / fail counts;
2. ``unknowns``  what no run has measured: a posted NCCL receive under a stream vs a device
                 sync (2 GPUs), ring attention's peak at Wan 1.3B / 14B shapes against the
                 memory model, a full-size random Wan 1.3B ``generate`` on 3 layouts at 2 ranks;
3. ``ranks``     launch cost (fresh ranks vs a live pool), a step of each layout at 2 ranks;
4. ``kernels``   the bf16 matmul and copy ceilings, then CUDA-graph replay vs eager per step;
5. ``vae``       the streaming VAE at 480p: first frame vs full decode, bitwise, peak memory;
6. ``forwards``  the Wan 2.1 1.3B and 14B forwards at 480p in bf16, against the roofline bound.

``env`` collects the provenance; ``sections`` turns a failure or an out-of-memory into that
section's status instead of the end of the check. Nothing here calls CUDA at import time;
without CUDA the check says so and writes nothing.
"""
