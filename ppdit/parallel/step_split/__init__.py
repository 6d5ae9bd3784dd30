"""Step-split pipeline parallelism: ``plan`` (splits and the plan), ``ranks`` (a stage's loop),
``run`` (entry points and single-device references).

Why its order is safe under NCCL: frames go forward on the pipeline's group, each stage posting
its receives in the order its upstream sends; credits go back on ``RankMesh.back_group``, a
communicator of their own, so a receive posted ahead never queues in front of a send the peer
waits for (``tests/ranks/test_nccl_rules.py`` keeps the one-communicator order as a fixture).
"""
