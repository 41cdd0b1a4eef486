"""Hugging Face models of every modality forecast through the CLI, and one-line errors on bad input.

Thirty model types (text, vision, audio, multimodal, encoder-decoder, video, layout), each its default config
with layer counts and widths shrunk here (the model stays the type's own code). Each runs ``traincast predict
CONFIG --json`` and ``traincast trace CONFIG --json``; the forecast must count the parameters of the head class
transformers builds from the same config, have a real backward (more FLOPs than the forward), and the trace
must have made the inputs the config asks for (image size, frames, mel bins, image placeholders by hand).
"""

import json

import pytest

from traincast.cli.main import _register_all, run

_register_all()

T = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2)
ENC = dict(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
           encoder_ffn_dim=128, decoder_ffn_dim=128)
VIS = dict(T, image_size=32, patch_size=8)
CONV = dict(conv_dim=[16, 16], conv_kernel=[10, 3], conv_stride=[5, 2], num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2)

# model_type: (modality, config fields, head class (None: traincast's default for the type), inputs expected,
#              extra CLI options)
CASES = {
    "gpt2": ("text", dict(n_embd=64, n_layer=2, n_head=2, n_positions=128), None, "32 tokens, vocab 50257", ()),
    "llama": ("text", dict(T, num_key_value_heads=1, vocab_size=1000), "LlamaForCausalLM", "32 tokens, vocab 1000", ()),
    "bert": ("text", dict(T), "BertForSequenceClassification", "32 tokens", ()),
    "roberta": ("text", dict(T), None, "32 tokens, vocab 50265", ("--task", "masked-lm")),
    "qwen3_moe": ("text", dict(T, num_key_value_heads=1, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                               vocab_size=1000, head_dim=32), None, "32 tokens", ()),
    "mamba": ("text", dict(hidden_size=64, num_hidden_layers=2, vocab_size=1000, state_size=8), None, "32 tokens", ()),
    "t5": ("encoder-decoder", dict(d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=2, vocab_size=1000), None,
           "32 tokens, vocab 1000", ()),
    "bart": ("encoder-decoder", dict(ENC, vocab_size=1000), "BartForConditionalGeneration", "32 tokens", ()),
    "vit": ("vision", VIS, None, "3x32x32 images", ()),
    "swin": ("vision", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4),
             "SwinForImageClassification", "3x32x32 images", ()),
    "convnext": ("vision", dict(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], image_size=64), None,
                 "3x64x64 images", ()),
    "beit": ("vision", VIS, "BeitForImageClassification", "3x32x32 images", ()),
    "bit": ("vision", dict(embedding_size=32, hidden_sizes=[128, 128, 128, 128], depths=[1, 1, 1, 1]), None,
            "3x64x64 images", ("--image-size", "64")),
    "cvt": ("vision", dict(embed_dim=[16, 32, 64], num_heads=[1, 2, 2]), None, "3x64x64 images", ("--image-size", "64")),
    "deit": ("vision", VIS, None, "3x32x32 images", ()),
    "whisper": ("audio", dict(ENC, num_mel_bins=80, max_source_positions=1500), None, "30 s of 80 log-mel features", ()),
    "wav2vec2": ("audio", dict(T, **CONV), None, "2 s of 16000 Hz audio", ("--audio-seconds", "2")),
    "hubert": ("audio", dict(T, **CONV), "HubertForSequenceClassification", "10 s of 16000 Hz audio", ()),
    "audio-spectrogram-transformer": ("audio", dict(T, max_length=128, num_mel_bins=32), None,
                                      "1.28 s of 32 log-mel features", ()),
    "clip": ("multimodal", dict(text_config=dict(T, vocab_size=1000), vision_config=VIS, projection_dim=32), None,
             "32 tokens, vocab 1000, 3x32x32 images", ()),
    "siglip": ("multimodal", dict(text_config=dict(T, vocab_size=1000), vision_config=VIS), "SiglipModel",
               "3x32x32 images", ()),
    "blip": ("multimodal", dict(text_config=dict(T, vocab_size=1000), vision_config=VIS, projection_dim=32),
             "BlipForConditionalGeneration", "3x32x32 images", ()),
    # LLaVA: one placeholder per vision patch, (32 / 8)^2 = 16
    "llava": ("multimodal", dict(text_config=dict(T, model_type="llama", vocab_size=1000, num_key_value_heads=2),
                                 vision_config=dict(VIS, model_type="clip_vision_model", projection_dim=32),
                                 image_token_index=999), None, "(16 image placeholders)", ()),
    # BLIP-2: one per Q-Former query
    "blip-2": ("multimodal", dict(vision_config=VIS, qformer_config=dict(T, vocab_size=1000, encoder_hidden_size=64),
                                  text_config=dict(model_type="opt", hidden_size=64, ffn_dim=128, num_hidden_layers=1,
                                                   num_attention_heads=2, vocab_size=1000, word_embed_proj_dim=64),
                                  num_query_tokens=4), None, "(4 image placeholders)", ()),
    # Gemma 3: mm_tokens_per_image
    "gemma3": ("multimodal", dict(text_config=dict(T, num_key_value_heads=1, vocab_size=1000, head_dim=32,
                                                   sliding_window=64),
                                  vision_config=dict(VIS, image_size=64), mm_tokens_per_image=4,
                                  image_token_index=999, boi_token_index=997, eoi_token_index=998),
               None, "(4 image placeholders)", ()),
    "videomae": ("video", dict(VIS, num_frames=4, tubelet_size=2), None, "4 frames of 3x32x32", ()),
    "timesformer": ("video", dict(VIS, num_frames=4), None, "2 frames of 3x32x32", ("--num-frames", "2")),
    "layoutlm": ("layout", dict(T), "LayoutLMForTokenClassification", "32 tokens with boxes", ()),
    "bros": ("layout", dict(T), "BrosForTokenClassification", "32 tokens with boxes", ()),
    "layoutlmv3": ("layout", dict(T, hidden_size=96, coordinate_size=16, shape_size=16, input_size=32, patch_size=8),
                   "LayoutLMv3ForTokenClassification", "32 tokens with boxes", ()),
}
assert len(CASES) == 30 and {c[0] for c in CASES.values()} == {
    "text", "vision", "audio", "multimodal", "encoder-decoder", "video", "layout"}


