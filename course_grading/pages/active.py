"""Nothing a student wrote runs in anyone's browser: the allow-list every page goes through.

Pages built from a submission (formgrader's manual-grading view, the feedback HTML) show what
the student's notebook holds: markdown they wrote, outputs their code produced, metadata they
could edit. Opened by the instructor, any script in them runs with the instructor's Jupyter
session. The rules, applied by ``safe_pages.py`` wherever such a page is built:

- HTML (``text/html`` outputs, raw cells, every markdown cell once rendered) keeps only an
  allow-list of tags, attributes, URL schemes (``http``, ``https``, ``mailto``; ``data:`` only
  for a raster image's ``src``) and CSS properties (values without ``url()``, ``expression()``
  or escapes). An image's ``src`` must be such a ``data:`` image: any URL, even a path on the
  page's own site, is fetched as the page opens, with the instructor's cookies
  (``<img src="/hub/logout">`` would log them out of JupyterHub; another site would learn when
  the page was read), so it is dropped. Links stay: they load nothing until clicked.
  Scripts, event handlers, ``javascript:`` URLs, frames, forms, ``<base>``,
  ``<meta>``, SVG and ``<style>`` never pass; MathML passes as layout only (``mathml.py``'s
  elements and attributes: no ``maction``, annotations, ``mglyph`` or links). The allow-list
  is nh3 (the Rust ``ammonia`` sanitiser), so what passes is what it parsed, not what a
  pattern matched.
- An output holding anything active is not cleaned silently: it is shown as text, with a line
  that says what was in it, so the instructor sees the attempt and nothing of it runs. So are
  ``application/javascript``, widget views and every MIME type the pages would not render as
  inert markup; an SVG output with scripts, ``foreignObject``, animations or outside links too
  (the pages show a clean one as an ``<img>``, where SVG cannot run anything).
- Output metadata the templates put into attributes (an image's width and height) must be
  plain numbers; a raster image must be base64. Anything else is dropped.
- Cost is bounded. nh3 is quadratic on some inputs (80,000 nested ``<div>`` took 30 s, 400 KB
  of ``&`` 6 s here), so HTML that is larger, more deeply nested or holds more character
  references than any honest output does (``LIMITS``) is shown as text, unparsed. The checks
  here are linear scans; nothing uses ``html.parser``, which is quadratic on ``<a<a<a…``.

The detection of "active" (``active_parts``) only decides what is *shown* as text: it is a
linear pattern scan and may miss a disguised handler; the allow-list removes that one anyway.
"""

from __future__ import annotations

import copy
import html
import json
import re
from typing import Any

import nh3
from nbformat.notebooknode import NotebookNode, from_dict
from pygments.token import STANDARD_TYPES

from course_grading.pages.mathml import MATHML_ATTRIBUTES, MATHML_TAGS
from course_grading.report_text import bounded

#: Most characters of a notebook's title or language name on a page (the student's metadata).
PAGE_TEXT = 200

#: (bytes, estimated nesting depth, tags, character references) beyond which HTML is text.
LIMITS = (2_000_000, 200, 60_000, 20_000)
#: At most this much of an output shown as text is kept (the rest is counted).
SHOWN_CHARS = 100_000

TAGS = set(nh3.ALLOWED_TAGS) | {"tfoot"} | MATHML_TAGS
ATTRIBUTES: dict[str, set[str]] = copy.deepcopy(nh3.ALLOWED_ATTRIBUTES | MATHML_ATTRIBUTES)
ATTRIBUTES["*"] = {"title", "lang", "dir", "style", "align"}
ATTRIBUTES["table"] = ATTRIBUTES.get("table", set()) | {"border", "cellpadding", "cellspacing"}
#: Classes a page's CSS styles and nothing on formgrader's page acts on: pandas' table class,
#: Pygments' token classes (markdown code blocks), never formgrader's own (``score``, ...).
_TOKENS = {name for name in STANDARD_TYPES.values() if name}
CLASSES = {
    "table": {"dataframe"},
    "div": {"highlight"},
    "span": _TOKENS,
    "code": _TOKENS,
    "pre": _TOKENS,
}
STYLE_PROPERTIES = {
    "color", "background-color", "text-align", "vertical-align", "font-weight", "font-style",
    "text-decoration", "white-space", "border", "border-collapse", "border-color",
    "border-style", "border-width", "border-top", "border-bottom", "border-left",
    "border-right", "padding", "padding-top", "padding-bottom", "padding-left",
    "padding-right", "margin", "margin-top", "margin-bottom", "margin-left", "margin-right",
    "width", "height", "min-width", "max-width",
}  # fmt: skip
SAFE_SCHEMES = {"http", "https", "mailto"}

