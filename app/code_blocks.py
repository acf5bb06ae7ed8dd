"""Fenced code blocks in an answer's text, found and syntax-highlighted without Qt.

An answer is split into prose and code blocks (`split`). A code block knows the raw offset of
every character of its code, so the view colours each character by the token that wrote it (the
origin kinds, in the background) exactly, with no guessing, while Pygments colours the
foreground by syntax (`lex`, `code_html`). A block still open (the answer streaming, or one
cut off) runs to the end of the text and is already a code block, language and all.

The fences are CommonMark's: three or more backticks or tildes, indented by at most three
spaces; the block closes at a fence of the same character at least as long, or at the end of
the text. The code's lines lose the opening fence's indentation.

Syntax colours come from a Pygments style per theme, each colour moved in lightness (hue kept)
until it reads at WCAG AA contrast (4.5:1) on every origin-kind background drawn over the code
background (`SyntaxPalette`): the styles alone fall to 2:1 on the corrected kind's orange.
"""

from __future__ import annotations

import colorsys
import html
import re
from dataclasses import dataclass
from functools import lru_cache

from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import Token
from pygments.util import ClassNotFound

# the Pygments style of each theme: Xcode's light look, GitHub's dark one (of the styles that
# colour ten kinds of token or more, the two that need the least moving to read on the kinds)
STYLES = {"light": "xcode", "dark": "github-dark"}
MIN_CONTRAST = 4.5  # WCAG AA for text

_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_LANG = re.compile(r"[\s{.]*([\w#+.-]*)")


@dataclass(frozen=True)
class CodeBlock:
    """A fenced code block of `text`: raw [start, end) covers its fences; `code` is what the
    block shows (and Copy copies), `offsets[i]` the raw index of code[i]."""

    start: int
    end: int
    lang: str
    code: str
    offsets: tuple[int, ...]
    closed: bool


@dataclass(frozen=True)
class Prose:
    """Markdown between code blocks: raw [start, end)."""

    start: int
    end: int


def _lines(text: str):
    """(start, end without the newline, end with it) of each line of `text`."""
    pos, n = 0, len(text)
    while pos < n:
        nl = text.find("\n", pos)
        stop = n if nl < 0 else nl
        yield pos, stop, (n if nl < 0 else nl + 1)
        pos = stop + 1


def _fence_open(line: str):
    """(indent, fence, language) when `line` opens a code block, else None."""
    m = _OPEN.match(line)
    if m is None:
        return None
    indent, fence, info = m.groups()
    if fence[0] == "`" and "`" in info:  # ```x``` on one line is inline code, not a block
        return None
    return len(indent), fence, _LANG.match(info).group(1)


def _closes(line: str, fence: str) -> bool:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3:
        return False
    run = len(stripped) - len(stripped.lstrip(fence[0]))
    return run >= len(fence) and not stripped[run:].strip()


def split(text: str) -> list[Prose | CodeBlock]:
    """`text` as prose and code blocks, in order, covering it all; a prose part between two
    code blocks may be empty. The last block may be open (no closing fence yet)."""
    parts: list[Prose | CodeBlock] = []
    prose_start = 0
    lines = list(_lines(text))
    i = 0
    while i < len(lines):
        start, stop, _ = lines[i]
        opened = _fence_open(text[start:stop])
        if opened is None:
            i += 1
            continue
        indent, fence, lang = opened
        parts.append(Prose(prose_start, start))
        body = []
        j, closed = i + 1, False
        while j < len(lines):
            ls, le, _ = lines[j]
            if _closes(text[ls:le], fence):
                closed = True
                break
            body.append((ls, le))
            j += 1
        end = lines[j][2] if closed else len(text)
        parts.append(_block(text, start, end, lang, body, indent, closed))
        prose_start = end
        i = j + 1
    parts.append(Prose(prose_start, len(text)))
    return parts


def _block(text: str, start: int, end: int, lang: str, body: list[tuple[int, int]], indent: int,
           closed: bool) -> CodeBlock:
    code: list[str] = []
    offsets: list[int] = []
    for k, (ls, le) in enumerate(body):
        if k:  # the newline that ended the line before
            code.append("\n")
            offsets.append(ls - 1)
        lead = 0
        while lead < indent and ls + lead < le and text[ls + lead] == " ":
            lead += 1
        code.append(text[ls + lead : le])
        offsets.extend(range(ls + lead, le))
    return CodeBlock(start, end, lang, "".join(code), tuple(offsets), closed)


def code_blocks(text: str) -> list[CodeBlock]:
    return [p for p in split(text) if isinstance(p, CodeBlock)]


