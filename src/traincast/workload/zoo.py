"""The model zoo: torchvision CNNs, a DCGAN, and HF transformers built from configs.

Every entry builds its model on any device (``meta`` for forecasts, ``cpu``
or ``cuda`` for measurements) without downloading weights, and knows its
input and loss, so ``build_step(name, ...)`` gives a full training step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from traincast.errors import UnknownNameError
from traincast.workload.hf import _position_limit, hf_config_step, hf_step, is_hf_config  # noqa: F401 - callers' names
from traincast.workload.steps import (
    TrainingStep,
    apply_freeze,
    make_optimizer,
    supervised_step,
)


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str  # vision | transformer | translation | gan | audio | spec
    description: str
    default_dataset_size: int
    input_hw: int = 224
    default_seq_len: int = 0

    def build(self, **kw) -> TrainingStep:
        return _BUILDERS[self.name](self, **kw)


# --- vision -----------------------------------------------------------------
def _vision_loss(out, target):
    # torchvision's inception/googlenet return (logits, aux...) in training mode
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        loss = F.cross_entropy(out[0], target)
        for aux in out[1:]:
            if isinstance(aux, torch.Tensor):
                loss = loss + 0.3 * F.cross_entropy(aux, target)
        return loss
    return F.cross_entropy(out, target)


@contextlib.contextmanager
def _parameters_on(device):
    """Parameters and buffers go to ``device`` as modules register them; other tensors a constructor makes
    (RegNet computes its block widths with torch ops and reads them back) stay on the CPU."""
    reg_p, reg_b = nn.Module.register_parameter, nn.Module.register_buffer

    def register_parameter(self, name, param):
        if param is not None:
            param = nn.Parameter(param.to(device), requires_grad=param.requires_grad)
        reg_p(self, name, param)

    def register_buffer(self, name, tensor, persistent=True):
        reg_b(self, name, tensor.to(device) if tensor is not None else None, persistent=persistent)

    nn.Module.register_parameter, nn.Module.register_buffer = register_parameter, register_buffer
    try:
        yield
    finally:
        nn.Module.register_parameter, nn.Module.register_buffer = reg_p, reg_b


def torchvision_model(name: str, device, **kwargs) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None, **kwargs)`` built on ``device``."""
    import torchvision

    try:
        with torch.device(device):
            return torchvision.models.get_model(name, weights=None, **kwargs)
    except NotImplementedError:  # a constructor that reads tensor values back: only its weights on ``device``
        with _parameters_on(device):
            return torchvision.models.get_model(name, weights=None, **kwargs)


def _torchvision(entry: ZooEntry, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    kwargs = {}
    if entry.name in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=True, init_weights=False)
    model = torchvision_model(entry.name.replace("-", "_"), device, **kwargs)
    hw = entry.input_hw

    def make_batch(dev):
        x = torch.randn(batch_size, 3, hw, hw, device=dev)
        y = torch.randint(0, 1000, (batch_size,), device=dev)
        return (x,), {}, y

    return supervised_step(
        entry.name, model, make_batch, _vision_loss,
        batch_size=batch_size, device=device, optimizer=optimizer, precision=precision,
        freeze=freeze, input_description=f"{batch_size}x3x{hw}x{hw} images, 1000 classes",
    )


# --- DCGAN (the PyTorch examples/dcgan training step) ------------------------
def _dcgan_nets(nz=100, ngf=64, ndf=64, nc=3):
    g = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
        nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
    )
    d = nn.Sequential(
        nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
    )
    return g, d


class DCGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.netG, self.netD = _dcgan_nets()


