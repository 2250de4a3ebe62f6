"""Which closed folders the classroom's mount namespace opens, and what each one shows.

The hub, its proxy and every student's server run as other users: a checkout cloned into a
``mktemp -d`` folder (mode 0700), or a base Python under ``/root``, is out of their reach unless
the namespace shows it through the highest closed folder on its way. Pure path logic: no mounts.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "private_view", ROOT / "classroom" / "private_view.py"
)
private_view = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(private_view)


@pytest.fixture
def tmp_path():
    """An open folder in ``/tmp`` (pytest's own lies under a closed ``pytest-of-<user>``)."""
    folder = Path(tempfile.mkdtemp(prefix="shapes-view-test-", dir="/tmp"))
    folder.chmod(0o755)
    if private_view.closed_ancestor(folder) is not None:
        pytest.skip(f"{folder} is not open to every user on this machine")
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(folder)


def _tree(tmp_path: Path) -> dict[str, Path]:
    made = {
        "pyenv": tmp_path / "root" / ".pyenv" / "versions" / "3.11",
        "clone": tmp_path / "tmp.X" / "private" / "deep" / "shapes",
        "open": tmp_path / "srv" / "shapes",
    }
    for path in made.values():
        path.mkdir(parents=True)
    (tmp_path / "root").chmod(0o700)
    (tmp_path / "tmp.X").chmod(0o700)
    (tmp_path / "tmp.X" / "private").chmod(0o700)  # a closed folder inside a closed folder
    return made


def test_each_closed_folder_is_opened_at_its_highest_point_showing_only_what_is_needed(tmp_path):
    paths = _tree(tmp_path)
    tops = private_view.closed_tops({paths["pyenv"]: "python", paths["clone"]: "checkout"})
    assert tops == [
        (tmp_path / "root", {paths["pyenv"]: "python"}),
        (tmp_path / "tmp.X", {paths["clone"]: "checkout"}),
    ]


def test_an_open_path_needs_nothing_and_paths_under_one_closed_folder_share_it(tmp_path):
    paths = _tree(tmp_path)
    assert private_view.closed_tops({paths["open"]: "checkout"}) == []
    inside = tmp_path / "root" / "shapes"
    inside.mkdir()
    tops = private_view.closed_tops({paths["pyenv"]: "python", inside: "checkout"})
    assert tops == [(tmp_path / "root", {paths["pyenv"]: "python", inside: "checkout"})]


def test_a_checkout_that_is_itself_the_closed_folder_is_left_to_its_own_cover(tmp_path):
    paths = _tree(tmp_path)
    paths["open"].chmod(0o700)
    assert private_view.closed_tops({paths["open"]: "checkout"}) == []
