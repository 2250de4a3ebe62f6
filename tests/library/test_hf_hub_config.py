"""``--model org/name`` fetches the model's ``config.json`` with ``huggingface_hub`` (issue 41),
tested against a Hub of our own on 127.0.0.1 (``HF_ENDPOINT``), never the internet: the file is
fetched once into the cache and read from there offline; a gated model, a missing one, one
without a ``config.json`` and an unreachable Hub each end in one line saying what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from course_lib.hf_configs import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = dict(load_config("SmolLM2-135M"), num_hidden_layers=4)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# repository -> (status, X-Error-Code) for its config.json
ANSWERS = {"acme/tiny-llama": (200, ""), "acme/gated": (403, "GatedRepo"),
           "acme/missing": (404, "RepoNotFound"),
           "acme/adapter": (404, "EntryNotFound")}  # fmt: skip


class Hub(BaseHTTPRequestHandler):
    """The two requests hf_hub_download makes for one file: HEAD (metadata) and GET."""

    seen: list[str] = []

    def _answer(self, body: bool) -> None:
        Hub.seen.append(f"{self.command} {self.path}")
        repo = self.path.split("/resolve/")[0].strip("/")
        status, code = ANSWERS.get(repo, (404, "RepoNotFound"))
        data = json.dumps(CONFIG).encode() if status == 200 else b'{"error": "no"}'
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", code)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"e0e0"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's names)
        self._answer(False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(True)

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hub.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def plan(model: str, endpoint: str, cache: Path, offline: bool = False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(cache), HF_HOME=str(cache / "home"),
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE="1" if offline else "0",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))  # fmt: skip
    args = ["plan", "--model", model, "--seq-len", "512", "--gpu", "L4", "--json"]
    return subprocess.run([sys.executable, "-m", "course_lib", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_hub_id_is_fetched_once_and_read_offline_from_the_cache(hub, tmp_path):
    out = plan("acme/tiny-llama", hub, tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["n_params"] > 0 and json.loads(out.stdout)["model"] == (
        "acme/tiny-llama"
    )
    assert Hub.seen and all("config.json" in s for s in Hub.seen)  # that file, nothing else
    cached = list(tmp_path.glob("models--acme--tiny-llama/snapshots/*/config.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == CONFIG
    Hub.seen.clear()
    again = plan("acme/tiny-llama", "http://127.0.0.1:9", tmp_path, offline=True)  # no Hub
    assert again.returncode == 0 and again.stdout == out.stdout and Hub.seen == []


@pytest.mark.parametrize(
    "model, words",
    [
        ("acme/gated", "acme/gated is gated on the Hub: accept its terms at"),
        ("acme/missing", "no model acme/missing at"),
        ("acme/adapter", "acme/adapter has no config.json"),
    ],
)
def test_gated_missing_and_config_less_models_answer_in_one_line(hub, tmp_path, model, words):
    out = plan(model, hub, tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr
    assert "config.json" in out.stderr  # what to do instead


def test_an_unreachable_hub_or_offline_mode_says_so_in_one_line(hub, tmp_path):
    down = plan("acme/tiny-llama", "http://127.0.0.1:9", tmp_path)
    assert down.returncode == 2 and down.stderr.count("\n") == 1
    assert "could not be reached" in down.stderr and "connect once" in down.stderr
    offline = plan("acme/tiny-llama", hub, tmp_path, offline=True)
    assert offline.returncode == 2 and "HF_HUB_OFFLINE is set" in offline.stderr
    assert Hub.seen == []  # offline means no request at all
