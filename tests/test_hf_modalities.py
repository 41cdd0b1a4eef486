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
    """A field the constructor reads but the config leaves None, which no other field gives (ESM's default
    ``vocab_size``): the one-line error names that field, not the other None fields of the config (its
    ``pad_token_id``, None by design, is skipped)."""
    p = _write(tmp_path, "esm", dict(T), "EsmForMaskedLM")
    msg = _one_line_error(*cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8")[::2])
    assert "leaves empty (None): " in msg and "vocab_size" in msg and "pad_token_id" not in msg, msg
    p.write_text(json.dumps(dict(json.loads(p.read_text()), vocab_size=100, emb_layer_norm_before=False, pad_token_id=1)))
    assert cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8")[0] == 0


@pytest.mark.parametrize("model_type,field,fields,value", [
    # HunYuan's default head_dim is None (its rotary embedding reads it): hidden_size / num_attention_heads
    ("hunyuan_v1_dense", "head_dim", dict(T, num_key_value_heads=1, vocab_size=1000), 32),
    # Nemotron's default num_key_value_heads is None: num_attention_heads (no grouped-query attention)
    ("nemotron", "num_key_value_heads", dict(T, head_dim=32, vocab_size=1000), 2),
])
def test_a_field_left_empty_that_other_fields_give_is_filled(capsys, tmp_path, model_type, field, fields, value):
    """The model built is the one the config with that field set explicitly builds (same parameters and
    FLOPs), and the forecast says what it assumed."""
    p = _write(tmp_path, model_type, fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any(f"leaves {field} empty; it is taken as {value}" in n for n in f["notes"]), f["notes"]
    q = _write(tmp_path, model_type, dict(fields, **{field: value}), None, folder="explicit")
    code, out, err = cli(capsys, "predict", q, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "8", "--json")
    assert code == 0, err
    g = json.loads(out)
    assert f["parameters"] == g["parameters"] == _expected_parameters(q, None, None)[0]
    assert f["flops"] == g["flops"]


def _trace(capsys, tmp_path, model_type, fields, cls=None, *extra):
    p = _write(tmp_path, model_type, fields, cls)
    code, out, err = cli(capsys, "trace", p, "-b", "2", *extra, "--ops", "--json")
    assert code == 0, err
    wl = json.loads(out)
    fwd = [o for o in wl["ops"] if o["phase"] == "forward"]
    assert sum(o["flops"] for o in wl["ops"] if o["phase"] == "backward") > sum(o["flops"] for o in fwd) > 0
    return wl, fwd, p


def _own_loss(capsys, path, *extra):
    """Whether the head trains on its own loss (no stand-in note in the forecast)."""
    code, out, err = cli(capsys, "predict", path, "--gpu", "A100-SXM4-80GB", "-b", "2", *extra, "--json")
    assert code == 0, err
    return not any("stand-in" in n for n in json.loads(out)["notes"])


def test_a_video_model_gets_clips(capsys, tmp_path):
    """A model that takes only ``pixel_values_videos`` (V-JEPA 2): clips of the config's ``frames_per_clip``
    at its ``crop_size``; its tubelet convolution sees batch x C x frames x H x W, and its classifier its labels."""
    fields = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2, crop_size=32,
                  frames_per_clip=4, patch_size=16, tubelet_size=2, pred_hidden_size=32, pred_num_hidden_layers=1,
                  pred_num_attention_heads=2, num_pooler_layers=1)
    wl, fwd, p = _trace(capsys, tmp_path, "vjepa2", fields, "VJEPA2ForVideoClassification")
    assert "4 frames of 3x32x32" in wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2, 3, 4, 32, 32]
    assert _own_loss(capsys, p)


def test_time_series_models_get_past_values_and_targets(capsys, tmp_path):
    """PatchTST: ``context_length`` steps of ``num_input_channels`` channels, patched into
    (32 - 8) / 8 + 1 = 4 patches per channel, with class targets; TimesFM: 1-D series and the forecast
    horizon's ``future_values`` (both train on their own loss)."""
    fields = dict(d_model=32, num_hidden_layers=1, num_attention_heads=2, ffn_dim=64, context_length=32,
                  num_input_channels=3, patch_length=8, patch_stride=8, num_targets=4)
    wl, fwd, p = _trace(capsys, tmp_path, "patchtst", fields, "PatchTSTForClassification")
    assert "32 time steps of 3 channels" in wl["input_description"]
    assert any(o["aten"] == "addmm" or o["aten"] == "mm" for o in fwd)
    attn = [o for o in fwd if "attention" in o["aten"] or o["aten"] == "bmm"]
    assert attn and attn[0]["input_shapes"][0][0] == 2 * 3  # one sequence per series and channel
    assert _own_loss(capsys, p)
    fields = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, head_dim=32,
                  context_length=64, patch_length=32, horizon_length=32)
    wl, fwd, p = _trace(capsys, tmp_path, "timesfm", fields)
    assert "64 time steps, 32 steps ahead" in wl["input_description"]
    assert _own_loss(capsys, p)


def test_keypoint_matchers_get_image_pairs(capsys, tmp_path):
    """A keypoint-matching head (LightGlue) takes pairs of images: batch x 2 x C x H x W, each image of both
    pairs through its keypoint detector's first convolution."""
    wl, fwd, _ = _trace(capsys, tmp_path, "lightglue", {}, None, "--image-size", "64")
    assert "pairs of 3x64x64 images" in wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0][0] == 2 * 2 and conv[0]["input_shapes"][0][-2:] == [64, 64]


QFORMER = dict(vision_config=VIS, qformer_config=dict(T, vocab_size=500, encoder_hidden_size=64),
               text_config=dict(model_type="opt", hidden_size=64, ffn_dim=128, num_hidden_layers=1,
                                num_attention_heads=2, vocab_size=1000, word_embed_proj_dim=64), num_query_tokens=4)


@pytest.mark.parametrize("model_type", ["instructblip", "instructblipvideo"])
def test_instructblip_gets_its_qformer_instruction(capsys, tmp_path, model_type):
    """InstructBLIP's Q-Former reads the instruction too (``qformer_input_ids``); one placeholder per query.
    InstructBLIP-Video's config names only a video token (left empty: the last id stands in)."""
    wl, fwd, _ = _trace(capsys, tmp_path, model_type, QFORMER, None, "--seq-len", "16")
    assert "(4 image placeholders)" in wl["input_description"]
    assert "16 instruction tokens for the Q-Former" in wl["input_description"]
    emb = [o for o in fwd if o["aten"] == "embedding" and o["input_shapes"][0][0] == 500]
    assert emb and emb[0]["input_shapes"][1] == [2, 16]  # the Q-Former's word embedding


def test_region_feature_models_get_detector_features(capsys, tmp_path):
    """VisualBERT and LXMERT take region features of a detector (36 per image) of the config's width;
    VisualBERT's pre-training labels span text and regions (its own loss)."""
    wl, fwd, p = _trace(capsys, tmp_path, "visual_bert", dict(T, visual_embedding_dim=32, vocab_size=1000), None,
                        "--seq-len", "16")
    assert "36 regions of 32 features" in wl["input_description"]
    assert any([72, 32] in o["input_shapes"] or [2, 36, 32] in o["input_shapes"] for o in fwd)  # projected
    assert any([4, 16 + 36, 32] in o["input_shapes"] for o in fwd if o["aten"] == "bmm")  # text and regions attend
    assert _own_loss(capsys, p, "--seq-len", "16")
    fields = dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, l_layers=1, x_layers=1, r_layers=1,
                  visual_feat_dim=32, visual_pos_dim=4, vocab_size=1000)
    wl, _, _ = _trace(capsys, tmp_path, "lxmert", fields, None, "--seq-len", "16")
    assert "36 regions of 32 features" in wl["input_description"]


def test_a_seq2seq_head_without_lm_in_its_name_trains_on_labels(capsys, tmp_path):
    """MarianMTModel is a seq2seq LM head (its task says so): labels, and decoder inputs shifted from them."""
    wl, fwd, p = _trace(capsys, tmp_path, "marian", dict(ENC, vocab_size=1000, decoder_vocab_size=1000,
                                                                pad_token_id=0, decoder_start_token_id=0), None,
                        "--seq-len", "16")
    assert _own_loss(capsys, p, "--seq-len", "16")


def test_composite_encoder_decoders_train_on_labels(capsys, tmp_path):
    """EncoderDecoderModel (BERT to BERT) and SpeechEncoderDecoderModel (wav2vec2 to BERT) are seq2seq heads:
    labels, decoder inputs shifted from them with the decoder's padding id; the speech one takes the raw audio
    its encoder takes (``input_values``), not log-mel features."""
    bert = dict(T, model_type="bert", vocab_size=1000)
    dec = dict(bert, is_decoder=True, add_cross_attention=True)
    wl, _, p = _trace(capsys, tmp_path, "encoder-decoder", dict(encoder=bert, decoder=dec), None, "--seq-len", "16")
    assert "16 tokens" in wl["input_description"]
    assert _own_loss(capsys, p, "--seq-len", "16")
    enc = dict(T, **CONV, model_type="wav2vec2")
    wl, fwd, p = _trace(capsys, tmp_path, "speech-encoder-decoder", dict(encoder=enc, decoder=dec), None,
                        "--seq-len", "16", "--audio-seconds", "2")
    assert "2 s of 16000 Hz audio" in wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2, 1, 32000]
    assert _own_loss(capsys, p, "--seq-len", "16", "--audio-seconds", "2")


def test_layout_boxes_of_the_type_the_model_takes(capsys, tmp_path):
    """UDOP reads its boxes as normalized floats (their mean), LayoutLM as integers: each gets the kind it
    takes, and trains on its labels. UDOP's one-stream config has its own image geometry (``image_size``,
    ``patch_size``): it trains on the page image too, 16 patches of 8 px."""
    fields = dict(d_model=64, d_kv=32, d_ff=128, num_layers=1, num_decoder_layers=1, num_heads=2, vocab_size=1000,
                  image_size=32, patch_size=8)
    wl, fwd, p = _trace(capsys, tmp_path, "udop", fields, None, "--seq-len", "16")
    assert "16 tokens with boxes" in wl["input_description"] and "3x32x32 images" in wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2, 3, 32, 32]
    assert _own_loss(capsys, p, "--seq-len", "16")
    wl, _, _ = _trace(capsys, tmp_path, "layoutlm", dict(T), "LayoutLMForTokenClassification", "--seq-len", "16")
    assert "16 tokens with boxes" in wl["input_description"]


def test_cross_attention_to_images(capsys, tmp_path):
    """IDEFICS: images as ``batch x images x C x H x W`` and ``image_attention_mask`` (which images each token
    attends to): its gated cross-attention layers attend from the 16 text tokens to the 16 patches + CLS."""
    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  cross_layer_interval=1, vocab_size=1000,
                  vision_config=dict(embed_dim=64, image_size=32, patch_size=8, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=128))
    wl, fwd, _ = _trace(capsys, tmp_path, "idefics", fields, None, "--seq-len", "16")
    assert "3x32x32 images" in wl["input_description"]
    cross = [o for o in fwd if "attention" in o["aten"] and o["input_shapes"][:2] == [[2, 2, 16, 32], [2, 2, 17, 32]]]
    assert len(cross) == 2  # one per cross-attention layer


