"""Tracing: FLOPs against hand formulas, phases, memory, specs, frozen layers."""

import json
from dataclasses import replace

import pytest
import torch
from torch import nn

from traincast.errors import ConfigError, SpecError, TraceError, UnknownNameError
from traincast.workload import Workload, trace


def conv_flops(b, cin, cout, k, hout, wout):
    return 2 * b * cin * cout * k * k * hout * wout


def test_conv_and_linear_flops_match_hand_formulas():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, bias=False), nn.Flatten(), nn.Linear(16 * 30 * 30, 10, bias=False))
    wl = trace(model, batch_size=4, inputs=(3, 32, 32))
    fwd = [o for o in wl.ops if o.phase == "forward"]
    conv = [o for o in fwd if o.aten == "convolution"]
    mm = [o for o in fwd if o.aten == "mm"]
    assert len(conv) == 1 and len(mm) == 1
    assert conv[0].flops == conv_flops(4, 3, 16, 3, 30, 30)
    assert mm[0].flops == 2 * 4 * (16 * 30 * 30) * 10
    # backward: input grad of the linear and both weight grads; the conv's input needs no grad
    bwd = [o for o in wl.ops if o.phase == "backward"]
    conv_b = [o for o in bwd if o.aten == "convolution_backward"]
    assert conv_b[0].flops == conv_flops(4, 3, 16, 3, 30, 30)  # weight grad only
    assert sum(o.flops for o in bwd if o.aten == "mm") == 2 * (2 * 4 * (16 * 30 * 30) * 10)


def test_resnet50_forward_is_4_1_gmacs_per_image(resnet50_b8):
    gmacs = resnet50_b8.flops("forward") / resnet50_b8.batch_size / 2e9
    assert 4.05 < gmacs < 4.2
    assert resnet50_b8.parameters == 25_557_032


def test_backward_is_about_twice_forward_for_conv_nets(resnet50_b8):
    ratio = resnet50_b8.flops("backward") / resnet50_b8.flops("forward")
    assert 1.85 < ratio < 2.05


def test_views_cost_nothing_and_phases_are_all_present(resnet50_b8):
    names = {o.aten for o in resnet50_b8.ops}
    assert not names & {"view", "t", "transpose", "expand", "detach", "_unsafe_view"}
    assert {o.phase for o in resnet50_b8.ops} == {"forward", "backward", "optimizer"}
    assert all(o.bytes_total > 0 for o in resnet50_b8.ops)
    assert resnet50_b8.unregistered_ops == ()


def test_sgd_momentum_steady_state_uses_foreach_kernels(resnet50_b8):
    opt = [o for o in resnet50_b8.ops if o.phase == "optimizer"]
    # momentum update and parameter update: multi-tensor kernels over all 161 tensors
    assert all(o.aten.startswith("_foreach_") for o in opt)
    assert max(o.n_tensors for o in opt) == 161
    m = resnet50_b8.memory
    assert m.optimizer_state_bytes == m.parameter_bytes  # one momentum buffer per parameter


def test_adam_state_is_two_moments():
    wl = trace("resnet18", batch_size=2, optimizer="adam")
    assert wl.memory.optimizer_state_bytes == 2 * wl.memory.parameter_bytes


def test_freezing_the_backbone_removes_weight_gradient_work():
    full = trace("resnet18", batch_size=4)
    frozen = trace("resnet18", batch_size=4, freeze="all-but-last")
    assert frozen.trainable_parameters == 512 * 1000 + 1000
    assert frozen.flops("forward") == full.flops("forward")
    assert frozen.flops("backward") < 0.001 * full.flops("backward")
    assert frozen.memory.gradient_bytes == frozen.trainable_parameters * 4
    assert frozen.memory.activation_bytes < 0.05 * full.memory.activation_bytes


def test_mixed_precision_puts_matmuls_and_convs_in_half():
    wl = trace("resnet18", batch_size=32, precision="amp-bf16")
    convs = [o for o in wl.ops if o.op_class == "conv"]
    assert convs and all(o.dtype == "bf16" for o in convs)
    # weights are cast once per step, and activations are about half
    assert any(o.aten == "_to_copy" for o in wl.ops)
    fp32 = trace("resnet18", batch_size=32)
    assert wl.memory.activation_bytes < 0.6 * fp32.memory.activation_bytes


