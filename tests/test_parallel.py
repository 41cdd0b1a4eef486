"""Parallel training: splitting conserves FLOPs, communication volumes and memory by hand formulas for a small
GPT, pipeline schedules against their closed forms, the collective model, bad input (exit 2)."""

from __future__ import annotations

import json
import math

import pytest

from traincast.cli.main import _register_all, app, run
from traincast.hardware import get_catalog
from traincast.hardware.records import Cluster
from traincast.predict.collectives import (
    COLLECTIVES, CollectiveParams, FabricParams, Group, collective_s, default_params, fabric_of,
)
from traincast.predict.compose import WorkloadFamily
from traincast.predict.parallel import ParallelConfig, ParallelModel, analyse, resolve
from traincast.predict.parallel.engine import shard_ops
from traincast.predict.parallel.schedule import closed_form, device_orders, simulate
from traincast.predict.registry import default_predictor

H, HEADS, LAYERS, SEQ, VOCAB = 64, 4, 4, 32, 512
PHI = 12 * LAYERS * H * H + 13 * LAYERS * H + VOCAB * H + SEQ * H + 2 * H  # GPT-2 parameters, tied embeddings


@pytest.fixture(scope="session")
def small_gpt(tmp_path_factory):
    p = tmp_path_factory.mktemp("gpt") / "config.json"
    p.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": H, "n_head": HEADS,
                             "n_layer": LAYERS, "n_positions": SEQ, "n_ctx": SEQ, "vocab_size": VOCAB,
                             "activation_function": "gelu", "tie_word_embeddings": True}))
    return str(p)


@pytest.fixture(scope="session")
def family(small_gpt):
    return WorkloadFamily(small_gpt, optimizer="adamw", precision="amp-bf16", seq_len=SEQ)


@pytest.fixture(scope="session")
def a100():
    return get_catalog().device("A100-SXM4-80GB")


def ideal_params() -> CollectiveParams:
    """Collectives at the datasheet bandwidth with no latency: time = bus bytes / link bandwidth."""
    f = FabricParams("nvswitch", 1.0, 0.0, 0.0, 0.0, 0.5)
    return CollectiveParams(intra={"nvswitch": f}, network=FabricParams("network", 1.0, 0.0, 0.0, 0.0, 0.5))


@pytest.fixture(scope="session")
def model(family, a100):
    return ParallelModel(family, a100, Cluster(a100, 8, 1), default_predictor(), "amp-bf16", exact_traces=True)


@pytest.fixture(scope="session")
def ideal_model(family, a100):
    return ParallelModel(family, a100, Cluster(a100, 8, 1), default_predictor(), "amp-bf16",
                         collectives=ideal_params(), exact_traces=True)