def _dcgan(entry: ZooEntry, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    with torch.device(device):
        gan = DCGAN()
    gan.train()
    apply_freeze([gan], freeze)
    name = optimizer if optimizer != "sgd" else "adam"  # the example uses Adam(0.5, 0.999)
    opt_d = make_optimizer(name, gan.netD.parameters(), lr=2e-4)
    opt_g = make_optimizer(name, gan.netG.parameters(), lr=2e-4)
    real = torch.randn(batch_size, 3, 64, 64, device=device)
    noise = torch.randn(batch_size, 100, 1, 1, device=device)
    ones = torch.ones(batch_size, device=device)
    zeros = torch.zeros(batch_size, device=device)
    s: dict = {}

    def d_real():
        s["err"] = F.binary_cross_entropy(gan.netD(real).view(-1), ones)

    def g_fake_d():
        s["fake"] = gan.netG(noise)
        s["err"] = F.binary_cross_entropy(gan.netD(s["fake"].detach()).view(-1), zeros)

    def g_step_fwd():
        s["err"] = F.binary_cross_entropy(gan.netD(s.pop("fake")).view(-1), ones)

    def back():
        s.pop("err").backward()

    def zero_g():
        opt_g.zero_grad(set_to_none=True)

    stages = [
        ("forward", d_real), ("backward", back),
        ("forward", g_fake_d), ("backward", back),
        ("optimizer", opt_d.step),
        ("optimizer", zero_g),
        ("forward", g_step_fwd), ("backward", back),
        ("optimizer", opt_g.step),
    ]
    return TrainingStep(
        name="dcgan", modules=[gan], optimizers=[opt_d, opt_g], stages=stages,
        batch_size=batch_size, device=device, precision=precision, optimizer_name=name,
        input_description=f"{batch_size}x3x64x64 images, nz=100", state=s,
    )


# --- transformers (Hugging Face, from configs, no downloads) -----------------
def _hf_config(name: str, seq_len: int):
    import transformers as tf

    tf.logging.set_verbosity_error()  # no config chatter on the user's terminal

    if name in ("bert-base", "bert-large", "bert-tiny", "bert-small"):
        dims = {"bert-base": (768, 12, 12), "bert-large": (1024, 24, 16),
                "bert-tiny": (128, 2, 2), "bert-small": (512, 4, 8)}[name]
        h, layers, heads = dims
        cfg = tf.BertConfig(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * h, max_position_embeddings=max(512, seq_len))
        return cfg, tf.BertForMaskedLM
    if name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt3-xl", "gpt3-2.7b"):
        dims = {"gpt2": (768, 12, 12), "gpt2-medium": (1024, 24, 16),
                "gpt2-large": (1280, 36, 20), "gpt3-xl": (2048, 24, 16), "gpt3-2.7b": (2560, 32, 32)}[name]
        h, layers, heads = dims
        cfg = tf.GPT2Config(n_embd=h, n_layer=layers, n_head=heads, n_positions=max(1024, seq_len))
        return cfg, tf.GPT2LMHeadModel
    if name == "opt-1.3b":
        cfg = tf.OPTConfig(hidden_size=2048, ffn_dim=8192, num_hidden_layers=24, num_attention_heads=32,
                           vocab_size=50272, word_embed_proj_dim=2048, max_position_embeddings=max(2048, seq_len))
        return cfg, tf.OPTForCausalLM
    if name == "llama-7b":
        cfg = tf.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                             num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                             max_position_embeddings=max(2048, seq_len))
        return cfg, tf.LlamaForCausalLM
    raise KeyError(name)


