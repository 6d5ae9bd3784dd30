"""ppdit: pipeline and tensor parallel inference of a video DiT (Wan 2.1), taught by running it.

Map of the package (each module's docstring says why it is built the way it is):

* ``ppdit.model``       Wan 2.1 presets, identical weights from a seed, the stage view
* ``ppdit.sampler``     flow-matching schedule, Euler steps, what a handoff carries
* ``ppdit.runtime``     launching ranks, device/backend choice, P2P, tracing
* ``ppdit.parallel``    step-split pipeline parallelism (more layouts follow)
* ``ppdit.analysis``    numbers from traces: busy fractions, handoff latencies
* ``ppdit.viz``         timelines and busy/idle bars
"""

__version__ = "0.1.0"
