"""One training step as a sequence of stages (forward, backward, optimizer).

The same ``TrainingStep`` is traced on the meta device by ``trace_step`` and
run on real tensors (CPU or CUDA) by the measurement package, so a forecast
and a measurement describe exactly the same work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from traincast.errors import ConfigError, TraceError, UnknownNameError

from traincast.workload.optimizers import OPTIMIZERS
from traincast.workload.precision import get_precision


def make_optimizer(name: str, params, lr: float | None = None) -> torch.optim.Optimizer:
    """The optimizer ``name`` (see ``OPTIMIZERS``) over the trainable ``params``."""
    factory = OPTIMIZERS.get(name)
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ConfigError("no trainable parameters: every parameter is frozen")
    return factory(params, lr)


def apply_freeze(modules: list[nn.Module], freeze: str | None) -> None:
    """``None``/``none``: train everything. ``all``: nothing. ``all-but-last[:K]``:
    only the last K (default 1) modules that own parameters stay trainable
    (feature extraction, as in transfer learning)."""
    if freeze in (None, "", "none"):
        return
    root = modules[0]
    if freeze == "all":
        for p in root.parameters():
            p.requires_grad_(False)
        return
    if not freeze.startswith("all-but-last"):
        raise ConfigError(f"--freeze must be 'none', 'all-but-last' or 'all-but-last:K', got {freeze!r}")
    k = 1
    if ":" in freeze:
        try:
            k = int(freeze.split(":", 1)[1])
        except ValueError:
            raise ConfigError(f"--freeze all-but-last:K needs an integer K, got {freeze!r}") from None
        if k < 1:
            raise ConfigError(f"--freeze all-but-last:K needs K >= 1, got {k}")
    owners = [m for m in root.modules() if any(True for _ in m.parameters(recurse=False))]
    for p in root.parameters():
        p.requires_grad_(False)
    for m in owners[-k:]:
        for p in m.parameters(recurse=False):
            p.requires_grad_(True)


@dataclass
class TrainingStep:
    """A full training step: ``stages`` run in order, each tagged with its phase."""

    name: str
    modules: list[nn.Module]
    optimizers: list[torch.optim.Optimizer]
    stages: list[tuple[str, Callable[[], None]]]
    batch_size: int
    device: torch.device
    precision: str = "fp32"
    optimizer_name: str = "sgd"
    input_description: str = ""
    state: dict = field(default_factory=dict)
    master_params: list = field(default_factory=list)  # fp32 master weights of a half model (bf16/fp16)

    def _autocast(self):
        half = get_precision(self.precision).autocast
        if half is not None and self.device.type in ("cuda", "cpu"):
            return torch.autocast(device_type=self.device.type, dtype={"fp16": torch.float16, "bf16": torch.bfloat16}[half])
        return contextlib.nullcontext()

    def run(self, on_phase: Callable[[str], None] | None = None, autocast_modes=()) -> None:
        """One step. ``on_phase`` is told each stage's phase before it runs."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        switches = (get_precision(self.precision).backend_switches() if self.device.type == "cuda"
                    else contextlib.nullcontext())
        with switches:
            for phase, fn in self.stages:
                if on_phase is not None:
                    on_phase(phase)
                if phase == "forward":
                    with self._autocast():
                        fn()
                else:
                    fn()

    def warm_up(self) -> None:
        """Create optimizer state (momentum, Adam moments) as after the first step."""
        for opt in self.optimizers:
            if opt.state:
                continue
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = torch.zeros_like(p)
            opt.step()
            opt.zero_grad(set_to_none=True)

    def optimizer_state_bytes(self) -> int:
        seen: dict[int, int] = {}
        for opt in self.optimizers:
            for st in opt.state.values():
                for v in st.values():
                    if isinstance(v, torch.Tensor) and v.device.type == self.device.type:
                        seen[id(v)] = v.numel() * v.element_size()
        for m in self.master_params:  # fp32 master weights of a half model: optimizer state (ZeRO's accounting)
            seen[id(m)] = m.numel() * m.element_size()
        return sum(seen.values())


def resolve_device(device: str | torch.device, allowed=("cpu", "cuda", "meta")) -> torch.device:
    """``device`` as a torch.device that exists on this machine (``gpu`` means ``cuda``); a clear error naming
    the problem otherwise: an unknown name, CUDA asked for without a GPU, a GPU index past the last one."""
    name = str(device).strip().lower()
    name = "cuda" if name == "gpu" else name
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in allowed:
        raise UnknownNameError("device", str(device), [*allowed, *(["cuda:0"] if "cuda" in allowed else [])])
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {str(device)!r} asked for, but no CUDA GPU is available here; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {str(device)!r} does not exist; this machine has "
                              f"{torch.cuda.device_count()} GPU(s)")
    return dev


def supervised_step(
    name: str,
    module: nn.Module,
    make_batch: Callable[[torch.device], tuple[tuple, dict, torch.Tensor | None]],
    loss_fn: Callable,
    *,
    batch_size: int,
    device: torch.device,
    optimizer: str = "sgd",
    precision: str = "fp32",
    freeze: str | None = None,
    input_description: str = "",
) -> TrainingStep:
    """forward + loss, backward, optimizer step of one module on one batch.

    ``make_batch(device)`` returns ``(args, kwargs, target)``; ``loss_fn(output,
    target)`` returns the scalar loss.
    """
    module.train()
    apply_freeze([module], freeze)
    prec = get_precision(precision)
    half = prec.params_dtype
    masters: list[torch.Tensor] = []
    if half is not None and not prec.masters:  # the model and its optimizer states in half, no masters
        module.to(half)
        opt = make_optimizer(optimizer, module.parameters())
    elif half is not None:  # the model in half, fp32 master weights in the optimizer
        module.to(half)
        trainable = [p for p in module.parameters() if p.requires_grad]
        masters = [p.detach().float().clone().requires_grad_(True) for p in trainable]
        main_grads = [torch.zeros_like(m) for m in masters]  # fp32 gradients of the masters, kept between steps
        opt = make_optimizer(optimizer, masters)
    else:
        opt = make_optimizer(optimizer, module.parameters())
    args, kwargs, target = make_batch(device)
    if half is not None:
        args, kwargs = _to_half((args, kwargs), half)
    state: dict = {}

    def forward() -> None:
        out = module(*args, **kwargs)
        state["loss"] = loss_fn(out, target)

    def backward() -> None:
        state.pop("loss").backward()

    step_fn = opt.step
    if masters:
        @torch.no_grad()
        def step_fn() -> None:
            # the half gradients into the masters' fp32 ones, the step on the masters, the masters back into the model
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in trainable]
            torch._foreach_copy_(main_grads, grads)
            for m, g in zip(masters, main_grads):
                m.grad = g
            opt.step()
            torch._foreach_copy_(trainable, masters)

    step = TrainingStep(
        name=name,
        modules=[module],
        optimizers=[opt],
        stages=[("forward", forward), ("backward", backward), ("optimizer", step_fn)],
        batch_size=batch_size,
        device=device,
        precision=precision,
        optimizer_name=optimizer,
        input_description=input_description,
        state=state,
        master_params=masters,
    )
    return step


def _to_half(tree, dtype):
    """Floating-point tensors of a batch in the model's half dtype (ids, masks and labels keep theirs)."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, tree)


def check_traceable(fn: Callable, what: str):
    """Run ``fn``; turn shape errors into a TraceError naming ``what``."""
    try:
        return fn()
    except (RuntimeError, ValueError, IndexError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(f"{what}: {first}") from None