def test_transformer_uses_fused_attention_and_scales_with_sequence():
    wl = trace("gpt2", batch_size=1, seq_len=128)
    att = [o for o in wl.ops if o.op_class == "attention"]
    assert len(att) == 24  # 12 layers, forward and backward
    n = 124_439_808
    # 6 N T rule of thumb for a training step (fwd 2NT, bwd 4NT), attention adds a little
    assert 0.95 < wl.flops() / (6 * n * 128) < 1.3


def test_workload_json_round_trip(resnet50_b8):
    back = Workload.from_json(resnet50_b8.to_json())
    assert back.flops() == resnet50_b8.flops()
    assert back.memory.peak_bytes == resnet50_b8.memory.peak_bytes
    assert json.loads(resnet50_b8.to_json())["flops"]["forward"] == resnet50_b8.flops("forward")
    # the kernel choices a saved workload was made under come back with it
    pinned = replace(resnet50_b8, sdpa="flash", memory_format="channels_last")
    again = Workload.from_json(pinned.to_json())
    assert (again.sdpa, again.memory_format) == ("flash", "channels_last")
    assert Workload.from_json(resnet50_b8.to_json()).sdpa == "auto"


def test_memory_is_linear_in_batch_and_max_batch_is_consistent():
    a = trace("resnet18", batch_size=4).memory
    b = trace("resnet18", batch_size=8).memory
    assert a.fixed_bytes == b.fixed_bytes
    assert b.at_batch(8) == pytest.approx(b.peak_bytes, rel=1e-6)
    assert a.at_batch(8) == pytest.approx(b.peak_bytes, rel=0.02)
    cap = 2 * 1024**3
    mb = b.max_batch(cap)
    assert b.at_batch(mb) <= cap < b.at_batch(mb + 1)


def test_one_gpu_peaks_activations_and_gradients_apart():
    """Without data parallelism the gradients (set to None by zero_grad) are made as the backward pass frees the
    activations: peak = parameters + optimizer states + max(activations, gradients) + transient, by hand; with
    DDP's buckets the gradients are held through the step (the sum). max_batch agrees with both ends."""
    from traincast.workload.records import MemoryFootprint

    m = MemoryFootprint(parameter_bytes=100, gradient_bytes=100, optimizer_state_bytes=200, activation_bytes=800,
                        transient_bytes=80, batch_size=8)
    assert m.peak(grads_held=True) == m.peak_bytes == 100 + 100 + 200 + 800 + 80
    assert m.peak(grads_held=False) == 100 + 200 + 800 + 80
    few = MemoryFootprint(100, 1000, 200, 80, 8, batch_size=8)  # gradients larger than the activations
    assert few.peak(grads_held=False) == 100 + 200 + 1000 + 8
    # per sample: 110 bytes (100 of activations, 10 transient); the gradient end: 300 + 1000 + 1 x b
    assert m.max_batch(1400, grads_held=False) == (1400 - 300) // 110 == 10
    assert few.max_batch(1400, grads_held=False) == min((1400 - 300) // 11, 1400 - 300 - 1000) == 100
    assert m.max_batch(1400, grads_held=True) == (1400 - 400) // 110
    assert few.max_batch(1200, grads_held=False) == 0


def test_a_one_gpu_forecast_uses_the_separate_peaks_and_data_parallel_the_sum():
    from traincast.predict.options import forecast_from_options

    one = forecast_from_options("resnet18", gpu="A100-SXM4-80GB", batch_size=32, precision="amp-bf16")
    two = forecast_from_options("resnet18", gpu="A100-SXM4-80GB", gpus=2, batch_size=64, precision="amp-bf16")
    m = one.workload.memory
    assert one.peak_memory_bytes == m.peak(grads_held=False) < m.peak_bytes
    assert two.peak_memory_bytes == two.workload.memory.peak_bytes


def test_spec_examples_have_the_parameter_counts_of_the_report():
    assert trace("mnist-cnn", batch_size=8).parameters == 24_330
    assert trace("pcam-cnn", batch_size=2).parameters == 19_941_381


def test_dcgan_step_trains_both_networks():
    wl = trace("dcgan", batch_size=4)
    phases = [o.phase for o in wl.ops]
    assert phases.count("optimizer") >= 2
    mods = {o.module.split(".")[1] for o in wl.ops if o.module.count(".") >= 1}
    assert {"netG", "netD"} <= mods


def _spec(tmp_path, layers, **extra):
    import yaml

    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({"input": {"shape": [28, 28, 1]}, "layers": layers, **extra}))
    return str(p)


