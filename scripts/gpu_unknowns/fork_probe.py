"""Import the fork server's preload as the server does (``guarded``: its guard first, which
sets ``PYTORCH_NVML_BASED_CUDA_CHECK``; ``plain``: without it), spying on every cudaGetDeviceCount
(what ``torch.cuda.is_available()`` calls, and what registers PyTorch's fork poisoning), then
fork and ask the child what a forked CPU rank would see of CUDA."""

import importlib
import json
import os
import sys
import traceback

import torch

asked: list[list[str]] = []
real = getattr(torch._C, "_cuda_getDeviceCount", None)  # absent on a CPU build (a dry run)


def spy() -> int:
    stack = traceback.extract_stack()[:-1]
    asked.append([f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in stack][-6:])
    return real()


def child_view() -> dict:
    """In the forked child: poisoned or not, and whether CUDA can still start."""
    seen = {"bad_fork": bool(torch.cuda._is_in_bad_fork())}
    for name, call in (("is_available", torch.cuda.is_available),
                       ("lazy_init", lambda: torch.cuda.get_device_capability(0))):
        try:
            seen[name] = str(call())
        except Exception as e:
            seen[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return seen


if real is not None:
    torch._C._cuda_getDeviceCount = spy
from ppdit._fork_server import PRELOAD  # noqa: E402

guarded = sys.argv[1:] == ["guarded"]  # plain: without ppdit's guard, the problem itself
for module in PRELOAD if guarded else PRELOAD[1:]:
    importlib.import_module(module)
out = {"guarded": guarded, "nvml_env": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
       "device_count_calls": len(asked), "first_caller": asked[0] if asked else None,
       "parent_initialized": torch.cuda.is_initialized()}
r, w = os.pipe()
if (pid := os.fork()) == 0:
    os.write(w, json.dumps(child_view()).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
out["forked_child"] = json.loads(os.read(r, 1 << 16) or b"{}")
print(json.dumps(out))
