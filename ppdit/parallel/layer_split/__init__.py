"""Layer-split pipeline parallelism: ``schedule`` (the pure schedule and its simulated clock),
``comms`` (framed messages), ``ranks`` (a stage's executor), ``run`` (entry points, reference),
``torch_baseline`` (the same stages under ``torch.distributed.pipelining``)."""
