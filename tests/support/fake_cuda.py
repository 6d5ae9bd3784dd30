"""A CUDA device for a machine without one: tensors put on "cuda" live on the CPU but say
``cuda:0``, so code that honours the device it is handed runs here, and its results say where
they would have been on a GPU box.

How: a ``TorchFunctionMode`` (``fake_cuda()``) sees every torch call first. A call that names a
CUDA device (``.to("cuda")``, ``torch.zeros(..., device=device)``, ``Module.to``) or takes a
fake-CUDA tensor runs on the CPU tensors inside, and its tensor results are wrapped again
(``FakeCudaTensor``: a wrapper subclass whose ``device`` is ``cuda:0``). ``.cpu()`` unwraps,
as a copy off a GPU does. A call mixing fake-CUDA tensors with CPU tensors of one element or
more fails as it would on a GPU ("Expected all tensors to be on the same device"), so code that
leaves half its work on the CPU does not pass here for code that would run there. The arithmetic
is the CPU's, bit for bit. Nothing of ``torch.cuda`` itself is provided: the caller fakes
``torch.cuda.is_available`` and ``device_count`` (as ``tests/unit/test_placement.py`` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

CUDA = torch.device("cuda", 0)


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor (``.elem``) that says it is on ``cuda:0``."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=CUDA, requires_grad=elem.requires_grad)
        wrapper.elem = elem
        return wrapper

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # reached only by what the mode lets through (a wrapper's own bookkeeping)
        args, kwargs = _unwrap((args, kwargs or {}))
        return _wrap(func(*args, **kwargs))


def _is_cuda(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "cuda") or (
        isinstance(x, str) and x.startswith("cuda"))


def _map(fn, x):
    """``fn`` over the leaves of nested lists, tuples and dicts (torch's pytree, but cheaper:
    this runs on every torch call)."""
    if isinstance(x, list | tuple) and not hasattr(x, "_fields"):
        return type(x)(_map(fn, v) for v in x)
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    return fn(x)


def _leaves(x, out: list) -> list:
    if isinstance(x, list | tuple):
        for v in x:
            _leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _leaves(v, out)
    else:
        out.append(x)
    return out


def _unwrap(tree):
    return _map(lambda x: x.elem if isinstance(x, FakeCudaTensor)
                else torch.device("cpu") if _is_cuda(x) else x, tree)


def _wrap(tree):
    return _map(lambda x: FakeCudaTensor(x) if type(x) in (torch.Tensor, torch.nn.Parameter)
                else x, tree)


# Calls that must see the arguments as they are: parsing a device, and Module._apply's test of
# whether a converted tensor may replace a parameter's data in place (it may not: a new one).
_AS_IS = {torch.device, torch._C._nn._parse_to, torch._has_compatible_shallow_copy_type}
_OFF_DEVICE = {torch.Tensor.cpu, torch.Tensor.tolist, torch.Tensor.item}  # a copy to the host


class _FakeCudaMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _AS_IS or getattr(func, "__name__", "") in ("__get__", "__set__"):
            return func(*args, **kwargs)  # metadata (``.device`` says cuda) and ``.data = x``
        flat = _leaves((args, kwargs), [])
        fake = [x for x in flat if isinstance(x, FakeCudaTensor)]
        if func in _OFF_DEVICE:
            return func(*_unwrap(args), **kwargs)
        if func is torch.Tensor.numpy and fake:
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() "
                            "to copy the tensor to host memory first (fake CUDA, as torch says)")
        if func is torch.Tensor.cuda:
            return args[0] if fake else FakeCudaTensor(args[0])
        if not fake and not any(_is_cuda(x) for x in flat):
            return func(*args, **kwargs)  # the CPU's own work
        if func is torch.Tensor.to and _names_the_host(args[1:], kwargs):
            return func(*_unwrap(args), **_unwrap(kwargs))  # a copy off the device
        host = [x for x in flat if type(x) in (torch.Tensor, torch.nn.Parameter) and x.dim() > 0]
        if fake and host and func not in (torch.Tensor.__getitem__, torch.Tensor.__setitem__,
                                          torch.Tensor.to):
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at "
                               f"least two devices, cuda:0 and cpu! ({func.__name__} under fake "
                               "CUDA: a GPU would refuse it)")
        args, kwargs = _unwrap((args, kwargs))
        return _wrap(func(*args, **kwargs))


def _names_the_host(args, kwargs) -> bool:
    """Whether ``.to(...)``'s arguments name the CPU (a device, or a CPU tensor to match)."""
    return any((isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and
               x == "cpu") or (type(x) is torch.Tensor and x.device.type == "cpu")
               for x in _leaves((args, kwargs), []))


@contextlib.contextmanager
def fake_cuda() -> Iterator[None]:
    """Inside: "cuda" is a device, its tensors CPU tensors that say ``cuda:0``."""
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    lazy_init = torch.cuda._lazy_init
    # Module.to(cuda) must give new parameters (the wrappers), not CPU data swapped in place;
    # and torch's own CUDA start-up, which a ``.to("cuda")`` asks for first, has nothing to do.
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    torch.cuda._lazy_init = lambda: None
    try:
        with _FakeCudaMode():
            yield
    finally:
        torch.cuda._lazy_init = lazy_init
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
