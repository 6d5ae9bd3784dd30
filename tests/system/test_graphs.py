"""The project's compile cache (``ppdit.runtime.compile_cache``) across processes: an existing
setting respected, and a folder per CPU capability, since a process on another vector ISA must
neither read nor be served this machine's compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ppdit.runtime.compile_cache import ENV, cache_key, cache_root, use_project_compile_cache


def test_compile_cache_respects_an_existing_setting(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path / "mine"))
    assert use_project_compile_cache() == tmp_path / "mine"
    monkeypatch.delenv(ENV)
    path = use_project_compile_cache()
    assert path == cache_root().resolve() / cache_key()  # one folder per machine kind
    assert path.is_dir() and os.environ[ENV] == str(path)
    assert use_project_compile_cache(tmp_path / "x") == (tmp_path / "x").resolve()
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv(ENV, os.path.abspath(default_cache_dir()))  # what Inductor writes itself
    assert use_project_compile_cache() == path  # ... is not a choice: the project folder wins
    # a folder ppdit chose for another key (a parent process on another capability), or the
    # unkeyed folder of earlier versions, is not a choice either
    for inherited in (cache_root() / "torch0-other-key", cache_root()):
        monkeypatch.setenv(ENV, str(inherited))
        assert use_project_compile_cache() == path


def test_compile_cache_key_names_the_cpu_capability():
    """Inductor compiles CPU kernels for the vector ISA ATen runs with, and its own cache key
    does not name it: a process with another ``ATEN_CPU_CAPABILITY`` must get another folder."""
    import subprocess
    import sys

    other = "default" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "avx2"
    code = "from ppdit.runtime.compile_cache import cache_key; print(cache_key())"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": other}
    theirs = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert theirs != cache_key() and f"-{other}-" in theirs
    assert torch.__version__ in cache_key() and cache_key().count("/") == 0



def test_compile_cache_key_asks_cuda_nothing_before_the_process_uses_it(monkeypatch):
    """A CPU rank forked on a GPU machine must not initialise CUDA (issue 50): on a CUDA build,
    simulated, the key names the CUDA version and asks the GPUs only once CUDA is in use."""
    asked = []
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    for name in ("is_available", "device_count", "get_device_capability", "init"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: asked.append(_n) or 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert cache_key().endswith("-cu13.0") and asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0))
    assert cache_key().endswith("-cu13.0-sm90")


_COMPILE_UNDER = """
import json, torch
from ppdit.runtime.compile_cache import cache_key, use_project_compile_cache
folder = use_project_compile_cache()
g = torch.Generator().manual_seed(0)
x, w = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
def f(x, w):
    return torch.nn.functional.gelu(x @ w, approximate="tanh").softmax(-1)
ok = torch.allclose(torch.compile(f)(x, w), f(x, w), rtol=1e-5, atol=1e-6)
print(json.dumps({"ok": ok, "key": cache_key(), "folder": str(folder)}))
"""


def test_code_compiled_under_another_cpu_capability_is_right_and_cached_apart():
    """A process running another vector ISA (as another machine sharing the checkout would)
    compiles into its own folder and gets the right answer: with one unkeyed folder it was
    served this machine's kernels (two TP ranks even disagreed)."""
    import json
    import subprocess
    import sys

    other = "default" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "avx2"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": other}
    env.pop(ENV, None)
    out = json.loads(subprocess.run([sys.executable, "-c", _COMPILE_UNDER], env=env,
                                    capture_output=True, text=True, check=True,
                                    timeout=300).stdout.strip().splitlines()[-1])
    assert out["ok"], "compiled code under another ISA differs from eager"
    folder = Path(out["folder"])
    assert out["key"] != cache_key() and folder.name == out["key"] and f"-{other}-" in folder.name
    assert folder.parent == cache_root() and any(folder.rglob("*.py")), "nothing compiled there"
