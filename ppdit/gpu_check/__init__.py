"""``make gpu-check``: on a CUDA machine, the GPU test suite, then the GPU measurements, written
to ``gpu_runs/<gpu>-<date>.json`` with where they were measured.

Why one command: ppdit is developed on CPUs, and most of what it says about GPUs was measured
once, somewhere. A GPU user runs this to check that every layout works on their machine and to
produce numbers the notebooks can quote with their provenance (``ppdit.analysis.gpu_runs``).

What runs, in order (``run.gpu_check``; the budget is about 8 minutes on one H100):

1. ``suite``     ``pytest -m gpu tests`` in a subprocess: its pass / fail counts;
2. ``ranks``     launch cost (``launch(hello, 2)`` on fresh ranks vs a job on a live
                 ``ranks(2)`` pool) and the step time of each layout at 2 ranks on the GPU(s)
                 present (step split, layer split, TP, SP), default placement;
3. ``kernels``   a bf16 matmul's TFLOP/s and a device copy's bandwidth, then CUDA-graph replay
                 vs eager per denoising step on ``tiny`` and ``small``;
4. ``vae``       the streaming VAE at 480p (the real Wan 2.1 VAE config, random weights, fp32):
                 first frame vs full decode, bitwise equality, peak memory;
5. ``forwards``  the Wan 2.1 1.3B and 14B forwards at 480p in bf16 on one GPU, against the
                 roofline lower bound (14B skipped, with the reason, when memory is short).

``env`` collects the provenance; ``sections`` runs one measurement so that a failure or an
out-of-memory becomes that section's status instead of the end of the check. Nothing here calls
CUDA at import time; without CUDA the check says so and writes nothing.
"""
