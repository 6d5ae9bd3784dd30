"""Layer-split pipeline parallelism: ``schedule`` (the pure schedule and its simulated clock),
``comms`` (framed messages), ``ranks`` (a stage's executor), ``run`` (entry points, reference),
``torch_baseline`` (the same stages under ``torch.distributed.pipelining``).

Why its order is safe under NCCL: every direction between two ranks has a communicator of its
own (``runtime.comm.mesh.Lanes``), and a receiver posts its receives in the order the sender sends
(``comms.Mailbox``), so a receive posted ahead can only wait for the message in front of it."""