# --- the layout of a traced GPT ----------------------------------------------------------------------------
@pytest.mark.parametrize("t", [2, 4])
def test_the_vocabulary_parallel_embedding_makes_its_share_of_the_weight_gradient(family, t):
    """Each tensor rank of a vocabulary-parallel embedding makes the gradient rows of its 1/t of the vocabulary:
    the dense (vocab, h) gradient, its casts and the tied head's sum are 1/t on a rank, not whole."""
    wl = family.trace(4)
    lay = analyse(wl)
    idx = [i for i, o in enumerate(wl.ops) if o.phase != "optimizer"]
    sharded = shard_ops(wl.ops, lay, t, False, idx)
    k = next(k for k, i in enumerate(idx) if wl.ops[i].aten == "embedding_dense_backward"
             and wl.ops[i].output_shapes[0] == (VOCAB, H))
    assert sharded[k].output_shapes[0] == (VOCAB // t, H)
    assert sharded[k].bytes_written * t == wl.ops[idx[k]].bytes_written
    # the lookup's output (every token's row, all-reduced over the ranks) stays whole
    f = next(k for k, i in enumerate(idx) if wl.ops[i].aten == "embedding" and wl.ops[i].phase == "forward")
    assert sharded[f].output_shapes == wl.ops[idx[f]].output_shapes


@pytest.mark.parametrize("layers,pp,v,sizes", [
    (70, 12, 1, [5] + [6] * 10 + [5]),  # BLOOM: 70 layers on 12 stages, the ends lighter (they hold the embeddings)
    (80, 8, 1, [10] * 8),
    (4, 3, 1, [1, 2, 1]),
    (7, 2, 1, [4, 3]),
    (10, 2, 2, [2, 3, 3, 2]),  # interleaved: the chunks in order
])
def test_layers_that_do_not_divide_go_to_the_middle_stages(layers, pp, v, sizes):
    from types import SimpleNamespace

    from traincast.predict.parallel.engine import _layers_per_chunk

    got = _layers_per_chunk(SimpleNamespace(layers=layers), SimpleNamespace(pp=pp, virtual_stages=v))
    assert got == sizes and sum(got) == layers


def test_an_uneven_pipeline_is_forecast_stage_by_stage(model):
    """4 layers on 3 stages: the middle stage holds 2 layers and is the slowest; the bubble is that of equal
    stages at the slowest one's pace or more."""
    cfg = ParallelConfig(tp=1, pp=3, dp=1, micro_batch=1)
    st = model.evaluate(cfg, 6)
    assert [s.layers for s in st.stages] == [1, 2, 1]
    fb = [s.forward_s + s.backward_s for s in st.stages]
    assert fb[1] == max(fb)
    assert st.bubble_share >= (3 - 1) / (6 + 3 - 1) - 1e-9


def test_layout_finds_layers_roles_and_parameters(family):
    wl = family.trace(4)
    lay = analyse(wl)
    assert lay.layers == LAYERS and lay.hidden == H and lay.heads == HEADS
    assert lay.tokens == 4 * SEQ and lay.seq_len == SEQ
    # per layer: c_attn and c_fc column-parallel (two groups), attn.c_proj and mlp.c_proj row-parallel
    assert lay.row_linears[1:-1] == (2,) * LAYERS and lay.col_groups[1:-1] == (2,) * LAYERS
    assert lay.col_groups[-1] == 1  # the vocabulary-parallel head
    # parameters each unit reads, by hand: 12h^2 + 13h per layer; the tied embedding counted in pre and post
    assert lay.unit_params[1] == 12 * H * H + 13 * H
    assert sum(lay.unit_params) - lay.tied_params == PHI == wl.trainable_parameters


def _flops(ops):
    return sum(o.flops for o in ops)


@pytest.mark.parametrize("t", [2, 4])
def test_tensor_split_conserves_flops(family, t):
    """Sum over the t ranks of the split ops = the unsplit ops; with sequence parallelism every op is split."""
    wl = family.trace(4)
    lay = analyse(wl)
    idx = [i for i, o in enumerate(wl.ops) if o.phase != "optimizer"]
    base = [wl.ops[i] for i in idx]
    sharded = shard_ops(wl.ops, lay, t, False, idx)
    split = [k for k, i in enumerate(idx) if lay.roles[i].role in ("col", "row", "sharded")
             and (lay.roles[i].split or lay.roles[i].role == "sharded")]
    assert sum(sharded[k].flops for k in split) * t == pytest.approx(sum(base[k].flops for k in split), rel=1e-3)
    rest = [k for k in range(len(idx)) if k not in set(split)]
    assert sum(sharded[k].flops for k in rest) >= sum(base[k].flops for k in rest) / t  # replicated: every rank
    with_sp = shard_ops(wl.ops, lay, t, True, idx)
    repl = [k for k, i in enumerate(idx) if lay.roles[i].role == "replicated"]
    assert sum(with_sp[k].flops for k in repl) * t == pytest.approx(sum(base[k].flops for k in repl), rel=1e-2)
    # a column-parallel GEMM keeps its own shapes: the output features divided
    k = next(k for k, i in enumerate(idx) if lay.roles[i].role == "col" and lay.roles[i].split == "n"
             and wl.ops[i].phase == "forward" and "c_fc" in wl.ops[i].module)
    assert sharded[k].output_shapes[0][-1] == 4 * H // t
    assert sharded[k].input_shapes[1] == (4 * SEQ, H) and sharded[k].input_shapes[2] == (H, 4 * H // t)


def test_step_flops_conserved_with_recomputation(ideal_model):
    none = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=2), 4)
    full = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=2, recompute="full"), 4)
    uc = ideal_model.unit_costs(1, False, 2)
    layer_fwd = sum(uc.forward_flops[1:-1])
    assert full.flops_per_replica == pytest.approx(none.flops_per_replica + 2 * layer_fwd)  # 2 micro-batches
    sel = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=2, recompute="selective"), 4)
    assert none.flops_per_replica < sel.flops_per_replica < full.flops_per_replica
    # pipeline stages share the work; tensor ranks with sequence parallelism split all of it
    pp = ideal_model.evaluate(ParallelConfig(pp=2, dp=1, micro_batch=2), 4)
    assert pp.flops_per_replica == pytest.approx(none.flops_per_replica)
    sp = ideal_model.evaluate(ParallelConfig(tp=2, dp=1, micro_batch=2, sequence_parallel=True), 4)
    assert sp.flops_per_replica == pytest.approx(none.flops_per_replica, rel=0.01)


# --- communication volumes by hand ---------------------------------------------------------------------------
def test_tensor_parallel_all_reduces_by_hand(ideal_model, a100):
    t, mb = 2, 2
    st = ideal_model.evaluate(ParallelConfig(tp=t, dp=1, micro_batch=mb), mb)
    msg = mb * SEQ * H * 2  # tokens x hidden x bf16 bytes
    ar = 2 * (t - 1) / t * msg / (a100.link.gb_per_s * 1e9)
    # per layer: 2 all-reduces forward (after the row-parallel layers), 2 backward; the embedding's 1 forward;
    # the head's 1 backward
    expected = (4 * LAYERS + 1 + 1) * ar
    assert st.stages[0].tensor_comm_s == pytest.approx(expected, rel=1e-6)
    sp = ideal_model.evaluate(ParallelConfig(tp=t, dp=1, micro_batch=mb, sequence_parallel=True), mb)
    half = (t - 1) / t * msg / (a100.link.gb_per_s * 1e9)  # one all-gather or reduce-scatter
    # forward: 2 all-gathers + 2 reduce-scatters per layer; backward: 2 + 2, and the 2 inputs gathered again
    assert sp.stages[0].tensor_comm_s == pytest.approx((10 * LAYERS + 1 + 3) * half, rel=1e-6)


