"""Decoding bombs: each one's outcome, peak memory and time, with today's decoder and an older one.

    python benchmarks/bombs.py [--before REV] [--only NAME] [--cap-mib 3072] [--timeout 60]

Each bomb is what a student process can hand the grader: the reply a kernel sends when asked
for the lesson's values (``evidence.take_values`` reads it) or the JSON a sandbox answers with
(``plain.load``). Every bomb runs in a fresh Python subprocess that builds its input, decodes it
and prints the outcome; its peak resident memory (``ru_maxrss``, input included) and the time of
the decoding alone are printed beside the same bomb decoded by ``course_grading`` at ``--before``
(default: the commit before the bounded decoder; its ``plain.py`` and ``evidence.py`` are copied
from git into a temporary folder). The older code can take gigabytes: its children run under an
address-space cap (``--cap-mib``) and a time limit (``--timeout``), so a row that reads
"MemoryError" or "killed" means it would have gone further.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "3df81d1"  # the grader as issue 25 found it
MIB = 2**20

#: name -> (how the bomb reaches the grader, Python that builds ``data``)
BOMBS = {
    "empty tensor of shape (2**62, 1, 0)": (
        "load-tensors",
        'data = b\'{"tensor": {"dtype": "float32", "shape": [4611686018427387904, 1, 0], '
        '"data": []}}\'',
    ),
    "values reply: 16 MiB of [[[[": ("reply", 'data = "[" * (16 * 2**20 - 8)'),
    "values reply: 16 MiB list literal [0,0,...]": (
        "reply",
        'data = "[" + "0," * (8 * 2**20 - 8) + "0]"',
    ),
    "values reply: base64 of 16 MiB of {list: [0,0,...]}": (
        "reply-b64",
        'data = b\'{"values": {"x": {"list": [\' + b"0," * (8 * 2**20 - 32) + b"0]}}}"',
    ),
    "set holding a tuple holding a list": (
        "load",
        'data = b\'{"set": [{"tuple": [{"list": []}]}]}\'',
    ),
    "1,329-bit Fraction": (
        "load-float",
        "data = b'{\"fraction\": [%d, 1]}' % (2**1329 - 1)",
    ),
    "nested 100,000 deep": ("load", 'data = b\'{"list": [\' * 100_000 + b"]}" * 100_000'),
    "integer 10**100000": ("load", 'data = b"1" + b"0" * 100_000'),
    "string of 16 MiB": ("load", "data = b'\"' + b'a' * (16 * 2**20 - 8) + b'\"'"),
    "dict with 10**6 keys": (
        "load",
        "data = b'{\"dict\": [' + b','.join(b'[%d, 0]' % i for i in range(10**6)) + b']}'",
    ),
}

#: How the child decodes ``data`` with the module ``plain`` (and ``evidence``) it imported.
STEPS = {
    "load": "value = plain.decode(plain.parse(data))",
    "load-tensors": "value = plain.decode(plain.parse(data), tensors=True); value.nested()",
    "load-float": "value = plain.decode(plain.parse(data)); float(value)",
    "reply": "value = reply(data)",
    "reply-b64": "value = reply(repr(base64.b64encode(data).decode() if NEW else data.decode()))",
}

CHILD = """
import asyncio, base64, json, resource, sys, time

def peak():  # VmHWM: ru_maxrss keeps the forking parent's peak through exec
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024

sys.path.insert(0, {folder!r})
import plain, evidence
evidence.plain = plain
NEW = hasattr(evidence, "reply_json")  # the kernel base64-encodes its JSON

class Kernel:
    def __init__(self, text):
        self.text = text
    def execute(self, *a, **k):
        return "id"

class Client:
    def __init__(self, text):
        self.kc = Kernel(text)
    async def async_wait_for_reply(self, msg_id):
        data = {{"text/plain": self.kc.text}}
        return {{"content": {{"user_expressions": {{"values": {{"status": "ok", "data": data}}}}}}}}

def reply(text):
    out = __import__("pathlib").Path({folder!r}) / "values.json"
    asyncio.run(evidence.take_values(Client(text), ["x"], out))
    payload = json.loads(out.read_text())
    if "error" in payload:
        raise plain.NotPlain(payload["error"])
    return {{name: plain.decode(value) for name, value in payload["values"].items()}}

{build}
start = time.perf_counter()
try:
    {step}
    outcome = "accepted"
except Exception as err:
    outcome = f"{{type(err).__name__}}: {{str(err)[:70]}}"
took = time.perf_counter() - start
rss = peak()
print(json.dumps({{"outcome": outcome, "seconds": took, "rss": rss}}))
"""


def _modules(rev: str | None, folder: Path) -> None:
    """``plain.py`` and ``evidence.py`` of ``rev`` (``None``: the working tree) in ``folder``."""
    (folder / "sandboxed").mkdir(parents=True)
    for name in ("plain.py", "evidence.py", "sandboxed/encode.py"):
        if rev is None:
            text = (ROOT / "course_grading" / name).read_text()
        else:
            text = subprocess.run(
                ["git", "show", f"{rev}:course_grading/{name}"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        text = text.replace("from course_grading import plain", "import plain")
        (folder / name).write_text(text)


def _run(folder: Path, name: str, cap: int, timeout: float) -> dict:
    """One bomb in a fresh subprocess under the caps; its outcome, seconds and peak bytes."""
    how, build = BOMBS[name]
    code = CHILD.format(folder=str(folder), build=build, step=STEPS[how])

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"killed after {timeout:g} s", "seconds": timeout, "rss": -1}
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        took = time.perf_counter() - start
        return {"outcome": f"crashed: {tail[:60]}", "seconds": took, "rss": -1}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git revision of the older decoder")
    parser.add_argument("--only", default=None, help="run the bombs whose name holds this")
    parser.add_argument("--cap-mib", type=int, default=3072, help="address-space cap, MiB")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per bomb")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"before": Path(tmp, "before"), "now": Path(tmp, "now")}
        _modules(args.before, folders["before"])
        _modules(None, folders["now"])
        for name in BOMBS:
            if args.only and args.only not in name:
                continue
            print(name)
            for label, folder in folders.items():
                got = _run(folder, name, args.cap_mib * MIB, args.timeout)
                peak = f"{got['rss'] / MIB:7.0f} MiB" if got["rss"] >= 0 else "      ? MiB"
                print(f"  {label:6} {peak} {got['seconds']:8.2f} s  {got['outcome']}")


if __name__ == "__main__":
    main()