def test_placeholders_of_a_patch_grid_model(capsys, tmp_path):
    """Qwen2-VL: a 56x56 image in 14 px patches is a 4x4 grid, merged 2x2: 4 placeholders per image."""
    fields = dict(text_config=dict(T, num_key_value_heads=1, vocab_size=1000,
                                   rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                        mrope_section=[4, 6, 6])),
                  vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=14,
                                     spatial_merge_size=2, temporal_patch_size=2),
                  image_token_id=999, video_token_id=998, vision_start_token_id=997)
    wl, fwd, _ = _trace(capsys, tmp_path, "qwen2_vl", fields, None, "--seq-len", "16", "--image-size", "56")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]


def test_images_placed_by_a_position_mask(capsys, tmp_path):
    """Kosmos-2 places its image features by ``image_embeds_position_mask``, not a placeholder token: one
    position per latent query."""
    fields = dict(text_config=dict(embed_dim=64, layers=1, attention_heads=2, ffn_dim=128, vocab_size=1000),
                  vision_config=dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=128, image_size=32, patch_size=8), latent_query_num=8)
    wl, _, _ = _trace(capsys, tmp_path, "kosmos-2", fields, None, "--seq-len", "16")
    assert "(8 image placeholders)" in wl["input_description"], wl["input_description"]


def test_language_adapters_and_no_position_limit(capsys, tmp_path):
    """X-MOD takes the language of each example (``lang_ids``); XLNet has no position limit (-1)."""
    wl, _, _ = _trace(capsys, tmp_path, "xmod", dict(T, vocab_size=1000, languages=["en_XX", "de_DE"]), None,
                      "--seq-len", "16")
    assert "16 tokens" in wl["input_description"]
    wl, _, _ = _trace(capsys, tmp_path, "xlnet", dict(d_model=64, n_layer=1, n_head=2, d_inner=128, vocab_size=1000),
                      None, "--seq-len", "16")
    assert "16 tokens" in wl["input_description"]


def test_naflex_models_get_rows_of_patches(capsys, tmp_path):
    """SigLIP 2 takes each image as rows of patches (``batch x patches x C*patch^2``) with its grid
    ``spatial_shapes``: a 32x32 image in 8 px patches is 16 rows of 192; an image of more patches than the vision
    config's ``num_patches`` is refused in one line."""
    fields = dict(text_config=dict(T, vocab_size=1000), vision_config=dict(T, patch_size=8, num_patches=16))
    wl, fwd, _ = _trace(capsys, tmp_path, "siglip2", fields, "Siglip2Model", "--seq-len", "16", "--image-size", "32")
    assert "3x32x32 images in 16 patches of 8px" in wl["input_description"]
    assert any([32, 192] in o["input_shapes"] or [2, 16, 192] in o["input_shapes"] for o in fwd)  # patch embedding
    p = _write(tmp_path, "siglip2", fields, "Siglip2Model", folder="big")
    msg = _one_line_error(*cli(capsys, "trace", p, "-b", "2", "--seq-len", "16", "--image-size", "64")[::2])
    assert "64 patches of 8 px, more than the 16" in msg


def test_speech_features_of_the_width_the_model_projects(capsys, tmp_path):
    """SeamlessM4T's speech encoder projects rows of ``feature_projection_input_dim`` (160) features, a width
    its config names beside no mel count: the rows have that width, and the description does not claim seconds."""
    fields = dict(hidden_size=64, speech_encoder_layers=1, speech_encoder_attention_heads=2,
                  speech_encoder_intermediate_size=128, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                  t2u_vocab_size=100, t2u_encoder_layers=1, t2u_decoder_layers=1, unit_embed_dim=64,
                  upsample_initial_channel=32, unit_hifi_gan_vocab_size=100, adaptor_kernel_size=8,
                  adaptor_stride=8, num_adapter_layers=1)
    wl, fwd, _ = _trace(capsys, tmp_path, "seamless_m4t", fields, "SeamlessM4TForSpeechToText", "--seq-len", "16",
                        "--audio-seconds", "2")
    assert "200 frames of 160 speech features" in wl["input_description"], wl["input_description"]
    assert any([2, 200, 160] in o["input_shapes"] for o in fwd)


def test_a_head_built_from_its_own_sub_config(capsys, tmp_path):
    """MusicGen's causal LM is built from the composite config's decoder part (its own config class), and
    takes one row of audio codes per codebook (``batch * num_codebooks x seq``, as its forward documents), its
    labels ``batch x seq x codebooks`` (its own loss): one embedding lookup per codebook of 2 x 16 codes."""
    import torch
    import transformers as tf

    from traincast.workload.hf import _config_for

    cfg = tf.MusicgenConfig()
    assert _config_for(tf.MusicgenForCausalLM, cfg) is cfg.decoder
    assert _config_for(tf.MusicgenForConditionalGeneration, cfg) is cfg
    dec = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, ffn_dim=128, vocab_size=100,
               num_codebooks=4)
    wl, fwd, p = _trace(capsys, tmp_path, "musicgen", dict(decoder=dec), "MusicgenForCausalLM", "--seq-len", "16")
    assert "16 tokens x 4 codebooks" in wl["input_description"]
    emb = [o for o in fwd if o["aten"] == "embedding"]
    assert len(emb) == 4 and all(o["input_shapes"][1] == [2, 16] for o in emb)
    with torch.device("meta"):
        n = sum(t.numel() for t in tf.MusicgenForCausalLM(tf.MusicgenDecoderConfig(**dec)).parameters())
    assert wl["parameters"] == n
    assert _own_loss(capsys, p, "--seq-len", "16")


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


def test_values_kept_on_the_cpu_meet_meta_tensors():
    """During a trace: integer values on the CPU sent to the model's (meta) device stay readable (Mistral 3's
    ``torch.as_tensor(image_sizes, device=features.device).tolist()``); a CPU scalar fills a meta tensor
    (SEW-D's ``masked_fill``); a boolean mask with real values selects its real count, forward and backward."""
    import torch

    from traincast.workload.hf import _MixedDevices

    sizes = torch.tensor([[28, 56]])
    with _MixedDevices():
        x = torch.empty(2, 5, 8, device="meta", requires_grad=True)
        assert torch.as_tensor(sizes, device=x.device).tolist() == [[28, 56]]
        assert sizes.to(x.device).tolist() == [[28, 56]]
        y = x.masked_fill(torch.ones(2, 5, 8, dtype=torch.bool, device="meta"), torch.tensor(-1.0))
        assert y.is_meta and y.shape == x.shape
        mask = torch.zeros(2, 5, dtype=torch.bool)
        mask[:, 1:3] = True
        sel = x[mask]
        assert sel.is_meta and sel.shape == (4, 8)
        z = torch.zeros(2, 5, 8, device="meta")
        z[mask] = torch.ones(4, 8, device="meta", requires_grad=True)
        z.sum().backward()
        # in a tuple of indices (Granite Docling's ``hidden[mask, :]``), and after other indices
        assert x[mask, :].shape == (4, 8) and x[mask, 2:].shape == (4, 6)
        assert x[:, mask[0]].shape == (2, 2, 8)
        w = torch.zeros(2, 5, 8, device="meta")
        w[mask, :] = x[mask, :] + 1
        w.sum().backward()
        # a real mask shaped like a meta tensor keeps its values (HunYuan-VL: ``mask[..., None].expand_as(embeds)``,
        # then ``.to(embeds.device)``), so the selection is counted exactly
        full = mask.unsqueeze(-1).expand_as(x).to(x.device)
        assert full.device.type == "cpu" and int(full.sum()) == 4 * 8
        assert x[full].shape == (4 * 8,)


def test_features_of_another_width_than_the_embeddings_are_refused():
    """On meta, ``masked_scatter`` does not check widths: the dry run does. Image features 8 wide put into
    16-wide text embeddings (a config pairing towers of different widths) are found, not silently counted as
    half as many placeholders; features of the embeddings' width pass, and their rows are counted."""
    import torch

    from traincast.workload.hf import _dry_run, _WidthMismatch

    class Scatter(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.width = width

        def forward(self, mask):
            emb = torch.zeros(2, 6, 16, device="meta")
            feats = torch.ones(4, self.width, device="meta")
            return emb.masked_scatter(mask.unsqueeze(-1).expand(2, 6, 16), feats)

    mask = torch.zeros(2, 6, dtype=torch.bool, device="meta")
    exc, rows = _dry_run(Scatter(8), {"mask": mask})
    assert isinstance(exc, _WidthMismatch) and "8 wide" in str(exc) and "16 wide" in str(exc)
    exc, rows = _dry_run(Scatter(16), {"mask": mask})
    assert exc is None and rows == [4]


def test_images_resized_to_the_projectors_patch_grid(capsys, tmp_path):
    """Idefics3's connector pixel-shuffles the patch grid by ``scale_factor`` 2: a 56 px image in 8 px patches
    (a 7x7 grid) cannot be split, so the images are resized to 48 px (6x6, as its image processor resizes them):
    the patch convolution sees 48x48, (6 / 2)^2 = 9 placeholders, the model built is the config's own (same
    parameters), and the forecast says what was resized."""
    fields = dict(text_config=dict(T, model_type="llama", vocab_size=1000, num_key_value_heads=2),
                  vision_config=dict(T, image_size=56, patch_size=8), scale_factor=2, image_token_id=999)
    wl, fwd, p = _trace(capsys, tmp_path, "idefics3", fields, None, "--seq-len", "32")
    assert "(9 image placeholders)" in wl["input_description"] and "3x48x48 images" in wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0][-2:] == [48, 48]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert f["parameters"] == _expected_parameters(p, None, None)[0]
    assert any("56x56 images are resized to 48x48" in n and "merge factor 2" in n for n in f["notes"]), f["notes"]