def test_spec_errors_name_the_layer_and_field(tmp_path):
    with pytest.raises(SpecError, match=r"m.yaml: layers\[0\] \(conv2d\).filters: missing \(required\)"):
        trace(_spec(tmp_path, [{"type": "conv2d", "kernel_size": 3}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layers\[0\]: unknown type 'dens'; did you mean 'dense'"):
        trace(_spec(tmp_path, [{"type": "dens", "units": 3}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layer 1 \(dense\): needs a flat input.*flatten"):
        trace(_spec(tmp_path, [{"type": "conv2d", "filters": 4, "kernel_size": 3}, {"type": "dense", "units": 3}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layer 0 \(conv2d\): kernel \[30, 30\] is larger than its input 28x28"):
        trace(_spec(tmp_path, [{"type": "conv2d", "filters": 4, "kernel_size": 30}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layers\[2\] \(dense\).units: Input should be a valid integer \(got 'ten'\)"):
        trace(_spec(tmp_path, [{"type": "flatten"}, {"type": "dropout", "rate": 0.5}, {"type": "dense", "units": "ten"}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layers\[0\] \(conv2d\).filter: unknown field; did you mean 'filters'"):
        trace(_spec(tmp_path, [{"type": "conv2d", "filter": 4, "kernel_size": 3}]), batch_size=2)
    with pytest.raises(SpecError, match=r"layers\[0\] \(dense\).activation: unknown value 'rellu'; did you mean 'relu'"):
        trace(_spec(tmp_path, [{"type": "flatten"}, {"dense": {"units": 3, "activation": "rellu"}}][1:]), batch_size=2)
    with pytest.raises(SpecError, match=r"layers\[0\] \(dense\).units: Input should be less than or equal to 1048576"):
        trace(_spec(tmp_path, [{"type": "flatten"}, {"type": "dense", "units": 2**40}][1:]), batch_size=2)


def test_keras_same_padding_and_strides(tmp_path):
    spec = _spec(tmp_path, [{"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same"},
                            {"type": "flatten"}, {"type": "dense", "units": 10}])
    wl = trace(spec, batch_size=2)
    conv = next(o for o in wl.ops if o.aten == "convolution")
    assert conv.output_shapes[0] == (2, 8, 14, 14)  # ceil(28 / 2), as Keras


def test_bad_model_inputs_are_clear_errors():
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        trace("resnet5O", batch_size=2)
    with pytest.raises(ConfigError, match="batch size must be a positive number"):
        trace("resnet18", batch_size=0)
    with pytest.raises(TraceError, match="cannot trace"):
        trace(nn.Linear(10, 3), batch_size=2, inputs=(7,))  # shapes that do not compose
    with pytest.raises(ConfigError, match="--freeze"):
        trace("resnet18", batch_size=2, freeze="some")


def test_module_with_callable_inputs():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(5, 4)
            self.b = nn.Linear(3, 4)

        def forward(self, x, y):
            return self.a(x) + self.b(y)

    wl = trace(Two(), batch_size=6, inputs=lambda b, dev: (torch.randn(b, 5, device=dev), torch.randn(b, 3, device=dev)))
    assert sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class == "matmul") == 2 * 6 * (5 * 4 + 3 * 4)


def test_depthwise_convolution_backward_counts_groups():
    # torch's registered conv-backward formula ignores groups (C-fold overcount); ours does not
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False))
    wl = trace(model, batch_size=2, inputs=(3, 16, 16))
    dw = [o for o in wl.ops if o.op_class == "conv" and o.args and o.args[-1] == 32 or
          (o.aten == "convolution_backward" and o.args[6] == 32)]
    fwd = next(o for o in dw if o.aten == "convolution")
    bwd = next(o for o in dw if o.aten == "convolution_backward")
    assert fwd.flops == 2 * 2 * 32 * 16 * 16 * 9
    assert bwd.flops == 2 * fwd.flops  # grad input + grad weight


def test_gathers_read_what_they_gather_not_the_whole_table():
    """An embedding reads one row per index; nll_loss one logit per target (bert-tiny b8, seq 128)."""
    wl = trace("bert-tiny", batch_size=8)
    emb = next(o for o in wl.ops if o.aten == "embedding" and o.input_shapes[0][0] == 30522)
    tokens = 8 * 128
    assert emb.bytes_read == tokens * 8 + tokens * 128 * 4  # int64 ids + fp32 rows
    nll = next(o for o in wl.ops if o.aten == "nll_loss_forward")
    assert nll.input_shapes[0] == (tokens, 30522)
    assert nll.bytes_read == tokens * (8 + 4)


def test_in_place_foreach_optimizer_ops_write_their_first_list():
    """SGD with momentum over AlexNet's 61.1 M parameters: each foreach kernel rewrites every buffer."""
    wl = trace("alexnet", batch_size=2)
    pbytes = wl.parameters * 4
    opt = [o for o in wl.ops if o.phase == "optimizer"]
    assert [o.aten for o in opt] == ["_foreach_mul_", "_foreach_add_", "_foreach_add_"]
    assert all(o.bytes_written == pbytes for o in opt)
    assert [o.bytes_read for o in opt] == [pbytes, 2 * pbytes, 2 * pbytes]


def test_fused_adamw_is_one_pass_over_weights_gradients_and_moments():
    """AdamW stepped by the fused kernel (``--optimizer adamw-fused``): one op reads the weights, gradients and both
    moments and rewrites three of them, where the foreach step's several kernels move each many times over; and
    it steps as torch.optim.AdamW does."""
    fused, foreach = (trace("alexnet", batch_size=2, optimizer=o) for o in ("adamw-fused", "adamw"))
    pbytes = fused.parameters * 4
    opt = [o for o in fused.ops if o.phase == "optimizer" and o.aten == "_fused_adamw_"]
    assert len(opt) == 1 and opt[0].n_tensors == 16  # AlexNet's 16 parameter tensors, one multi-tensor launch list
    assert opt[0].bytes_read == pytest.approx(4 * pbytes, rel=1e-6) and opt[0].bytes_written == 3 * pbytes
    moved = sum(o.bytes_total for o in foreach.ops if o.phase == "optimizer")
    assert moved > 2 * sum(o.bytes_total for o in fused.ops if o.phase == "optimizer")
    from traincast.workload.optimizers import OPTIMIZERS

    torch.manual_seed(0)
    p = [nn.Parameter(torch.randn(30, 20)) for _ in range(2)]
    q = [nn.Parameter(x.detach().clone()) for x in p]
    a, b = OPTIMIZERS.get("adamw-fused")(p, 1e-2), torch.optim.AdamW(q, lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        for x, y in zip(p, q):
            x.grad = torch.randn_like(x)
            y.grad = x.grad.clone()
        a.step()
        b.step()
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(p, q))


def _decoder_matmul_flops(layers, h, vocab, ffn, tokens, seq, causal=False):
    """Forward matmul FLOPs of a decoder-only transformer by hand: per layer QKV (3h^2), output projection
    (h^2) and MLP (2 h ffn) on every token, attention scores and values (2 seq h per token; a fused kernel
    told the mask is causal computes (seq + 1) / 2 keys per query on average), and the LM head."""
    keys = (seq + 1) / 2 if causal else seq
    per_token = layers * (2 * (4 * h * h + 2 * h * ffn) + 2 * 2 * keys * h) + 2 * h * vocab
    return per_token * tokens


@pytest.mark.parametrize("name, layers, h, ffn, vocab", [
    ("gpt3-2.7b", 32, 2560, 4 * 2560, 50257),
    ("opt-1.3b", 24, 2048, 8192, 50272),
])
def test_new_language_models_match_hand_formulas(name, layers, h, ffn, vocab):
    seq = 256
    wl = trace(name, batch_size=2, seq_len=seq)
    mm = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class in ("matmul", "attention"))
    assert mm == pytest.approx(_decoder_matmul_flops(layers, h, vocab, ffn, 2 * seq, seq), rel=0.01)
    from traincast.workload import zoo

    assert zoo.get(name.replace("-", "_").replace("2.7b", "27").replace("1.3b", "13")).name == name  # NeuSight's names


def test_a_hugging_face_config_json_is_a_model(tmp_path):
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 384, "n_head": 6,
           "n_layer": 3, "n_positions": 128, "vocab_size": 1000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=2)  # seq_len: the config's 128 positions
    mm = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class in ("matmul", "attention"))
    assert mm == pytest.approx(_decoder_matmul_flops(3, 384, 1000, 4 * 384, 2 * 128, 128, causal=True), rel=0.01)
    assert any(o.op_class == "attention" for o in wl.ops)  # fused attention, as for zoo transformers
    # no architectures: the causal-LM class of the model type
    del cfg["architectures"]
    p.write_text(json.dumps(cfg))
    assert trace(str(p), batch_size=1, seq_len=32).flops() > 0


def test_a_hugging_face_model_folder_is_its_config_json(tmp_path):
    folder = tmp_path / "my-gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_layer": 2,
                                                    "n_positions": 64, "vocab_size": 500}))
    wl = trace(str(folder), batch_size=2, seq_len=16)
    assert wl.model == "my-gpt" and wl.flops() == trace(str(folder / "config.json"), batch_size=2, seq_len=16).flops()
    with pytest.raises(ConfigError, match="is a folder without a config.json"):
        trace(str(tmp_path), batch_size=2)


def test_hugging_face_config_eager_attention_and_an_encoder_without_a_loss(tmp_path):
    """A config naming ``attn_implementation: eager`` is traced as its explicit score matmuls and softmax (no
    fused attention op); a class whose forward takes no labels (``BertModel``) trains on a stand-in loss; with
    every dropout probability 0 the forward pass has no dropout ops (an inference pass)."""
    b, n, d, L, ffn = 2, 64, 256, 2, 1024
    cfg = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": d, "num_hidden_layers": L,
           "num_attention_heads": 4, "intermediate_size": ffn, "vocab_size": 1000,
           "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "attn_implementation": "eager"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=b, seq_len=n)
    fwd = [o for o in wl.ops if o.phase == "forward"]
    assert not any(o.op_class == "attention" for o in wl.ops)
    assert sum(o.aten == "_softmax" for o in fwd) == L and sum(o.aten == "bmm" for o in fwd) == 2 * L
    assert not any(o.aten in ("bernoulli_", "native_dropout") for o in fwd)
    assert any(o.phase == "backward" for o in wl.ops)
    # per token: 4 d^2 projections + 2 d ffn per layer, scores and values 2 n d; the pooler d^2 on one token
    mm = sum(o.flops for o in fwd if o.op_class == "matmul")
    assert mm == pytest.approx(2 * b * n * L * (4 * d * d + 2 * d * ffn + 2 * n * d) + 2 * b * d * d, rel=0.01)
    cfg["attention_probs_dropout_prob"] = 0.1  # training-mode dropout on the attention probabilities
    p.write_text(json.dumps(cfg))
    assert sum(o.aten == "bernoulli_" for o in trace(str(p), batch_size=b, seq_len=n).ops) == L


@pytest.mark.parametrize("b, n", [(2, 16), (1, 7)])
def test_a_mixture_of_experts_config_traces_with_evenly_loaded_experts(tmp_path, b, n):
    """Mixtral (grouped experts): each layer's routed rows (tokens x top-k) are split evenly over the experts
    and multiplied as one batched GEMM per projection, padded to a whole number of rows per expert; the
    router adds a d x E GEMM per token. b=1, n=7: 14 routed rows over 4 experts, 4 rows each (2 padding)."""
    d, ffn, L, E, K, vocab = 64, 128, 2, 4, 2, 1000
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": d,
           "intermediate_size": ffn, "num_hidden_layers": L, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_local_experts": E, "num_experts_per_tok": K, "vocab_size": vocab, "max_position_embeddings": 64}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=b, seq_len=n)
    assert wl.balanced_expert_gemms == 2 * L  # gate-up and down per layer, forward
    rows = -(-b * n * K // E)
    fwd = [o for o in wl.ops if o.phase == "forward" and ".experts" in o.module and o.aten == "bmm"]
    assert sorted(o.input_shapes[:2] for o in fwd) == sorted(
        [((E, rows, d), (E, d, 2 * ffn)), ((E, rows, ffn), (E, ffn, d))] * L)
    assert sum(o.flops for o in fwd) == L * 2 * E * rows * (d * 2 * ffn + ffn * d)
    bwd = [o for o in wl.ops if o.phase == "backward" and ".experts" in o.module and o.aten == "bmm"]
    assert sum(o.flops for o in bwd) == 2 * sum(o.flops for o in fwd)  # input and weight gradients
    router = [o for o in wl.ops if o.phase == "forward" and o.module.endswith("mlp.gate") and o.op_class == "matmul"]
    assert sum(o.flops for o in router) == L * 2 * b * n * d * E


def test_switch_transformers_build_eager_and_their_expert_loop_traces_evenly_loaded(tmp_path):
    """SwitchTransformers has no ``scaled_dot_product_attention`` path: it is built with its own
    matmul-softmax-matmul. Its sparse layers loop over the experts the router picked (torch.where, no shape on
    meta): traced with each of the E experts on ceil(T / E) of the T tokens (top-1), so the expert FLOPs are
    those of the dense FFN over every token. Another loop over experts (NLLB-MoE's) traces through the expected
    selections of workload/selections.py."""

    b, n, d, ff, L, E = 2, 16, 64, 128, 2, 4
    cfg = {"model_type": "switch_transformers", "architectures": ["SwitchTransformersForConditionalGeneration"],
           "d_model": d, "d_ff": ff, "d_kv": 16, "num_layers": L, "num_decoder_layers": L, "num_heads": 4,
           "num_experts": E, "vocab_size": 1000, "encoder_sparse_step": 0, "decoder_sparse_step": 0}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=b, seq_len=n)
    assert not any(o.op_class == "attention" for o in wl.ops)
    assert sum(o.aten == "_softmax" for o in wl.ops if o.phase == "forward") == 2 + 2 * 2  # self, and cross in the decoder
    assert wl.balanced_expert_gemms == 0
    cfg.update(encoder_sparse_step=1, decoder_sparse_step=1)  # every feed-forward layer a mixture of experts
    p.write_text(json.dumps(cfg))
    wl = trace(str(p), batch_size=b, seq_len=n)
    experts = [o for o in wl.ops if o.phase == "forward" and ".experts.expert_" in o.module and o.op_class == "matmul"]
    assert wl.balanced_expert_gemms == 2 * L * E * 2  # encoder and decoder layers, experts, wi and wo
    assert {o.input_shapes[0][0] for o in experts} == {b * n // E}
    assert sum(o.flops for o in experts) == 2 * L * b * n * 2 * (d * ff + ff * d)
    nllb = {"model_type": "nllb-moe", "d_model": d, "encoder_layers": L, "decoder_layers": L,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": ff, "decoder_ffn_dim": ff,
            "num_experts": E, "encoder_sparse_step": 1, "decoder_sparse_step": 1, "vocab_size": 1000,
            "max_position_embeddings": 64}
    p.write_text(json.dumps(nllb))
    wl = trace(str(p), batch_size=b, seq_len=n)
    assert wl.routed_selections == 2 * L * E  # torch.where per expert, encoder and decoder layers
    experts = [o for o in wl.ops if o.phase == "forward" and ".experts.expert_" in o.module and o.op_class == "matmul"]
    assert len(experts) == 2 * L * E * 2


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "no-such-type"}, "model_type 'no-such-type' is not one transformers"),
    ({"model_type": "gpt2", "architectures": ["NoSuchModel"]}, "architectures[0] 'NoSuchModel' is not a model class"),
    ({"model_type": "gpt2", "n_embd": 100, "n_head": 3}, "cannot build"),
    ({"model_type": "gpt2", "n_layer": "two"}, "not a valid gpt2 config: .*n_layer"),
    ({"model_type": "gpt2", "n_head": 0}, "num_attention_heads must be a positive integer, got 0"),
    ({"model_type": "gpt2", "n_layer": -2}, "num_hidden_layers must be a positive integer, got -2"),
    ({"model_type": "gpt2", "vocab_size": 0}, "vocab_size must be a positive integer, got 0"),
    ({"model_type": "gpt2", "architectures": "GPT2LMHeadModel"}, "architectures must be a list of class names"),
    ({"model_type": 5}, "model_type must be a string"),
])
def test_bad_hugging_face_configs_are_clear_errors(tmp_path, cfg, message):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises((SpecError, ConfigError), match=message.replace("[", r"\[").replace("]", r"\]")):
        trace(str(p), batch_size=1, seq_len=16)


def test_transformer_base_matches_the_hand_formula():
    """Vaswani et al. base on WMT: per token, encoder layers 4 d^2 (attention projections) + 2 d ffn, decoder
    layers 8 d^2 + 2 d ffn, the tied output projection d x vocab; attention scores and values 2 seq d per
    token per attention (one per encoder layer, two per decoder layer)."""
    from traincast.workload.zoo import WMT_VOCAB

    b, n, d, ffn, L = 2, 20, 512, 2048, 6
    wl = trace("transformer", batch_size=b, seq_len=n)
    mm = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class in ("matmul", "attention"))
    per_token = L * 2 * (4 * d * d + 2 * d * ffn) + L * 2 * (8 * d * d + 2 * d * ffn) + 2 * d * WMT_VOCAB \
        + 3 * L * 2 * 2 * n * d
    assert mm == pytest.approx(per_token * b * n, rel=0.01)


def test_gnmt_lstm_flops_match_the_hand_formula():
    """GNMT v2: every LSTM step computes 4 gates from its input and hidden state, 2 x 4H x (in + H) FLOPs per
    token: a bidirectional first encoder layer (in H, twice), three encoder layers (in 2H, H, H), the
    attention LSTM (in H) and three decoder layers fed [output, context] (in 2H)."""
    b, n, H = 2, 12, 1024
    wl = trace("gnmt", batch_size=b, seq_len=n)
    lstm = sum(o.flops for o in wl.ops if o.phase == "forward" and o.op_class == "matmul"
               and (o.module.split(".") + [""])[1] in ("enc_bi", "enc", "dec_att", "dec"))
    ins = [H, H, 2 * H, H, H, H, 2 * H, 2 * H, 2 * H]
    assert lstm == pytest.approx(sum(2 * 4 * H * (i + H) for i in ins) * b * n, rel=0.001)


def test_identical_layers_get_identical_costs_in_every_phase(tmp_path):
    """Backward ops belong to the module whose forward op made their autograd node: every decoder layer of a
    Llama shows the same FLOPs per module and phase, and so does a second trace (no set-order chance)."""
    import json
    import re
    from collections import defaultdict

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
           "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
           "vocab_size": 500, "max_position_embeddings": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))

    def per_layer(wl):
        out = defaultdict(lambda: defaultdict(int))
        for o in wl.ops:
            m = re.search(r"layers\.(\d+)(.*)", o.module)
            if m:
                out[(m.group(2), o.phase)][int(m.group(1))] += o.flops
        return out

    a = per_layer(trace(str(path), batch_size=2, seq_len=32, precision="amp-bf16"))
    b = per_layer(trace(str(path), batch_size=2, seq_len=32, precision="amp-bf16"))
    assert a == b
    assert {phase for _, phase in a} == {"forward", "backward"}
    for (mod, phase), by_layer in a.items():
        assert set(by_layer) == {0, 1, 2, 3}, (mod, phase, dict(by_layer))
        assert len(set(by_layer.values())) == 1, (mod, phase, dict(by_layer))
    attn_bwd = a[(".self_attn", "backward")]
    assert all(v > 0 for v in attn_bwd.values())  # the fused attention backward stays in its own layer


