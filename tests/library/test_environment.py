"""environment.yml (conda) must list what pyproject.toml (pip) lists, with the same bounds."""

import re
import sys
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (a dev extra there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CONDA_PYTHON = "3.11"  # environment.yml pins python=3.11
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name


def _split(spec: str) -> tuple[str, str]:
    # extras ("pyjwt[crypto]") are pip's; conda's package of the same name is compared
    name, bounds = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(.*)$", spec).groups()
    return name.lower().replace("_", "-"), bounds.replace(" ", "")


def pyproject_requirements() -> dict[str, str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(meta["dependencies"])
    for extra in ("lab", "grader", "dev", "hf"):
        specs += meta["optional-dependencies"][extra]
    # A requirement whose marker excludes the conda environment's Python is not needed there.
    env = {"python_version": CONDA_PYTHON, "python_full_version": CONDA_PYTHON + ".0"}
    wanted = lambda s: Requirement(s).marker is None or Requirement(s).marker.evaluate(env)
    specs = [s for s in specs if wanted(s)]
    return dict(_split(s) for s in specs)


def conda_requirements() -> dict[str, str]:
    found = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-]+[^#]*?)\s*$", line)
        if not m or m.group(1).rstrip(":") in {"pip", "conda-forge"} or line.strip().endswith(":"):
            continue
        name, bounds = _split(
            m.group(1).replace("=", "==", 1)
            if re.match(r"^[A-Za-z0-9_.\-]+=[^=<>]", m.group(1))
            else m.group(1)
        )
        if name == "python":
            continue
        found[CONDA_NAMES.get(name, name)] = bounds
    return found


def test_environment_mirrors_pyproject():
    pip, conda = pyproject_requirements(), conda_requirements()
    assert set(pip) == set(conda), (
        f"only in pyproject.toml: {sorted(set(pip) - set(conda))}; "
        f"only in environment.yml: {sorted(set(conda) - set(pip))}"
    )
    for name, bounds in pip.items():
        assert conda[name] == bounds, (
            f"{name}: pyproject says {bounds!r}, environment.yml {conda[name]!r}"
        )


def test_the_checker_sees_a_drift(tmp_path, monkeypatch):
    # The comparison must be able to fail: drop a package from a copy and compare again.
    text = (ROOT / "environment.yml").read_text().replace("  - tqdm>=4.66\n", "")
    monkeypatch.setattr(
        Path,
        "read_text",
        lambda self, *a, **k: (
            text if self.name == "environment.yml" else Path.read_bytes(self).decode()
        ),
    )
    assert "tqdm" not in conda_requirements()
