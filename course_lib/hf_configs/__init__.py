"""Real model configurations by name, offline: shipped ones, the local Hugging Face cache, a file.

Nothing is downloaded. :func:`load_config` reads, in this order:

1. a path to a ``config.json`` (anything ending in ``.json``, or an existing file);
2. a shipped name, case, spaces and an ``org/`` prefix ignored (``"meta-llama/llama-3.2-3b"``):
   six models as their published ``config.json`` copied field for field (``Llama-3.1-8B.json``,
   ``Llama-3.2-1B.json``, ``Qwen2.5-7B.json``, ``Qwen2.5-0.5B.json``, ``Mistral-7B-v0.3.json``,
   ``gpt2.json``) and the table ``catalog.json``: the architecture fields of 35 more (Llama 3,
   3.1, 3.2, 3.3 and 405B; Qwen2.5 and Qwen3 from 0.5B to 72B; Gemma 2 and 3; Phi-3 and Phi-4;
   Mistral NeMo, Small 3 and Mixtral; OLMo 2; SmolLM2), written from each model's published
   ``config.json`` (Gemma 3: the text model's ``text_config``; every parameter count is checked
   against the published one in ``tests/library/test_finetune_plan.py``);
3. a hub id (``org/name``) in the local Hugging Face cache: ``$HF_HUB_CACHE``, else
   ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``, where ``models--org--name/snapshots/*/``
   holds the ``config.json`` ``from_pretrained`` downloaded (the newest snapshot);
4. any other hub id: its ``config.json`` alone, fetched with ``huggingface_hub``'s
   ``hf_hub_download`` (from ``$HF_ENDPOINT``, with your token if you logged in) into that cache,
   so the next plan reads it offline. With ``HF_HUB_OFFLINE=1`` only the cache is read. A gated
   model, a missing one, one without a ``config.json`` and an unreachable Hub each end in one
   line saying what to do (:func:`fetch_config`).

A name found nowhere else is an error listing the closest known names (:mod:`difflib`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path


@cache
def _catalog() -> dict[str, tuple[str, dict]]:
    """The table: name -> (hub id, config dict)."""
    table = json.loads(resources.files(__name__).joinpath("catalog.json").read_text())
    return {name: (entry["hub_id"], entry["config"]) for name, entry in table.items()}


def _files() -> list[str]:
    """The names of the shipped ``config.json`` copies."""
    found = resources.files(__name__).iterdir()
    return [f.name.removesuffix(".json") for f in found if f.name.endswith(".json")
            and f.name != "catalog.json"]  # fmt: skip


def available() -> list[str]:
    """The shipped configuration names, sorted.

    Returns:
        Names :func:`load_config` accepts without a path (``"Llama-3.1-8B"``, ``"gpt2"``, ...).
    """
    return sorted({*_files(), *_catalog()}, key=str.lower)


def hub_id(name: str) -> str | None:
    """The Hugging Face hub id of a shipped name from the table (``None``: not in the table).

    Args:
        name: a shipped name, as :func:`available` spells it.

    Returns:
        ``org/name``, or ``None``.
    """
    entry = _catalog().get(name)
    return entry[0] if entry else None


def _key(name: str) -> str:
    return name.rsplit("/", 1)[-1].replace(" ", "").replace("_", "-").lower()


def hub_cache() -> Path:
    """Where ``huggingface_hub`` keeps its downloads (module docstring).

    Returns:
        The cache folder (it need not exist).
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "huggingface")  # fmt: skip
    return Path(home) / "hub"