def test_a_vision_tower_that_cannot_fit_its_projector_is_built_for_a_size_that_does(capsys, tmp_path):
    """ModernVBERT's SigLIP tower has position embeddings for its own 7x7 grid only, which its pixel shuffle by 4
    cannot split, and no resized image runs in that tower: the model is built for 32 px images (a 4x4 grid, as
    ``--image-size 32`` would build it) and the forecast says so. Where the user named the image size, theirs
    stands: the one-line error says what does not fit and what to set."""
    fields = dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2),
                  vision_config=dict(T, image_size=56, patch_size=8), pixel_shuffle_factor=4)
    p = _write(tmp_path, "modernvbert", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("make a 7x7 grid, which the projector's merge factor 4 does not divide" in n
               and "built for 32x32 images (as --image-size 32 would)" in n for n in notes), notes
    code, out, err = cli(capsys, "trace", p, "-b", "2", "--seq-len", "32", "--ops", "--json")
    conv = [o for o in json.loads(out)["ops"] if o["aten"] == "convolution" and o["phase"] == "forward"]
    assert conv and conv[0]["input_shapes"][0][-2:] == [32, 32]
    msg = _one_line_error(*cli(capsys, "trace", p, "-b", "2", "--seq-len", "32", "--image-size", "56")[::2])
    assert "make a 7x7 grid, which the projector's merge factor 4 does not divide" in msg, msg
    assert "multiple of 32" in msg


def test_towers_of_different_widths_are_forecast_with_the_widths_aligned(capsys, tmp_path):
    """A config pairing a vision tower whose merger outputs 96-wide features with a 64-wide text model cannot run
    (transformers' own default Qwen3-VL config does this: 3584 vs 4096). The vision config's ``out_hidden_size``
    is the one field that holds the features' width: the model is forecast with it set to the text's 64, with the
    parameters of the model so built, and the forecast says which field it changed."""
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=96, deepstack_visual_indexes=[])
    text = dict(T, num_key_value_heads=1, vocab_size=1000, head_dim=32,
                rope_scaling=dict(rope_type="default", mrope_section=[4, 6, 6]))
    p = _write(tmp_path, "qwen3_vl", dict(vision_config=vision, text_config=text, image_token_id=999,
                                          vision_start_token_id=998), None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "64", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("features are 96 wide with a text model 64 wide" in n and "vision_config.out_hidden_size = 64" in n
               for n in f["notes"]), f["notes"]
    # the patches come cut into rows (2 x 28 x 28 of 8 px): the input pipeline decodes the 224 px images they are
    assert any(n.startswith("input pipeline not counted: 224x224 JPEG") for n in f["notes"]), f["notes"]
    data = json.loads(p.read_text())
    data["vision_config"]["out_hidden_size"] = 64
    p.write_text(json.dumps(data))
    assert f["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "64", "--json")
    assert code == 0, err
    assert not any("wide with a text model" in n for n in json.loads(out)["notes"])


def test_an_image_grid_smaller_than_the_pooled_tokens_grows_to_fit(capsys, tmp_path):
    """Gemma 3 average-pools the vision tower's patch grid to ``mm_tokens_per_image`` (n x n) tokens, so the grid's
    side must be a multiple of n (transformers' default pairs a 14x14 grid with 16x16 tokens: a pool of stride 0).
    A 32 px image in 8 px patches (4x4) pooled to 8x8 tokens: the tower is built for 64 px (8x8), 64 placeholders."""
    fields = dict(text_config=dict(T, num_key_value_heads=1, vocab_size=1000, head_dim=32, sliding_window=64),
                  vision_config=dict(VIS, image_size=32), mm_tokens_per_image=64,
                  image_token_index=999, boi_token_index=997, eoi_token_index=998)
    wl, fwd, p = _trace(capsys, tmp_path, "gemma3", fields, None, "--seq-len", "128")
    assert "(64 image placeholders)" in wl["input_description"] and "3x64x64 images" in wl["input_description"]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "128", "--json")
    assert code == 0, err
    assert any("8 px patches" in n and "8x8 grid of tokens the projector pools them to (mm_tokens_per_image 64)"
               in n and "built for 64x64 images" in n for n in json.loads(out)["notes"])


def test_tiled_images_and_patch_rows(capsys, tmp_path):
    """Mllama takes each image as tiles (``batch x images x tiles x C x H x W``) with its aspect-ratio id and
    tile mask, its text attending to them across (one image token each); Fuyu takes images as rows of flattened
    patches (``batch x patches x patch*patch*C``), one placeholder per patch."""
    fields = dict(vision_config=dict(hidden_size=64, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                                     intermediate_size=128, vision_output_dim=128, image_size=32, patch_size=8,
                                     intermediate_layers_indices=[0]),
                  text_config=dict(T, num_key_value_heads=2, vocab_size=1000, cross_attention_layers=[1], pad_token_id=0),
                  image_token_index=999)
    wl, fwd, p = _trace(capsys, tmp_path, "mllama", fields, None, "--seq-len", "32")
    assert "(1 image placeholders)" in wl["input_description"]
    assert "3x64x64 images in 4 tiles of 32x32" in wl["input_description"], wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2 * 4, 3, 32, 32]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    fields = dict(text_config=dict(T, vocab_size=1000), image_size=32, patch_size=8, image_token_id=999)
    wl, fwd, _ = _trace(capsys, tmp_path, "fuyu", fields, None, "--seq-len", "32")
    assert "(16 image placeholders)" in wl["input_description"] and "16 rows of 8px patches" in wl["input_description"]
    assert any([2, 16, 192] in o["input_shapes"] or [32, 192] in o["input_shapes"] for o in fwd)


def _params_and_shapes(capsys, tmp_path, model_type, fields, *extra):
    wl, fwd, p = _trace(capsys, tmp_path, model_type, fields, None, *extra)
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    return wl["input_description"], [s for o in fwd for s in o["input_shapes"]]


def test_raw_audio_with_the_channel_axis_its_extractor_adds(capsys, tmp_path):
    """OmniASR's CTC head takes raw audio as ``batch x 1 x samples`` (its feature extractor adds the axis): tried
    after the plain ``batch x samples``, which its first convolution refuses."""
    audio = dict(hidden_size=64, num_attention_heads=2, num_hidden_layers=1, intermediate_size=128)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "omniasr_ctc", dict(audio_config=audio), "--audio-seconds", "1")
    assert "1 s of 16000 Hz audio, one channel" in desc, desc
    assert [2, 1, 16000] in shapes


def test_text_lines_at_the_size_of_the_image_processor(capsys, tmp_path):
    """A text recognizer whose config names no image size takes the 48x320 lines its image processor makes (a
    224 px square does not fit its head), with a note saying so."""
    desc, shapes = _params_and_shapes(capsys, tmp_path, "pp_ocrv5_server_rec", {})
    assert "3x48x320 images" in desc, desc
    assert [2, 3, 48, 320] in shapes


@pytest.mark.parametrize("model_type,fields,rows", [
    # Granite Speech 5: 80 mel bins with their deltas, two frames a row: 320 wide, a row every 2 frames
    ("granite_speech5_ctc", dict(encoder_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                                     num_attention_heads=2, num_key_value_heads=2, head_dim=32)),
     [2, 100, 320]),
])
def test_feature_rows_stacked_as_the_feature_extractor_stacks_them(capsys, tmp_path, model_type, fields, rows):
    desc, shapes = _params_and_shapes(capsys, tmp_path, model_type, fields, "--audio-seconds", "2")
    assert f"rows of {rows[2]}" in desc, desc
    assert rows in shapes or [rows[0] * rows[1], rows[2]] in shapes  # (its input projection flattens the batch)


def test_ids_with_a_token_per_stream(capsys, tmp_path):
    """Kyutai's speech-to-text takes, at each step, the text token and one token per audio codebook (its
    embedding adds each stream's offset): ``batch x seq x 33``, the labels the text stream."""
    fields = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                  ffn_dim=128)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "kyutai_speech_to_text", fields, "--seq-len", "16")
    assert "16 tokens x 33 streams" in desc, desc
    assert [2, 16, 33] in shapes


def test_tts_labels_are_latent_frames_at_their_tokens(capsys, tmp_path):
    """Pocket TTS trains on frames of continuous latents, one per frame token after the audio BOS in the ids:
    half the sequence is frames, ``batch x frames x latent_dim`` labels, and the model's own loss."""
    fields = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                  intermediate_size=128, flow_head_config=dict(hidden_size=32, num_hidden_layers=1, condition_dim=64))
    desc, shapes = _params_and_shapes(capsys, tmp_path, "pocket_tts", fields, "--seq-len", "16")
    assert "16 tokens (audio: 8 frames of 32 latents as labels)" in desc, desc
    assert [2, 8, 32] in shapes
    assert _own_loss(capsys, tmp_path / "pocket_tts" / "config.json", "--seq-len", "16")


def test_text_as_long_as_the_audio_it_is_added_to(capsys, tmp_path):
    """Voxtral Realtime adds one audio frame to each text position: the text has as many tokens as the audio
    encoder makes frames (1.6 s: 160 mel frames, 20 after its downsampling), not --seq-len."""
    audio = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, head_dim=32)
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=2, head_dim=32, vocab_size=1000)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "voxtral_realtime",
                                      dict(audio_config=audio, text_config=text, hidden_size=64),
                                      "--seq-len", "16", "--audio-seconds", "1.6")
    assert desc.startswith("2 x (20 tokens"), desc


def test_a_default_head_that_cannot_be_built_falls_back_to_the_next(capsys, tmp_path):
    """wav2vec2-BERT's default head (CTC) cannot be built from a config that defines no vocabulary: the next head
    of the model type that can (audio classification) is forecast, with its exact parameters and a note saying
    which head and why. A head the user names is never replaced: a one-line error."""
    fields = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
                  output_hidden_size=64, classifier_proj_size=32, tdnn_dim=[32, 32, 32, 32, 32])
    p = _write(tmp_path, "wav2vec2-bert", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--audio-seconds", "1", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert f["parameters"] == _expected_parameters(p, None, "audio-classification")[0]
    assert any("Wav2Vec2BertForCTC cannot be built" in n and "Wav2Vec2BertForSequenceClassification" in n
               and "--task audio-classification" in n for n in f["notes"]), f["notes"]
    named = _write(tmp_path, "wav2vec2-bert", fields, "Wav2Vec2BertForCTC", folder="named")
    msg = _one_line_error(*cli(capsys, "trace", named, "-b", "2", "--audio-seconds", "1")[::2])
    assert "vocabulary size" in msg, msg
    msg = _one_line_error(*cli(capsys, "trace", p, "-b", "2", "--audio-seconds", "1", "--task", "ctc")[::2])
    assert "vocabulary size" in msg, msg


def test_labels_as_many_as_the_head_predicts(capsys, tmp_path):
    """Perceiver's masked-LM decoder predicts its ``max_position_embeddings`` positions whatever the input's
    length: the labels are that many tokens (the loss's rows: batch x 64), the input stays --seq-len."""
    fields = dict(d_latents=32, d_model=32, num_latents=8, num_blocks=1, num_self_attends_per_block=1,
                  num_self_attention_heads=2, num_cross_attention_heads=1, max_position_embeddings=64)
    wl, fwd, p = _trace(capsys, tmp_path, "perceiver", fields, None, "--seq-len", "16")
    assert wl["input_description"].startswith("2 x (16 tokens"), wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    assert any(o["aten"].startswith("nll_loss") and o["input_shapes"][0][0] == 2 * 64 for o in fwd)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "16", "--json")
    assert code == 0, err
    assert any("predicts 64 positions" in n for n in json.loads(out)["notes"])


def test_decoder_audio_codes_one_per_codebook(capsys, tmp_path):
    """Dia's decoder takes its audio codes as ``batch x frames x codebooks`` (its forward documents the layouts)
    and the labels one row per example and codebook, as its logits are flattened: its own loss."""
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=32)
    fields = dict(encoder_config=small, decoder_config=dict(small, num_channels=3, vocab_size=100, cross_hidden_size=64,
                                                            cross_num_attention_heads=2, cross_head_dim=32,
                                                            cross_num_key_value_heads=2),
                  delay_pattern=[0, 1, 2])
    desc, shapes = _params_and_shapes(capsys, tmp_path, "dia", fields, "--seq-len", "16")
    assert "16 audio frames x 3 codebooks (vocab 100)" in desc, desc
    assert [2, 16, 3] in shapes
    assert _own_loss(capsys, tmp_path / "dia" / "config.json", "--seq-len", "16")