def _transformer(entry: ZooEntry, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    seq_len = seq_len or entry.default_seq_len
    cfg, cls = _hf_config(entry.name, seq_len)
    return hf_step(entry.name, cfg, cls, batch_size=batch_size, device=device, optimizer=optimizer,
                   precision=precision, freeze=freeze, seq_len=seq_len)


# --- Mozilla DeepSpeech (TensorFlow DeepSpeech of the Ardagna talk's job JJ1) ----
class DeepSpeech(nn.Module):
    """Mozilla DeepSpeech v0.x: 26 MFCC x 19 frames of context in, three clipped-ReLU
    dense layers of 2048, one LSTM of 2048, a dense layer, 29 characters out."""

    def __init__(self, n_input: int = 494, hidden: int = 2048, n_out: int = 29):
        super().__init__()
        self.dense1 = nn.Linear(n_input, hidden)
        self.dense2 = nn.Linear(hidden, hidden)
        self.dense3 = nn.Linear(hidden, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.dense5 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_out)

    def forward(self, x):
        for layer in (self.dense1, self.dense2, self.dense3):
            x = torch.clamp(F.relu(layer(x)), max=20.0)
        x, _ = self.lstm(x)
        x = torch.clamp(F.relu(self.dense5(x)), max=20.0)
        return self.out(x)


def _deepspeech(entry: ZooEntry, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    frames = seq_len or entry.default_seq_len
    with torch.device(device):
        model = DeepSpeech()

    def make_batch(dev):
        x = torch.randn(batch_size, frames, 494, device=dev)
        y = torch.randint(1, 29, (batch_size, frames), device=dev)
        return (x,), {}, y

    def loss_fn(out, y):
        # CTC has no meta kernel; its dynamic programme (frames x label length x batch)
        # is negligible beside the LSTM, so a frame-wise log-softmax loss stands in
        return F.nll_loss(F.log_softmax(out, -1).flatten(0, 1), y.flatten())

    return supervised_step(
        entry.name, model, make_batch, loss_fn, batch_size=batch_size, device=device, optimizer=optimizer,
        precision=precision, freeze=freeze, input_description=f"{batch_size}x{frames} frames of 494 MFCC features",
    )


# --- translation: Transformer base and GNMT v2 (the Habitat paper's two WMT models) ----
WMT_VOCAB = 32317  # the WMT'16 en-de BPE vocabulary both models were measured with


def _sinusoid_table(n_pos: int, d: int) -> torch.Tensor:
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]
    i = torch.arange(d, dtype=torch.float32)[None, :]
    angle = pos / torch.pow(10000.0, 2 * (i // 2) / d)
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))


class TransformerBase(nn.Module):
    """Vaswani et al. 2017 base: 6+6 post-norm layers, 512 wide, 8 heads, 2048 FFN, sinusoid positions,
    separate source/target embeddings, the output projection tied to the target embedding."""

    def __init__(self, vocab: int = WMT_VOCAB, d: int = 512, heads: int = 8, layers: int = 6, ffn: int = 2048,
                 max_len: int = 512, dropout: float = 0.1):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.register_buffer("pos", _sinusoid_table(max_len, d), persistent=False)
        self.core = nn.Transformer(d, heads, layers, layers, ffn, dropout, batch_first=True)
        self.proj = nn.Linear(d, vocab, bias=False)
        self.proj.weight = self.tgt_emb.weight

    def forward(self, src, tgt):
        s = self.src_emb(src) + self.pos[: src.shape[1]]
        t = self.tgt_emb(tgt) + self.pos[: tgt.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device, dtype=t.dtype)
        return self.proj(self.core(s, t, tgt_mask=mask, tgt_is_causal=True))


class GNMT(nn.Module):
    """GNMT v2 as in NVIDIA's DeepLearningExamples: a shared 1024 embedding; encoder = one bidirectional
    LSTM layer, then three unidirectional ones (residual from the third); decoder = an LSTM layer whose
    output queries normalised Bahdanau attention over the encoder states, then three LSTM layers fed
    [output, context] (residual from the third), then the classifier."""

    def __init__(self, vocab: int = WMT_VOCAB, hidden: int = 1024, layers: int = 4, dropout: float = 0.2):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.enc_bi = nn.LSTM(hidden, hidden, bidirectional=True)
        self.enc = nn.ModuleList([nn.LSTM(2 * hidden if i == 0 else hidden, hidden) for i in range(layers - 1)])
        self.dec_att = nn.LSTM(hidden, hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Parameter(torch.empty(hidden).uniform_(-0.1, 0.1))
        self.dec = nn.ModuleList([nn.LSTM(2 * hidden, hidden) for _ in range(layers - 1)])
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, vocab)

    def forward(self, src, tgt):  # (time, batch) token ids
        x, _ = self.enc_bi(self.drop(self.emb(src)))
        for i, lstm in enumerate(self.enc):
            y, _ = lstm(self.drop(x))
            x = y + x if i >= 1 else y
        keys = self.k(x)  # (S, B, H)
        h, _ = self.dec_att(self.drop(self.emb(tgt)))  # (T, B, H)
        score = torch.tanh(self.q(h)[:, None] + keys[None]) @ (self.v / self.v.norm())  # (T, S, B)
        ctx = torch.einsum("tsb,sbh->tbh", torch.softmax(score, dim=1), x)
        out = h
        for i, lstm in enumerate(self.dec):
            y, _ = lstm(self.drop(torch.cat([out, ctx], dim=-1)))
            out = y + out if i >= 1 else y
        return self.classifier(self.drop(out))


def _translation(entry: ZooEntry, *, batch_size, device, optimizer, precision, freeze, seq_len=None, **_):
    n = seq_len or entry.default_seq_len
    with torch.device(device):
        model = TransformerBase(max_len=max(512, n)) if entry.name == "transformer-base" else GNMT()
    time_major = entry.name == "gnmt"

    def make_batch(dev):
        shape = (n, batch_size) if time_major else (batch_size, n)
        src = torch.randint(0, WMT_VOCAB, shape, device=dev)
        tgt = torch.randint(0, WMT_VOCAB, shape, device=dev)
        return (src, tgt), {}, tgt

    def loss_fn(out, tgt):  # label-smoothed cross-entropy, next-token targets
        logits = out[:-1] if time_major else out[:, :-1]
        gold = tgt[1:] if time_major else tgt[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), gold.reshape(-1), label_smoothing=0.1)

    return supervised_step(
        entry.name, model, make_batch, loss_fn, batch_size=batch_size, device=device, optimizer=optimizer,
        precision=precision, freeze=freeze,
        input_description=f"{batch_size} sentence pairs x {n} tokens, vocab {WMT_VOCAB}",
    )


