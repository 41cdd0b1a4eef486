"""Mixed precision by torch.autocast's rules on meta tensors (workload/autocast.py, data/autocast_cuda.yaml).

The policy is checked three ways: against torch's own CUDA autocast test lists (names and, on meta, the dtype
each listed op gives), against real CPU autocast where CPU and CUDA agree, and against real CUDA autocast where
a GPU is present.
"""

import ast
import collections
import contextlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from traincast.workload import trace
from traincast.workload.autocast import autocast, policy_of, policy_table

_LISTS = Path(torch.__file__).parent / "testing" / "_internal" / "autocast_test_lists.py"
LOWER = ("torch_fp16", "nn_fp16", "linalg_fp16", "methods_fp16")
FP32 = ("torch_fp32", "nn_fp32", "methods_fp32")


def _torch_test_lists():
    """torch's own autocast test-list classes (CUDA: AutocastTestLists; CPU: AutocastCPUTestLists), compiled
    from the installed torch without the test harness they sit beside."""
    if not _LISTS.is_file():
        pytest.skip("this torch build ships no autocast test lists")
    ns = {"torch": torch, "collections": collections, "TEST_WITH_ROCM": False}
    for node in ast.parse(_LISTS.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name in ("AutocastTestLists", "AutocastCPUTestLists"):
            exec(compile(ast.Module([node], []), str(_LISTS), "exec"), ns)  # noqa: S102 - torch's own file
    return ns["AutocastTestLists"], ns["AutocastCPUTestLists"]


def _aten(name: str) -> str:
    return {"__matmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}.get(name, name)


def _fn(list_name: str, op: str):
    if list_name.startswith("nn"):
        return getattr(torch._C._nn, op)
    if list_name.startswith("linalg"):
        return getattr(torch._C._linalg, op)
    if list_name.startswith("methods"):
        return lambda *a, **k: getattr(a[0], op)(*a[1:], **k)
    return getattr(torch, op)


def _entries(lists, names):
    for ln in names:
        for e in getattr(lists, ln, []):
            op, args = e[0], e[1]
            if op == "einsum":  # (name, equation, operands)
                yield ln, op, (args,) + tuple(e[2]), {}
                continue
            kwargs = e[2] if len(e) > 2 and isinstance(e[2], dict) else {}
            yield ln, op, args, kwargs


def _meta(obj):
    if isinstance(obj, torch.Tensor):
        return torch.empty_like(obj, device="meta")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_meta(o) for o in obj)
    return obj


def _valid(fn, args, kwargs) -> bool:
    """Whether a sample call of torch's lists runs at all on meta without autocast (some have no meta kernel;
    einsum's sample does not match its equation)."""
    try:
        fn(*args, **kwargs)
        return True
    except (NotImplementedError, RuntimeError):
        return False


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _autocast_cuda_lines() -> dict[str, set[str]]:
    """Each aten op with a CUDA autocast kernel in this torch, with those of its overloads that have one."""
    out: dict[str, set[str]] = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA"):
            continue
        out.setdefault(name[len("aten::"):].split(".")[0], set()).add(name)
    return out


def test_policy_covers_exactly_the_ops_torchs_cuda_autocast_has_kernels_for():
    lines = _autocast_cuda_lines()
    ours = {n for n in policy_table()["lower_precision_fp"] + policy_table()["fp32"]
            + policy_table()["fp32_set_opt_dtype"] + policy_table()["fp32_append_dtype"]
            + policy_table()["promote"] + policy_table()["banned"]}
    assert set(lines) == ours, (sorted(set(lines) - ours), sorted(ours - set(lines)))


def test_data_file_names_its_source():
    t = policy_table()
    assert "autocast_mode.cpp" in t["source"] and t["torch_version"] and t["date"]


def test_policy_matches_torchs_own_cuda_test_lists():
    cuda_lists, _ = _torch_test_lists()
    lists = cuda_lists(torch.device("meta"))
    wrong = []
    for ln, expect in [(n, "lower_precision_fp") for n in LOWER] + [(n, "fp32") for n in FP32] + [
            ("torch_need_autocast_promote", "promote"), ("banned", "banned")]:
        for e in getattr(lists, ln):
            got = policy_of(_aten(e[0]))
            ok = got == expect or (expect == "fp32" and got in ("fp32_set_opt_dtype", "fp32_append_dtype"))
            if not ok:
                wrong.append(f"{e[0]} ({ln}): {got}")
    assert not wrong, wrong


def test_every_listed_op_gets_autocasts_dtype_on_meta():
    cuda_lists, _ = _torch_test_lists()
    lists = cuda_lists(torch.device("meta"))
    checked, wrong = 0, []
    for ln, op, args, kwargs in _entries(lists, LOWER + FP32 + ("torch_need_autocast_promote",)):
        if not _valid(_fn(ln, op), args, kwargs):
            continue
        with autocast(torch.float16):
            out = _first(_fn(ln, op)(*args, **kwargs))
        want = torch.float16 if ln in LOWER else torch.float32
        checked += 1
        if out.dtype != want:
            wrong.append(f"{op}: {out.dtype}")
    assert not wrong, wrong
    assert checked >= 80


def test_agrees_with_real_cpu_autocast_where_cpu_and_cuda_rules_agree():
    """CPU autocast has its own lists; where an op is on the same list for both devices, real autocast on the
    CPU and the emulation (CUDA's rules) on meta must give the same dtype. Elsewhere traincast applies CUDA's."""
    _, cpu_lists = _torch_test_lists()
    lists = cpu_lists(torch.device("cpu"))
    checked, wrong = 0, []
    for ln, op, args, kwargs in _entries(lists, ("torch_16", "nn_16", "torch_fp32", "nn_fp32")):
        pol = policy_of(op)
        same = (pol == "lower_precision_fp") if ln.endswith("16") else pol in ("fp32", "fp32_set_opt_dtype")
        if not same:
            continue
        fn = getattr(torch._C._nn, op) if ln.startswith("nn") else getattr(torch, op)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            real = _first(fn(*args, **kwargs)).dtype
        with autocast(torch.bfloat16):
            ours = _first(fn(*_meta(args), **_meta(kwargs))).dtype
        checked += 1
        if real != ours:
            wrong.append(f"{op}: real {real}, ours {ours}")
    assert not wrong, wrong
    assert checked >= 15


@contextlib.contextmanager
def _real_cuda_autocast(dtype, mode):
    """torch's own AutocastCUDA kernels, on fake CUDA tensors of ``mode`` (no GPU: the forward needs none;
    torch.autocast's Python wrapper would switch itself off without CUDA, so the switches are set directly)."""
    torch._C.set_autocast_enabled("cuda", True)
    torch._C.set_autocast_dtype("cuda", dtype)
    torch._C.autocast_increment_nesting()
    try:
        with mode:
            yield mode
    finally:
        torch._C.autocast_decrement_nesting()
        torch._C.set_autocast_enabled("cuda", False)
        torch._C.clear_autocast_cache()


def _fake_cuda(mode, obj):
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(obj, torch.Tensor):
        return FakeTensor(mode, torch.empty_like(obj, device="meta"), torch.device("cuda"))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fake_cuda(mode, o) for o in obj)
    return obj