def test_features_in_place_of_the_text(capsys, tmp_path):
    """Pop2Piano's encoder takes the features (at the width its feature extractor makes, 512 mel bins) in place of
    token ids; the decoder's labels are the text: tried after the forms with both, which its encoder refuses."""
    fields = dict(d_model=512, d_kv=16, d_ff=128, num_layers=1, num_decoder_layers=1, num_heads=2, vocab_size=100)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "pop2piano", fields, "--seq-len", "16", "--audio-seconds", "1")
    assert desc == "2 x (1 s of 512 log-mel features)", desc
    assert [2, 100, 512] in shapes


def test_images_resized_to_the_backbones_windows(capsys, tmp_path):
    """RF-DETR's DINOv2 backbone splits its patch grid into ``num_windows`` windows per side: a 70 px image in 14 px
    patches (5x5) cannot be split in 2, so it is resized to 56 px (4x4), with a note; the model is the config's."""
    backbone = dict(model_type="rf_detr_dinov2", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    image_size=70, patch_size=14,
                    num_windows=2, window_block_indexes=[0], out_features=["stage1", "stage2"])
    fields = dict(backbone_config=backbone, d_model=32, decoder_layers=1, decoder_ffn_dim=64, num_queries=10,
                  decoder_self_attention_heads=2, decoder_cross_attention_heads=2, group_detr=1)
    wl, fwd, p = _trace(capsys, tmp_path, "rf_detr", fields)
    assert "3x56x56 images" in wl["input_description"], wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0][-2:] == [56, 56]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--json")
    assert code == 0, err
    assert any("resized to 56x56" in n and "2 attention windows per side (num_windows)" in n
               for n in json.loads(out)["notes"])


def test_fixed_length_and_reversible_layers_and_empty_lists():
    """Reformer trains only at the length its axial position shape multiplies to; a model whose reversible layers
    run inside a custom autograd Function, and a config whose feature lists are empty, get one clear line."""
    import transformers as tf

    from traincast.workload.hf import _fixed_length, explain

    assert _fixed_length(tf.ReformerConfig())[0] == 4096
    assert _fixed_length(tf.ReformerConfig(axial_pos_embds=False)) is None
    assert _fixed_length(tf.BertConfig()) is None
    msg = explain(AssertionError("Expected gradient function to be set"), "ReformerModelWithLMHead",
                  "running its forward")
    assert "custom autograd Function" in msg
    cfg = tf.LwDetrConfig()
    msg = explain(ValueError("torch.cat(): expected a non-empty list of Tensors"), "LwDetrForObjectDetection",
                  "running its forward", cfg)
    assert "projector_scale_factors" in msg and "empty" in msg


def test_a_token_per_codebook_with_labels_for_each(capsys, tmp_path):
    """CSM takes, at each step, one token per codebook (``batch x seq x codebooks``, as its forward documents), and
    its labels the same codes (the backbone trains on the first, the depth decoder on the rest)."""
    depth = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=16, num_codebooks=4, backbone_hidden_size=64, vocab_size=64)
    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=32, num_codebooks=4, vocab_size=64, text_vocab_size=100,
                  depth_decoder_config=depth)  # (its codec, Mimi, at its default size: the codes come as ids)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "csm", fields, "--seq-len", "16")
    assert "16 tokens x 4 streams" in desc, desc
    assert [2, 16, 4] in shapes
    assert _own_loss(capsys, tmp_path / "csm" / "config.json", "--seq-len", "16")


def test_navit_packed_patches_with_their_grids(capsys, tmp_path):
    """MiniCPM-V takes every image's patches side by side in one row (``1 x C x patch x patches*patch``) with each
    image's patch grid ``target_sizes``, the grid a multiple of its merge and window kernels (2 x 2: 4); its
    projector merges 16 patches into one placeholder: a 64 px image in 16 px patches is 16 patches, one placeholder."""
    text = dict(model_type="qwen3_5_text", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=2, head_dim=32, vocab_size=1000,
                layer_types=["full_attention"])
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=64,
                  patch_size=16, insert_layer_id=1)
    fields = dict(text_config=text, vision_config=vision, image_size=64, insert_layer_id=1)
    desc, shapes = _params_and_shapes(capsys, tmp_path, "minicpmv4_6", fields, "--seq-len", "16")
    assert "3x64x64 images packed in 16 patches of 16px" in desc and "(1 image placeholders)" in desc, desc
    assert [1, 3, 16, 2 * 16 * 16] in shapes


def test_layerdrop_read_from_the_config_is_off_too(capsys, tmp_path):
    """wav2vec2's encoder draws ``torch.rand([])`` against ``config.layerdrop`` at every layer (not a module
    attribute): that draw is left out too, so two traces of the model are the same, and the forecast says so."""
    p = _write(tmp_path, "wav2vec2", dict(T, **CONV, num_hidden_layers=6, layerdrop=0.5), None)
    runs = []
    for _ in range(3):
        code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--audio-seconds", "1",
                             "--json")
        assert code == 0, err
        runs.append(json.loads(out))
    assert len({r["iteration_s"] for r in runs}) == 1
    assert any("LayerDrop is left out" in n and "0.5 in config.layerdrop" in n for n in runs[0]["notes"])


def test_parameters_made_off_the_meta_device_join_it(capsys, tmp_path):
    """DiffLlama makes its attention's lambda parameters with ``torch.normal(mean, std, size=...)``, which ignores
    the ``torch.device("meta")`` context: they were CPU parameters whose gradients the backward could not copy
    out of meta. They are moved to meta, the backward runs, and every parameter is counted."""
    fields = dict(T, num_key_value_heads=2, vocab_size=1000)
    wl, fwd, p = _trace(capsys, tmp_path, "diffllama", fields, None, "--seq-len", "32")
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_rope_fields_a_config_leaves_out_are_filled_and_said(capsys, tmp_path):
    """RoPE's parameters do not change what a step computes. Cohere Compass's default config names no
    ``rope_parameters`` for its ``full_attention`` layers (its constructor stops on a KeyError): default RoPE
    stands in and the forecast says so, with the parameters transformers counts for the filled config."""
    fields = dict(T, num_key_value_heads=1, vocab_size=1000, rope_parameters={})
    p = _write(tmp_path, "cohere_compass_text", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("names no rope_parameters for its full_attention layers: default RoPE of base 10000" in n
               for n in f["notes"]), f["notes"]
    data = json.loads(p.read_text())
    data["rope_parameters"] = {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    p.write_text(json.dumps(data))
    assert f["parameters"] == _expected_parameters(p, None, None)[0]


def test_multimodal_rope_sections_scaled_to_the_rotary_dimensions():
    """A forward that stops splitting 64 rotary dimensions by sections [8, 12, 12] (sum 32; GLM-4V's code default
    where its config names none) is repaired by sections scaled to [16, 24, 24] in the text config's RoPE
    parameters. Sections that do not scale evenly are rounded to whole dimensions that sum to the total, largest
    remainders first (GLM-4V-MoE's default config: 42-wide heads, half of them rotated, 11 rotary frequencies:
    [3, 4, 4]); other errors get no repair."""
    from transformers import AutoConfig

    from traincast.workload.hf import _rope_sections_fix

    exc = RuntimeError("split_with_sizes expects split_sizes to sum exactly to 64 (input tensor's size at "
                       "dimension -1), but got split_sizes=[8, 12, 12]")
    cfg = AutoConfig.for_model("glm4v")
    note = _rope_sections_fix(exc, cfg)(cfg)
    assert cfg.text_config.rope_parameters["mrope_section"] == [16, 24, 24]
    assert "[8, 12, 12] sum to 32, not the 64 rotary dimensions" in note
    odd = RuntimeError("split_with_sizes expects split_sizes to sum exactly to 11 (...), but got split_sizes=[8, 12, 12]")
    cfg = AutoConfig.for_model("glm4v_moe")
    note = _rope_sections_fix(odd, cfg)(cfg)
    assert cfg.text_config.rope_parameters["mrope_section"] == [3, 4, 4], note
    assert "[8, 12, 12] sum to 32, not the 11 rotary dimensions" in note and "mrope_section [3, 4, 4]" in note
    assert _rope_sections_fix(RuntimeError("shape mismatch"), cfg) is None


def test_a_sub_config_without_rope_theta_takes_the_configs_own():
    """DBRX's attention reads ``attn_config.rope_theta``, which its config keeps in the top level's RoPE
    parameters: the sub-config takes that base (500000 here), not a stand-in; a note says so."""
    from transformers import AutoConfig

    from traincast.workload.hf import _fill_rope

    cfg = AutoConfig.for_model("dbrx")
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": 500000.0}
    notes: list[str] = []
    exc = AttributeError("'DbrxAttentionConfig' object has no attribute 'rope_theta'")
    assert _fill_rope(exc, cfg, notes) and cfg.attn_config.rope_theta == 500000.0
    assert notes == ["the config's DbrxAttentionConfig names no rope_theta: it takes 500000, the base the config "
                     "names elsewhere (RoPE's base does not change the step's cost)"]
    assert not _fill_rope(AttributeError("'DbrxFFNConfig' object has no attribute 'ffn_hidden_size'"), cfg, notes)


def test_led_reads_its_real_mask_and_takes_no_global_attention(capsys, tmp_path):
    """LED's encoder takes its global-attention path only where the mask's values ask for it
    (``is_index_global_attn.flatten().any().item()``); on meta the tracer would answer yes and the path's shapes
    would not compose. Its masks and ids keep real values on the CPU: a plain training batch, no global attention,
    and the step traces with every parameter counted."""
    fields = dict(ENC, vocab_size=1000, attention_window=[16], max_encoder_position_embeddings=64,
                  max_decoder_position_embeddings=64)
    wl, fwd, p = _trace(capsys, tmp_path, "led", fields, None, "--seq-len", "32")
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_an_empty_field_read_through_an_attribute_is_named():
    """DeepSeek-V2's router calls ``torch.topk(..., k=self.top_k)``, set in its constructor as
    ``self.top_k = config.num_experts_per_tok``, which the default config leaves None. The message names that
    field, not another empty one that only appears elsewhere in the code (``topk_group``)."""
    import torch
    from transformers import PretrainedConfig

    from traincast.workload.hf import explain

    class Router(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.top_k = config.num_experts_per_tok
            self.topk_group = config.topk_group

        def forward(self, x):
            if self.topk_group is not None:
                x = x[:, : self.topk_group]
            return torch.topk(x, k=self.top_k, dim=-1)

    cfg = PretrainedConfig(num_experts_per_tok=None, topk_group=None)
    try:
        Router(cfg)(torch.zeros(2, 8))
    except TypeError as exc:
        msg = explain(exc, "Router", "running its forward", cfg)
    assert "needs config fields this config leaves empty (None): num_experts_per_tok;" in msg, msg


def test_patches_of_one_frame_with_their_merge_sizes(capsys, tmp_path):
    """VideoLLaMA 3 takes Qwen2-VL-style patch rows, but of one frame each (its config names no
    ``temporal_patch_size``: rows of 3 x 8 x 8, not 3 x 2 x 8 x 8) and each image's spatial merge
    (``image_merge_sizes``); 32 px images in 8 px patches merged by 2: (4 / 2)^2 = 4 placeholders."""
    fields = dict(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     patch_size=8),
                  text_config=dict(T, model_type="qwen2", num_key_value_heads=1, vocab_size=1000),
                  image_token_id=999)
    wl, fwd, p = _trace(capsys, tmp_path, "video_llama_3", fields, None, "--seq-len", "32", "--image-size", "32")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2 * 16, 3, 8, 8], conv[:1]  # one frame's patches, one per row
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_patch_rows_padded_per_image(capsys, tmp_path):
    """ColQwen2 takes the Qwen2-VL patch rows of each image in a batch axis (``batch x rows x width``, as its
    processor pads them) and unpads them by ``image_grid_thw``: 32 px images in 8 px patches, 16 rows each."""
    vlm = dict(model_type="qwen2_vl", image_token_id=999,
               vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=8,
                                  spatial_merge_size=2, temporal_patch_size=2, mlp_ratio=2),
               text_config=dict(T, num_key_value_heads=1, vocab_size=1000,
                                rope_parameters=dict(rope_type="default", mrope_section=[4, 6, 6])))
    wl, fwd, p = _trace(capsys, tmp_path, "colqwen2", dict(vlm_config=vlm, embedding_dim=16), None,
                        "--seq-len", "32", "--image-size", "32")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_dynamic_patches_at_the_configs_mean_patch_size(capsys, tmp_path):
    """BLT groups bytes into patches where a small LM's entropy rises: a shape from the text's values. The step
    is forecast at the config's mean patch size (``patch_size`` 4: 32 tokens make 8 patches), passed through the
    causal-LM head's ``**kwargs`` to the base model's ``patch_lengths``, and the forecast says so."""
    small = dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
    fields = dict(vocab_size=260, patch_size=4, encoder_hash_byte_group_vocab=100,
                  patcher_config=dict(small, num_hidden_layers=1),
                  encoder_config=dict(small, num_hidden_layers=1, hidden_size_global=64),
                  decoder_config=dict(small, num_hidden_layers=1, hidden_size_global=64),
                  global_config=dict(small, hidden_size=64, num_hidden_layers=1))
    wl, fwd, p = _trace(capsys, tmp_path, "blt", fields, None, "--seq-len", "32")
    assert "8 patches of 4 bytes" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    assert any("patches of 4 tokens (the config's patch_size) stand in" in n for n in json.loads(out)["notes"])