def _spec_example(entry: ZooEntry, **kw):
    from traincast.workload.spec import build_spec_step, example_path

    return build_spec_step(example_path(entry.name), **kw)


_ENTRIES = [
    ZooEntry("alexnet", "vision", "AlexNet (torchvision)", 1281167),
    ZooEntry("vgg11", "vision", "VGG-11 (torchvision)", 1281167),
    ZooEntry("vgg16", "vision", "VGG-16 (torchvision)", 1281167),
    ZooEntry("vgg19", "vision", "VGG-19 (torchvision)", 1281167),
    ZooEntry("resnet18", "vision", "ResNet-18 (torchvision)", 1281167),
    ZooEntry("resnet34", "vision", "ResNet-34 (torchvision)", 1281167),
    ZooEntry("resnet50", "vision", "ResNet-50 (torchvision)", 1281167),
    ZooEntry("resnet101", "vision", "ResNet-101 (torchvision)", 1281167),
    ZooEntry("resnet152", "vision", "ResNet-152 (torchvision)", 1281167),
    ZooEntry("inception_v3", "vision", "Inception v3 (torchvision), 299x299, aux head", 1281167, input_hw=299),
    ZooEntry("googlenet", "vision", "GoogLeNet (torchvision), aux heads", 1281167),
    ZooEntry("mobilenet_v2", "vision", "MobileNet v2 (torchvision)", 1281167),
    ZooEntry("densenet121", "vision", "DenseNet-121 (torchvision)", 1281167),
    ZooEntry("vit_b_16", "vision", "ViT-B/16 (torchvision)", 1281167),
    ZooEntry("dcgan", "gan", "DCGAN generator+discriminator step (PyTorch example), 64x64", 202599, input_hw=64),
    ZooEntry("bert-tiny", "transformer", "BERT tiny (2 layers, 128 hidden), MLM", 1000000, default_seq_len=128),
    ZooEntry("bert-small", "transformer", "BERT small (4 layers, 512 hidden), MLM", 1000000, default_seq_len=128),
    ZooEntry("bert-base", "transformer", "BERT base (12 layers, 768 hidden), MLM", 1000000, default_seq_len=512),
    ZooEntry("bert-large", "transformer", "BERT large (24 layers, 1024 hidden), MLM", 1000000, default_seq_len=512),
    ZooEntry("gpt2", "transformer", "GPT-2 small (124M)", 1000000, default_seq_len=1024),
    ZooEntry("gpt2-medium", "transformer", "GPT-2 medium (355M)", 1000000, default_seq_len=1024),
    ZooEntry("gpt2-large", "transformer", "GPT-2 large (774M)", 1000000, default_seq_len=1024),
    ZooEntry("gpt3-xl", "transformer", "GPT-3 XL shape: GPT-2 architecture, 2048 hidden, 24 layers, 16 heads (1.3B)", 1000000, default_seq_len=2048),
    ZooEntry("gpt3-2.7b", "transformer", "GPT-3 2.7B shape: GPT-2 architecture, 2560 hidden, 32 layers, 32 heads", 1000000, default_seq_len=2048),
    ZooEntry("opt-1.3b", "transformer", "OPT-1.3B (Meta): 2048 hidden, 24 layers, 32 heads, 8192 MLP, ReLU", 1000000, default_seq_len=2048),
    ZooEntry("llama-7b", "transformer", "LLaMA-7B shape: 32 layers, 4096 hidden, 11008 MLP, 32 heads", 1000000, default_seq_len=2048),
    ZooEntry("transformer-base", "translation", "Transformer base (Vaswani et al. 2017): 6+6 layers, 512 wide, 8 heads, WMT en-de vocab; --seq-len tokens", 4500966, default_seq_len=50),
    ZooEntry("gnmt", "translation", "GNMT v2 (NVIDIA): 4+4 LSTM layers of 1024, attention, WMT en-de vocab; --seq-len tokens", 4500966, default_seq_len=50),
    ZooEntry("deepspeech", "audio", "Mozilla DeepSpeech (TensorFlow DeepSpeech shape): 3x dense 2048, LSTM 2048; --seq-len frames", 281241, default_seq_len=300),
    ZooEntry("mnist-cnn", "spec", "MNIST CNN of the practicum report (24,330 params)", 60000, input_hw=28),
    ZooEntry("pcam-cnn", "spec", "PatchCamelyon CNN of the practicum report (19.9M params)", 262144, input_hw=96),
]
ALIASES = {
    "llama-7b-shaped": "llama-7b",
    "bert": "bert-base",
    "gpt-2": "gpt2",
    "inception-v3": "inception_v3",
    "inceptionv3": "inception_v3",
    "mobilenet-v2": "mobilenet_v2",
    "vit-b16": "vit_b_16",
    "gpt3_xl": "gpt3-xl",
    "gpt3_27": "gpt3-2.7b",
    "opt_13": "opt-1.3b",
    "deepspeech2": "deepspeech",
    "transformer": "transformer-base",
    "gnmt-v2": "gnmt",
    "deep-speech": "deepspeech",
}
_BUILDERS: dict[str, Callable] = {}
for _e in _ENTRIES:
    _BUILDERS[_e.name] = {"vision": _torchvision, "gan": _dcgan, "transformer": _transformer, "spec": _spec_example,
                          "audio": _deepspeech, "translation": _translation}[_e.family]
