"""TeX in markdown drawn as MathML, made on the server: no page needs a script for its maths.

Feedback pages may run no script (their Content-Security-Policy), so MathJax cannot typeset
``$...$`` there, and formgrader's MathJax comes from a CDN a grading server may not reach.
Chromium (and Firefox, and Safari) draw MathML Core natively, so each formula of a markdown
cell, ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]`` and ``\\begin{env}...\\end{env}`` as
nbconvert's markdown reader finds them, becomes a ``<math>`` element, made by ``latex2mathml``
(pure Python, maintained on PyPI since 2018; it covers the TeX of these lessons: fractions,
scripts, roots, ``\\times``, ``\\approx``, ``\\text``, matrices, ``cases``, ``align``, accents,
braces, fonts such as ``\\mathbf``). Elsewhere the page renders as nbconvert renders it.

What the converter makes is not trusted: it copies ``\\text{...}`` and ``\\href`` into its
output as they are, so a formula whose MathML holds any element or attribute outside
``MATHML_TAGS`` / ``MATHML_ATTRIBUTES`` is shown as its TeX, escaped, as it is when the
converter fails (unknown syntax, nesting too deep) or the cell's formulas pass
``MAX_TEX_CHARS``. Then, like all the page, the MathML goes through the allow-list
(``active.clean_html``), which knows these elements and attributes and nothing active:
no ``maction``, ``semantics``/``annotation``, ``mglyph`` (it loads an image), ``href``.
"""

from __future__ import annotations

import re
from typing import Any

import latex2mathml.converter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

#: MathML Core's presentation elements that draw, and ``menclose`` (``\\boxed``, ``\\cancel``).
MATHML_TAGS = {
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msup", "msub", "msubsup",
    "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd",
    "mstyle", "mpadded", "mphantom", "merror", "mmultiscripts", "mprescripts", "none",
    "menclose",
}  # fmt: skip
_LAYOUT = {"displaystyle", "scriptlevel", "mathvariant", "mathcolor", "mathbackground", "dir"}
#: Attributes per MathML element: layout only, no URL, no event, no ``style`` beyond the page's.
MATHML_ATTRIBUTES: dict[str, set[str]] = {tag: set(_LAYOUT) for tag in MATHML_TAGS}
MATHML_ATTRIBUTES["math"] |= {"display"}
MATHML_ATTRIBUTES["mo"] |= {
    "form", "fence", "separator", "lspace", "rspace", "stretchy", "symmetric", "maxsize",
    "minsize", "largeop", "movablelimits", "accent",
}  # fmt: skip
MATHML_ATTRIBUTES["mover"] |= {"accent"}
MATHML_ATTRIBUTES["munder"] |= {"accentunder"}
MATHML_ATTRIBUTES["munderover"] |= {"accent", "accentunder"}
MATHML_ATTRIBUTES["mfrac"] |= {"linethickness"}
MATHML_ATTRIBUTES["mspace"] |= {"width", "height", "depth"}
MATHML_ATTRIBUTES["mpadded"] |= {"width", "height", "depth", "lspace", "voffset"}
MATHML_ATTRIBUTES["mtable"] |= {
    "columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame",
}  # fmt: skip
MATHML_ATTRIBUTES["mtd"] |= {"columnspan", "rowspan", "columnalign", "rowalign"}
MATHML_ATTRIBUTES["menclose"] |= {"notation"}
#: TeX characters converted per markdown cell; the formulas past it are shown as TeX.
MAX_TEX_CHARS = 20_000

_TAG = re.compile(r"<(/?)([^\s/>]+)([^>]*)>")
_ATTR = re.compile(r"([^\s=/]+)\s*=")


def _only_mathml(markup: str) -> bool:
    """Whether ``markup`` holds only allowed MathML elements and attributes (and the
    converter's ``xmlns``, which an HTML page ignores and the allow-list drops)."""
    for match in _TAG.finditer(markup):
        tag = match.group(2).lower()
        if tag not in MATHML_TAGS:
            return False
        allowed = MATHML_ATTRIBUTES[tag] | ({"xmlns"} if tag == "math" else set())
        if any(a.lower() not in allowed for a in _ATTR.findall(match.group(3))):
            return False
    return True


def tex_to_mathml(tex: str, display: bool) -> str | None:
    """One formula as a ``<math>`` element, or ``None`` when it cannot be shown as MathML.

    Args:
        tex: the formula's TeX, without its delimiters (a whole ``\\begin{env}...\\end{env}``
            for an environment).
        display: a displayed formula (``$$``, ``\\[``, an environment) rather than inline.

    Returns:
        ``<math display="block|inline">...</math>`` holding only ``MATHML_TAGS`` and
        ``MATHML_ATTRIBUTES``; ``None`` when the converter fails (any error, deep nesting
        included) or its output holds anything else (module docstring).
    """
    try:
        markup = latex2mathml.converter.convert(tex, display="block" if display else "inline")
    except Exception:  # the converter raises many types, RecursionError among them
        return None
    return markup if _only_mathml(markup) else None


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, its formulas drawn as MathML (module docstring).

    Args:
        *args: nbconvert's ``IPythonRenderer`` arguments.
        **kwargs: its keyword arguments (attachments, ``embed_images``, ...).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tex_left = MAX_TEX_CHARS

    def _math(self, tex: str, display: bool, as_text: str) -> str:
        self.tex_left -= len(tex)
        markup = tex_to_mathml(tex, display) if self.tex_left >= 0 else None
        return markup if markup is not None else as_text

    def block_math(self, body: str) -> str:
        """A displayed formula (``$$...$$``, ``\\[...\\]``).

        Args:
            body: its TeX.

        Returns:
            Its MathML, or nbconvert's text for it.
        """
        return self._math(body, True, super().block_math(body))

    def inline_math(self, body: str) -> str:
        """An inline formula (``$...$``, ``\\(...\\)``).

        Args:
            body: its TeX.

        Returns:
            Its MathML, or nbconvert's text for it.
        """
        return self._math(body, False, super().inline_math(body))

    def latex_environment(self, name: str, body: str) -> str:
        """A ``\\begin{name}...\\end{name}`` environment, displayed.

        Args:
            name: the environment.
            body: its TeX.

        Returns:
            Its MathML, or nbconvert's text for it.
        """
        tex = f"\\begin{{{name}}}{body}\\end{{{name}}}"
        return self._math(tex, True, super().latex_environment(name, body))


def markdown_to_html(exporter: Any, context: Any, source: str) -> str:
    """Markdown as ``exporter``'s ``markdown2html`` renders it, formulas as MathML.

    The same settings as nbconvert's ``HTMLExporter.markdown2html``: the cell's attachments,
    ``embed_images``, the notebook's folder, heading anchors, lexer options.

    Args:
        exporter: the ``HTMLExporter`` the page is made with.
        context: the template's context (the cell, the resources).
        source: the markdown.

    Returns:
        The HTML (not yet through the allow-list).
    """
    cell = context.get("cell", {}) if hasattr(context, "get") else {}
    resources = context.get("resources", {}) if hasattr(context, "get") else {}
    renderer = MathMLRenderer(
        escape=False,
        attachments=cell.get("attachments", {}),
        embed_images=getattr(exporter, "embed_images", False),
        path=resources.get("metadata", {}).get("path", ""),
        anchor_link_text=getattr(exporter, "anchor_link_text", "¶"),
        exclude_anchor_links=getattr(exporter, "exclude_anchor_links", False),
        **getattr(exporter, "lexer_options", {}),
    )
    return MarkdownWithMath(renderer=renderer).render(source)