def test_config_properties_that_build_new_configs_end():
    """WavTokenizer's ``encoder_config`` is a property that builds a new config at each read, and that config has
    the same property: following it from every config never ended (Apertus 1.5 ran past every time limit). It is
    followed from stored configs only: the stored one and the one its property builds."""
    from transformers import PretrainedConfig

    from traincast.workload.hf import _SUB_VISION, _subconfigs

    class Fresh(PretrainedConfig):
        model_type = "fresh-test"

        @property
        def encoder_config(self):
            return Fresh()

    outer = PretrainedConfig()
    outer.audio_config = Fresh()
    subs = _subconfigs(outer, _SUB_VISION)
    assert len(subs) == 2 and subs[0] is outer.audio_config and all(isinstance(s, Fresh) for s in subs)


def test_patches_as_small_images(capsys, tmp_path):
    """Kimi K2.5's vision tower embeds each patch with a convolution of the patch's size, so it takes the patches
    of one frame as ``patches x C x P x P`` with their grid: 32 px images in 8 px patches, 16 per image, merged
    2 x 2 into 4 placeholders."""
    fields = dict(vision_config=dict(patch_size=8, num_attention_heads=2, num_hidden_layers=1, hidden_size=32,
                                     intermediate_size=64, pos_emb_height=8, pos_emb_width=8),
                  text_config=dict(T, model_type="deepseek_v3", num_key_value_heads=2, vocab_size=1000,
                                   n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                   first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
                                   qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1),
                  projection_hidden_size=32, image_token_id=999)
    wl, fwd, p = _trace(capsys, tmp_path, "kimi_k25", fields, None, "--seq-len", "32", "--image-size", "32")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2 * 16, 3, 8, 8], conv[:1]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_a_repair_keeps_the_first_attempts_notes_and_names_itself_in_a_later_refusal(monkeypatch):
    """The first attempt changes the config before a repair's retry (here it writes a note, as turning LayerDrop off
    does): that note stays, once, beside the repair's. A config still refused after a repair says which change was
    made first; a repair that changes nothing new is not tried twice."""
    from traincast.errors import TraceError
    from traincast.workload import hf

    calls = []

    def once(name, cfg, cls, *, notes, **kw):
        calls.append(1)
        notes.append("LayerDrop is left out")
        if len(calls) == 1:
            raise hf._Repairable("cannot trace m: widths", lambda c: "widths aligned")
        if kw.get("fail"):
            raise TraceError("cannot trace m: something else")
        return "step"

    monkeypatch.setattr(hf, "_hf_step_once", once)
    with hf.hf_options() as opts:
        assert hf.hf_step("m", None, None) == "step"
    assert opts.notes == ["LayerDrop is left out", "m: widths aligned"] and len(calls) == 2
    calls.clear()
    with hf.hf_options(), pytest.raises(TraceError, match=r"something else \(after changing the config first: "
                                                           r"widths aligned\)"):
        hf.hf_step("m", None, None, fail=True)

    def always(name, cfg, cls, *, notes, **kw):
        calls.append(1)
        raise hf._Repairable("cannot trace m: widths", lambda c: "widths aligned")

    calls.clear()
    monkeypatch.setattr(hf, "_hf_step_once", always)
    with hf.hf_options(), pytest.raises(TraceError, match=r"widths \(after changing the config first: widths aligned\)$"):
        hf.hf_step("m", None, None)
    assert len(calls) == 2  # the same repair again: refused, not retried