_EXTRA = [  # calls of ops of the data file beyond torch's test lists
    ("interpolate-nearest", lambda x: F.interpolate(x, scale_factor=2.0)),
    ("interpolate-bilinear", lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear")),
    ("huber_loss", lambda x: F.huber_loss(x, x)),
    ("softmax-of-half", lambda x: torch.softmax(x.half(), -1)),
    ("sum-of-half", lambda x: x.half().sum()),
    ("vector_norm-of-half", lambda x: torch.linalg.vector_norm(x.half())),
    ("cumprod-of-half", lambda x: torch.cumprod(x.half(), 0)),
    ("cross_entropy", lambda x: F.cross_entropy(x.flatten(1), x[:, 0, 0, 0].long())),
    ("linear-then-layer_norm", lambda x: F.layer_norm(F.linear(x, x[0, 0]), (8,))),
    ("baddbmm-mixed", lambda x: torch.baddbmm(x[0], x[0].bfloat16(), x[0].bfloat16())),
    ("matrix_sqrth", lambda x: torch.ops.aten.linalg_matrix_sqrth(x[0, 0])),
]


def test_agrees_with_torchs_cuda_autocast_kernels_on_fake_cuda_tensors():
    cuda_lists, _ = _torch_test_lists()
    lists = cuda_lists(torch.device("meta"))
    wrong, checked = [], 0
    for dt in (torch.float16, torch.bfloat16):
        calls = [(op, _fn(ln, op), args, kwargs)
                 for ln, op, args, kwargs in _entries(lists, LOWER + FP32 + ("torch_need_autocast_promote",))]
        calls += [(name, f, (torch.empty(2, 4, 8, 8, device="meta"),), {}) for name, f in _EXTRA]
        for op, fn, args, kwargs in calls:
            if not _valid(fn, args, kwargs):
                continue
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = FakeTensorMode()
            fargs, fkwargs = _fake_cuda(mode, args), _fake_cuda(mode, kwargs)
            try:
                with _real_cuda_autocast(dt, mode):
                    real = _first(fn(*fargs, **fkwargs)).dtype
            except Exception:  # noqa: BLE001 - a kernel that asks the (absent) GPU something, e.g. cuDNN's
                continue
            with autocast(dt):
                ours = _first(fn(*args, **kwargs)).dtype
            checked += 1
            if real != ours:
                wrong.append(f"{op} {dt}: real {real}, ours {ours}")
    assert not wrong, wrong
    print(f"{checked} calls checked against the AutocastCUDA kernels")
    assert checked >= 150


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: real CUDA autocast")
def test_agrees_with_real_cuda_autocast():
    cuda_lists, _ = _torch_test_lists()
    dev = torch.device("cuda")
    lists = cuda_lists(dev)
    extra = [  # ops of the data file beyond torch's test lists
        ("interpolate-nearest", lambda x: F.interpolate(x, scale_factor=2.0)),
        ("interpolate-bilinear", lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear")),
        ("huber_loss", lambda x: F.huber_loss(x, x)),
        ("sdpa", lambda x: F.scaled_dot_product_attention(x, x, x)),
        ("softmax-of-half", lambda x: torch.softmax(x.half(), -1)),
        ("sum-of-half", lambda x: x.half().sum()),
        ("cross_entropy", lambda x: F.cross_entropy(x.flatten(1), torch.zeros(2, dtype=torch.long, device=x.device))),
        ("linear-then-layer_norm", lambda x: F.layer_norm(F.linear(x, x[0, 0]), (8,))),
        ("baddbmm-mixed", lambda x: torch.baddbmm(x[0], x[0].bfloat16(), x[0].bfloat16())),
    ]
    wrong, checked = [], 0
    for dt in (torch.float16, torch.bfloat16):
        for ln, op, args, kwargs in _entries(lists, LOWER + FP32 + ("torch_need_autocast_promote",)):
            fn = _fn(ln, op)
            try:
                with torch.autocast("cuda", dtype=dt):
                    real = _first(fn(*args, **kwargs)).dtype
            except RuntimeError:  # not supported in this dtype on this GPU
                continue
            if not _valid(fn, _meta(args), _meta(kwargs)):
                continue
            with autocast(dt):
                ours = _first(fn(*_meta(args), **_meta(kwargs))).dtype
            checked += 1
            if real != ours:
                wrong.append(f"{op} {dt}: real {real}, ours {ours}")
        x = torch.randn(2, 4, 8, 8, device=dev)
        for name, f in extra:
            with torch.autocast("cuda", dtype=dt):
                real = f(x).dtype
            with autocast(dt):
                ours = f(_meta(x)).dtype
            checked += 1
            if real != ours:
                wrong.append(f"{name} {dt}: real {real}, ours {ours}")
    print(f"checked {checked} calls against real CUDA autocast")
    assert not wrong, wrong


def test_bloom_traces_in_amp(tmp_path):
    """BLOOM adds its fp32 ALiBi bias with baddbmm to half-precision query-key products: autocast casts all
    three inputs of baddbmm to the half type."""
    import json

    cfg = tmp_path / "bloom.json"
    cfg.write_text(json.dumps({"model_type": "bloom", "architectures": ["BloomForCausalLM"], "hidden_size": 64,
                               "n_layer": 2, "n_head": 4, "vocab_size": 1000}))
    for prec, half in (("amp-bf16", "bf16"), ("amp-fp16", "fp16")):
        wl = trace(str(cfg), batch_size=2, seq_len=16, precision=prec)
        fwd = [o for o in wl.ops if o.phase == "forward"]
        assert {o.dtype for o in fwd if o.aten == "baddbmm"} == {half}
        assert {o.dtype for o in fwd if o.aten in ("_softmax", "native_layer_norm", "_log_softmax")} == {"fp32"}


class _Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return torch.softmax(self.norm(self.lin(x)), -1).sum(-1)


def test_dtype_per_op_of_a_small_model():
    wl = trace(_Small(), batch_size=2, inputs=(8,), precision="amp-bf16")
    fwd = [(o.aten, o.dtype) for o in wl.ops if o.phase == "forward"]
    # linear: input, weight and bias cast to bf16, then the bf16 addmm
    assert fwd[:4] == [("_to_copy", "bf16")] * 3 + [("addmm", "bf16")]
    # layer_norm: its bf16 input cast back to fp32; softmax and sum in fp32
    assert fwd[4:8] == [("_to_copy", "fp32"), ("native_layer_norm", "fp32"), ("_softmax", "fp32"), ("sum", "fp32")]
    bwd = [(o.aten, o.dtype) for o in wl.ops if o.phase == "backward"]
    assert ("mm", "bf16") in bwd  # the weight gradient's GEMM in bf16, as the forward's
    assert bwd[-2:] == [("_to_copy", "fp32"), ("_to_copy", "fp32")]  # gradients back to the fp32 parameters
    assert all(o.dtype == "fp32" for o in wl.ops if o.phase == "optimizer")


def test_weight_casts_are_cached_within_a_forward():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return self.lin(self.lin(x))

    wl = trace(Twice(), batch_size=2, inputs=(8,), precision="amp-fp16")
    casts = [o for o in wl.ops if o.phase == "forward" and o.aten == "_to_copy" and o.dtype == "fp16"]
    assert len(casts) == 3  # input, weight, bias; the second call reuses the weight and bias casts


def test_autocast_is_off_outside_and_in_other_threads():
    x = torch.randn(2, 8, device="meta")
    w = torch.randn(4, 8, device="meta")
    with autocast(torch.bfloat16):
        assert F.linear(x, w).dtype == torch.bfloat16
        import threading

        seen = []
        th = threading.Thread(target=lambda: seen.append(F.linear(x, w).dtype))
        th.start()
        th.join()
        assert seen == [torch.float32]
    assert F.linear(x, w).dtype == torch.float32
