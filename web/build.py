"""Build the planner page into web/build/ (``make planner-page``): Pyodide's core files from its
npm package (``npm ci --prefix web`` first), the course's wheel, and the page's own files. The
result is static: serve the folder with any web server (``python -m http.server -d web/build``)
and open it; nothing else is fetched, from anywhere."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

WEB = Path(__file__).resolve().parent
ROOT = WEB.parent
PYODIDE = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
           "pyodide-lock.json")  # fmt: skip
PAGE = ("index.html", "page.js", "page.py", "style.css")


def main(out: Path = WEB / "build") -> Path:
    """Assemble the page in ``out`` (emptied first) and return it."""
    source = WEB / "node_modules" / "pyodide"
    missing = [f for f in PYODIDE if not (source / f).is_file()]
    if missing:
        raise SystemExit(f"no Pyodide at {source} ({', '.join(missing)}): npm ci --prefix web")
    shutil.rmtree(out, ignore_errors=True)
    (out / "pyodide").mkdir(parents=True)
    for name in PYODIDE:
        shutil.copy2(source / name, out / "pyodide" / name)
    for name in PAGE:
        shutil.copy2(WEB / name, out / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--wheel-dir", str(out), str(ROOT)], check=True)
    wheel = next(out.glob("*.whl")).name
    (out / "manifest.json").write_text(json.dumps({"wheel": wheel}))
    print(f"the planner page is in {out}: python -m http.server -d {out}, then open it")
    return out


if __name__ == "__main__":
    main()