def test_tiles_with_the_mask_of_the_real_ones(capsys, tmp_path):
    """Granite Docling takes ``batch x tiles x C x H x W`` with a ``batch x tiles`` mask of the real tiles, and
    selects the tiles by it (``pixel_values[pixel_attention_mask]``): a 64 px tile in 8 px patches shuffled by 2
    is (8 / 2)^2 = 16 placeholders, and the step traces with every parameter counted."""
    fields = dict(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     image_size=64, patch_size=8, out_hidden_size=64, scale_factor=2),
                  text_config=dict(T, num_key_value_heads=1, vocab_size=1000, pad_token_id=0, bos_token_id=1,
                                   eos_token_id=1),
                  image_token_id=999, pad_token_id=0)
    wl, fwd, p = _trace(capsys, tmp_path, "granite_docling", fields, None, "--seq-len", "128")
    assert "(16 image placeholders)" in wl["input_description"], wl["input_description"]
    conv = [o for o in fwd if o["aten"] == "convolution"]
    assert conv and conv[0]["input_shapes"][0] == [2, 3, 64, 64], conv[:1]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_a_clamp_by_a_bound_the_config_leaves_none_is_repaired_and_said(capsys, tmp_path):
    """DBRX clamps its query/key/value by ``attn_config.clip_qkv``, which transformers' default config leaves None:
    ``clamp`` stops (both bounds None). The one None field named as a clamp's bound is set to infinity, a bound
    that never binds (a clamp costs the same whatever its bound), and the forecast names the field."""
    fields = dict(d_model=64, n_heads=2, n_layers=1, max_seq_len=128, vocab_size=1000,
                  attn_config=dict(kv_n_heads=1, rope_theta=10000.0),
                  ffn_config=dict(ffn_hidden_size=128, moe_num_experts=2, moe_top_k=1))
    p = _write(tmp_path, "dbrx", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("clamps by attn_config.clip_qkv, which the config leaves None" in n
               and "attn_config.clip_qkv = inf" in n for n in f["notes"]), f["notes"]
    assert f["parameters"] == _expected_parameters(p, None, None)[0]
    data = json.loads(p.read_text())  # a bound of its own: no repair
    data["attn_config"]["clip_qkv"] = 8.0
    p.write_text(json.dumps(data))
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    assert not any("clip_qkv" in n for n in json.loads(out)["notes"])


def test_a_duration_based_tts_model_trains_on_durations_spectrogram_and_variances(capsys, tmp_path):
    """FastSpeech 2 refuses to train without all its targets, and its length regulator expands each token's
    hidden state by the token's duration (``repeat_interleave`` by values): 32 tokens and 2 s of 80 mel bins at
    100 frames a second, 6 frames per token (192 frames), the durations real so the regulator makes 192 rows."""
    fields = dict(hidden_size=64, encoder_layers=1, decoder_layers=1, encoder_linear_units=128,
                  decoder_linear_units=128, speech_decoder_postnet_layers=2, speech_decoder_postnet_units=32,
                  duration_predictor_channels=32, pitch_predictor_channels=32, energy_predictor_channels=32,
                  pitch_predictor_layers=2)
    wl, fwd, p = _trace(capsys, tmp_path, "fastspeech2_conformer", fields, None, "--seq-len", "32",
                        "--audio-seconds", "2")
    assert "targets: 192 frames of 80 mel bins, 6 per token" in wl["input_description"], wl["input_description"]
    rep = [o for o in fwd if o["aten"] == "repeat_interleave"]
    assert rep, sorted({o["aten"] for o in fwd})
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32",
                         "--audio-seconds", "2", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("each of the 32 tokens lasting 6 frames" in n and "pitch and energy targets" in n for n in notes)
    assert not any("stand-in" in n for n in notes), notes


def test_patch_rows_of_every_image_in_one_axis_where_the_forward_documents_them(capsys, tmp_path):
    """NeoMME's model documents ``pixel_values`` as ``(num_patches, 3 * patch_size ** 2)``, the rows of every
    image in one axis (its head's docstring says images): 64 px images in 32 px patches are 2 x 4 rows, for the
    2 x 4 placeholders."""
    fields = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, embedding_rank=16, embedding_dim=16,
                  layer_types=["sliding_attention", "full_attention"], per_layer_config={})
    wl, fwd, p = _trace(capsys, tmp_path, "neomme", fields, None, "--seq-len", "32", "--image-size", "64")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]
    assert "as 4 rows of 32px patches, all images' rows in one axis" in wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_placeholders_as_many_as_a_passed_over_count_check_names(capsys, tmp_path):
    """Music Flamingo checks its audio placeholders against the features it makes (``torch_compilable_check``,
    which the dry run passes over) and then stops elsewhere on the wrong count, before any features are scattered.
    The check's message names the count (``features: 1500`` for two 30 s windows): 750 placeholders each."""
    fields = dict(audio_config=dict(model_type="audioflamingo3_encoder", num_mel_bins=128, num_hidden_layers=1,
                                    num_attention_heads=2,
                                    intermediate_size=128, hidden_size=64),
                  text_config=dict(T, model_type="qwen2", num_key_value_heads=2, vocab_size=1000),
                  audio_token_id=999, audio_bos_token_id=997, audio_eos_token_id=998, head_dim=64)
    wl, fwd, p = _trace(capsys, tmp_path, "musicflamingo", fields, None, "--seq-len", "32")
    assert "(750 audio placeholders)" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_images_and_audio_each_with_their_placeholders_and_a_boolean_feature_mask(capsys, tmp_path):
    """Gemma 3n takes images and audio: its audio tower inverts the feature mask (``~input_features_mask``), so
    the mask is boolean (the form tried after the integer one fails), its log-mel width is ``input_feat_size``
    (128), and the audio's placeholders follow the image's: as many as its audio-count check, passed over in the
    dry run, names (``tokens: 0, features: N``): 10 s of audio make 188 per example after 256 image ones."""
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, hidden_size_per_layer_input=16, num_kv_shared_layers=0,
                layer_types=["sliding_attention", "full_attention"], activation_sparsity_pattern=[0.0, 0.0],
                laurel_rank=8, altup_num_inputs=2)
    audio = dict(hidden_size=64, conf_num_hidden_layers=1, conf_num_attention_heads=2)
    wl, fwd, p = _trace(capsys, tmp_path, "gemma3n", dict(text_config=text, audio_config=audio), None,
                        "--seq-len", "32")
    assert "(256 image and 188 audio placeholders)" in wl["input_description"], wl["input_description"]
    assert "10 s of 128 log-mel features" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_tuple_fields_read_as_lists_and_a_head_as_wide_as_its_backbone(capsys, tmp_path):
    """VitMatte's default config holds its decoder's widths as tuples, which its constructor adds to a list
    (``[hidden_size] + fusion_hidden_sizes``: a TypeError): they are read as lists, as a config.json gives them.
    Its decoder then takes features ``hidden_size`` (32) wide from a backbone 64 wide, and its convolution stops on
    the channels: the head's ``hidden_size`` is set to the backbone's, and the forecast says both."""
    fields = dict(hidden_size=32, backbone_config=dict(model_type="vitdet", hidden_size=64, num_hidden_layers=1,
                                                       num_attention_heads=2, image_size=64, pretrain_image_size=64,
                                                       patch_size=16, out_features=["stage1"]))
    p = _write(tmp_path, "vitmatte", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--image-size", "64", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("holds convstream_hidden_sizes, fusion_hidden_sizes" in n and "read as lists" in n for n in notes), notes
    assert any("takes features 32 wide (hidden_size) from a backbone 64 wide" in n and "hidden_size = 64" in n
               for n in notes), notes
    data = json.loads(p.read_text())  # the widths agreeing: no repair
    data["hidden_size"] = 64
    p.write_text(json.dumps(data))
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--image-size", "64", "--json")
    assert code == 0, err
    assert not any("from a backbone" in n for n in json.loads(out)["notes"])


def test_images_sized_to_a_patch_count_the_projector_table_holds(capsys, tmp_path):
    """Aria's projector maps patch counts to query counts (``projector_patch_to_query_dict``) and takes no other
    count: 32 px images in 8 px patches make 16 patches, which the table {64: 4} does not hold. The images are
    sized to the smallest count it holds (8 x 8 patches: 64 px), with a note."""
    fields = dict(vision_config=dict(model_type="idefics3_vision", hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8),
                  text_config=dict(T, model_type="aria_text", num_key_value_heads=1, vocab_size=1000,
                                   moe_num_experts=2, moe_topk=1, moe_num_shared_experts=1),
                  projector_patch_to_query_dict={"64": 4}, image_token_index=999)
    wl, fwd, p = _trace(capsys, tmp_path, "aria", fields, None, "--seq-len", "32")
    assert "3x64x64 images" in wl["input_description"] and "(4 image placeholders)" in wl["input_description"], \
        wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    assert any("the images are 64x64, a grid of 8x8 patches" in n and "projector_patch_to_query_dict holds 64" in n
               for n in json.loads(out)["notes"])


def test_each_tokens_patches_as_one_channels_last_block(capsys, tmp_path):
    """Inkling 2 takes ``pixel_values`` as one ``patch*merge x patch*merge x channels`` block per image token, its
    grid counted in tokens: 64 px images in 8 px patches merged 2 x 2 are 16 blocks of 16 x 16 x 3 each, for 16
    placeholders (the form tried after the patch rows)."""
    fields = dict(text_config=dict(model_type="inkling2_text", vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=32, swa_num_attention_heads=2,
                                   swa_num_key_value_heads=1, swa_head_dim=32, moe_intermediate_size=64,
                                   n_routed_experts=2, num_experts_per_tok=1, n_layers_per_attn_res_block=1,
                                   layer_types=["hybrid_sliding", "hybrid"], sliding_window_size=16, rel_extent=16),
                  vision_config=dict(model_type="inkling2_vision", hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=1, num_attention_heads=2, patch_size=8, posemb_grid_size=8,
                                     projection_hidden_dim=128, text_hidden_size=64),
                  image_token_id=999)
    wl, fwd, p = _trace(capsys, tmp_path, "inkling2", fields, None, "--seq-len", "32", "--image-size", "64")
    d = wl["input_description"]
    assert "(16 image placeholders)" in d and "each token's 2x2 patches as one 16px block, channels last" in d, d
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_no_images_or_audio_for_towers_the_config_leaves_out(capsys, tmp_path):
    """transformers' default Gemma 4 config leaves ``vision_config`` and ``audio_config`` None: the model builds
    neither tower (and stops if given pixels or audio), so it trains on text alone, and the forecast says so."""
    fields = dict(text_config=dict(T, model_type="gemma4_text", num_key_value_heads=1, head_dim=32, vocab_size=1000,
                                   layer_types=["sliding_attention", "full_attention"]),
                  vision_config=None, audio_config=None)
    wl, fwd, p = _trace(capsys, tmp_path, "gemma4", fields, None, "--seq-len", "32")
    assert wl["input_description"] == "2 x (32 tokens, vocab 1000)", wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("no vision tower (vision_config None" in n and "no pixel_values" in n for n in notes), notes
    assert any("no audio tower (audio_config None" in n and "no input_features" in n for n in notes), notes


def test_a_pixel_mask_with_real_values_where_the_model_selects_patches_by_it(capsys, tmp_path):
    """ViLT picks its image patches by the pixel mask's nonzero entries (``unique`` of their rows: no meta kernel);
    where no other form runs, the mask is passed on the CPU with its values (every pixel real): 64 px images in
    32 px patches."""
    fields = dict(T, vocab_size=1000, image_size=64, patch_size=32, max_position_embeddings=32, max_image_length=-1)
    wl, fwd, p = _trace(capsys, tmp_path, "vilt", fields, None, "--seq-len", "16", "--image-size", "64")
    assert "3x64x64 images with their pixel mask (all real)" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]


def test_a_config_class_without_num_key_value_heads_takes_the_attention_heads(capsys, tmp_path):
    """Moonshine Streaming's decoder config class has no ``num_key_value_heads`` at all (its encoder's has), and its
    decoder layers read it: transformers' documented default where it is not specified, ``num_attention_heads`` (no
    grouped-query attention), said in a note; a config that names it gets no note."""
    fields = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                  head_dim=32, encoder_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                   num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                                                   sliding_windows=[[16, 4], [16, 0]]))
    p = _write(tmp_path, "moonshine_streaming", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("MoonshineStreamingConfig has no num_key_value_heads; it is taken as 2 (num_attention_heads" in n
               for n in f["notes"]), f["notes"]
    data = json.loads(p.read_text())
    data["num_key_value_heads"] = 2
    p.write_text(json.dumps(data))
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--json")
    assert code == 0, err
    assert not any("num_key_value_heads" in n for n in json.loads(out)["notes"])


def test_integers_a_model_writes_onto_its_device_keep_their_values():
    """During the trace of a model that reads them back (Step 3.7's vision grid, ``.tolist()``),
    ``torch.tensor(python ints, device=meta)`` is made on the CPU with its values; floating values stay on meta. Of
    any other model, they stay on meta (where meeting meta tensors costs no copy from the CPU)."""
    import torch

    from traincast.workload.hf import _MixedDevices

    with _MixedDevices():
        assert torch.tensor([[1, 4, 4]], device="meta").is_meta
    with _MixedDevices(real_tensors=True):
        x = torch.empty(2, 8, device="meta")
        grid = torch.tensor([[1, 4, 4]], device=x.device)
        assert grid.device.type == "cpu" and grid.tolist() == [[1, 4, 4]]
        assert torch.tensor([0.5, 1.0], device=x.device).is_meta
        assert torch.tensor([True, False], device="meta").tolist() == [True, False]
        assert (x + torch.tensor(2, device=x.device)).is_meta


def test_a_sliding_window_mask_no_layer_uses_and_a_vision_grid_written_from_python(capsys, tmp_path):
    """Step 3.7 builds a sliding-window mask whatever its layers are, and its default text config leaves
    ``sliding_window`` None with every layer full attention: the window is set to the position limit, a window that
    never binds, with a note. Its vision tower writes its patch grid as ``torch.tensor([[1, h, w]],
    device=hidden.device)`` and reads it back: the grid keeps its values (8 x 8 patches of a 112 px image, two
    stride-2 convolutions: 4 placeholders)."""
    text = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                share_expert_dim=32, mlp_layer_types=["dense", "sparse"], layer_types=["full_attention"] * 2,
                max_position_embeddings=512, num_sliding_attention_heads=2, query_pre_attn_scalar=32)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, image_size=112,
                  patch_size=14, max_position_embeddings=64)
    fields = dict(text_config=text, vision_config=vision, image_token_id=999)
    wl, fwd, p = _trace(capsys, tmp_path, "step3p7", fields, None, "--seq-len", "32")
    assert "(4 image placeholders)" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("leaves text_config.sliding_window None and names no sliding layer" in n
               and "text_config.sliding_window = 512" in n for n in notes), notes
    assert any("the forward reads back integers it writes onto its device" in n for n in notes), notes


def test_audio_scattered_before_the_images_and_a_token_id_from_the_model_family(capsys, tmp_path):
    """transformers' Qwen2.5-Omni thinker config declares no ``vision_start_token_id``, which its rotary positions
    read; the talker config of the same module declares 151652: taken from there, with a note (a token id sizes
    nothing). Its forward scatters the audio's features (750 rows per example) before the images' (64): the count
    checks passed with 64 image placeholders, so they stand, and the audio gets its 750 after them."""
    fields = dict(audio_token_index=995, image_token_index=996, video_token_index=997, audio_start_token_id=993,
                  audio_end_token_id=994,
                  audio_config=dict(num_mel_bins=128, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=128,
                                    d_model=64, output_dim=64),
                  vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=64,
                                     fullatt_block_indexes=[0]),
                  text_config=dict(T, vocab_size=1000, num_key_value_heads=1,
                                   rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[4, 6, 6])))
    wl, fwd, p = _trace(capsys, tmp_path, "qwen2_5_omni_thinker", fields, None, "--seq-len", "32")
    assert "(64 image and 750 audio placeholders)" in wl["input_description"], wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("Qwen2_5OmniThinkerConfig has no vision_start_token_id" in n and "it takes 151652" in n
               and "Qwen2_5OmniTalkerConfig" in n for n in notes), notes
    assert any("puts the audio's features in before the images'" in n for n in notes), notes