@pytest.mark.parametrize("name", ["regnet_y_400mf", "efficientnet_b0", "convnext_tiny", "swin_t", "shufflenet_v2_x0_5"])
def test_any_torchvision_classification_model_traces(name):
    """Every name of ``torchvision.models.list_models`` is a model, not only the zoo's (RegNet's constructor
    reads tensor values back, so only its weights go to the meta device)."""
    from traincast.workload import zoo

    assert name in zoo.torchvision_names() and name not in zoo.ZOO
    wl = trace(name, batch_size=2)
    assert wl.parameters > 1e6 and wl.flops("forward") > 0 and wl.flops("backward") > wl.flops("forward")
    assert zoo.get(name).default_dataset_size == 1281167


def test_unknown_model_name_suggests_torchvision_names_too():
    from traincast.errors import UnknownNameError
    from traincast.workload import zoo

    with pytest.raises(UnknownNameError, match="did you mean 'regnet_y_400mf'"):
        zoo.get("regnet_y_400m")


def test_the_tracer_follows_values_computed_only_from_real_inputs():
    """Value reads of small tensors made from real values get their real answer; writes without values (also
    through another view of the storage), ``empty`` and tensors computed from weights fall back to the dense-batch
    answer (True)."""
    from traincast.workload.tracer import _OpRecorder, _Tracker

    rec = _OpRecorder(_Tracker(), "op")
    rec.phase = "forward"
    act = torch.empty(4, device="meta")
    with rec:
        m = torch.zeros(4, dtype=torch.bool, device="meta")
        v = m[:2]
        assert not bool(m.any()) and not bool(v.any())  # real zeros: False, as in training
        ids = torch.tensor([[5, 0, 0]]).to("meta")  # CPU values moved to meta keep them
        assert int((ids > 0).sum()) == 1
        m.copy_(act > 0)  # written from an activation: no values, for the view either
        assert bool(m.any()) and bool(v.any())
        assert bool(torch.empty(8, dtype=torch.bool, device="meta").any())  # empty holds nothing to follow
    assert rec.data_dependent == 3


