"""Data-dependent selections on the meta device, answered with their expected sizes.

``torch.nonzero``, ``torch.where(cond)``, ``torch.argwhere``, ``masked_select`` and indexing with a boolean
mask return as many rows as the mask holds true values, and meta tensors hold no values. A trace meets them in
two kinds of places:

* **router masks** of mixture-of-experts layers that loop over the experts in Python (DBRX, NLLB-MoE,
  LongCat-Flash, Step, ...): ``one_hot(top_k_index, E)`` or ``indices == e`` or ``zeros.scatter(1, top_k, 1)``,
  then ``torch.where(mask[e])`` for each expert;
* **masks of a dense batch**: attention or padding masks, image-placeholder tokens, valid-patch masks.

:class:`ExpectedSelections` is a ``TorchFunctionMode`` that follows how full each boolean/integer tensor is
expected to be from how it was made, and gives every selection ``round(numel x density)`` rows:

* indices from ``topk``/``argmax``/``max(dim)`` over a dimension of ``n`` are categories of ``n``
  (``categories``); ``one_hot`` of them, or ``== k`` against one category, is true for ``1/n`` of the elements
  (balanced routing: each expert gets its even share of the routed tokens, what the load-balancing loss trains
  towards); ``torch.zeros`` is empty, and ``scatter`` of a value into it at ``m`` indices fills ``m`` elements;
* integer and boolean tensors with real values (the token ids and masks traincast makes on the CPU) that move
  to meta keep what they hold: their density, and ``== token`` against them (image or audio placeholders) has
  its real density;
* inside :func:`numbers_followed` (torchvision's detection step, which checks and samples its own targets by
  value): a sampler's pick masks (``mask = zeros_like(x); mask[idx] = 1``) hold as many true elements as ``idx``
  has, ``pos | neg`` of two of them their sum, ``torch.cat`` of tagged masks their weighted mean;
  ``torch.tensor(numbers, device="meta")`` is made on the CPU and moved, so that its values are known (PyTorch
  makes it below the dispatcher, where the tracer would not see them); and a mask whose real values the tracer
  followed (``_OpRecorder.values``, passed in as ``values``) is selected with its real count, unless it was
  computed from the stand-in indices of a selection sized without values (``guessed``: zeros that only keep shapes
  valid);
* views, reshapes, copies and dtype changes keep the density;
* anything else is full (density 1): every position of a dense batch is a real token.

Counts made from them (``mask.sum(0)``: tokens per expert) have an expected value, which ``tolist()`` returns
(JetMoE splits its expert GEMMs by such a list).

Each answered selection is counted (``routed`` for the ones that took a router density, ``known_sized`` for
the ones sized from real input values, ``dense`` for the rest), and the forecast names the routed and dense
ones.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary

_T = torch.Tensor


def unsized_selection(who: str) -> str:
    """The error line for a selection this module could not size (one made inside a kernel, not a torch call)."""
    return (f"{who} takes a shape from tensor values (torch.nonzero) inside an op traincast cannot size; values "
            "do not exist on the meta device. Selections made by torch calls (torch.where, nonzero, boolean masks, "
            "mixture-of-experts routing) are sized as balanced routing or a dense batch; this one is not")

# a tensor made by one of these from a tagged tensor has the tagged tensor's density / categories
_KEEPS = {
    _T.permute, torch.permute, _T.transpose, torch.transpose, _T.t, torch.t, _T.squeeze, torch.squeeze,
    _T.unsqueeze, torch.unsqueeze, _T.reshape, torch.reshape, _T.view, _T.flatten, torch.flatten, _T.contiguous,
    _T.clone, torch.clone, _T.to, _T.bool, _T.int, _T.long, _T.float, _T.half, _T.bfloat16, _T.type_as, _T.detach,
    torch.detach, _T.movedim, torch.movedim, _T.__getitem__, _T.expand, _T.expand_as, _T.select, torch.select,
    _T.unbind, torch.unbind, _T.chunk, torch.chunk, _T.split, torch.split, _T.view_as, _T.reshape_as,
}
_ZEROS = {torch.zeros, torch.zeros_like, _T.new_zeros}
_SCATTER = {torch.scatter, _T.scatter, _T.scatter_}
_EQ = {torch.eq, _T.eq, _T.__eq__}
_INDICES = {torch.topk: 1, _T.topk: 1, torch.max: 1, _T.max: 1, torch.min: 1, _T.min: 1,
            torch.argmax: None, _T.argmax: None, torch.argmin: None, _T.argmin: None}
_NONZERO = {torch.nonzero, _T.nonzero, torch.argwhere, _T.argwhere}
_MASKED_SELECT = {torch.masked_select, _T.masked_select}
_SUM = {torch.sum, _T.sum, torch.count_nonzero, _T.count_nonzero}
_BINCOUNT = {torch.bincount, _T.bincount}
_KNOWN_MAX = 1 << 24  # elements of a CPU tensor whose values are kept when it moves to meta
_SELECT = _NONZERO | _MASKED_SELECT | {torch.where, _T.__getitem__, _T.__setitem__, _T.tolist, _T.__format__}
_FROM_DATA = {torch.tensor, torch.as_tensor, torch.scalar_tensor}
_OR = {torch.logical_or, _T.logical_or, torch.bitwise_or, _T.bitwise_or, _T.__or__}
_CAT = {torch.cat, torch.concat, torch.concatenate}
_WATCHED = frozenset(_KEEPS | _ZEROS | _SCATTER | _EQ | set(_INDICES) | _SUM | _BINCOUNT | _SELECT | _FROM_DATA
                     | _OR | _CAT | {F.one_hot})


_NUMBERS: contextvars.ContextVar[bool] = contextvars.ContextVar("traincast_follow_numbers", default=False)


def following_numbers() -> bool:
    """Whether the rules of :func:`numbers_followed` are on."""
    return _NUMBERS.get()


@contextlib.contextmanager
def numbers_followed():
    """Inside, the rules of steps that check and sample their own targets by value (torchvision's detectors):
    ``torch.tensor(numbers, device="meta")`` is made on the CPU and moved, its values followed (the detectors
    rescale their boxes with such tensors, then test them with ``Tensor.item()``), a sampler's pick masks
    (``zeros_like``, ``mask[idx] = 1``, ``pos | neg``, ``torch.cat``) hold as many true elements as it picked, and
    a mask with followed values selects its real count.
    Off elsewhere: the mixture-of-experts layers of language models build routing masks the same ways, which the
    balanced-routing rules above size, and a forward that ran on followed numbers would take value-dependent code
    paths on the CPU while it is traced."""
    token = _NUMBERS.set(True)
    try:
        yield
    finally:
        _NUMBERS.reset(token)


def is_meta_device(device) -> bool:
    """Whether ``device`` (a torch.device, a string or None) names the meta device."""
    return isinstance(device, torch.device) and device.type == "meta" or isinstance(device, str) and device == "meta"


def _dim_arg(args, kwargs, pos: int):
    if "dim" in kwargs:
        return kwargs["dim"]
    if len(args) > pos and isinstance(args[pos], int):
        return args[pos]
    return None


def _dims(i) -> int:
    """How many dimensions of the indexed tensor one index item covers (None: none, a tensor: its own)."""
    if i is None or isinstance(i, bool):
        return 0
    if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
        return i.dim()
    return 1


def _check_masks(items, t: torch.Tensor) -> None:
    """PyTorch's check of boolean masks in an index: each covers dimensions of ``t`` of its own shape."""
    k = 0
    for n, i in enumerate(items):
        if i is Ellipsis:
            k = t.dim() - sum(_dims(j) for j in items[n + 1:] if j is not Ellipsis)
            continue
        if isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.dim() > 0:
            got = tuple(t.shape[k:k + i.dim()])
            if got != tuple(i.shape):
                j = next((d for d in range(i.dim()) if d >= len(got) or got[d] != i.shape[d]), 0)
                raise IndexError(f"The shape of the mask {list(i.shape)} at index {j} does not match the shape of "
                                 f"the indexed tensor {list(t.shape)} at index {k + j}")
        k += _dims(i)


class ExpectedSelections(TorchFunctionMode):
    """While active, data-dependent selections on meta tensors take their expected sizes (module docstring)."""

    def __init__(self, values=None):
        super().__init__()
        # meta tensors -> their real values, where the tracer followed them (``_OpRecorder.values``): a selection
        # of such a mask takes its real count
        self.values = values if values is not None else {}
        # the stand-in indices of selections sized without values, and (the tracer marks them) what is computed
        # from them: their followed values are placeholders, not training's
        self.guessed: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.density: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # expected share of true elements
        self.categories: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # index tensors: how many categories
        self.value: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # counts: expected value of each element
        self.known: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # meta tensors moved from real CPU values
        self.exact: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # densities known from real values
        self.full_counts: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # counts of masks taken as full
        self.routed = 0  # selections sized from a router's density
        self.known_sized = 0  # selections sized from real input values (placeholder tokens): exact
        self.dense = 0  # selections sized as full

    # --- what a tensor is expected to hold ----------------------------------------------------------
    def _tally(self, t: torch.Tensor, full: bool) -> None:
        """Count one answered selection: sized as full, from real values, or from a router's density."""
        if full:
            self.dense += 1
        elif t in self.exact:
            self.known_sized += 1
        else:
            self.routed += 1

    def _rows(self, mask: torch.Tensor) -> int:
        real = self.values.get(mask) if _NUMBERS.get() and mask not in self.guessed else None
        if real is not None:  # values the tracer followed (sampled labels, masks of real inputs): the real count
            self.known_sized += 1
            return int(real.count_nonzero())
        d = self.density.get(mask)
        self._tally(mask, d is None)
        return mask.numel() if d is None else int(round(mask.numel() * d))

    # --- the selections -----------------------------------------------------------------------------
    def _nonzero(self, mask: torch.Tensor, as_tuple: bool):
        n = self._rows(mask)
        if as_tuple:
            out = tuple(torch.zeros(n, dtype=torch.long, device=mask.device) for _ in range(max(mask.dim(), 1)))
        else:
            out = (torch.zeros((n, mask.dim()), dtype=torch.long, device=mask.device),)
        for t in out:  # stand-in indices: zeros the tracer follows, but not what training's indices hold
            self.guessed[t] = True
        return out if as_tuple else out[0]

    def _index(self, index, indexed: torch.Tensor | None = None):
        """A ``__getitem__``/``__setitem__`` index with its boolean tensors replaced by the long indices of their
        expected true elements (what PyTorch does with a boolean mask, with the count it would find). A mask whose
        shape is not that of the dimensions of ``indexed`` it covers raises PyTorch's IndexError (the long indices
        would hide it: meta's index does not check them against the tensor)."""
        items = index if isinstance(index, tuple) else (index,)
        if indexed is not None and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items):
            _check_masks(items, indexed)  # (masks on the CPU too: meta's index does not check them either)
        if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.device.type == "meta" for i in items):
            return index, False
        out: list = []
        for i in items:
            if isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.device.type == "meta":
                if i.dim() == 0:  # x[True]: a new axis of 1, as PyTorch does
                    out.append(None)
                else:
                    out.extend(self._nonzero(i, as_tuple=True))
            else:
                out.append(i)
        return tuple(out), True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func not in _WATCHED:  # most calls: nothing to size or to follow
            return func(*args, **(kwargs or {}))
        kwargs = kwargs or {}
        first = args[0] if args else None
        if func in _FROM_DATA and _NUMBERS.get() and is_meta_device(kwargs.get("device")) \
                and not isinstance(first, torch.Tensor):
            # torch.tensor(python numbers, device="meta") is made below the dispatcher, without the values it was
            # given: made on the CPU and moved, so that the tracer follows them (box scale factors, image sizes)
            cpu = func(*args, **{**kwargs, "device": "cpu"})
            out = cpu.to(kwargs["device"])
            self._tag(_T.to, (cpu, kwargs["device"]), {}, out)
            return out
        meta = isinstance(first, torch.Tensor) and first.device.type == "meta"
        if meta and func in _NONZERO:
            as_tuple = bool(kwargs.get("as_tuple", False)) and func is not torch.argwhere and func is not _T.argwhere
            return self._nonzero(first, as_tuple)
        if meta and func is torch.where and len(args) == 1 and not kwargs:
            return self._nonzero(first, as_tuple=True)
        if meta and func in _MASKED_SELECT:
            mask = args[1] if len(args) > 1 else kwargs["mask"]
            shape = torch.broadcast_shapes(first.shape, mask.shape)
            full = mask.expand(shape) if tuple(mask.shape) != tuple(shape) else mask
            for tags in (self.density, self.exact):
                if mask in tags:
                    tags[full] = tags[mask]
            return first.expand(shape).reshape(-1)[: self._rows(full)].clone()
        if meta and func is _T.__format__ and first.dim() == 0:
            # f"expert_{idx}" of a meta scalar: formatted as the value the tracer answers for it (``item()``), not
            # as "tensor(..., device='meta')"
            return format(first.item(), args[1] if len(args) > 1 else "")
        if meta and func is _T.tolist and first in self.value:
            return self._expected_list(first)
        if meta and func in (_T.__getitem__, _T.__setitem__) and len(args) >= 2:
            index, changed = self._index(args[1], first)
            if changed:
                args = (first, index, *args[2:])
        out = func(*args, **kwargs)
        self._tag(func, args, kwargs, out)
        return out

    def _expected_list(self, t: torch.Tensor):
        """``t.tolist()`` for a tensor of counts (tokens per expert): integers with the expected total, spread
        evenly (the first ones get the remainder)."""
        n = t.numel()
        total = int(round(self.value[t] * n))
        base, extra = divmod(total, n) if n else (0, 0)
        self._tally(t, t in self.full_counts and t not in self.exact)
        flat = [base + (1 if i < extra else 0) for i in range(n)]
        return torch.tensor(flat, dtype=torch.long).reshape(t.shape).tolist()

    # --- how full what was made is --------------------------------------------------------------------
    def _tag(self, func, args, kwargs, out) -> None:
        first = args[0] if args else None
        if func in _ZEROS and isinstance(out, torch.Tensor):
            self.density[out] = 0.0
            return
        if func in _CAT and _NUMBERS.get() and isinstance(out, torch.Tensor) and out.numel():
            parts = [t for t in first if isinstance(t, torch.Tensor)] if isinstance(first, (list, tuple)) else []
            if parts and all(t in self.density for t in parts):
                self.density[out] = sum(self.density[t] * t.numel() for t in parts) / out.numel()
                if all(t in self.exact for t in parts):
                    self.exact[out] = True
            return
        if not isinstance(first, torch.Tensor):
            return
        if func is _T.to and isinstance(out, torch.Tensor) and out.device.type == "meta" \
                and first.device.type == "cpu" and not first.is_floating_point() and first.numel() <= _KNOWN_MAX:
            # integer/boolean inputs with real values (token ids, masks) moved to meta: how full they are is known
            self.known[out] = first
            if first.numel():
                self.density[out] = float(first.count_nonzero()) / first.numel()
                self.exact[out] = True
            return
        if func in _KEEPS:
            if not (self.density or self.categories or self.value):
                return
            d, c, v = self.density.get(first), self.categories.get(first), self.value.get(first)
            if d is None and c is None and v is None:
                return
            e, f = self.exact.get(first), self.full_counts.get(first)
            for o in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(o, torch.Tensor):
                    for tags, x in ((self.density, d), (self.categories, c), (self.value, v), (self.exact, e),
                                    (self.full_counts, f)):
                        if x is not None:
                            tags[o] = x
            return
        if func in _SUM and isinstance(out, torch.Tensor) and out.numel():
            d = self.density.get(first)
            if d is None and first.dtype == torch.bool:  # counts of a mask not followed: a full one
                d = 1.0
                self.full_counts[out] = True
            if d is not None:
                self.value[out] = d * first.numel() / out.numel()
                if first in self.exact:
                    self.exact[out] = True
            return
        if func in _BINCOUNT and isinstance(out, torch.Tensor) and out.numel():
            self.value[out] = first.numel() / out.numel()
            return
        if func in _INDICES:
            pos = _INDICES[func]
            dim = _dim_arg(args, kwargs, 2 if func in (torch.topk, _T.topk) else 1)
            if dim is None and func in (torch.topk, _T.topk):
                dim = -1
            if dim is None or first.dim() == 0:
                return
            idx = out[pos] if pos is not None and isinstance(out, (tuple, list)) else out
            if isinstance(idx, torch.Tensor) and not idx.is_floating_point():
                self.categories[idx] = int(first.shape[dim])
            return
        if func is F.one_hot:
            n = self.categories.get(first)
            classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            n = n or (classes if isinstance(classes, int) and classes > 0 else None)
            if n and isinstance(out, torch.Tensor):
                self.density[out] = 1.0 / n
            return
        if func in _EQ and len(args) > 1 and isinstance(args[1], (int, torch.Tensor)):
            other = args[1]
            scalar = isinstance(other, int) or (isinstance(other, torch.Tensor) and other.numel() == 1)
            real = self.known.get(first)
            if real is not None and isinstance(other, int) and isinstance(out, torch.Tensor) and real.numel():
                self.density[out] = float((real == other).count_nonzero()) / real.numel()  # placeholder tokens
                self.exact[out] = True
                return
            n = self.categories.get(first)
            if n and scalar and isinstance(out, torch.Tensor):
                self.density[out] = 1.0 / n
            return
        if func is _T.__setitem__ and _NUMBERS.get() and len(args) > 2 and self.density.get(first) == 0.0 \
                and first.numel():
            # zeros[idx] = 1 (a sampler's mask of the indices it picked): as full as the indices are many
            items = args[1] if isinstance(args[1], tuple) else (args[1],)
            if len(items) == 1 and isinstance(items[0], torch.Tensor) and items[0].dtype == torch.long \
                    and not (isinstance(args[2], (int, float)) and args[2] == 0):
                self.density[first] = min(1.0, items[0].numel() / first.numel())
                self.exact[first] = True  # as many as were picked: a count, not a router's expectation
            return
        if func in _OR and _NUMBERS.get() and len(args) > 1 and isinstance(args[1], torch.Tensor) \
                and isinstance(out, torch.Tensor):
            a, b = self.density.get(first), self.density.get(args[1])
            if a is not None and b is not None:  # disjoint picks (positives | negatives): their sum
                self.density[out] = min(1.0, a + b)
                if first in self.exact and args[1] in self.exact:
                    self.exact[out] = True
            return
        if func in _SCATTER and isinstance(out, torch.Tensor) and self.density.get(first) == 0.0:
            index = args[2] if len(args) > 2 else kwargs.get("index")
            if isinstance(index, torch.Tensor) and out.numel():
                self.density[out] = min(1.0, index.numel() / out.numel())
