"""ppdit: pipeline and tensor parallel inference of a video DiT (Wan 2.1), taught by running it.

Map of the package (each module's docstring says why it is built the way it is):

* ``ppdit.model``         Wan 2.1 presets, identical weights from a seed, the stage view
* ``ppdit.sampler``       flow-matching schedule, Euler steps, what a handoff carries
* ``ppdit.runtime``       launching ranks, device/backend choice, P2P, tracing, compile cache
* ``ppdit.parallel``      step split, layer split, tensor (funcol), sequence (Ulysses), PP x TP,
                          decode overlap, and the torch.distributed.pipelining baseline
* ``ppdit.serve``         the bring-up system: controller + generator mesh, PP0 -> PP1
* ``ppdit.vae``           streaming causal decode of Wan's VAE (presets, measurements, plots)
* ``ppdit.graphs``        one denoising step as a CUDA graph (eager on CPU, same buffers)
* ``ppdit.analysis``      traces, bubbles, rooflines, hardware, memory, launch overhead
* ``ppdit.viz``, ``*_plots`` timelines, busy bars, counters; schedule / roofline / VAE figures
* ``ppdit.claims``        the claims ledger the book publishes
* ``ppdit.labkit``        loading lab files for the checkers
"""

__version__ = "0.1.0"