def test_tp_comm_overlap_hides_the_gathers_under_the_gemms_by_hand(ideal_model, a100):
    """--tp-comm-overlap: per unit and phase, exposed = comm / t + max(0, comm x (t - 1) / t - the unit's column-
    and row-parallel GEMM time); the total volume is unchanged and the step is faster."""
    t, mb = 2, 2
    plain = ParallelConfig(tp=t, dp=1, micro_batch=mb, sequence_parallel=True)
    over = ParallelConfig(tp=t, dp=1, micro_batch=mb, sequence_parallel=True, tp_comm_overlap=True)
    a, b = ideal_model.evaluate(plain, mb), ideal_model.evaluate(over, mb)
    uc = ideal_model.unit_costs(t, True, mb)
    assert all(g > 0 for g in uc.tp_gemm_forward_s[1:-1]) and all(g > 0 for g in uc.tp_gemm_backward_s[1:-1])
    half = (t - 1) / t * mb * SEQ * H * 2 / (a100.link.gb_per_s * 1e9)
    expected = 0.0
    for u in range(len(uc.forward_s)):
        is_layer = 0 < u < len(uc.forward_s) - 1
        f = 4 * half if is_layer else (half if u == 0 else 0.0)  # 2 all-gathers + 2 reduce-scatters; the embedding
        bwd = 6 * half if is_layer else (3 * half if u == len(uc.forward_s) - 1 else 0.0)
        for c, g in ((f, uc.tp_gemm_forward_s[u]), (bwd, uc.tp_gemm_backward_s[u])):
            expected += c / t + max(0.0, c * (t - 1) / t - g)
    assert b.stages[0].tensor_comm_s == pytest.approx(expected, rel=1e-6)
    assert b.stages[0].tensor_comm_s < a.stages[0].tensor_comm_s
    assert b.comm_total_by_kind["tensor"] == pytest.approx(a.comm_total_by_kind["tensor"], rel=1e-9)
    assert b.iteration_s < a.iteration_s
    assert "tp-overlap" in over.label()


def lay_params(model):
    """Parameters per unit as the engine gathers them (one copy of a tied embedding without pipeline stages)."""
    lay = model.layout
    units = list(lay.unit_params)
    if lay.tied_params:
        units[-1] = max(0, units[-1] - lay.tied_params)
    return units


def test_data_parallel_and_zero_volumes_by_hand(ideal_model, a100):
    bw = a100.link.gb_per_s * 1e9
    grad_bytes = PHI * 4
    d = 4
    st = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=2, overlap_grad_sync=False), 2)
    assert st.comm_total_by_kind["data"] == pytest.approx(2 * (d - 1) / d * grad_bytes / bw, rel=1e-6)
    assert st.comm_exposed_by_kind["data"] == pytest.approx(st.comm_total_by_kind["data"], rel=1e-6)
    z1 = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=2, sharding="zero1", overlap_grad_sync=False), 2)
    # reduce-scatter of the gradients, then all-gather of the updated (fp32) parameters
    assert z1.comm_total_by_kind["data"] == pytest.approx((d - 1) / d * (grad_bytes + PHI * 4) / bw, rel=1e-6)
    z3 = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=2, sharding="zero3"), 2)
    # per unit: all-gather forward, all-gather + reduce-scatter backward, (d-1)/d of the parameters each; with
    # AMP the gathers move the half-precision parameters (2 bytes: FSDP's MixedPrecisionPolicy, ZeRO-3's bf16
    # parameters), the reduce-scatter the fp32 gradients (4 bytes)
    lay = ideal_model.layout
    counted = sum(lay.unit_params) - lay.tied_params
    assert z3.comm_total_by_kind["sharding"] == pytest.approx((d - 1) / d * counted * (2 + 2 + 4) / bw, rel=1e-6)


def test_pipeline_sends_by_hand(ideal_model, a100):
    st = ideal_model.evaluate(ParallelConfig(pp=2, dp=1, micro_batch=1), 4)
    msg = 1 * SEQ * H * 2
    # each of the 4 micro-batches: one send forward, one backward, on the busiest stage's boundary
    assert st.comm_total_by_kind["pipeline"] == pytest.approx(2 * 4 * msg / (a100.link.gb_per_s * 1e9), rel=1e-6)