# -- syntax -----------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _lexer(lang: str):
    if not lang:
        return None
    try:
        # the text exactly as given: no stripped or added newlines, so offsets stay the code's
        return get_lexer_by_name(lang.lower(), stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=64)
def lex(code: str, lang: str) -> tuple[tuple[int, int, object], ...]:
    """(start, end, token type) runs covering `code`; one plain run when the language is
    unknown or missing. Cached: a closed block is lexed once, however often its answer redraws."""
    lexer = _lexer(lang)
    if lexer is None or not code:
        return ((0, len(code), Token.Text),) if code else ()
    runs = []
    for index, ttype, value in lexer.get_tokens_unprocessed(code):
        if value:
            runs.append((index, index + len(value), ttype))
    covered = sum(e - s for s, e, _ in runs)
    if covered != len(code):  # a lexer that rewrote the text: show it plain rather than misplaced
        return ((0, len(code), Token.Text),)
    return tuple(runs)


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    return tuple(int(h[i : i + 2], 16) / 255 for i in (0, 2, 4))


def over(colour: str, base: str) -> tuple[float, float, float]:
    """'#rrggbbaa' drawn over the opaque '#rrggbb' `base`."""
    c, b = _rgb(colour[:7]), _rgb(base)
    a = int(colour[7:9], 16) / 255 if len(colour) > 7 else 1.0
    return tuple(a * x + (1 - a) * y for x, y in zip(c, b))


def _luminance(rgb) -> float:
    def lin(v):
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    """WCAG contrast ratio of two rgb triples (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def readable(colour: str, backgrounds: tuple, dark: bool, target: float = MIN_CONTRAST) -> str:
    """`colour` with its lightness moved (towards white on a dark theme, black on a light one)
    until it reaches `target` contrast on every background; the hue stays."""
    h, lightness, s = colorsys.rgb_to_hls(*_rgb(colour))
    for _ in range(101):
        rgb = colorsys.hls_to_rgb(h, lightness, s)
        if min(contrast(rgb, bg) for bg in backgrounds) >= target:
            break
        lightness = min(1.0, lightness + 0.01) if dark else max(0.0, lightness - 0.01)
    return "#%02x%02x%02x" % tuple(round(v * 255) for v in rgb)


@dataclass(frozen=True)
class SyntaxPalette:
    """The foreground of each token type: a Pygments style made readable on `backgrounds`
    (rgb triples: the code background and each origin kind's, both shades, over it)."""

    style: str
    backgrounds: tuple
    dark: bool

    def css(self, ttype) -> str:
        return _css(self, ttype)


@lru_cache(maxsize=1024)
def _css(palette: SyntaxPalette, ttype) -> str:
    d = get_style_by_name(palette.style).style_for_token(ttype)
    parts = []
    if d["color"]:
        parts.append("color:" + readable("#" + d["color"], palette.backgrounds, palette.dark))
    if d["bold"]:
        parts.append("font-weight:bold")
    if d["italic"]:
        parts.append("font-style:italic")
    return ";".join(parts)


def palette_for(dark: bool, code_bg: str, kind_bgs: list[str]) -> SyntaxPalette:
    """The theme's palette: `kind_bgs` ('#rrggbbaa') are drawn over `code_bg` in two shades (the
    view alternates them so neighbouring tokens of one kind stay apart)."""
    bgs = [over(code_bg, code_bg)]
    for bg in kind_bgs:
        alpha = int(bg[7:9], 16) if len(bg) > 7 else 255
        bgs.append(over(bg, code_bg))
        bgs.append(over(bg[:7] + "%02x" % min(255, int(alpha * 1.6)), code_bg))
    return SyntaxPalette(STYLES["dark" if dark else "light"], tuple(bgs), dark)


@lru_cache(maxsize=64)
def code_html(code: str, lang: str, palette: SyntaxPalette) -> str:
    """The code as HTML spans coloured by syntax (foreground only; the view draws the kinds
    behind). Neighbouring runs of one look share a span. Cached per block."""
    out = []
    style, piece = None, []
    for start, end, ttype in lex(code, lang):
        css = palette.css(ttype)
        if css != style and piece:
            out.append(_span(style, "".join(piece)))
            piece = []
        style = css
        piece.append(code[start:end])
    if piece:
        out.append(_span(style, "".join(piece)))
    return "".join(out)


def _span(css: str | None, text: str) -> str:
    text = html.escape(text, quote=False)
    return f"<span style='{css}'>{text}</span>" if css else text


def label(block: CodeBlock) -> str:
    """What the block's header says: its language as the fence names it, or 'code'."""
    return block.lang or "code"
