"""CPU ranks started from ppdit's fork server on a GPU machine (what ``make test`` and
``make lab`` do there), a real path on them (TP compare, which asks ``cache_key``), and CUDA
ranks forced onto the fork server (refused in one line since issue 50). Each answer is
recorded, not fatal. Under ``__main__``: spawned ranks re-import this file."""

import json
import multiprocessing
import os


def first(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    hits = [ln for ln in text.splitlines() if "CUDA" in ln or "Error" in ln]
    return (hits[-1] if hits else text.splitlines()[0])[:300]


def cpu_rank(ctx) -> dict:
    """What a forked CPU rank sees of CUDA, and ppdit's compile-cache key there."""
    import torch

    from ppdit.runtime.compile_cache import cache_key

    seen = {"device": str(ctx.device), "method": multiprocessing.get_start_method(True)}
    for name, call in (("bad_fork", torch.cuda._is_in_bad_fork), ("cache_key", cache_key)):
        try:
            seen[name] = str(call())
        except Exception as e:
            seen[name] = first(e)
    return seen


def attempt(call) -> object:
    try:
        return call()
    except Exception as e:
        return first(e)


def main() -> None:
    from ppdit.analysis.tp_styles import TPCompare, TPVariant, run_tp_compare
    from ppdit.runtime import launch
    from ppdit.runtime.processes.hello import hello

    out = {"nvml_env": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")}
    out["cpu_ranks"] = attempt(lambda: launch(cpu_rank, 2, device="cpu", timeout_s=90,
                                              echo=False))
    variants = (TPVariant("single"), TPVariant("funcol"))
    out["tp_compare_cpu"] = attempt(lambda: run_tp_compare(
        TPCompare(variants, rounds=0), 2, device="cpu", echo=False, timeout_s=120) and "ok")
    os.environ["PPDIT_START_METHOD"] = "forkserver"  # read at each launch
    out["forkserver_cuda_ranks"] = attempt(lambda: [
        (r["device"], r["backend"]) for r in launch(hello, 2, device="cuda", timeout_s=90,
                                                    echo=False)])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