# --- memory by hand --------------------------------------------------------------------------------------
def test_memory_by_hand_formula(ideal_model, family):
    one = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=4), 4)
    wl = family.trace(4)
    # AMP keeps fp32 parameters and gradients (4 + 4 bytes) and Adam's two fp32 moments (8 bytes) per parameter
    assert one.memory["parameters"] == PHI * 4
    assert one.memory["gradients"] == PHI * 4
    assert one.memory["optimizer"] == PHI * 8
    # one replica without splitting holds what the trace says: its saved tensors are the activations and the
    # half-precision weight copies autocast keeps for the backward pass (one per weight and bias)
    copies = sum(2 * n for n in (3 * H * H, 3 * H, H * H, H, 4 * H * H, 4 * H, 4 * H * H, H)) * LAYERS + 2 * VOCAB * H
    assert one.memory["weight_copies"] == copies
    assert one.memory["activations"] + one.memory["weight_copies"] == pytest.approx(wl.memory.activation_bytes, abs=2)
    assert one.peak_memory_bytes == pytest.approx(wl.memory.peak_bytes, abs=8)
    d = 4
    z1 = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=4, sharding="zero1"), 4)
    z2 = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=4, sharding="zero2"), 4)
    z3 = ideal_model.evaluate(ParallelConfig(dp=d, micro_batch=4, sharding="zero3"), 4)
    assert z1.memory["optimizer"] == PHI * 8 // d and z1.memory["gradients"] == PHI * 4
    assert z2.memory["gradients"] == PHI * 4 // d
    assert z3.memory["parameters"] == PHI * 4 // d
    # the gathered unit and the prefetched next, in half precision, are the weight copies the layers run with:
    # twice the largest unit (the tied embedding/head, counted in the post unit) at 2 bytes, and no autocast copies
    assert z3.memory["buffers"] == pytest.approx(2 * max(lay_params(ideal_model)) * 2, rel=1e-6)
    assert z3.memory["weight_copies"] == 0
    off = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=4, offload_optimizer=True), 4)
    assert off.memory["optimizer"] == 0
    # full recomputation keeps each layer's input (tokens x h x 4 bytes: the fp32 residual stream) and one layer
    full = ideal_model.evaluate(ParallelConfig(dp=1, micro_batch=4, recompute="full"), 4)
    assert full.memory["activations"] < one.memory["activations"]
    uc = ideal_model.unit_costs(1, False, 4)
    # (the output unit's activations are freed by its backward before any layer is recomputed: one recomputed layer
    # needs only what exceeds them)
    kept = (uc.activation_bytes[0] + uc.activation_bytes[-1] + LAYERS * 4 * SEQ * H * 4
            + max(0.0, max(uc.activation_bytes[1:-1]) - uc.activation_bytes[-1]))
    assert full.memory["activations"] == pytest.approx(kept, rel=1e-6)
    assert kept < uc.activation_bytes[0] + uc.activation_bytes[-1] + LAYERS * 4 * SEQ * H * 4 + max(
        uc.activation_bytes[1:-1])  # the old sum, which held both at once
    # tensor parallelism with sequence parallelism divides every activation by t
    sp = ideal_model.evaluate(ParallelConfig(tp=2, dp=1, micro_batch=4, sequence_parallel=True), 4)
    assert sp.memory["activations"] == pytest.approx(one.memory["activations"] / 2, rel=1e-6)
    # 1F1B: the first stage holds p micro-batches' activations, the last one
    pp = ideal_model.evaluate(ParallelConfig(pp=2, dp=1, micro_batch=1), 4)
    assert [s.in_flight for s in pp.stages] == [2, 1]


def test_fsdp_with_one_micro_batch_peaks_gradients_and_activations_apart(ideal_model):
    """FSDP, one micro-batch a step: gradients set to None each step are made as the backward pass frees the
    activations (peak = the rest + max(activations, gradients)); with two micro-batches they are accumulated, and
    ZeRO-3 keeps its partitions: the sum."""
    def parts(st):
        m = st.memory
        return m["parameters"] + m["optimizer"] + m["weight_copies"] + m["transient"] + m["buffers"]

    one = ideal_model.evaluate(ParallelConfig(dp=4, micro_batch=4, sharding="fsdp-full"), 4)
    m = one.memory
    assert one.peak_memory_bytes == pytest.approx(parts(one) + max(m["activations"], m["gradients"]), abs=8)
    assert any("peak apart" in n for n in one.notes)
    two = ideal_model.evaluate(ParallelConfig(dp=4, micro_batch=2, sharding="fsdp-full"), 4)
    assert two.peak_memory_bytes == pytest.approx(parts(two) + two.memory["activations"] + two.memory["gradients"],
                                                  abs=8)
    z3 = ideal_model.evaluate(ParallelConfig(dp=4, micro_batch=4, sharding="zero3"), 4)
    assert z3.peak_memory_bytes == pytest.approx(parts(z3) + z3.memory["activations"] + z3.memory["gradients"], abs=8)


# --- op-level selective checkpointing (torchtitan's "selective op" policy) -----------------------------------
LH, LKV, LF, LL = 64, 32, 128, 2  # a small Llama: hidden, key/value width (2 of 4 heads), MLP width, layers


@pytest.fixture(scope="module")
def llama_model(tmp_path_factory, a100):
    p = tmp_path_factory.mktemp("llama") / "config.json"
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": LH,
                             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": LF,
                             "num_hidden_layers": LL, "vocab_size": VOCAB, "max_position_embeddings": SEQ}))
    fam = WorkloadFamily(str(p), optimizer="adamw", precision="amp-bf16", seq_len=SEQ)
    return ParallelModel(fam, a100, Cluster(a100, 8, 1), default_predictor(), "amp-bf16",
                         collectives=ideal_params(), exact_traces=True)


