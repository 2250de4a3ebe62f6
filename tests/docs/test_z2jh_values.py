"""The Zero to JupyterHub values in docs/classroom.md: valid YAML, keys the chart has.

The chart checks a ``config.yaml`` against its ``values.schema.json`` (packaged with the Helm
chart, generated from ``jupyterhub/values.schema.yaml`` in jupyterhub/zero-to-jupyterhub-k8s).
No PyPI or npm package ships that schema and nothing else can be fetched here, so this test
cannot read it. What it checks instead:

- the YAML blocks parse, and the ``config.yaml`` block's keys are all in ``CHART_KEYS`` below:
  every value path the docs use, each looked up by hand in the chart's ``values.schema.yaml``
  at the chart's tags 3.0.0, 3.3.8 and 4.4.0 (and its main branch, July 2026), where each of
  these objects is closed (``additionalProperties: false``) except where ``OPEN`` says;
- the dotted keys the prose names (``singleuser.cpu.guarantee``, ``hub.db.type``) are in it too,
  and ``hub.db.type``'s value is one of the schema's enum;
- ``hub.config``'s traits exist on JupyterHub's own classes (the ``classroom`` extra installs
  jupyterhub); ``hub.extraConfig``'s Python compiles and uses only what JupyterHub's
  ``Spawner`` has (``KubeSpawner.uid``/``gid`` are kubespawner's: not installed, not checked).

Checked once by hand against the real schema (not in this test, which cannot fetch it): the
docs' ``config.yaml`` merged into the chart's default values validates with jsonschema against
the 3.3.8 and 4.4.0 schemas, and a misspelled ``singleuser.extraEnvs`` fails there too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "classroom.md"
LEAF = None
OPEN = "open"  # an object the schema leaves open (any key), or a free-form list
#: Value paths of the jupyterhub chart (3.x and 4.x) the docs may use: see the module docstring.
CHART_KEYS = {
    "hub": {
        "config": OPEN,  # patternProperties ^[A-Z].*$: a traitlets class, any trait
        "extraEnv": OPEN,
        "extraConfig": OPEN,
        "db": {"type": LEAF, "url": LEAF, "password": LEAF, "upgrade": LEAF},
        "baseUrl": LEAF,
    },
    "singleuser": {
        "image": {"name": LEAF, "tag": LEAF, "pullPolicy": LEAF, "pullSecrets": OPEN},
        "defaultUrl": LEAF,
        "fsGid": LEAF,
        "uid": LEAF,
        "extraEnv": OPEN,
        "storage": {"extraVolumes": OPEN, "extraVolumeMounts": OPEN, "capacity": LEAF},
        "cpu": {"guarantee": LEAF, "limit": LEAF},
        "memory": {"guarantee": LEAF, "limit": LEAF},
    },
}
DB_TYPES = {"sqlite-pvc", "sqlite-memory", "mysql", "postgres", "other"}


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^ *```{language}\n(.*?)^ *```", text, re.S | re.M)


def config_yaml(text: str) -> dict:
    """The ``config.yaml`` block: the YAML block after the words ``config.yaml``."""
    after = text[text.index("**`config.yaml`**") :]
    return yaml.safe_load(blocks(after, "yaml")[0])


def unknown_keys(values: dict, known: dict = CHART_KEYS, path: str = "") -> list[str]:
    """Every key path in ``values`` that the chart's schema does not have (``CHART_KEYS``)."""
    found = []
    for key, value in values.items():
        here = f"{path}.{key}" if path else key
        if key not in known:
            found.append(here)
        elif isinstance(known[key], dict):
            if isinstance(value, dict):
                found += unknown_keys(value, known[key], here)
            else:
                found.append(f"{here} (an object in the chart)")
    return found


def prose_keys(text: str) -> list[str]:
    """Dotted chart keys named in the prose: `singleuser.cpu.guarantee: 1`, `hub.db.type`."""
    return re.findall(r"`((?:hub|singleuser)\.[\w.]+)(?::[^`]*)?`", text)


def known_path(dotted: str) -> bool:
    node: object = CHART_KEYS
    for part in dotted.split("."):
        if node == OPEN:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


TEXT = DOC.read_text(encoding="utf-8")


def test_the_yaml_blocks_parse():
    parsed = [yaml.safe_load(block) for block in blocks(TEXT, "yaml")]
    assert len(parsed) == 2, "the exchange's claim and config.yaml"
    claim = parsed[0]
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_config_yaml_uses_only_keys_the_chart_has():
    assert unknown_keys(config_yaml(TEXT)) == []
    misspelled = {"singleuser": {"extraEnvs": {"X": "1"}, "image": {"nam": "x"}}, "hubb": {}}
    assert unknown_keys(misspelled) == ["singleuser.extraEnvs", "singleuser.image.nam", "hubb"]


def test_the_keys_the_prose_names_are_the_charts():
    named = prose_keys(TEXT)
    assert "singleuser.cpu.guarantee" in named and "hub.db.type" in named
    assert [key for key in named if not known_path(key)] == []
    assert not known_path("singleuser.cpu.guaranteed")
    types = re.findall(r"`hub\.db\.type: (\S+)`", TEXT)
    assert types and set(types) <= DB_TYPES


def test_hub_config_names_real_jupyterhub_traits():
    jupyterhub = pytest.importorskip("jupyterhub.app", reason="the classroom extra (jupyterhub)")
    from jupyterhub.auth import Authenticator

    classes = {"JupyterHub": jupyterhub.JupyterHub, "Authenticator": Authenticator}
    config = config_yaml(TEXT)["hub"]["config"]
    missing = [
        f"{name}.{trait}"
        for name, traits in config.items()
        for trait in traits
        if name not in classes or not classes[name].class_traits().get(trait)
    ]
    assert missing == []
    assert not Authenticator.class_traits().get("allowed_userz")  # what a typo would be


def test_hub_extra_config_compiles_and_uses_what_a_spawner_has():
    spawner = pytest.importorskip("jupyterhub.spawner", reason="the classroom extra (jupyterhub)")
    Spawner = spawner.Spawner  # noqa: N806

    code = config_yaml(TEXT)["hub"]["extraConfig"]["shapes"]
    tree = ast.parse(code)  # a SyntaxError fails the test
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "spawner"
    }
    assert used and all(Spawner.class_traits().get(a) or hasattr(Spawner, a) for a in used), used
    assert "pre_spawn_hook" in Spawner.class_traits()