#: MIME types the pages show as escaped text, and raster images (base64 in an ``<img>``).
TEXT_MIME = {"text/plain", "text/latex"}
RASTER_MIME = {"image/png", "image/jpeg", "image/gif"}
#: Markdown is rendered through ``safe_pages.SafeMarkdown``, which cleans the HTML it makes.
MARKDOWN_MIME = "text/markdown"

_ACTIVE_TAGS = {
    "script", "iframe", "frame", "frameset", "object", "embed", "applet", "form", "base",
    "meta", "link", "portal", "foreignobject", "animate", "animatemotion", "animatetransform",
    "set", "handler", "listener",
}  # fmt: skip
_TAG = re.compile(r"<(/?)([a-zA-Z][^\s/>]*)([^<>]*)")
_ATTR = re.compile(r"""([^\s"'=<>/]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_URL_ATTRS = {
    "href", "src", "action", "formaction", "xlink:href", "data", "background", "poster",
    "ping", "cite", "longdesc", "lowsrc", "dynsrc", "codebase", "srcset",
}  # fmt: skip
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):")
_RASTER_URL = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z", re.I)
_BAD_STYLE = re.compile(r"expression|url\(|javascript|@import|behavior|binding|\\", re.I)
_CSS_FUNCTION = re.compile(r"(?:rgba?|hsla?)\([\d\s.,%/]*\)", re.I)
_CSS_VALUE = re.compile(r"[\w\s.,%#+-]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
         "track", "wbr", "param"}  # fmt: skip
_CONTROL = dict.fromkeys(range(33))  # browsers drop tabs, newlines and spaces in a URL scheme


def too_costly(markup: str) -> str:
    """Why ``markup`` is not parsed as HTML at all (``LIMITS``), or ``""``. Linear time.

    Nesting depth is estimated from the tags alone (an opening tag that is not void or
    self-closed goes one deeper, a closing tag one back), so it needs no parser; it is what
    nh3's quadratic cases grow with.

    Args:
        markup: HTML from a submission (an output, a raw cell, rendered markdown).

    Returns:
        The first limit it passes, in words with the count (``"80,000 tags (more than
        60,000)"``); ``""`` when it is within all of them.
    """
    size, depth_limit, tag_limit, ref_limit = LIMITS
    if len(markup) > size:
        return f"{len(markup):,} characters of HTML (more than {size:,})"
    if markup.count("&") > ref_limit:
        return f"{markup.count('&'):,} character references (more than {ref_limit:,})"
    depth = deepest = tags = 0
    for match in _TAG.finditer(markup):
        tags += 1
        if match.group(1):
            depth = max(depth - 1, 0)
        elif match.group(2).lower() not in _VOID and not match.group(3).endswith("/"):
            depth += 1
            deepest = max(deepest, depth)
    if tags > tag_limit:
        return f"{tags:,} tags (more than {tag_limit:,})"
    if deepest > depth_limit:
        return f"elements nested about {deepest:,} deep (more than {depth_limit})"
    return ""


def _active_url(tag: str, name: str, value: str) -> bool:
    if tag == "img" and name in ("src", "srcset", "lowsrc", "dynsrc"):  # loaded as it shows
        return not (name == "src" and _RASTER_URL.match(value.strip()))
    match = _SCHEME.match(value.translate(_CONTROL))
    if match is None or match.group(1).lower() in SAFE_SCHEMES:
        return False
    return not (tag == "img" and name == "src" and _RASTER_URL.match(value.strip()))


def active_parts(markup: str) -> list[str]:
    """What in ``markup`` would run or load something: ``["<script>", "onerror=", ...]``.

    A linear scan of the text with character references decoded; see the module docstring
    for why a miss here is harmless.

    Args:
        markup: HTML from a submission.

    Returns:
        One entry per kind of active part, sorted: an active tag (``"<script>"``), an event
        handler (``"onerror="``), ``"srcdoc="``, a URL attribute with its scheme
        (``"href=javascript:"``; an image's non-``data:`` source as ``"src=:"`` or
        ``"src=https:"``), or a style's bad token (``"style=url("``). ``[]`` when nothing is.
    """
    text = html.unescape(markup) if "&" in markup else markup
    found = set()
    for tag in _TAG.finditer(text):
        name = tag.group(2).lower()
        if name in _ACTIVE_TAGS and not tag.group(1):
            found.add(f"<{name}>")
        for attr in _ATTR.finditer(tag.group(3)):
            key, value = attr.group(1).lower(), (attr.group(2) or "").strip("\"'")
            if key.startswith("on"):
                found.add(f"{key}=")
            elif key == "srcdoc":
                found.add("srcdoc=")
            elif key in _URL_ATTRS and _active_url(name, key, value):
                scheme = _SCHEME.match(value.translate(_CONTROL))
                found.add(f"{key}={scheme.group(1).lower() if scheme else ''}:")
            elif key == "style" and (bad := _BAD_STYLE.search(value)):
                found.add(f"style={bad.group(0).lower()}")
    return sorted(found)


def _safe_style(value: str) -> str | None:
    kept = []
    for declaration in value[:4000].split(";"):
        prop, _, val = declaration.partition(":")
        if not val or _BAD_STYLE.search(val):
            continue
        if _CSS_VALUE.fullmatch(_CSS_FUNCTION.sub("", val)):
            kept.append(f"{prop.strip()}:{val.strip()}")
    return ";".join(kept) or None


def _attribute(tag: str, name: str, value: str) -> str | None:
    if name == "style":
        return _safe_style(value)
    if tag == "img" and name == "src":  # an image loads its URL: only data: rasters stay
        return value if _RASTER_URL.match(value.strip()) else None
    if name in _URL_ATTRS and value.strip().lower().startswith("data:"):
        return None
    return value


def clean_html(markup: str) -> str:
    """``markup`` with only the allow-list left; too costly to parse: all of it escaped.

    Args:
        markup: HTML from a submission.

    Returns:
        nh3's cleaned HTML (allowed tags, attributes, classes and style properties; comments
        dropped; an image's ``src`` kept only as a ``data:`` raster image); or, when
        ``too_costly``, the first ``SHOWN_CHARS`` characters escaped inside ``<pre>``.
    """
    if too_costly(markup):
        return f"<pre>{html.escape(markup[:SHOWN_CHARS])}</pre>"
    return nh3.clean(
        markup,
        tags=TAGS,
        attributes=ATTRIBUTES,
        attribute_filter=_attribute,
        url_schemes=SAFE_SCHEMES | {"data"},  # data: is narrowed to raster images above
        allowed_classes=CLASSES,
        filter_style_properties=STYLE_PROPERTIES,
        strip_comments=True,
    )


def svg_active_parts(svg: str) -> list[str]:
    """What in an SVG image would run or load something (handlers, scripts, outside links).

    Links inside the image (``#id``, ``url(#id)``) and embedded raster images (matplotlib's
    ``imshow``) are not: the pages show an SVG as an ``<img>``, which loads nothing anyway.

    Args:
        svg: the text of an ``image/svg+xml`` output.

    Returns:
        What ``active_parts`` finds, less links, plus every ``href`` or ``xlink:href`` that
        points outside the image; sorted, without repeats.
    """
    found = [
        part
        for part in active_parts(svg)
        if not part.startswith(("href=", "xlink:href=", "style=url("))
    ]
    for tag in _TAG.finditer(svg):
        for attr in _ATTR.finditer(tag.group(3)):
            key, value = attr.group(1).lower(), (attr.group(2) or "").strip("\"' ")
            inside = value.startswith("#") or _RASTER_URL.match(value)
            if key in ("href", "xlink:href") and not inside:
                found.append(f"{key}= (not a link inside the image)")
    return sorted(set(found))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return json.dumps(value, indent=1, default=str)


def _shown_as_text(mime: str, why: str, text: str) -> str:
    more = len(text) - SHOWN_CHARS
    tail = f"\n[... {more:,} more characters]" if more > 0 else ""
    return f"[a {mime} output, shown as text: {why}; nothing of it ran]\n{text[:SHOWN_CHARS]}{tail}"


def _why_not_rendered(mime: str, text: str) -> str:
    """Why an output of type ``mime`` is shown as text (``""``: it is rendered, cleaned)."""
    if mime in TEXT_MIME:
        return ""
    if mime in RASTER_MIME:
        return "" if _BASE64.fullmatch(text) else "the image is not base64"
    if mime in ("text/html", MARKDOWN_MIME):  # markdown may hold raw HTML
        parts = active_parts(text) if not too_costly(text) else []
        return too_costly(text) or (f"it holds {', '.join(parts)}" if parts else "")
    if mime == "image/svg+xml":
        parts = svg_active_parts(text) if not too_costly(text) else []
        return too_costly(text) or (f"it holds {', '.join(parts)}" if parts else "")
    return "pages never run or render this type"


def _image_metadata(meta: Any) -> dict:
    """Only what the templates put into an ``<img>``: number width/height, alt text."""
    if not isinstance(meta, dict):
        return {}
    kept: dict[str, Any] = {}
    for key in ("width", "height"):
        if type(meta.get(key)) in (int, float) and meta[key] > 0:
            kept[key] = meta[key]
    if isinstance(meta.get("alt"), str):
        kept["alt"] = meta["alt"]  # quoted and escaped by every template
    if meta.get("unconfined") is True:
        kept["unconfined"] = True
    return kept


def neutralise_output(output: NotebookNode) -> NotebookNode:
    """Make one output inert, in place (see the module docstring); return it.

    If any of its MIME types cannot be shown inert, the whole output becomes one
    ``text/plain`` entry that shows each such part as text and says why: the rendered parts
    go too, so the instructor sees the attempt rather than a cleaned copy of it.

    Args:
        output: one cell output; only one with a ``data`` bundle (display data, an execute
            result) is changed.

    Returns:
        ``output`` itself: its ``data`` cleaned (HTML through ``clean_html``) or shown as text,
        its ``metadata`` reduced to a raster image's plain-number size and alt text.
    """
    data = output.get("data")
    if not isinstance(data, dict):
        return output
    kept, shown = {}, []
    for mime, value in data.items():
        text = _text(value)
        why = _why_not_rendered(mime, text)
        if why:
            shown.append(_shown_as_text(mime, why, text))
        else:
            kept[mime] = clean_html(text) if mime == "text/html" else text
    meta = output.get("metadata") if isinstance(output.get("metadata"), dict) else {}
    images = {m: _image_metadata(meta.get(m)) for m in kept if m in RASTER_MIME}
    if shown:
        kept, images = {"text/plain": "\n".join(shown)}, {}
    output["data"] = from_dict(kept)
    output["metadata"] = from_dict({**_image_metadata(meta), **images} if images else {})
    return output


_GRADE_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def _raster_bundle(bundle: Any) -> dict:
    if not isinstance(bundle, dict):
        return {}
    return {
        m: v
        for m, v in bundle.items()
        if m in RASTER_MIME and isinstance(v, str) and _BASE64.fullmatch(v)
    }


def neutralise_cell(cell: NotebookNode) -> NotebookNode:
    """Make one cell inert, in place: outputs, raw HTML, attachments, unsafe metadata.

    A raw cell's source is cleaned as HTML; attachments keep only base64 raster images; an
    nbgrader grade id that is not a plain name (templates put it into attributes) takes the
    cell's nbgrader metadata with it; tags that are not strings are dropped.

    Args:
        cell: a notebook cell from a submission.

    Returns:
        ``cell`` itself, made inert.
    """
    for output in cell.get("outputs", []):
        neutralise_output(output)
    if cell.get("cell_type") == "raw":
        cell["source"] = clean_html(_text(cell.get("source", "")))
    if isinstance(cell.get("attachments"), dict):  # markdown images: raster, base64, only
        cell["attachments"] = from_dict(
            {name: _raster_bundle(bundle) for name, bundle in cell["attachments"].items()}
        )
    meta = cell.get("metadata")
    if not isinstance(meta, dict):
        return cell
    nbgrader = meta.get("nbgrader")
    grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    if grade_id is not None and not (isinstance(grade_id, str) and _GRADE_ID.fullmatch(grade_id)):
        del meta["nbgrader"]  # templates put grade ids into attributes; no lesson has such a one
    tags = meta.get("tags")
    if tags is not None:
        meta["tags"] = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
    return cell


def neutralise_notebook(nb: NotebookNode) -> NotebookNode:
    """Make every cell of ``nb`` inert, in place, and drop saved widget state; return it.

    Args:
        nb: a notebook built from a submission, before any page is made from it.

    Returns:
        ``nb`` itself, every cell through ``neutralise_cell``, its saved widget state
        (``metadata.widgets``) gone, and the metadata a page shows (``title``, the language's
        name) text of at most ``PAGE_TEXT`` characters.
    """
    for cell in nb.cells:
        neutralise_cell(cell)
    nb.metadata.pop("widgets", None)
    if "title" in nb.metadata:
        nb.metadata["title"] = bounded(str(nb.metadata["title"]), PAGE_TEXT)
    language = nb.metadata.get("language_info")
    if isinstance(language, dict) and "name" in language:
        language["name"] = bounded(str(language["name"]), PAGE_TEXT)
    return nb