def test_op_level_checkpointing_keeps_every_other_matmul_and_attention(llama_model):
    """In each layer the 1st, 3rd, 5th and 7th aten.mm (q, v, gate, down projections) and the attention kernel are
    kept; k, o and up projections and every elementwise op are recomputed: FLOPs, time and memory by hand."""
    mb = 2
    wl, lay = llama_model.inputs(mb)
    tokens = mb * SEQ
    for u in range(1, LL + 1):
        fwd = [i for i, o in enumerate(wl.ops) if o.phase == "forward" and lay.roles[i].unit == u]
        kept = [wl.ops[i] for i in fwd if lay.roles[i].op_saved]
        mms = [wl.ops[i].module.rsplit(".", 1)[-1] for i in fwd if wl.ops[i].aten == "mm"]
        assert mms == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        assert sorted(o.module.rsplit(".", 1)[-1] for o in kept if o.aten == "mm") == \
            ["down_proj", "gate_proj", "q_proj", "v_proj"]
        assert sum(1 for o in kept if o.op_class == "attention") == 1 and len(kept) == 5
        # what it keeps: the four GEMM outputs in bf16 and the attention kernel's outputs
        attn = next(o for o in kept if o.op_class == "attention")
        saved = sum(lay.saved_bytes[i] for i in fwd)
        assert saved == tokens * (LH + LKV + LF + LH) * 2 + attn.bytes_written
        assert attn.bytes_written >= tokens * LH * 2
    none = llama_model.evaluate(ParallelConfig(dp=1, micro_batch=mb), 2 * mb)
    op = llama_model.evaluate(ParallelConfig(dp=1, micro_batch=mb, recompute="selective-op"), 2 * mb)
    full = llama_model.evaluate(ParallelConfig(dp=1, micro_batch=mb, recompute="full"), 2 * mb)
    uc = llama_model.unit_costs(1, False, mb)
    # FLOPs: the forward of each layer again, less the kept ops; the recomputed GEMMs are k, o and up
    recomputed = sum(uc.forward_flops[u] - uc.saved_forward_flops[u] for u in range(1, LL + 1))
    assert op.flops_per_replica == pytest.approx(none.flops_per_replica + 2 * recomputed)
    rec_mm = sum(o.flops for i, o in enumerate(wl.ops) if o.phase == "forward" and o.aten == "mm"
                 and 0 < lay.roles[i].unit <= LL and not lay.roles[i].op_saved)
    assert rec_mm == LL * 2 * tokens * LH * (LKV + LH + LF)
    assert none.flops_per_replica < op.flops_per_replica < full.flops_per_replica
    assert op.recompute_s == pytest.approx(2 * sum(uc.forward_s[u] - uc.saved_forward_s[u] for u in range(1, LL + 1)))
    # memory: pre and post as traced, each layer's input (the fp32 residual stream) and what it keeps, and the
    # recomputed rest of one layer while its backward runs
    rest = max(uc.activation_bytes[u] - uc.saved_activation_bytes[u] for u in range(1, LL + 1))
    kept_bytes = (uc.activation_bytes[0] + uc.activation_bytes[-1] + LL * tokens * LH * 4
                  + sum(uc.saved_activation_bytes[1:-1]) + max(0.0, rest - uc.activation_bytes[-1]))
    assert op.memory["activations"] == pytest.approx(kept_bytes, abs=1)
    assert full.memory["activations"] < op.memory["activations"] < none.memory["activations"]


# --- schedules ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 1), (8, 32)])
def test_1f1b_bubble_with_equal_stages(p, m):
    r = simulate([1.0] * p, [2.0] * p, m, p)
    assert r.bubble_share == pytest.approx((p - 1) / (m + p - 1))
    assert r.makespan_s == pytest.approx((m + p - 1) * 3.0)
    assert r.in_flight == tuple(min(p - d, m) for d in range(p))
    assert closed_form([1.0] * p, [2.0] * p, m, p).makespan_s == pytest.approx(r.makespan_s)
    g = simulate([1.0] * p, [2.0] * p, m, p, schedule="gpipe")
    assert g.makespan_s == pytest.approx(r.makespan_s) and g.in_flight == (m,) * p


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4)])
def test_interleaved_bubble_shrinks_by_v(p, m, v):
    n = p * v
    r = simulate([1.0 / v] * n, [2.0 / v] * n, m, p, v)
    assert r.makespan_s == pytest.approx((m + (p - 1) / v) * 3.0)  # Narayanan et al. 2021
    assert closed_form([1.0 / v] * n, [2.0 / v] * n, m, p, v).makespan_s == pytest.approx(r.makespan_s)
    assert sum(1 for op in device_orders(p, m, v)[0] if op[0] == "F") == m * v


def test_closed_form_close_to_simulation_with_unequal_stages_and_sends():
    import random

    rng = random.Random(7)
    errs = []
    for _ in range(60):
        p, m = rng.choice([2, 4, 8]), rng.choice([4, 8, 16])
        f = [rng.uniform(0.8, 1.2) for _ in range(p)]
        b = [2 * x for x in f]
        c = rng.choice([0.0, 0.05])
        errs.append(abs(closed_form(f, b, m, p, 1, c).makespan_s / simulate(f, b, m, p, 1, c).makespan_s - 1))
    assert max(errs) < 0.15 and sum(errs) / len(errs) < 0.04


