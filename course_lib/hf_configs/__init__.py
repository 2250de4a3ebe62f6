"""Real model configurations, shipped as facts: the ``config.json`` of a few Hugging Face models.

Each file is the model's published ``config.json`` on the Hugging Face Hub, copied field for
field; nothing is downloaded at run time. :func:`load_config` takes a shipped name
(``"Llama-3.1-8B"``; case and an ``org/`` prefix are ignored) or the path of any ``config.json``.

| name | repository | parameters |
|---|---|---|
| ``Llama-3.1-8B`` | ``meta-llama/Llama-3.1-8B`` | 8,030,261,248 |
| ``Llama-3.2-1B`` | ``meta-llama/Llama-3.2-1B`` (tied embeddings) | 1,235,814,400 |
| ``Qwen2.5-7B`` | ``Qwen/Qwen2.5-7B`` | 7,615,616,512 |
| ``Qwen2.5-0.5B`` | ``Qwen/Qwen2.5-0.5B`` (tied embeddings) | 494,032,768 |
| ``Mistral-7B-v0.3`` | ``mistralai/Mistral-7B-v0.3`` | 7,248,023,552 |
| ``gpt2`` | ``openai-community/gpt2`` (tied embeddings) | 124,439,808 |
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path


def available() -> list[str]:
    """The shipped configuration names, sorted.

    Returns:
        Names :func:`load_config` accepts without a path (``"Llama-3.1-8B"``, ``"gpt2"``, ...).
    """
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def load_config(name_or_path: str | os.PathLike) -> dict:
    """The config dict of a shipped model name, or of a ``config.json`` path.

    Args:
        name_or_path: a shipped name (case and an ``org/`` prefix ignored, so
            ``"meta-llama/llama-3.1-8b"`` works), or the path of a ``config.json``.

    Returns:
        The JSON object as a dict, field for field (``hidden_size``, ``num_hidden_layers``, ...).

    Raises:
        ValueError: ``name_or_path`` is neither a shipped name nor a ``config.json`` (naming the
            shipped ones), or the file is not a JSON object.
    """
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        if not path.is_file():
            raise ValueError(f"no config file at {text!r}")
        return _parse(path.read_text(), text)
    wanted = text.rsplit("/", 1)[-1].lower()
    for name in available():
        if name.lower() == wanted:
            return _parse(resources.files(__name__).joinpath(name + ".json").read_text(), name)
    shipped = ", ".join(available())
    raise ValueError(
        f"unknown model {text!r}: pass the path of its config.json, or one of {shipped}"
    )


def _parse(text: str, where: str) -> dict:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{where} holds a JSON {type(config).__name__}, not a config object")
    return config