ZOO: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}


@functools.lru_cache(maxsize=1)
def torchvision_names() -> tuple[str, ...]:
    """Every torchvision image-classification model (``torchvision.models.list_models``)."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def all_torchvision_names() -> tuple[str, ...]:
    """Every torchvision model: classification, then segmentation, video, optical flow, quantization and
    detection (``workload.tvtasks``)."""
    from traincast.workload import tvtasks

    return torchvision_names() + tuple(tvtasks.task_names())


def _task_builder(entry: ZooEntry, **kw):
    from traincast.workload import tvtasks

    return tvtasks.build(entry.name, **kw)


def get(name: str) -> ZooEntry:
    """A zoo entry by name or alias, or any torchvision model (classification: ImageNet-1k input; the other
    tasks: ``workload.tvtasks``)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key in ZOO:
        return ZOO[key]
    tv = key.replace("-", "_")
    if tv in torchvision_names():
        _BUILDERS.setdefault(tv, _torchvision)
        return ZooEntry(tv, "vision", f"{tv} (torchvision)", 1281167, input_hw=299 if tv == "inception_v3" else 224)
    from traincast.workload import tvtasks

    task = tvtasks.task_names().get(tv)
    if task is not None:
        _BUILDERS.setdefault(tv, _task_builder)
        return ZooEntry(tv, "vision", tvtasks.description(tv), tvtasks.dataset_size(tv))
    from traincast.workload import llms

    raise UnknownNameError("model", name, list(ZOO) + list(ALIASES) + list(llms.models())
                           + list(all_torchvision_names()))


def names() -> list[str]:
    return list(ZOO)