# --- collectives -----------------------------------------------------------------------------------------
def test_collective_volumes_and_topology():
    ideal = ideal_params()
    g = Group(8, 8, 1, 8, 100e9, "nvlink3", 50e9)
    S = 1e9
    assert collective_s("all-reduce", S, g, ideal) == pytest.approx(2 * 7 / 8 * S / 100e9)
    assert collective_s("all-gather", S, g, ideal) == pytest.approx(7 / 8 * S / 100e9)
    assert collective_s("reduce-scatter", S, g, ideal) == pytest.approx(7 / 8 * S / 100e9)
    assert collective_s("send-recv", S, Group(2, 2, 1, 8, 100e9, "nvlink3", 50e9), ideal) == pytest.approx(S / 100e9)
    # across 4 nodes: each node's network is shared by its 8 GPUs' rings: bounded by the node's NICs
    g4 = Group(32, 8, 4, 8, 100e9, "nvlink3", 50e9)
    assert collective_s("all-reduce", S, g4, ideal) == pytest.approx(2 * 31 / 32 * S / 50e9)
    # a group with 2 of a node's 8 GPUs gets a quarter of the NICs (the other groups use the rest)
    g2 = Group(8, 2, 4, 8, 100e9, "nvlink3", 50e9)
    assert collective_s("all-reduce", S, g2, ideal) == pytest.approx(2 * 7 / 8 * S / (50e9 / 4))
    assert collective_s("all-reduce", S, Group(1, 1, 1, 8, 1e9, "nvlink3", 1e9), ideal) == 0.0
    assert fabric_of("nvlink2") == "nvlink-mesh" and fabric_of("nvlink4") == "nvswitch" and fabric_of("pcie4") == "pcie"
    assert set(COLLECTIVES.names()) >= {"all-reduce", "all-gather", "reduce-scatter", "send-recv", "all-to-all"}


def test_fitted_collectives_reproduce_nccl_measurements(shared_data):
    """The shipped fit against two measurements it was fitted on, and a sanity range for its parameters."""
    p = default_params()
    assert 0.3 < p.intra["nvswitch"].bus_efficiency <= 1.0 and 0.3 < p.network.bus_efficiency <= 1.0
    a100 = get_catalog().device("A100-SXM4-40GB")
    one_node = Group.of_cluster(Cluster(a100, 8, 1), 8)
    # Echo nccl-tests, 8 A100 in a node, 1 GiB all-reduce: 8139 us
    assert collective_s("all-reduce", 1 << 30, one_node) == pytest.approx(8139e-6, rel=0.15)
    # 128 A100 on 16 nodes, 8 x 200 Gb/s InfiniBand each, 1 GiB: 16586 us
    nodes = Group.of_cluster(Cluster(a100, 8, 16, inter_node_gbit_per_s=1600), 128)
    assert collective_s("all-reduce", 1 << 30, nodes) == pytest.approx(16586e-6, rel=0.15)
    line = (shared_data / "collectives" / "echo_a100_ib_allreduce_8gpu.log").read_text()
    assert "1073741824" in line  # the measurement the figure above comes from


# --- data parallelism does not scale perfectly ----------------------------------------------------------------
def test_data_parallel_speedup_below_linear(small_gpt):
    from traincast.predict import forecast

    f = forecast(small_gpt, gpu="A100-80GB", gpus=8, batch_size=64, seq_len=SEQ, precision="amp-bf16",
                 optimizer="adamw", dataset_size=6400)
    last = f.scaling[-1]
    assert last.gpus == 8 and last.speedup < 7.8
    assert f.straggler_s > 0 and f.communication_total_s > 0
    assert f.iteration_s == pytest.approx(f.forward_s + f.backward_s + f.optimizer_s + f.communication_s
                                          + f.overhead_s + f.straggler_s)


# --- forecast and CLI -------------------------------------------------------------------------------------------
def test_forecast_with_layout_reports_strategy_stages_and_memory(small_gpt):
    from traincast.predict import forecast

    cfg, _ = resolve(8, tp=2, pp=2, micro_batch=1)
    f = forecast(small_gpt, gpu="A100-80GB", gpus=8, batch_size=16, seq_len=SEQ, precision="amp-bf16",
                 optimizer="adamw", strategy=cfg, dataset_size=1600)
    d = f.to_dict()
    assert d["strategy"]["tp"] == 2 and d["strategy"]["dp"] == 2 and d["strategy"]["micro_batches"] == 8
    assert len(d["stages"]) == 2 and d["stages"][0]["layers"] == LAYERS // 2
    assert 0 < d["bubble_share"] < 1 and d["comm_exposed_by_kind"]["tensor"] > 0
    assert d["memory"]["peak"] == d["peak_memory_bytes"] and d["fits_in_memory"]
    assert f.steps_per_epoch == 100


@pytest.fixture(scope="module")
def cli():
    _register_all()
    return app


def _run(cli, args, capsys):
    code = run(args, cli)
    return code, capsys.readouterr()


