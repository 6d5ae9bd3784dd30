"""One process on GPU 0: what blocks behind a kernel spinning on a non-blocking side stream
(what a posted NCCL receive is). Each probe: host seconds inside the call, then seconds until
the current stream is done; their sum near the spin means the call waited for it, device-wide,
as it would for a posted receive's sender (the NCCL rules model these: ``device_sync``).
Then an NCCL world of one: what ``Wire.batch`` returns; FSDP2 from a bf16 folder against the
unsharded bf16 model."""

import json
import os
import socket
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ppdit.runtime.device import Placement
from ppdit.runtime.observe.timing import timed

SPIN_S = 1.5
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
gpu = Placement(dev, "nccl")
side = torch.cuda.Stream(dev)  # a pool stream is non-blocking, as NCCL's streams are
out: dict = {"spin_s": SPIN_S, "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING"),
             "blocked": {}}


def error(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:240]}"


def cycles_per_s() -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        a.record()
        torch.cuda._sleep(50_000_000)
        b.record()
    torch.cuda.synchronize()
    return 5e7 / (a.elapsed_time(b) / 1e3)


SPIN = int(cycles_per_s() * SPIN_S)
torch.ones(1024, device=dev).mul_(2).sum().item()  # the baseline probes' own kernels, loaded
torch.cuda.synchronize()


def probe(name: str, call) -> None:
    try:
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SPIN)
        t = time.perf_counter()
        call()
        host = time.perf_counter() - t
        t = time.perf_counter()
        torch.cuda.current_stream().synchronize()
        then = time.perf_counter() - t
        torch.cuda.synchronize()
        out["blocked"][name] = {"host_s": round(host, 3), "then_s": round(then, 3),
                                "waited_for_spin": host + then > 0.7 * SPIN_S}
    except Exception as e:
        torch.cuda.synchronize()
        out["blocked"][name] = {"error": error(e)}


def capture() -> None:
    x, graph = torch.ones(1024, device=dev), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x.mul_(2)


def free_then_empty() -> None:
    held = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    del held
    gpu.empty_cache()


def timed_entry() -> None:
    with timed(gpu):
        pass


x = torch.rand(1 << 16, device=dev)
vol = torch.randn(1, 16, 4, 32, 32, device=dev, dtype=torch.bfloat16)
wts = torch.randn(16, 16, 3, 3, 3, device=dev, dtype=torch.bfloat16)
q = torch.randn(1, 4, 256, 64, device=dev, dtype=torch.bfloat16)
for name, call in (("Placement.synchronize()", gpu.synchronize),
                   ("synchronize(device_wide=True)", lambda: gpu.synchronize(device_wide=True)),
                   ("timed(placement) entry", timed_entry),
                   (".item()", lambda: torch.ones(1, device=dev).sum().item()),
                   ("empty_cache() after a 1 GB free", free_then_empty),
                   ("torch.cuda.graph entry", capture),
                   ("first i0e", lambda: torch.special.i0e(x)),
                   ("first rfft (cuFFT)", lambda: torch.fft.rfft(x)),
                   ("first conv3d bf16 (cuDNN)", lambda: F.conv3d(vol, wts, padding=1)),
                   ("first SDPA bf16", lambda: F.scaled_dot_product_attention(q, q, q))):
    probe(name, call)


def nccl_world_of_one() -> None:
    from ppdit.runtime.comm.wire import Wire

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, timeout=timedelta(seconds=60))
    a = torch.arange(8.0, device=dev)
    b = torch.empty_like(a)
    works = Wire(dev).batch([("send", a, 0), ("recv", b, 0)])
    for work in works:
        work.wait(timedelta(seconds=20))
    out["nccl_batch"] = {"works_for_2_ops": len(works), "equal": bool(torch.equal(a, b))}


def fsdp_bf16() -> None:
    from ppdit.analysis.tp_styles import example_inputs
    from ppdit.checkpoint.source import ModelSource
    from ppdit.checkpoint.tiny import build_tiny_pipeline
    from ppdit.model import forward_by_stages
    from ppdit.parallel.fsdp.load import load_sharded

    folder = build_tiny_pipeline(os.path.join(tempfile.mkdtemp(), "bf16"), stored=torch.bfloat16)
    src = ModelSource(folder=str(folder), dtype="bf16")
    latent, t, text = example_inputs("tiny", (1, 16, 5, 16, 16))
    ins = (latent.to(dev, torch.bfloat16), t.to(dev), text.to(dev, torch.bfloat16))
    with torch.no_grad():
        got = forward_by_stages(load_sharded(src, None, dev)[0], *ins)
        ref = forward_by_stages(src.dit(dev), *ins)
    out["fsdp_bf16_folder"] = {"bitwise": bool(torch.equal(got, ref)),
                               "max_abs": float((got.float() - ref.float()).abs().max())}


for name, call in (("nccl_batch", nccl_world_of_one), ("fsdp_bf16_folder", fsdp_bf16)):
    try:
        call()
    except Exception as e:
        out[name] = {"error": error(e)}
print(json.dumps(out))
os._exit(0)  # no NCCL teardown: not what is measured