def cli(capsys, *args):
    code = run([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write(tmp_path, model_type, fields, cls, folder=None):
    folder = tmp_path / (folder or model_type)
    folder.mkdir(parents=True)
    cfg = {"model_type": model_type, **fields, **({"architectures": [cls]} if cls else {})}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def _expected_parameters(path, cls_name, task):
    """The parameter count of the head class transformers itself builds from the config (on meta)."""
    import torch
    import transformers as tf

    from traincast.workload import hf

    data = json.loads(path.read_text())
    cfg = hf.load_config(data)
    cls = hf.choose_class(cfg, data["model_type"], [cls_name] if cls_name else None, task, str(path))
    with torch.device("meta"):
        model = cls(cfg)
    assert isinstance(model, tf.PreTrainedModel)
    return sum(p.numel() for p in model.parameters()), cls


@pytest.mark.parametrize("model_type", list(CASES))
def test_every_modality_forecasts_through_the_cli(capsys, tmp_path, model_type):
    modality, fields, cls_name, inputs, extra = CASES[model_type]
    path = _write(tmp_path, model_type, fields, cls_name)
    seq = ("--seq-len", "32") if modality in ("text", "encoder-decoder", "multimodal", "layout") else ()
    code, out, err = cli(capsys, "predict", path, "--gpu", "A100-SXM4-80GB", "-b", "2", "--dataset-size", "100",
                         *seq, *extra, "--json")
    assert code == 0, err
    f = json.loads(out)
    task = extra[extra.index("--task") + 1] if "--task" in extra else None
    n, cls = _expected_parameters(path, cls_name, task)
    assert f["parameters"] == n
    assert f["flops"]["backward"] > f["flops"]["forward"] > 0  # a real backward through the whole model
    assert f["total_s"] > 0 and f["steps_per_epoch"] == 50
    code, out, err = cli(capsys, "trace", path, "-b", "2", *seq, *extra, "--json")
    assert code == 0, err
    wl = json.loads(out)
    assert inputs in wl["input_description"], wl["input_description"]
    assert wl["input_description"].startswith("2 x (")


def test_heads_with_labels_train_on_their_own_loss_and_others_say_so(capsys, tmp_path):
    """A classifier with labels: no stand-in note; a feature model without a loss (ViTModel): the note."""
    path = _write(tmp_path, "vit", VIS, "ViTForImageClassification")
    code, out, _ = cli(capsys, "predict", path, "--gpu", "A100-SXM4-80GB", "-b", "2", "--json")
    assert code == 0 and not any("stand-in" in n for n in json.loads(out)["notes"])
    path = _write(tmp_path, "vit", VIS, None, folder="vit-features")
    code, out, _ = cli(capsys, "predict", path, "--gpu", "A100-SXM4-80GB", "-b", "2", "--task", "base", "--json")
    assert code == 0 and any("ViTModel computes no loss" in n for n in json.loads(out)["notes"])


def test_whisper_window_and_audio_seconds(capsys, tmp_path):
    """Whisper's encoder takes exactly 3000 mel frames (30 s); wav2vec2's raw audio follows --audio-seconds:
    twice the seconds, twice the convolution FLOPs of its feature encoder, and its conv stem (strides 5 and 2,
    kernels 10 and 3) makes (16000 s - 10) // 5 + 1 frames, then (n - 3) // 2 + 1 for its attention."""
    path = _write(tmp_path, "whisper", CASES["whisper"][1], None)
    code, _, err = cli(capsys, "trace", path, "-b", "2", "--audio-seconds", "5")
    assert code == 2 and "takes exactly 3000 mel frames" in err and len(err.strip().splitlines()) == 1
    path = _write(tmp_path, "wav2vec2", CASES["wav2vec2"][1], None)
    conv = []
    for secs in (1, 2):
        code, out, _ = cli(capsys, "trace", path, "-b", "1", "--audio-seconds", secs, "--ops", "--json")
        assert code == 0
        ops = [o for o in json.loads(out)["ops"] if o["phase"] == "forward"]
        conv.append(sum(o["flops"] for o in ops if o["aten"] == "convolution"))
        frames = ((16000 * secs - 10) // 5 + 1 - 3) // 2 + 1
        attn = [o for o in ops if "attention" in o["aten"]]
        assert attn and all(o["input_shapes"][0] == [1, 2, frames, 32] for o in attn)
    assert conv[1] / conv[0] == pytest.approx(2, rel=0.01)


def test_config_without_a_top_level_vocab_builds(capsys, tmp_path):
    """CLIP's vocab lives in text_config; the old builder stopped on cfg.vocab_size."""
    path = _write(tmp_path, "clip", CASES["clip"][1], None)
    code, out, err = cli(capsys, "trace", path, "-b", "2", "--seq-len", "16", "--json")
    assert code == 0, err
    assert "16 tokens, vocab 1000" in json.loads(out)["input_description"]


# --- bad input: one line, exit 2 ---------------------------------------------------------------------------------
def _one_line_error(code, err):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def test_unknown_model_type_gets_a_did_you_mean(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "lama"}))
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2")[::2])
    assert "model_type 'lama' is not one transformers" in msg and "did you mean" in msg and "'llama'" in msg


def test_unknown_head_class_gets_a_did_you_mean(capsys, tmp_path):
    p = _write(tmp_path, "llama", CASES["llama"][1], "LlamaForCasualLM")
    msg = _one_line_error(*cli(capsys, "trace", p, "-b", "2", "--seq-len", "16")[::2])
    assert "'LlamaForCasualLM' is not a model class" in msg and "'LlamaForCausalLM'" in msg


def test_unknown_model_name_gets_a_did_you_mean(capsys):
    msg = _one_line_error(*cli(capsys, "predict", "resnet5", "--gpu", "A100-SXM4-80GB", "-b", "2")[::2])
    assert "did you mean" in msg and "'resnet50'" in msg


def test_task_the_config_does_not_have(capsys, tmp_path):
    p = _write(tmp_path, "vit", VIS, None)
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--task", "ctc")[::2])
    assert "--task ctc is not available for model_type 'vit'" in msg and "image-classification" in msg
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--task", "causal-llm")[::2])
    assert "unknown task 'causal-llm'" in msg and "'causal-lm'" in msg


def test_a_config_that_cannot_be_traced_says_what_stops_it(capsys, tmp_path):
    """A LLaVA config whose projector reads a vision layer the tower does not have: one line naming the class
    and what stopped it."""
    fields = dict(CASES["llava"][1], vision_feature_layer=-7)
    p = _write(tmp_path, "llava", fields, None)
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32")[::2])
    assert "LlavaForConditionalGeneration stops while running its forward: IndexError" in msg


def test_a_missing_config_field_is_named(capsys, tmp_path):
    """A model whose code reads a config field the config lacks: the field is named, with what to do."""
    from traincast.workload.hf import explain

    msg = explain(AttributeError("'LlavaConfig' object has no attribute 'vision_feature_layer'"),
                  "LlavaForConditionalGeneration", "building")
    assert "vision_feature_layer" in msg and "add \"vision_feature_layer\" to the config.json" in msg


def test_anyres_models_get_their_tiles_and_count_their_placeholders(capsys, tmp_path):
    """LLaVA-NeXT ("AnyRes"): each image arrives as the base image plus the crops of the grid resolution that
    transformers' preprocessing picks from ``image_grid_pinpoints``. A 32x32 image with pinpoints 32x32 and
    32x64 picks 32x32: one crop plus the base, 2 tiles of 3x32x32, so the vision tower's patch convolution runs
    on batch x 2 tiles; the projector's placeholder count is learnt from the model (the forecast runs)."""
    fields = dict(CASES["llava"][1], image_grid_pinpoints=[[32, 32], [32, 64]])
    path = _write(tmp_path, "llava_next", fields, None)
    code, out, err = cli(capsys, "trace", path, "-b", "2", "--seq-len", "32", "--ops", "--json")
    assert code == 0, err
    wl = json.loads(out)
    assert "2 tiles per image (AnyRes grid)" in wl["input_description"]
    conv = [o for o in wl["ops"] if o["phase"] == "forward" and o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2 * 2, 3, 32, 32]
    code, out, err = cli(capsys, "predict", path, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err


def test_a_config_field_left_empty_is_named(capsys, tmp_path):
    """A field the constructor reads but the config leaves None (HunYuan's default ``head_dim``, read by its
    rotary embedding): the one-line error names that field, not the other None fields of the config (its
    ``pad_token_id``, None by design, is read by the same constructor and skipped)."""
    p = _write(tmp_path, "hunyuan_v1_dense", dict(T, num_key_value_heads=1, vocab_size=1000), None)
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8")[::2])
    assert "leaves empty (None): head_dim; set them in the config.json" in msg, msg
    p.write_text(json.dumps(dict(json.loads(p.read_text()), head_dim=32)))
    assert cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8")[0] == 0


def test_a_meta_tensor_sent_to_the_ids_device_stays_on_meta():
    """Vision-language models write ``embeds.to(input_ids.device)``; traincast keeps a multimodal model's ids on
    the CPU (their values are read), so during a trace such a move keeps the tensor on meta (in training both
    live on the GPU), with the dtype asked for."""
    import torch

    from traincast.workload.hf import _MixedDevices

    ids = torch.zeros(2, 4, dtype=torch.long)
    with _MixedDevices():
        x = torch.empty(2, 4, 8, device="meta")
        assert x.to(ids.device).device.type == "meta"
        assert x.to("cpu", torch.bfloat16).dtype == torch.bfloat16 and x.to("cpu", torch.bfloat16).is_meta
        assert x.to(ids).dtype == torch.long and x.to(ids).is_meta
        assert x.cpu().is_meta
        assert x.to(device="cpu").is_meta