def cached_config(repo_id: str) -> Path | None:
    """The ``config.json`` of ``repo_id`` in the local Hugging Face cache (the newest snapshot).

    Args:
        repo_id: ``org/name``.

    Returns:
        Its path, or ``None`` when the cache holds none.
    """
    if "/" not in repo_id:
        return None
    folder = hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    found = list(folder.glob("*/config.json")) if folder.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def load_config(name_or_path: str | os.PathLike) -> dict:
    """The config dict of a shipped name, a hub id in the local cache, or a ``config.json``.

    Args:
        name_or_path: a path, a shipped name or a hub id (module docstring).

    Returns:
        The JSON object as a dict, field for field (``hidden_size``, ``num_hidden_layers``, ...).

    Raises:
        ValueError: no such file, a name found nowhere (listing the closest known names), or a
            file that is not a JSON object.
    """
    text = str(name_or_path)
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        if not path.is_file():
            raise ValueError(f"no config file at {text!r}")
        return _parse(path.read_text(), text)
    wanted = _key(text)
    for name in _files():
        if _key(name) == wanted:
            return _parse(resources.files(__name__).joinpath(name + ".json").read_text(), name)
    for name, (repo, config) in _catalog().items():
        if wanted in (_key(name), _key(repo)):
            return dict(config, _name_or_path=repo)
    cached = cached_config(text)
    if cached is None and _HUB_ID.fullmatch(text):
        cached = fetch_config(text)
    if cached is not None:
        return dict(_parse(cached.read_text(), str(cached)), _name_or_path=text)
    raise ValueError(_unknown(text))


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def fetch_config(repo_id: str) -> Path:
    """Download ``repo_id``'s ``config.json`` (only that file) into the Hugging Face cache.

    Args:
        repo_id: ``org/name`` on the Hub (``$HF_ENDPOINT``, default huggingface.co).

    Returns:
        The path of the cached ``config.json``.

    Raises:
        ValueError: one line saying what to do: ``huggingface_hub`` missing, a gated model (accept
            its terms and log in), no such model (or a private one), no ``config.json`` in it, or
            the Hub out of reach (offline) with nothing in the cache.
    """
    try:
        from huggingface_hub import (
            constants,
            errors,
            get_hf_file_metadata,
            hf_hub_download,
            hf_hub_url,
        )
    except ImportError:
        raise ValueError(
            f"{repo_id!r} is not in the Hugging Face cache at {hub_cache()}, and fetching its "
            "config.json needs huggingface_hub (pip install huggingface_hub): or pass the path "
            "of its config.json"
        ) from None
    where, instead = constants.ENDPOINT, "or pass the path of its config.json"
    try:
        if not constants.HF_HUB_OFFLINE:  # one look first: hf_hub_download retries for 23 s
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=10)
        return Path(hf_hub_download(repo_id, "config.json"))
    except errors.GatedRepoError:
        why = (f"{repo_id} is gated on the Hub: accept its terms at {where}/{repo_id} and log in "
               f"(hf auth login, or HF_TOKEN), {instead}")  # fmt: skip
    except errors.RepositoryNotFoundError:
        why = (f"no model {repo_id} at {where} (or it is private: log in with hf auth login); "
               f"check the id, {instead}")  # fmt: skip
    except errors.RemoteEntryNotFoundError:
        why = (f"{repo_id} has no config.json (an adapter or GGUF repository?): give its base "
               "model's id, or the path of a config.json")  # fmt: skip
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled, OSError) as exc:
        offline = constants.HF_HUB_OFFLINE
        reach = "HF_HUB_OFFLINE is set" if offline else f"{where} could not be reached"
        why = (f"{repo_id} is not in the Hugging Face cache at {hub_cache()} and {reach} "
               f"({type(exc).__name__}): connect once to fetch it, {instead}")  # fmt: skip
    except errors.HfHubHTTPError as exc:
        why = f"the Hub answered {exc.response.status_code} for {repo_id}: {instead}"
    except Exception as exc:  # the HTTP client's own errors: no connection, a timeout
        why = (f"{repo_id} is not in the Hugging Face cache at {hub_cache()} and {where} "
               f"could not be reached ({type(exc).__name__}): connect once to fetch it, "
               f"{instead}")  # fmt: skip
    raise ValueError(why)


def _unknown(text: str) -> str:
    """The error for a name found nowhere: the closest known names first."""
    names = {_key(n): n for n in available()}
    close = difflib.get_close_matches(_key(text), list(names), n=5, cutoff=0.5)
    hint = f"closest: {', '.join(names[k] for k in close)}; " if close else ""
    where = f"not shipped and not in the Hugging Face cache at {hub_cache()}"
    return (
        f"unknown model {text!r} ({where}): {hint}pass the path of its config.json, a hub id "
        f"you have downloaded, or one of {len(names)} shipped names (python -c 'from "
        "course_lib.hf_configs import available; print(available())')"
    )


def _parse(text: str, where: str) -> dict:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{where} holds a JSON {type(config).__name__}, not a config object")
    return config