def test_a_composite_that_only_generates_forecasts_its_part_that_trains(capsys, tmp_path):
    """Qwen2.5-Omni's top-level class holds a thinker, a talker and a vocoder and only generates with them: its
    forward takes nothing to train on. Of its sub-configs, only the thinker's model type has a head in the same
    task mapping (``multimodal-lm``): that head is forecast, with a note, with the thinker's parameters."""
    thinker = dict(audio_token_index=995, image_token_index=996, video_token_index=997, audio_start_token_id=993,
                   audio_end_token_id=994, vision_start_token_id=992,
                   audio_config=dict(num_mel_bins=128, encoder_layers=1, encoder_attention_heads=2,
                                     encoder_ffn_dim=128, d_model=64, output_dim=64),
                   vision_config=dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=64,
                                      fullatt_block_indexes=[0]),
                   text_config=dict(T, vocab_size=1000, num_key_value_heads=1,
                                    rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[4, 6, 6])))
    p = _write(tmp_path, "qwen2_5_omni", dict(thinker_config=thinker), None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("Qwen2_5OmniForConditionalGeneration.forward takes no input to train on" in n
               and "Qwen2_5OmniThinkerForConditionalGeneration (thinker_config), is forecast" in n
               for n in f["notes"]), f["notes"]
    q = _write(tmp_path, "qwen2_5_omni_thinker", thinker, None)
    assert f["parameters"] == _expected_parameters(q, None, None)[0]


def test_an_empty_size_read_through_a_config_alias_is_named():
    """Dots1's experts are built as ``torch.empty(self.num_experts, 2 * d, h)`` with ``self.num_experts =
    config.num_local_experts``, an alias (``attribute_map``) of ``n_routed_experts``, which the default config leaves
    None; ``torch.empty`` then says only that it takes 1 positional argument. The refusal names the field behind
    the alias, not another empty one elsewhere in the code."""
    import torch
    from transformers import PretrainedConfig

    from traincast.workload.hf import explain

    class AliasConfig(PretrainedConfig):
        attribute_map = {"num_local_experts": "n_routed_experts"}

    class Experts(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.num_experts = config.num_local_experts
            self.shared = config.n_shared_experts
            self.weight = torch.nn.Parameter(torch.empty(self.num_experts, 4, 2))

    cfg = AliasConfig(n_routed_experts=None, n_shared_experts=None)
    try:
        Experts(cfg)
    except TypeError as exc:
        msg = explain(exc, "Experts", "building", cfg)
    assert "needs config fields this config leaves empty (None): n_routed_experts;" in msg, msg


def test_a_none_list_made_a_tensor_and_indexed_on_meta_is_named():
    """PP-DocLayout V2's forward makes ``torch.tensor(self.config.class_thresholds, device=logits.device)`` of a list
    the default config leaves None (on meta: a 0-d tensor) and indexes it by class: ``too many indices for tensor of
    dimension 0``, raised through traincast's own modes. The refusal names the field, read in the model's frames."""
    import torch
    from transformers import PretrainedConfig

    from traincast.workload.hf import _MixedDevices, explain
    from traincast.workload.selections import ExpectedSelections

    class Head(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config

        def forward(self, logits):
            class_ids = logits.argmax(-1)
            class_thresholds = torch.tensor(self.config.class_thresholds, dtype=torch.float32, device=logits.device)
            return class_thresholds[class_ids]

    cfg = PretrainedConfig(class_thresholds=None)
    try:
        with _MixedDevices(), ExpectedSelections(), _MixedDevices():  # modes as in a trace
            Head(cfg)(torch.empty(2, 8, 3, device="meta"))
    except IndexError as exc:
        msg = explain(exc, "Head", "running its forward", cfg)
    assert "needs config fields this config leaves empty (None): class_thresholds;" in msg, msg


def test_a_robot_policy_gets_its_state_and_the_actions_it_learns(capsys, tmp_path):
    """PI0's forward takes the robot's ``state`` and, in training, the chunk of ``actions`` it learns to predict
    (flow matching: its own loss): a state vector of the config's ``max_state_dim`` and ``chunk_size`` actions of
    ``max_action_dim``; its camera images as ``batch x cameras x C x H x W`` with the mask of the real cameras (one)."""
    text = dict(model_type="gemma", vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    vision = dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=8, projection_dim=64)
    fields = dict(chunk_size=4, max_state_dim=8, max_action_dim=6,
                  vlm_config=dict(model_type="paligemma", image_token_index=999, vocab_size=1000, projection_dim=64,
                                  hidden_size=64, text_config=text, vision_config=vision),
                  dit_config=dict(text, hidden_size=32, intermediate_size=64))
    wl, fwd, p = _trace(capsys, tmp_path, "pi0", fields, None, "--seq-len", "32")
    d = wl["input_description"]
    assert "robot state of 8, 4 actions of 6 as targets" in d and "(16 image placeholders)" in d, d
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    assert ([2, 8] in [s for o in fwd for s in o["input_shapes"]])
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("a robot policy: trained on a state of 8 values and a chunk of 4 actions of 6" in n for n in notes), notes
    assert not any("stand-in" in n for n in notes), notes  # its own loss


def test_a_task_conditioned_segmenter_gets_its_task_prompt(capsys, tmp_path):
    """OneFormer's forward needs ``task_inputs``, the tokenized task prompt ("the task is panoptic") its processor
    makes ``task_seq_len`` long: ids of its text vocabulary, with the images."""
    fields = dict(num_queries=10, task_seq_len=8, text_encoder_width=32, text_encoder_context_length=8,
                  text_encoder_num_layers=1, text_encoder_vocab_size=1000, conv_dim=32, mask_dim=32, hidden_dim=32,
                  encoder_feedforward_dim=64, encoder_layers=1, decoder_layers=2, num_attention_heads=2,
                  dim_feedforward=64, query_dec_layers=1,
                  backbone_config=dict(model_type="swin", embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1],
                                       image_size=64, window_size=4,
                                       out_features=["stage1", "stage2", "stage3", "stage4"]))
    wl, fwd, p = _trace(capsys, tmp_path, "oneformer", fields, None, "--image-size", "64")
    assert wl["input_description"] == "2 x (3x64x64 images, a task prompt of 8 tokens)", wl["input_description"]
    assert wl["parameters"] == _expected_parameters(p, None, None)[0]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--image-size", "64", "--json")
    assert code == 0, err
    assert any("each image with a task prompt of 8 token ids (task_seq_len)" in n for n in json.loads(out)["notes"])


def test_multimodal_rope_sections_the_config_leaves_out_are_split_evenly(capsys, tmp_path):
    """transformers' default HunYuan-VL config names no ``mrope_section`` and its forward needs three: split
    evenly over the rotary half-dimensions (a cost-neutral repair, said in a note), after its placeholders are
    counted from what its projector makes (each image's merged patches plus a row-end token per row)."""
    fields = dict(text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=2),
                  vision_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=2, out_hidden_size=64, text_hidden_size=64))
    wl, fwd, p = _trace(capsys, tmp_path, "hunyuan_vl", fields, None, "--seq-len", "64")
    # 224 px in 16 px patches: 14 x 14, merged 2 x 2: 7 rows of 7, plus one token closing each row and two more
    assert "(58 image placeholders)" in wl["input_description"]
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100", "-b", "2", "--seq-len", "64", "--json")
    assert code == 0, err
    assert any("mrope_section [6, 5, 5]" in n for n in json.loads(out)["notes"])


def test_images_and_audio_with_their_chunk_lengths_and_both_placeholder_counts(capsys, tmp_path):
    """Dots 3 Note: mel bins first for its 2-d conv stem, ``chunk_sample_lengths`` of its features, one-frame
    patches, and its count check that names no modality sizing the audio placeholders after the images'."""
    fields = dict(text_config=dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, index_n_heads=2,
                                   shared_experts_intermediate_size=32),
                  vision_config=dict(hidden_size=64, intermediate_size=128, num_attention_heads=2,
                                     moe_intermediate_size=32, adapter_in_dim=64, adapter_out_dim=64),
                  audio_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=2, adapter_input_size=64, adapter_out_dim=64))
    wl, fwd, _ = _trace(capsys, tmp_path, "dots3_note", fields, None, "--seq-len", "64")
    assert "64 image and 125 audio placeholders" in wl["input_description"]
    assert "10 s of 128 log-mel features" in wl["input_description"]


def test_value_reads_of_masks_made_from_real_inputs_get_their_real_answer(capsys, tmp_path):
    """Longformer asks ``is_index_global_attn.any().item()`` of a mask computed (on meta) from the all-local
    attention mask traincast made: the tracer follows those values and answers False, so the global-attention
    path (its own query/key/value projections) is not traced; before, a dense-batch True ran it and failed."""
    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, attention_window=32)
    wl, fwd, _ = _trace(capsys, tmp_path, "longformer", fields, None, "--seq-len", "64")
    assert fwd and not any("global" in o["module"] for o in wl["ops"])
    assert any(o["module"].endswith(".query") for o in fwd)


def test_reversible_layers_recompute_their_forward_in_the_backward(capsys, tmp_path):
    """Reformer runs its layers inside a custom autograd Function with grad off and recomputes them in the
    backward: traced with the module names kept, the backward costs about three forwards (recompute + 2x)."""
    wl, fwd, _ = _trace(capsys, tmp_path, "reformer", {})
    f = sum(o["flops"] for o in fwd)
    b = sum(o["flops"] for o in wl["ops"] if o["phase"] == "backward")
    assert 2.5 * f < b < 3.5 * f
    assert any("attention" in o["module"] for o in fwd)


