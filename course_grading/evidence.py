"""Take the declared values out of the student's kernel, as plain data, after its last cell.

One step of ``execute.py``: once every cell has run, the kernel is sent the encoder
(``sandboxed/encode.py``: no expected value, no checking code) and asked for the lesson's
declared names as JSON. The answer is written to ``values.json`` beside ``out.ipynb`` as
``{"values": {name: encoded}}``, or ``{"error": why}``. It is untrusted: the kernel is the
student's, so the grader decodes and re-validates every value (``plain.decode``) and decides
nothing from this step's success.
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path

ENCODER = Path(__file__).resolve().parent / "sandboxed" / "encode.py"
REPLY_BYTES = 16 * 2**20  # the largest answer kept
TIMEOUT = 60  # seconds the kernel may take to answer

_TAKE = """
def _shapes_take(names):
    import json
    namespace = get_ipython().user_ns
    values = {}
    for name in names:
        if name in namespace:
            values[name] = encode(namespace[name])
        else:
            values[name] = {"missing": name}
    return json.dumps({"values": values})
"""


async def take_values(client, names: list[str], path: Path) -> None:
    """Ask ``client``'s kernel for ``names`` (module docstring); write ``path``."""
    code = ENCODER.read_text(encoding="utf-8") + _TAKE
    try:
        msg_id = client.kc.execute(
            code,
            silent=True,
            store_history=False,
            user_expressions={"values": f"_shapes_take({list(names)!r})"},
        )
        reply = await asyncio.wait_for(client.async_wait_for_reply(msg_id), TIMEOUT)
        found = reply["content"].get("user_expressions", {}).get("values", {})
        if found.get("status") != "ok":
            raise ValueError(f"{found.get('ename', 'no answer')}: {found.get('evalue', '')}")
        text = found.get("data", {}).get("text/plain", "")
        if len(text) > REPLY_BYTES:
            raise ValueError(f"the answer is over {REPLY_BYTES // 2**20} MiB")
        answer = ast.literal_eval(text)
        if not isinstance(answer, str):
            raise ValueError("the answer is not text")
        path.write_text(answer, encoding="utf-8")
    except Exception as err:  # noqa: BLE001 (the kernel is the student's: anything can happen)
        why = f"{type(err).__name__}: {err}"[:300]
        path.write_text(json.dumps({"error": why}), encoding="utf-8")
