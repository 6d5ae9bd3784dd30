"""``make gpu-check``: on a CUDA machine, the GPU test suite, then the GPU measurements, written
to ``gpu_runs/<gpu>-<date>.json`` with where they were measured.

Why one command: ppdit is developed on CPUs, and most of what it says about GPUs was measured
once, somewhere. A GPU user runs this to check that every layout works on their machine and to
produce numbers the notebooks can quote with their provenance (``ppdit.analysis.gpu_runs``).

What runs, in order (``run.gpu_check``; the budget is about 8 minutes on one H100):

1. ``suite``     ``pytest -m gpu tests`` in a subprocess: its pass / fail counts;
2. ``ranks``     launch cost (fresh ranks vs a live pool), a step of each layout at 2 ranks;
3. ``kernels``   the bf16 matmul and copy ceilings, then CUDA-graph replay vs eager per step;
4. ``vae``       the streaming VAE at 480p: first frame vs full decode, bitwise, peak memory;
5. ``forwards``  the Wan 2.1 1.3B and 14B forwards at 480p in bf16, against the roofline bound.

``env`` collects the provenance; ``sections`` turns a failure or an out-of-memory into that
section's status instead of the end of the check. Nothing here calls CUDA at import time;
without CUDA the check says so and writes nothing.
"""
