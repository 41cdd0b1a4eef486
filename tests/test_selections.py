"""Data-dependent selections on the meta device take their expected sizes (workload/selections.py):
mixture-of-experts layers that loop over the experts their router picked, and boolean masks of a dense batch."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from traincast.workload import trace
from traincast.workload.selections import ExpectedSelections, numbers_followed

T, D, FF, E, K = 32, 16, 24, 4, 2  # tokens, width, expert width, experts, experts per token


class LoopMoE(nn.Module):
    """A mixture-of-experts layer written the way transformers' DBRX, LongCat-Flash and Step write theirs (and
    two other ways of making the routing mask): a router, top-k, then a Python loop over the experts hit, each
    running its MLP on the tokens ``torch.where`` finds for it."""

    def __init__(self, mask: str):
        super().__init__()
        self.mask = mask
        self.inp = nn.Linear(D, D, bias=False)  # the experts' inputs need their gradient, as inside a model
        self.router = nn.Linear(D, E, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(D, FF, bias=False), nn.ReLU(), nn.Linear(FF, D, bias=False))
                                     for _ in range(E))
        self.w_in = nn.Parameter(torch.randn(E, D, FF))  # stacked experts (mask "stacked")
        self.w_out = nn.Parameter(torch.randn(E, FF, D))

    def forward(self, x):
        x = self.inp(x)
        weights, idx = torch.topk(self.router(x).softmax(-1), K, dim=-1)  # (T, K)
        out = torch.zeros_like(x)
        if self.mask == "one_hot":
            mask = F.one_hot(idx, num_classes=E).permute(2, 1, 0)  # (E, K, T)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            for e in hit:
                pos, tok = torch.where(mask[e].squeeze(0))
                y = self.experts[int(e[0])](x[tok]) * weights[tok, pos, None]
                out.index_add_(0, tok, y)
        elif self.mask == "eq":
            for e in range(E):
                sel = idx == e  # (T, K)
                tok, pos = sel.nonzero(as_tuple=True)
                out.index_add_(0, tok, self.experts[e](x[tok]) * weights[tok, pos, None])
        elif self.mask == "stacked":  # as GPT-OSS and OpenAI Privacy Filter write theirs: stacked weights, a skip test
            mask = F.one_hot(idx, num_classes=E).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            for e in hit:
                e = e[0]
                if e == E:  # "skip masking index": never true in training
                    continue
                pos, tok = torch.where(mask[e])
                y = (x[tok] @ self.w_in[e]).relu() @ self.w_out[e]
                out.index_add_(0, tok, y * weights[tok, pos, None])
        elif self.mask == "bool_index":
            for e in range(E):
                sel = (idx == e).any(-1)  # not followed: the any() of a routed mask is taken as full
                out = out + self.experts[e](x)[sel].sum() * 0
        return out


def _loss(module, x):
    return module(x).sum()


@pytest.mark.parametrize("mask", ["one_hot", "eq"])
def test_a_python_loop_over_routed_experts_traces_with_balanced_routing(mask):
    """Each of the E experts gets its even share, T*K/E, of the T*K routed rows: the expert GEMMs of the forward
    add up to those of K dense MLPs over every token, the backward to twice that, and every per-expert
    selection is counted as routed."""
    wl = trace(LoopMoE(mask), batch_size=T, inputs=(D,), optimizer="sgd")
    fwd = [o for o in wl.ops if o.phase == "forward" and ".experts." in o.module and o.op_class == "matmul"]
    rows = T * K // E
    assert {o.input_shapes[0][0] for o in fwd} == {rows}
    assert sum(o.flops for o in fwd) == 2 * T * K * (D * FF + FF * D)
    bwd = [o for o in wl.ops if o.phase == "backward" and ".experts." in o.module and o.op_class == "matmul"]
    assert sum(o.flops for o in bwd) == 2 * sum(o.flops for o in fwd)
    assert wl.routed_selections == E
    assert wl.dense_selections == (1 if mask == "one_hot" else 0)  # the "experts hit" list: every expert
    notes = wl.kernel_notes()
    assert any("sized as balanced routing" in n and f"{E} per-expert" in n for n in notes)


def test_a_mask_not_made_by_a_router_is_taken_as_full():
    """``(idx == e).any(-1)`` is not followed (any() of a routed mask): the boolean index selects every token,
    and the forecast says a selection was sized as a dense batch."""
    wl = trace(LoopMoE("bool_index"), batch_size=T, inputs=(D,), optimizer="sgd")
    assert wl.dense_selections == E and wl.routed_selections == 0
    assert any("sized as a dense batch" in n for n in wl.kernel_notes())


def test_selection_rules_on_meta_tensors():
    """The rules one by one: zeros are empty, a scatter of top-k indices into them fills K of E per row,
    counts of that mask have the expected value T*K/E and ``tolist()`` returns them with the exact total, an
    untagged mask selects every element, masked_select and boolean indexing agree with nonzero."""
    sel = ExpectedSelections()
    with sel:
        logits = torch.empty(T, E, device="meta")
        _, idx = logits.topk(K, dim=1)
        gates = torch.zeros(T, E, device="meta").scatter(1, idx, 1)
        assert gates.nonzero().shape == (T * K, 2)
        assert gates.long().sum(0).tolist() == [T * K // E] * E
        x = torch.empty(T, D, device="meta")
        full = torch.ones(T, dtype=torch.bool, device="meta")
        assert x[full].shape == (T, D)
        assert torch.masked_select(x, full[:, None]).shape == (T * D,)
        assert torch.where(full)[0].shape == (T,)
        assert torch.argmax(logits, dim=-1).eq(1).nonzero().shape == (T // E, 1)
    assert sel.routed == 3 and sel.dense == 3
    # real CPU ids moved to meta (how traincast feeds a vision-language model): the placeholder mask selects
    # exactly the placeholders, on meta as on the CPU
    ids = torch.zeros(2, 10, dtype=torch.long)
    ids[:, 3:7] = 99  # 4 image tokens per sample
    sel = ExpectedSelections()
    with sel:
        emb = torch.empty(2, 10, D, device="meta")
        mask = (ids.to("meta") == 99).unsqueeze(-1).expand_as(emb)
        assert emb[mask].shape == (2 * 4 * D,)
        cpu_mask = (ids == 99).to("meta")
        assert cpu_mask.nonzero().shape == (8, 2)
    assert sel.known_sized == 2 and sel.routed == 0 and sel.dense == 0
    # an odd total is spread with the remainder first, and nothing is tagged outside the mode
    sel = ExpectedSelections()
    with sel:
        mask = F.one_hot(torch.empty(5, dtype=torch.long, device="meta"), num_classes=3)
        assert mask.sum(0).tolist() == [2, 2, 1]
    with pytest.raises(NotImplementedError):
        torch.empty(3, device="meta").nonzero()


def test_jetmoe_splits_its_expert_gemms_by_the_expected_tokens_per_expert(tmp_path):
    """JetMoE turns its router's counts into a Python list (``expert_size.tolist()``) to split the tokens over
    its experts: the list is the balanced one, so each expert GEMM gets T*K/E rows."""
    L, b, n = 2, 2, 16
    cfg = {"model_type": "jetmoe", "hidden_size": D * 4, "num_hidden_layers": L, "num_local_experts": E,
           "num_experts_per_tok": K, "intermediate_size": 128, "kv_channels": 16, "num_key_value_heads": 2,
           "vocab_size": 1000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=b, seq_len=n)
    assert wl.routed_selections == 2 * L  # the MLP's and the attention's mixture of experts, per layer
    rows = b * n * K // E
    mlp = [o for o in wl.ops if o.phase == "forward" and o.module.endswith("mlp.input_linear") and o.op_class == "matmul"]
    assert len(mlp) == L * E and {o.input_shapes[0][0] for o in mlp} == {rows}


def test_a_skip_test_on_an_index_sized_without_values_does_not_skip_every_expert():
    """``if expert_idx == num_experts: continue`` reads an index a selection made without values: it reads as 0 (a
    valid index; before, the dense-batch answer True skipped every expert and none was traced). Each expert runs on
    its balanced share, and the backward of ``w[e]`` writes a gradient of the whole stack, as eager PyTorch's
    ``select_backward`` does, once per expert."""
    wl = trace(LoopMoE("stacked"), batch_size=T, inputs=(D,), optimizer="sgd")
    fwd = [o for o in wl.ops if o.phase == "forward" and o.op_class == "matmul" and o.input_shapes[0][0] == T * K // E]
    assert len(fwd) == 2 * E
    assert sum(o.flops for o in fwd) == 2 * T * K * (D * FF + FF * D)
    sel = [o for o in wl.ops if o.phase == "backward" and o.aten == "select_backward"]
    assert len(sel) == 2 * E and all(o.bytes_total >= E * D * FF * 4 for o in sel)


def test_sampler_masks_numbers_on_meta_and_followed_values():
    """A sampler's pick masks hold as many true elements as it picked (torchvision's detection samplers:
    ``zeros_like`` then ``mask[idx] = 1``, positives | negatives, ``torch.cat`` over images); numbers given to
    ``torch.tensor(..., device="meta")`` keep their values; a mask whose values the tracer followed is selected
    with its real count."""
    sel = ExpectedSelections()
    with sel, numbers_followed():
        matched = torch.empty(2000, dtype=torch.long, device="meta")
        pos = torch.zeros_like(matched, dtype=torch.uint8)
        neg = torch.zeros_like(matched, dtype=torch.uint8)
        pos[torch.empty(128, dtype=torch.long, device="meta")] = 1
        neg[torch.empty(384, dtype=torch.long, device="meta")] = 1
        assert torch.where(pos | neg)[0].shape == (512,)
        both = torch.cat([pos, neg])  # 512 of 4000
        assert torch.where(both)[0].shape == (512,)
        assert torch.where(matched >= 1)[0].shape == (2000,)  # not made by a sampler: full
        sizes = torch.tensor([3, 0, 3, 5], device="meta")
        assert sizes.device.type == "meta" and torch.where(sizes == 3)[0].shape == (2,)
    with sel:  # outside numbers_followed (a language model's forward): neither rule
        assert torch.where(torch.tensor([3, 0, 3, 5], device="meta") == 3)[0].shape == (4,)
        picked = torch.zeros(10, dtype=torch.uint8, device="meta")
        picked[torch.empty(3, dtype=torch.long, device="meta")] = 1
        assert torch.where(picked)[0].shape == (0,)  # zeros stay empty: the routing rules' answer
    assert sel.known_sized == 3 and sel.dense == 2 and sel.routed == 1
    flags = torch.tensor([1, 0, 1, 0, 0])
    followed = flags.to("meta")
    sel = ExpectedSelections(values={followed: flags})
    with sel, numbers_followed():
        assert torch.nonzero(followed).shape == (2, 1)
    with sel:
        assert torch.nonzero(followed).shape == (5, 1)  # outside: a dense batch, as for any other mask
    assert sel.known_sized == 1
