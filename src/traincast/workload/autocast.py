"""torch.autocast's rules on meta tensors.

``torch.autocast(device_type="cuda")`` does nothing to meta tensors: its dispatch keys (``AutocastCUDA``, ...)
are per backend and a meta tensor carries none, and its kernels check that an input is on the autocast device.
So a trace on meta reproduces it where it acts: Python kernels for the listed ops on the otherwise unused
``AutocastPrivateUse1`` dispatch key (every other op falls through it), the key switched on for the thread while
a forward pass is traced. That key sits where autocast's keys sit
(above autograd, so the casts are recorded and the backward pass runs in the dtypes the forward gave it), and
nested calls inside composite ops (``cross_entropy`` -> ``log_softmax`` -> ``nll_loss``) pass through it too,
as they pass through autocast. (Real CUDA autocast does run on fake CUDA tensors without a GPU, but only the
forward: autograd's engine needs a CUDA context for the backward.) The per-op policy is CUDA's
(``data/autocast_cuda.yaml``, transcribed from PyTorch's ``autocast_mode.cpp``; tests/test_autocast.py checks it
against the installed torch's AutocastCUDA kernels):

- ``lower_precision_fp``: floating inputs (not fp64) cast to the autocast dtype; casts of leaf tensors that
  require grad (weights) are cached for the forward pass, as autocast caches them;
- ``fp32``: floating inputs cast to fp32; ``fp32_set_opt_dtype``: the op is called with ``dtype=float32``
  where the call gives none (no separate cast); ``fp32_append_dtype`` (``norm``): likewise through its dtype
  overload;
- ``promote``: floating inputs cast to the widest floating type among them;
- ``banned`` (``binary_cross_entropy``): traced in fp32 (real autocast refuses it; users compute it outside);
- every other op runs in the dtypes it is given.

CPU autocast has other lists (``torch.autocast("cpu")``: fewer fp32 ops, bf16 by default); traincast forecasts
GPU training and always applies CUDA's.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path

import torch

_DATA = Path(__file__).parent / "data" / "autocast_cuda.yaml"
_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_KEYSET = torch._C.DispatchKeySet(_KEY)


@functools.lru_cache(maxsize=1)
def policy_table() -> dict:
    """The CUDA autocast policy: the data file as read (``source``, ``torch_version``, lists by policy)."""
    from traincast import yamlio

    return yamlio.safe_load(_DATA.read_text())


@functools.lru_cache(maxsize=1)
def _policies() -> dict[str, str]:
    t = policy_table()
    out: dict[str, str] = {}
    for pol in ("lower_precision_fp", "lower_precision_fp_sdpa_kernels", "fp32", "fp32_set_opt_dtype",
                "fp32_append_dtype", "promote", "banned"):
        for name in t.get(pol) or ():
            out[name] = {"lower_precision_fp_sdpa_kernels": "lower_precision_fp"}.get(pol, pol)
    return out


def policy_of(op_name: str) -> str | None:
    """The autocast policy of the aten op ``op_name`` (overload packet name), None for ops autocast leaves."""
    return _policies().get(op_name)


def current_dtype() -> torch.dtype | None:
    """The dtype autocast lowers to in this thread now (None: autocast is off)."""
    return _STATE.dtype


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


class _State(threading.local):
    def __init__(self):
        self.dtype: torch.dtype | None = None
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


_STATE = _State()


def _cast(obj, to: torch.dtype, cache: bool):
    if isinstance(obj, torch.Tensor):
        if not _eligible(obj) or obj.dtype == to:
            return obj
        if cache and obj.is_leaf and obj.requires_grad:
            hit = _STATE.cache.get(id(obj))
            if hit is None or hit[0] is not obj:
                hit = (obj, obj.to(to))
                _STATE.cache[id(obj)] = hit
            return hit[1]
        return obj.to(to)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast(o, to, cache) for o in obj)
    return obj


def _widest(args, kwargs) -> torch.dtype | None:
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten((args, kwargs))
    dts = [t.dtype for t in flat if _eligible(t)]
    if not dts:
        return None
    return functools.reduce(torch.promote_types, dts)


def _kernel(op, pol: str):
    """The Python kernel of the emulated autocast key for ``op`` (an OpOverload) under policy ``pol``: cast by
    the policy, then call the op below the key (as autocast's own kernels do)."""

    def kernel(keyset, *args, **kwargs):
        dtype = _STATE.dtype
        with torch._C._ExcludeDispatchKeyGuard(_KEYSET):
            if dtype is None:  # registered by another thread's trace, not on in this one
                return op(*args, **kwargs)
            if pol == "lower_precision_fp":
                return op(*_cast(args, dtype, True), **{k: _cast(v, dtype, True) for k, v in kwargs.items()})
            if pol in ("fp32", "banned"):
                return op(*_cast(args, torch.float32, False),
                          **{k: _cast(v, torch.float32, False) for k, v in kwargs.items()})
            if pol in ("fp32_set_opt_dtype", "fp32_append_dtype"):
                names = [a.name for a in op._schema.arguments]
                at = names.index("dtype") if "dtype" in names else None
                given = kwargs.get("dtype") if at is None or at >= len(args) else args[at]
                if given is None and any(_eligible(a) and a.dtype != torch.float32 for a in args[:1]):
                    if at is None:  # no dtype in this overload (norm): cast the input
                        return op(*_cast(args, torch.float32, False), **kwargs)
                    if at < len(args):
                        return op(*args[:at], torch.float32, *args[at + 1:], **kwargs)
                    return op(*args, **{**kwargs, "dtype": torch.float32})
                return op(*args, **kwargs)
            # promote
            wide = _widest(args, kwargs)
            if wide is not None:
                args = _cast(args, wide, False)
                kwargs = {k: _cast(v, wide, False) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


_LOCK = threading.Lock()
_USERS = 0
_LIBS: list = []


def _register() -> list:
    """Every overload of every listed op gets its kernel for the key; every other op falls through it (as every
    op not on autocast's lists falls through autocast's key, so composite ops decompose with it on)."""
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    lib = torch.library.Library("aten", "IMPL")
    for name, pol in _policies().items():
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:  # an op this torch build does not have
            continue
        for ov in packet.overloads():
            lib.impl(name if ov == "default" else f"{name}.{ov}", _kernel(getattr(packet, ov), pol),
                     "AutocastPrivateUse1", with_keyset=True)
    return [fallback, lib]


@contextlib.contextmanager
def registered():
    """The emulation's kernels registered for the key while inside (shared by threads, counted)."""
    global _USERS, _LIBS
    with _LOCK:
        if _USERS == 0:
            _LIBS = _register()
        _USERS += 1
    try:
        yield
    finally:
        with _LOCK:
            _USERS -= 1
            if _USERS == 0:
                for lib in reversed(_LIBS):
                    lib._destroy()
                _LIBS = []


@contextlib.contextmanager
def autocast(dtype: torch.dtype):
    """Autocast to ``dtype`` for tensors on any device (meta included), in this thread, while inside.
    Weight casts are cached until the outermost region ends, as autocast caches them."""
    with registered():
        was_in = torch._C._dispatch_tls_is_dispatch_key_included(_KEY)
        was_ex = torch._C._dispatch_tls_is_dispatch_key_excluded(_KEY)
        old = _STATE.dtype
        _STATE.dtype = dtype
        torch._C._dispatch_tls_set_dispatch_key_included(_KEY, True)
        torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, False)
        try:
            yield
        finally:
            torch._C._dispatch_tls_set_dispatch_key_included(_KEY, was_in)
            torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, was_ex)
            _STATE.dtype = old
            if old is None:
                _STATE.cache.clear()
