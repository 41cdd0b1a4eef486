"""Named language models: ``traincast predict llama-3.1-70b`` (or its hub id, ``meta-llama/Llama-3.1-70B``)
without a config file.

``data/llms.yaml`` holds the published shapes of the models users pre-train and fine-tune on clusters (LLaMA,
Llama 2, 3 and 3.1, Mistral, Mixtral, Qwen2.5, Qwen3, DeepSeek-V3, GPT-3, BLOOM), each with its source, the
context it was pre-trained at
(the default ``--seq-len``) and the parameter count its authors publish. The step is the one a Hugging Face
``config.json`` with those fields gives (:func:`traincast.workload.hf.hf_config_step`): built on the meta
device, no weights, no download.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

DATA = Path(__file__).parent / "data" / "llms.yaml"


@functools.lru_cache(maxsize=1)
def models() -> dict[str, dict]:
    """name -> entry (``hub``, ``about``, ``source``, ``seq_len``, ``parameters``, ``config``)."""
    from traincast import yamlio

    return yamlio.safe_load(DATA.read_text())["models"]


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, e in models().items():
        out[name] = name
        if e.get("hub"):
            out[e["hub"].lower()] = name
            out[e["hub"].lower().rsplit("/", 1)[-1]] = name  # the hub name without its owner
    return out


def entries() -> list[SimpleNamespace]:
    """The named models as rows of a model list (``name``, ``family`` "llm", ``description``), beside the zoo's
    entries."""
    return [SimpleNamespace(name=n, family="llm", description=e["about"]) for n, e in models().items()]


def resolve(text: str) -> str | None:
    """The named model ``text`` means (its name or hub id, any case), or None."""
    return _index().get(str(text).strip().lower())


def config(name: str) -> dict:
    """The config.json content of ``name`` (a :func:`resolve`\\ d name), named by it."""
    return dict(models()[name]["config"], _name_or_path=name)


def build(text: str, *, seq_len=None, **kw):
    from traincast.workload.hf import hf_config_step

    name = resolve(text)
    return hf_config_step(config(name), seq_len=seq_len or models()[name]["seq_len"], **kw)