def test_a_qformer_built_for_other_encoder_states_and_a_feature_mask_over_its_outputs(capsys, tmp_path):
    """Granite Speech: its default Q-Former is built for 1408-wide encoder states after an audio encoder of another
    width (repaired, said in a note); its ``input_features_mask`` is a boolean mask over the projector's outputs,
    not the frames (the form found from PyTorch's mask-shape check); one set of queries against every window's
    keys (batch 1 against many) runs SDPA's math path."""
    fields = dict(encoder_config=dict(num_layers=1, hidden_dim=64, num_heads=2, dim_head=32),
                  projector_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64),
                  text_config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=2))
    p = _write(tmp_path, "granite_speech", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100", "-b", "2", "--seq-len", "64", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("projector_config.encoder_hidden_size = 64" in n for n in notes)
    assert any("math path" in n for n in notes)


def test_a_boolean_mask_of_the_wrong_shape_raises_as_pytorch_does():
    import torch

    from traincast.workload.selections import ExpectedSelections

    x = torch.empty(2, 10, 4, device="meta")
    with ExpectedSelections():
        assert x[torch.ones(2, 10, dtype=torch.bool, device="meta")].shape == (20, 4)
        with pytest.raises(IndexError, match=r"shape of the mask \[2, 8\] at index 1 does not match"):
            x[torch.ones(2, 8, dtype=torch.bool, device="meta")]
        with pytest.raises(IndexError):  # a mask holding values is checked too
            x[torch.ones(2, 8, dtype=torch.bool)]


def test_rows_split_by_real_counts_after_a_selection_sized_full_make_positions_real():
    """Nemotron-H Omni's RADIO tower keeps the patch rows whose position (``torch.arange`` on its device) is past
    its class and register tokens: sized as full, the rows then split by the real grid fall short; the repair has
    such integer positions made on the CPU with their values."""
    import transformers as tf

    from traincast.workload.hf import _dense_split, _real_tensors_fix

    exc = RuntimeError("split_with_sizes expects split_sizes to sum exactly to 412 (input tensor's size at "
                       "dimension 0), but got split_sizes=[196, 196]")
    assert not _dense_split(exc)  # no selection was sized as full: another cause
    exc.dense_selections = 2
    assert _dense_split(exc)
    cfg = tf.LlamaConfig()
    assert _real_tensors_fix(exc, cfg) is not None
    exc2 = RuntimeError("split_with_sizes expects split_sizes to sum exactly to 392 (input tensor's size at "
                        "dimension 0), but got split_sizes=[196, 200]")
    exc2.dense_selections = 2
    assert not _dense_split(exc2)  # the splits ask for more rows than were selected: not a full-sized selection


def test_a_vocabulary_map_of_image_tokens_the_config_leaves_out_is_made(capsys, tmp_path):
    """Chameleon's default config leaves its tokenizer's ``vocabulary_map`` None, which the model reads to map its
    image tokenizer's codes to token ids and to find ``<image>``: ids only, so one is made (``<image>`` on the last
    id, one token per VQ code before it), said in a note; the images then fill their placeholders."""
    fields = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, vocab_size=1000,
                  vq_config=dict(num_embeddings=64, embed_dim=32, latent_channels=32, base_channels=32,
                                 channel_multiplier=[1, 2], num_res_blocks=1, resolution=32))
    p = _write(tmp_path, "chameleon", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100", "-b", "2", "--seq-len", "32", "--image-size", "32",
                         "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("vocabulary_map empty" in n and "<image> and 64 image codes" in n for n in notes)
    code, out, err = cli(capsys, "trace", p, "-b", "2", "--seq-len", "32", "--image-size", "32", "--json")
    assert code == 0, err
    assert "image placeholders" in json.loads(out)["input_description"]
    # built without a list of notes (``_build``'s default): the map is made all the same
    import torch

    from traincast.workload import hf

    cfg = hf.load_config(json.loads(p.read_text()))
    cls = hf.choose_class(cfg, "chameleon", None, None, str(p))
    hf._build(cls, cfg, torch.device("meta"), "chameleon")
    assert cfg.vocabulary_map["<image>"] == 999


def test_a_head_with_no_forward_pass_is_refused_with_one_line(tmp_path, capsys):
    """Bark's BarkModel only generates (no forward in transformers): one line saying so, exit 2, rather than a
    message about inputs traincast cannot make."""
    path = _write(tmp_path, "bark", {}, None)
    code, _, err = cli(capsys, "predict", path, "--gpu", "A100", "-b", "2", "--seq-len", "32")
    assert code == 2 and "BarkModel has no forward pass in transformers (it only generates)" in err
    assert "Traceback" not in err


def test_llama4_default_widths_are_repaired_and_its_output_field_read_as_none(capsys, tmp_path):
    """transformers' default Llama 4 config cannot run: its vision adapter is built for intermediate_size features a
    patch while the pixel shuffle (ratio 0.5) of a tower hidden_size wide makes 4 x hidden_size, and its projector
    takes vision_output_dim features where the adapter makes projector_output_dim; and this release's
    Llama4ForConditionalGeneration reads ``image_outputs`` off its text model's output, which has no such field, at
    the end of every training forward. Here a small config with the same two mismatches (a 32-wide tower shuffled
    to 128 before an adapter built for 256; a projector for 96 features after an adapter making 64): forecast with
    the tower 64 wide and the projector taking 64, each change in a note, the loss Llama 4's own, and the parameter
    count that of the head built from the repaired config."""
    import torch
    import transformers as tf

    text = dict(hidden_size=64, intermediate_size=64, intermediate_size_mlp=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=2, vocab_size=1000,
                max_position_embeddings=256)
    vision = dict(hidden_size=32, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4, image_size=56,
                  patch_size=14, projector_input_dim=64, projector_output_dim=64, vision_output_dim=96,
                  pixel_shuffle_ratio=0.5)
    p = _write(tmp_path, "llama4", dict(text_config=text, vision_config=vision), None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "32", "--json")
    assert code == 0, err
    f = json.loads(out)
    notes = f["notes"]
    assert any("vision_config.hidden_size = 64" in n for n in notes), notes
    assert any("vision_config.vision_output_dim = 64" in n for n in notes), notes
    assert any("MoeCausalLMOutputWithPast.image_outputs" in n for n in notes), notes
    assert not any("stand-in" in n for n in notes)
    fixed = tf.Llama4Config(text_config=text, vision_config=dict(vision, hidden_size=64, vision_output_dim=64))
    with torch.device("meta"):
        n = sum(q.numel() for q in tf.Llama4ForConditionalGeneration(fixed).parameters())
    assert f["parameters"] == n


@pytest.mark.parametrize("model_type,fields,where", [
    ("bert", dict(hidden_size=48, num_attention_heads=5, intermediate_size=96, num_hidden_layers=1, vocab_size=100),
     "num_attention_heads"),
    ("siglip", dict(vision_config=dict(hidden_size=48, num_attention_heads=5, intermediate_size=96,
                                       num_hidden_layers=1, image_size=32, patch_size=16),
                    text_config=dict(hidden_size=48, num_attention_heads=4, intermediate_size=64,
                                     num_hidden_layers=1, vocab_size=100)),
     "vision_config.num_attention_heads"),
])
def test_heads_that_do_not_divide_the_width_take_the_nearest_count_that_does(capsys, tmp_path, model_type, fields,
                                                                             where):
    """transformers' default Aya Vision config splits a SigLIP tower 1152 wide over 14 heads, which its constructor
    refuses. A width of 48 over 5 heads (in BERT's wording and in SigLIP's): forecast with 6 heads of 8 (4 and 6 are
    as near; the larger), said in a note, with the FLOPs of the model built with 6 heads; the heads only split the
    width, so the one built with 4 differs at most by a softmax over fewer score matrices (under 0.1%)."""
    p = _write(tmp_path, model_type, fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "16", "--json")
    assert code == 0, err
    wl = json.loads(out)
    assert any(f"48 over 5 attention heads ({where})" in n and "6 heads of 8" in n for n in wl["notes"]), wl["notes"]
    flops = []
    for heads in (6, 4):
        fixed = json.loads(json.dumps(fields))
        (fixed["vision_config"] if "vision_config" in fixed else fixed)["num_attention_heads"] = heads
        q = _write(tmp_path, model_type, fixed, None, folder=f"{model_type}-{heads}")
        code, out, err = cli(capsys, "predict", q, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "16", "--json")
        assert code == 0, err
        flops.append(json.loads(out)["flops"])
        assert not any("attention heads" in n for n in json.loads(out)["notes"])
    assert wl["flops"] == flops[0]
    assert 0 <= flops[0]["total"] - flops[1]["total"] < 1e-3 * flops[0]["total"]


def test_layer_type_lists_left_empty_follow_transformers_convention(capsys, tmp_path):
    """``layer_types`` left None (transformers' default LFM2-MoE config, whose class, unlike Lfm2Config, does not
    derive it) is every layer ``full_attention``; ``mlp_layer_types`` left None is ``dense`` for the first
    ``first_k_dense_replace`` layers (1 where the config names none) and ``sparse`` after, as the configs that
    derive it do. The LFM2-MoE forecast has the parameters of the model built with that list."""
    import torch
    import transformers as tf

    from traincast.workload import hf

    fields = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                  num_dense_layers=1, vocab_size=1000)
    p = _write(tmp_path, "lfm2_moe", fields, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "2", "--seq-len", "16", "--json")
    assert code == 0, err
    f = json.loads(out)
    assert any("layer_types empty; it is taken as full_attention x 3" in n for n in f["notes"]), f["notes"]
    with torch.device("meta"):
        model = tf.Lfm2MoeForCausalLM(tf.Lfm2MoeConfig(**fields, layer_types=["full_attention"] * 3))
    assert f["parameters"] == sum(q.numel() for q in model.parameters())
    for dense, want in ((None, ["dense"] + ["sparse"] * 3), (2, ["dense"] * 2 + ["sparse"] * 2)):
        cfg = tf.AutoConfig.for_model("deepseek_ocr2_text", num_hidden_layers=4)
        assert cfg.mlp_layer_types is None
        if dense is not None:
            cfg.first_k_dense_replace = dense
        c, k, v = hf._derived_fields(cfg)["mlp_layer_types"]
        assert (c, k, v) == (cfg, "mlp_layer_types", want)


def test_a_misspelt_config_field_is_read_as_the_field_one_letter_away():
    """transformers' default EdgeTAM config names its timm backbone ``archirecture: repvit_m1``: the backbone built
    is TimmWrapperConfig's default ``resnet50``, whose channels the neck does not take. A field the class does not
    declare, one typing slip from one it does that the config leaves at its default, is read as that field where
    the forward stops; of every default config transformers has, only EdgeTAM's holds such a slip."""
    import transformers as tf

    from traincast.workload import hf

    assert hf._one_edit("archirecture", "architecture") and hf._one_edit("hiden_size", "hidden_size")
    assert hf._one_edit("hidden_szie", "hidden_size") and not hf._one_edit("hidden_size", "hidden_size")
    assert not hf._one_edit("layer_norm_epsilon", "layer_norm_eps")
    cfg = tf.AutoConfig.for_model("edgetam")
    [(name, c, key, field_)] = hf._misspelt_fields(cfg)
    assert (name, key, field_, c.architecture) == ("vision_config.backbone_config", "archirecture", "architecture",
                                                   "resnet50")
    note = hf._misspelt_fix(RuntimeError("Invalid channel dimensions"), cfg)(cfg)
    assert c.architecture == "repvit_m1" and "archirecture ('repvit_m1')" in note
    assert hf._misspelt_fields(tf.AutoConfig.for_model("vit")) == []
    assert hf._misspelt_fix(None, tf.AutoConfig.for_model("edgetam")) is None


def test_a_detectors_per_label_post_processing_values_left_empty_get_stand_ins(capsys, tmp_path):
    """PP-DocLayoutV2's default config leaves ``class_thresholds`` and ``class_order`` (a score threshold and a
    reading priority per label) empty, and its forward indexes them by the predicted classes. They size nothing:
    filled with 0.5 and the labels' order in one repair, said in a note, and the forecast is that of the model
    given the values by hand."""
    p = _write(tmp_path, "pp_doclayout_v2", {}, None)
    code, out, err = cli(capsys, "predict", p, "--gpu", "A100-SXM4-80GB", "-b", "1", "--json")
    assert code == 0, err
    wl = json.loads(out)
    assert any("class_thresholds empty; it is taken as 0.5 x 2" in n and "class_order empty" in n
               for n in wl["notes"]), wl["notes"]
    q = _write(tmp_path, "pp_doclayout_v2", dict(class_thresholds=[0.3, 0.7], class_order=[1, 0]), None,
               folder="given")
    code, out, err = cli(capsys, "predict", q, "--gpu", "A100-SXM4-80GB", "-b", "1", "--json")
    assert code == 0, err
    given = json.loads(out)
    assert not any("class_thresholds" in n for n in given["notes"])
    assert (wl["flops"], wl["parameters"]) == (given["flops"], given["parameters"])
