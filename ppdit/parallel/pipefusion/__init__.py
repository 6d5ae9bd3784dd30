"""PipeFusion (xDiT, Fang et al. 2024, https://arxiv.org/abs/2405.14430): layer split's stages,
fed token *patches* instead of requests, so one request fills the pipeline within one step.

A patch's queries need every token's keys and values, but the other patches are still in
flight. Each stage keeps, per block, the K/V of the whole sequence from the last time it saw
each patch and overwrites a patch's rows as it runs it: patches before it in this step are
fresh, those after it are one step stale ("displaced"). Diffusion's neighbouring steps are
alike, so the error is small, and the first ``warmup_steps`` run whole (exact, like layer
split) to fill the buffers. Lossy: ``ppdit.teaching`` measures what it costs against the exact
layer split, the validation the engines that ship it ask for.

    plan.py       a ``LayoutPlan`` with ``pipefusion=P`` as layer split's plan with patches
    displaced.py  the attention processor that keeps each block's K/V across patches and steps
"""
