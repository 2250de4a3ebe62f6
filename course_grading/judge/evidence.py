"""Take the declared values out of the student's kernel, as plain data, after its last cell.

One step of ``execute.py``: once every cell has run, the kernel is sent the encoder
(``sandbox/inside/encode.py``: no expected value, no checking code) and asked for the lesson's
declared names as JSON. The answer is written to ``values.json`` beside ``out.ipynb`` as
``{"values": {name: encoded}}``, or ``{"error": why}``. It is untrusted: the kernel is the
student's, so the grader decodes and re-validates every value (``plain.decode``) and decides
nothing from this step's success.

The kernel hands its JSON back base64-encoded, so the reply's ``text/plain`` (the repr of a
``str``) is one quoted run of base64 characters; anything else (a kernel whose formatter was
replaced, a reply of 16 MiB of ``[[[[``) is refused by one regular-expression match, and the
JSON itself is read by ``plain.parse``, which bounds it before it is built. Nothing is
evaluated.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from course_grading.judge import plain

if TYPE_CHECKING:
    from nbclient import NotebookClient

ENCODER = Path(__file__).resolve().parents[1] / "sandbox" / "inside" / "encode.py"
REPLY_BYTES = plain.MAX_BYTES  # the largest answer kept
QUOTED_BASE64 = re.compile(r"'([A-Za-z0-9+/]*+={0,2})'")  # the repr of a base64 str
TIMEOUT = 60  # seconds the kernel may take to answer

_TAKE = """
def _shapes_take(names):
    import base64, json
    namespace = get_ipython().user_ns
    values = {}
    for name in names:
        if name in namespace:
            values[name] = encode(namespace[name])
        else:
            values[name] = {"missing": name}
    return base64.b64encode(json.dumps({"values": values}).encode()).decode("ascii")
"""


async def take_values(client: NotebookClient, names: list[str], path: Path) -> None:
    """Ask ``client``'s kernel for ``names`` (module docstring); write ``path``.

    Args:
        client: the notebook's client, its kernel still running after the last cell.
        names: the lesson's declared value names.
        path: the job's ``values.json``: ``{"values": {name: encoded}}``, or ``{"error":
            why}``.

    Raises:
        ValueError: raised and caught here when the kernel's expression fails; like every other
            failure of the student's kernel, it is written to ``path`` as ``{"error": why}`` and
            nothing escapes.
    """
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
        path.write_bytes(reply_json(found.get("data", {}).get("text/plain", "")))
    except plain.NotPlain as err:
        path.write_text(json.dumps({"error": str(err)[:300]}), encoding="utf-8")
    except Exception as err:  # noqa: BLE001 (the kernel is the student's: anything can happen)
        why = f"{type(err).__name__}: {err}"[:300]
        path.write_text(json.dumps({"error": why}), encoding="utf-8")


def reply_json(text: object) -> bytes:
    """The JSON bytes in a kernel's ``text/plain`` reply (module docstring), checked by
    ``plain.parse`` to be ``{"values": {...}}`` within the bounds.

    Args:
        text: the reply's ``text/plain``: the repr of a base64 ``str``.

    Returns:
        The decoded JSON bytes, to be written as ``values.json``.

    Raises:
        plain.NotPlain: the reply is not the quoted base64 of such JSON.
    """
    if not isinstance(text, str) or len(text) > REPLY_BYTES * 4 // 3 + 8:
        raise plain.NotPlain(f"the answer is not text of at most {REPLY_BYTES // 2**20} MiB")
    found = QUOTED_BASE64.fullmatch(text)
    if found is None:
        raise plain.NotPlain("the answer is not the text the grader asked for")
    data = base64.b64decode(found.group(1), validate=True)
    answer = plain.parse(data)
    if not isinstance(answer, dict) or not isinstance(answer.get("values"), dict):
        raise plain.NotPlain("the answer holds no values")
    return data