@pytest.mark.parametrize("extra,msg", [
    (["--tp", "3"], "does not divide the 8 GPUs"),
    (["--tp", "2", "--pp", "2", "--dp", "4"], "not the 8 GPUs"),
    (["--zero", "1", "--fsdp", "full"], "give one of them"),
    (["--pp", "8", "--dp", "1"], "more than the model's 4 layers"),
    (["--pp", "8", "--tp", "1", "--dp", "1", "--gpus", "8"], "more than the model's 4 layers"),
    (["--micro-batch", "3"], "does not divide"),
    (["--schedule", "interleaved:2"], "needs pipeline stages"),
    (["--schedule", "1fb1"], "did you mean"),
    (["--sequence-parallel"], "needs --tp >= 2"),
    (["--tp", "2", "--tp-comm-overlap"], "needs --tp >= 2 and --sequence-parallel"),
    (["--tp", "8"], "does not divide the model's 4 attention heads"),
    (["--recompute", "partial"], "unknown recomputation"),
])
def test_bad_layouts_exit_2_with_one_line(cli, capsys, small_gpt, extra, msg):
    args = ["predict", small_gpt, "--gpu", "A100-80GB", "--gpus", "8", "-b", "16", "--seq-len", str(SEQ)] + extra
    code, out = _run(cli, args, capsys)
    assert code == 2, out
    lines = [ln for ln in out.err.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0], out.err


def test_tensor_parallel_across_nodes_warns(cli, capsys, small_gpt):
    args = ["predict", small_gpt, "--gpu", "A100-80GB", "--gpus", "4", "--nodes", "2", "-b", "8", "--seq-len",
            str(SEQ), "--tp", "4", "--json"]
    code, out = _run(cli, args, capsys)
    assert code == 0, out.err
    d = json.loads(out.out)
    assert any("tensor parallelism across nodes" in n for n in d["notes"])


def test_parallelize_lists_fastest_layouts_that_fit(cli, capsys, small_gpt):
    args = ["parallelize", small_gpt, "--gpu", "A100-80GB", "--gpus", "8", "-b", "32", "--seq-len", str(SEQ),
            "--micro-batches", "1,2,4", "--json"]
    code, out = _run(cli, args, capsys)
    assert code == 0, out.err
    d = json.loads(out.out)
    best = d["best"]
    assert best["fits_in_memory"] and best["config"]["gpus"] == 8
    top = d["top"]
    assert 1 <= len(top) <= 10 and all(c["fits_in_memory"] for c in top)
    assert [c["iteration_s"] for c in top] == sorted(c["iteration_s"] for c in top)
    assert d["considered"] > len(top)
    # 3 GPUs: 3 divides neither the 4 heads nor the 4 layers (stages of 1, 2 and 1 layers are too uneven for the
    # search: the fullest holds 50% more than the mean), and 3 replicas cannot share a batch of 7
    code, out = _run(cli, ["parallelize", small_gpt, "--gpu", "A100-80GB", "--gpus", "3", "-b", "7"], capsys)
    assert code == 2 and "error:" in out.err


def test_predict_with_the_best_layout_takes_parallelizes_choice(small_gpt):
    from traincast.errors import ConfigError
    from traincast.predict.options import forecast_from_options
    from traincast.predict.parallel.search import parallelize

    kw = dict(gpu="A100-SXM4-80GB", gpus=8, batch_size=32, seq_len=SEQ, precision="amp-bf16", optimizer="adamw")
    best = parallelize(small_gpt, **kw).best
    f = forecast_from_options(small_gpt, best_layout=True, steps=10, **kw)
    label = f.strategy["label"] if f.strategy else "plain data parallel"
    assert label == (best.config.label() if not best.config.is_plain_data_parallel else "plain data parallel")
    assert f.iteration_s == pytest.approx(best.iteration_s, rel=1e-6) and f.total_s == pytest.approx(10 * f.iteration_s)
    assert any("as `traincast parallelize` finds it" in n for n in f.notes)
    with pytest.raises(ConfigError, match="--best-layout searches the layout itself"):
        forecast_from_options(small_gpt, best_layout=True, tp=2, **kw)


def test_strategy_registries_name_every_choice():
    from traincast.predict.parallel import RECOMPUTATIONS, SCHEDULES, SHARDINGS

    assert {"none", "zero1", "zero2", "zero3", "fsdp-full", "fsdp-grad-op", "fsdp-hybrid"} <= set(SHARDINGS.names())
    assert {"1f1b", "gpipe", "interleaved"} <= set(SCHEDULES.names())
    assert {"none", "selective", "selective-op", "full"} <= set(RECOMPUTATIONS.names())
    cfg, warn = resolve(16, tp=2, pp=2, fsdp="hybrid", schedule="interleaved:2", recompute="selective",
                        sequence_parallel=True)
    assert cfg.dp == 4 and cfg.sharding == "fsdp-hybrid" and cfg.virtual_stages == 2 and not warn
    assert math.prod((cfg.tp, cfg.pp, cfg.dp)) == cfg.gpus == 16


