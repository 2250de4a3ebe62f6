"""The planner page (web/, ``make planner-page``) in Chromium: Pyodide from its npm package and
the course's wheel, served from 127.0.0.1 beside the page, nothing fetched from anywhere else;
the form filled as a person would, and the page's plan equal to
``python -m course_lib plan ... --json`` on twelve configurations (every verdict, QLoRA, a full
fine-tune under ZeRO-3, a card given by its memory, the time per epoch), and a bad value shown as
the command line's one-line error.

Needs ``/usr/bin/chromium``, the ``playwright`` package and ``npm ci --prefix web`` (Pyodide's
npm package); skipped, saying which, without them. About a minute here: Pyodide starts in about
20 s, and a plan takes 1 to 5 s in WebAssembly.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from course_lib.cli import main

ROOT = Path(__file__).resolve().parents[2]
PYODIDE = ROOT / "web" / "node_modules" / "pyodide" / "pyodide.asm.wasm"

# (the form's fields to set: the run's selects, then flags), checked against the command line
CONFIGS = [
    {"model": "Llama-3.1-8B", "gpu": "RTX 4090", "--seq-len": "4096", "--dtype": "bf16"},
    {"model": "Llama-3.1-8B", "gpu": "RTX 4090", "--seq-len": "4096", "--dtype": "bf16",
     "--loss": "chunked", "--target-tokens": "32000"},
    {"model": "Qwen2.5-7B", "gpu": "T4", "--seq-len": "1024", "--finetune": "qlora",
     "--lora-targets": "all-linear"},
    {"model": "Qwen2.5-0.5B", "gpu": "A100 80GB", "--seq-len": "2048", "--finetune": "full",
     "--target-tokens": "32000"},
    {"model": "gemma-2-2b", "gpu": "L4", "--seq-len": "1024", "--dtype": "bf16"},
    {"model": "Mistral-7B-v0.3", "gpu": "H100 80GB", "--seq-len": "8192", "--attention": "flash",
     "--checkpointing": "on", "--dataset-size": "10000"},
    {"model": "Llama-3.1-70B", "gpu": "H200", "--seq-len": "4096", "--finetune": "qlora",
     "--micro-batch": "2", "--bnb-version": "0.41.1", "--reentrant": True},
    {"model": "SmolLM2-1.7B", "--gpu-memory": "12GiB", "--seq-len": "2048",
     "--modules-to-save": "embed_tokens,lm_head"},
    {"model": "Llama-3.1-8B", "gpu": "A100 80GB", "--seq-len": "4096", "--finetune": "full",
     "--devices": "8", "--sharding": "zero3", "--optimizer": "adamw-mixed",
     "--sub-group-size": "100000000"},
    {"model": "Phi-3-mini-4k-instruct", "gpu": "A10G", "--seq-len": "1024",
     "--lora-targets": "qkv_proj,o_proj", "--lora-dropout": "0.1", "--optimizer-step": "foreach"},
    {"model": "Qwen3-8B", "gpu": "RTX 4090", "--seq-len": "16384"},
    {"model": "gpt2", "gpu": "T4", "--seq-len": "1024", "--finetune": "full",
     "--no-kbit-upcast": True, "--allocator": "expandable"},
]  # fmt: skip


def cli_argv(config: dict) -> list[str]:
    argv = ["--model", config["model"]] + (["--gpu", config["gpu"]] if "gpu" in config else [])
    for flag, value in config.items():
        if flag.startswith("--"):
            argv += [flag] if value is True else [flag, value]
    return argv


def pairs(argv: list[str]) -> set[tuple[str, str]]:
    """The flags and their values, in any order (a flag without a value pairs with "")."""
    out, i = set(), 0
    while i < len(argv):
        takes = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        out.add((argv[i], argv[i + 1] if takes else ""))
        i += 2 if takes else 1
    return out


def cli_json(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plan", *argv, "--json"])
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def page():
    from helpers import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    playwright = pytest.importorskip("playwright.sync_api", reason="needs playwright")
    if not PYODIDE.exists():
        pytest.skip("needs Pyodide's npm package: npm ci --prefix web")
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("page_build", ROOT / "web" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = module.main

    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "page")

        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        local = f"http://127.0.0.1:{server.server_address[1]}/"
        outside: list[str] = []
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            tab = browser.new_page()

            def route(r) -> None:  # anything but our server is refused, and noted
                if r.request.url.startswith(local):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            tab.route("**/*", route)
            tab.goto(local + "index.html")
            tab.wait_for_function("['ready', 'failed'].includes(document.body.dataset.state)",
                                  timeout=240_000)  # fmt: skip
            assert tab.evaluate("document.body.dataset.state") == "ready", tab.text_content(
                "#errors"
            )
            yield tab, outside
            browser.close()
        server.shutdown()


def fill(tab, config: dict) -> None:
    """Set the form as a person would: every flag blank first, then the configuration's."""
    tab.evaluate("""() => { for (const el of document.querySelectorAll('[data-flag]'))
        { if (el.type === 'checkbox') el.checked = false; else el.value = ''; } }""")
    tab.select_option("#model", config["model"])
    tab.select_option("#gpu", config.get("gpu", ""))
    for flag, value in config.items():
        if not flag.startswith("--"):
            continue
        field = f"[data-flag='{flag}']"
        if value is True:
            tab.check(field)
        elif tab.evaluate(f'document.querySelector("{field}").tagName') == "SELECT":
            tab.select_option(field, value)
        else:
            tab.fill(field, value)


def plan_in_the_page(tab, config: dict) -> dict:
    fill(tab, config)
    tab.click("#plan-button")
    tab.wait_for_function("document.body.dataset.state === 'done'", timeout=120_000)
    return tab.evaluate("window.planner.last")


@pytest.mark.parametrize("config", CONFIGS, ids=[c["model"] + "-" + str(i)
                                                 for i, c in enumerate(CONFIGS)])  # fmt: skip
def test_the_page_gives_the_command_lines_plan(page, config):
    tab, outside = page
    last = plan_in_the_page(tab, config)
    assert pairs(last["argv"]) == pairs(cli_argv(config))  # the form said what the flags say
    assert last["plan"] == cli_json(cli_argv(config))
    verdict = tab.get_attribute("#verdict", "data-verdict")
    assert verdict == last["plan"]["verdict"]
    assert tab.locator("#bar [data-part='card']").count() == 1  # the card's line on the axis
    assert outside == [], outside  # nothing but our own server


def test_the_three_verdicts_and_a_bad_value_show_in_the_page(page):
    tab, outside = page
    seen = set()
    for config in (CONFIGS[0], CONFIGS[1], CONFIGS[10]):
        seen.add(plan_in_the_page(tab, config)["plan"]["verdict"])
    assert seen == {"fits", "may not fit", "does not fit"}
    bad = plan_in_the_page(tab, {"model": "Llama-3.1-8B", "gpu": "L4", "--seq-len": "-5"})
    assert bad["status"] == 2 and bad["plan"] is None
    assert "--seq-len must be positive, got -5" in tab.text_content("#errors")
    assert outside == []