def test_convolutions_fed_channels_last_strides_are_counted_and_noted():
    """ConvNeXt's blocks permute to channels-last for their LayerNorm and back: 15 of its 18 depthwise convolutions
    and its 3 downsampling ones get NCHW-shaped inputs with channels-last strides (PyTorch then runs channels-last
    kernels); MobileNet v2 feeds none. A forecast says so; with --memory-format channels_last it need not."""
    from traincast.workload.layout import apply_memory_format

    cnx, mnv2 = trace("convnext_tiny", batch_size=2), trace("mobilenet_v2", batch_size=2)
    assert cnx.channels_last_strided_convs == 18 and mnv2.channels_last_strided_convs == 0
    # those convolutions and their backward passes are marked channels-last (the kernels PyTorch picks), no others
    convs = [o for o in cnx.ops if o.aten in ("convolution", "convolution_backward")]
    assert sum(o.layout == "nhwc" for o in convs) == 36 and len(convs) == 44
    assert not any(o.layout for o in mnv2.ops)
    assert any("18 convolutions per forward get channels-last-strided inputs" in n for n in cnx.kernel_notes())
    assert not any("channels-last-strided" in n for n in mnv2.kernel_notes())
    assert not any("channels-last-strided" in n for n in apply_memory_format(cnx, "channels_last").kernel_notes())
    assert Workload.from_dict(json.loads(json.dumps(cnx.to_dict()))).channels_last_strided_convs == 18