def test_plan_uses_the_best_layout_per_configuration(small_gpt):
    from traincast.plan.pareto import plan

    kw = dict(epochs=1, dataset_size=6400, batch_size=64, gpus=(8,), gpu_types=("A100-80GB",), precision="amp-bf16",
              optimizer="adamw", seq_len=SEQ)
    searched = plan(small_gpt, layouts="search", **kw)
    plain = plan(small_gpt, layouts="data-parallel", **kw)
    assert searched.configs and all(c.layout == "" for c in plain.configs)
    for s, p in zip(searched.configs, plain.configs):
        assert s.instance == p.instance and s.fits_in_memory
        # a layout replaces replicas only when it is faster
        assert s.iteration_s <= p.iteration_s * (1 + 1e-9)
        assert (s.layout == "") == (s.iteration_s == p.iteration_s)
    assert "layout" in searched.to_dict()["configurations"][0]


def test_exposed_gradient_sync_closed_form_equals_the_bucket_by_bucket_queue():
    """The bucketed all-reduce's exposed tail in O(1) equals the queue simulated bucket by bucket (DDP: bucket k
    starts when the backward pass has produced it and bucket k-1 is done)."""
    import random

    from traincast.predict.parallel.engine import _exposed_after

    def queue(t_sync, backward_s, nbytes, bucket):
        n = max(1, math.ceil(nbytes / bucket))
        sizes = [bucket] * (n - 1) + [nbytes - bucket * (n - 1)]
        finish = done = 0.0
        for sz in sizes:
            done += sz
            finish = max(finish, backward_s * done / nbytes) + t_sync * sz / nbytes
        return max(0.0, finish - backward_s)

    r = random.Random(0)
    for _ in range(2000):
        args = (r.uniform(0.01, 2), r.uniform(0.01, 2), r.uniform(1e3, 1e10), r.choice([1e6, 25e6, 4e8, 3e9]))
        assert _exposed_after(*args) == pytest.approx(queue(*args), rel=1e-9, abs=1e-12)
    assert _exposed_after(0.0, 1.0, 1e9, 25e6) == 0.0
    assert _exposed_after(3.0, 1.0, 1e9, 1e9) == pytest.approx(3.0)  # one bucket: all of it after the backward


def test_a_mixture_of_experts_is_searched_with_expert_parallelism(tmp_path, a100):
    """The expert count is read off the batched expert GEMMs; the search tries expert-parallel degrees that divide
    it and the data-parallel ranks, and a degree that does not divide the experts is one clear error."""
    from traincast.errors import ConfigError
    from traincast.predict.parallel.search import enumerate_layouts

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
                             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                             "vocab_size": 1000, "max_position_embeddings": 64}))
    fam = WorkloadFamily(str(p), optimizer="adamw", precision="amp-bf16", seq_len=32)
    pm = ParallelModel(fam, a100, Cluster(a100, 8, 1), default_predictor(), "amp-bf16", exact_traces=True)
    assert pm.layout.experts == 4 and pm.layout.moe_layers == 2
    eps = {cfg.ep for cfg, _ in enumerate_layouts(pm, 8, 16)}
    assert eps == {1, 2, 4}  # 8 does not divide the 4 experts
    with pytest.raises(ConfigError, match="--ep 8 does not divide"):
        pm.evaluate(ParallelConfig(tp=1, pp=1, dp=8, ep=8), 2)
    step = pm.evaluate(ParallelConfig(tp=1, pp=1, dp=8, ep=4), 2)
    plain = pm.evaluate(ParallelConfig(tp=1, pp=1, dp=8, ep=1), 2)
    assert step.memory["parameters"] < plain.memory["parameters"]  # each rank holds 1 of 4 experts' weights


def test_the_search_interleaves_chunks_that_do_not_divide_the_layers(tmp_path, a100):
    """Llama 3 405B's 126 layers on 16 stages of 2 or 4 chunks (3.94 and 1.97 layers a chunk) ran interleaved; the
    search tries every chunk count whose fullest chunk holds at most 10% more layers than the mean, as for stages
    (before, only counts that divide the layers). On 2 stages: 10 layers in 2 x 2 chunks (2.5 a chunk, the fullest
    3: +20%) or 2 x 4 (1.25, 2: +60%) are not tried; 11 layers in 2 x 2 chunks (2.75, 3: +9%) are."""
    from traincast.predict.parallel.search import enumerate_layouts

    def interleaved(layers):
        p = tmp_path / f"config{layers}.json"
        p.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": layers,
                                 "n_positions": 32, "vocab_size": 500}))
        fam = WorkloadFamily(str(p), optimizer="adamw", precision="amp-bf16", seq_len=32)
        pm = ParallelModel(fam, a100, Cluster(a100, 8, 1), default_predictor(), "amp-bf16", exact_traces=True)
        return {cfg.virtual_stages for cfg, _ in enumerate_layouts(pm, 2, 8, virtual=(2, 4, 5))
                if cfg.pp == 2 and cfg.schedule == "interleaved"}

    assert interleaved(8) == {2, 4}  # 8 layers divide into 2 x 2 and 2 x 4 chunks
    assert interleaved(10) == {5}  # 10 = 2 x 5 x 1; 2.5 and 1.25 a chunk are too uneven
    assert interleaved(11) == {2}  # 2.75 a chunk, the fullest 3 (+9%)

