"""An NCCL all-reduce posted under a 3 s group timeout, held 12 s behind a spin on the current
stream. ``after``: the timeout rises to 60 s after the posting (``RankContext.expect``'s order);
``before``: before it (the control). NCCL keeps the timeout in force at the posting, so
``after`` is predicted to end at about 3 s (the rules now model that: ``Op.bound_s``)."""

import json
import os
import socket
import sys
import time
from datetime import timedelta

os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "2"  # what ppdit's ranks set
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ppdit.runtime.comm.wire import communicator_aborted, wait_for

when = sys.argv[1]
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                        timeout=timedelta(seconds=3))
x = torch.ones(4, device=dev)
dist.all_reduce(x)
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
a.record()
torch.cuda._sleep(50_000_000)
b.record()
torch.cuda.synchronize()
spin = int(5e7 / (a.elapsed_time(b) / 1e3) * 12.0)
if when == "before":
    c10d._set_pg_timeout(timedelta(seconds=60))
torch.cuda._sleep(spin)  # NCCL's stream waits for the current one: the op ends after ~12 s
start = time.monotonic()
work = dist.all_reduce(x, async_op=True)
if when == "after":
    c10d._set_pg_timeout(timedelta(seconds=60))
out = {"raise": when}
try:
    wait_for(work, 20, "watchdog probe")
    out["completed_after_s"] = round(time.monotonic() - start, 1)
except BaseException as e:
    out["raised_after_s"] = round(time.monotonic() - start, 1)
    out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:240]}"
out["aborted"] = communicator_aborted()
print(json.dumps(out), flush=True)
os._exit(0)
