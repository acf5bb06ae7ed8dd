"""The text of one bubble: the view (`TokenText`), the tokens behind its characters, and an
answer rendered into it (`render_answer`) with the origin kinds in the background and, in code
blocks, the syntax in the foreground.

How colours and markdown live together: the answer is split into prose and fenced code blocks
(app/code_blocks.py). Prose is rendered as markdown (python `markdown` -> HTML); its raw text,
whose every character belongs to one token, is then aligned with the rendered characters
(markdown syntax such as `**` is skipped, `align`). A code block is rendered by us: a header line
(its language, and a Copy button over its right end) and the code, coloured by Pygments; each
code character's token is known exactly from the block's offsets, so no alignment is needed
there. Then each run of characters gets its token's background. Hovering a character looks its
token up in the same map and shows kind, the source that proposed its step (lookup or the draft
model), step and draft position. An accepted token that lookup copied from the conversation also
gets a dotted underline in its kind's colour: the background stays the kind, the one primary
signal.

While an answer streams its last code block may be open (no closing fence yet): it is a code
block all the same, highlighted, with its language and a Copy button that copies what has come.
Per update the prose's HTML and each closed block's highlighted HTML come from caches: only the
growing tail is rendered anew.
"""

from __future__ import annotations

import html
from functools import lru_cache

import markdown as md
from PySide6.QtCore import QEvent, QPointF, Qt, QTimer
from PySide6.QtGui import QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QFrame, QSizePolicy, QTextBrowser, QToolButton, QToolTip

from .answer_token import AnswerToken
from .code_blocks import CodeBlock, Prose, code_html, label, palette_for, split
from .theme import KIND_HINTS, KINDS, SOURCE_WORDS, Theme

LOOKAHEAD = 12  # raw characters skipped at most to find a rendered character (markdown syntax)
CONTEXT_LOOKAHEAD = 40  # ... when the next few rendered characters match too (a fence with its language)
# the user state (QTextBlock.userState) that marks a code block's header line and its first code
# line in the document, plus the block's index: how the view finds them again after setHtml
HEAD_STATE = 1 << 24
CODE_STATE = 2 << 24
_SEPARATORS = "\u2029\ufdd0\ufdd1"


ViewToken = AnswerToken  # what the view keeps per assistant token: the store's token itself


@lru_cache(maxsize=256)
def markdown_to_html(text: str) -> str:
    """Cached: the prose before an answer's growing tail renders once, not on every update."""
    return md.markdown(text, extensions=["fenced_code", "tables", "sane_lists", "nl2br"], output_format="html")


def align(raw: str, owners: list[int], doc_chars: list[str]) -> list[int]:
    """For each document character, the index of the token that produced it (-1: none).

    raw[i] was produced by token owners[i]. Rendered characters are found in order in the raw
    text, skipping at most LOOKAHEAD raw characters (markdown syntax); whitespace matches
    whitespace loosely (markdown folds newlines and spaces)."""
    out = [-1] * len(doc_chars)
    i, n = 0, len(raw)
    last = -1
    for j, c in enumerate(doc_chars):
        if i >= n:
            break
        if c.isspace() or c in "\u2029\u2028\ufdd0\ufdd1\ufffc":
            if raw[i].isspace():
                last = owners[i]
                out[j] = last
                i += 1
            elif c == " ":
                out[j] = last
            continue
        hit = _best_hit(raw, i, n, doc_chars, j)
        if hit < 0:
            out[j] = last
            continue
        last = owners[hit]
        out[j] = last
        i = hit + 1
    return out


def _best_hit(raw: str, lo: int, hi: int, doc_chars: list[str], j: int, context: int = 4) -> int:
    """The first place in raw[lo:hi] where doc_chars[j] occurs followed by the same next few
    rendered characters (so a "p" of "python" in a code fence is not taken for the "p" of "print");
    else the first place it occurs at all; -1 when nowhere."""
    want = []
    for c in doc_chars[j : j + context * 3]:
        if c.isspace() or c in "\u2029\u2028\ufdd0\ufdd1\ufffc":
            break
        want.append(c)
        if len(want) == context:
            break
    ctx = raw.find("".join(want), lo, min(hi, lo + CONTEXT_LOOKAHEAD) + len(want) - 1)
    if ctx >= 0:
        return ctx
    return raw.find(want[0], lo, min(hi, lo + LOOKAHEAD))



class TokenText(QTextBrowser):
    """A read-only rich text view that is exactly as tall as its content (the page scrolls), with
    a Copy button over the header line of each code block."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("BubbleText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setOpenExternalLinks(True)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.viewport().setMouseTracking(True)
        self.document().setDocumentMargin(2)
        self.document().setUndoRedoEnabled(False)  # read-only: no undo step per coloured run
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.tokens: list[ViewToken] = []
        self.position_tokens: list[int] = []  # document position -> token index (-1 none)
        self.code_blocks: list[CodeBlock] = []  # the blocks shown, in order
        self.code_heads: list[int] = []  # the document block number of each one's header line
        self.copy_buttons: list[QToolButton] = []
        self._fit()

    def _fit(self, *_):
        h = int(self.document().size().height() + 0.999) + 2 * self.frameWidth() + 2
        if h != self.height():
            self.setFixedHeight(max(h, 22))
        self.place_copy_buttons()

    def resizeEvent(self, e):
        super().resizeEvent(e)
        self._fit()

    def wheelEvent(self, e):  # let the chat page scroll
        e.ignore()

    # -- code blocks ------------------------------------------------------------------------
    def set_code_blocks(self, blocks: list[CodeBlock], heads: list[int]) -> None:
        """The code blocks now in the document and their header lines: one Copy button each
        (kept across renders, so a click while the answer streams is not lost)."""
        self.code_blocks, self.code_heads = list(blocks), list(heads)
        while len(self.copy_buttons) < len(heads):
            b = QToolButton(self.viewport())
            b.setObjectName("CodeCopy")
            b.setText("Copy")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.clicked.connect(lambda _=False, i=len(self.copy_buttons): self.copy_code(i))
            self.copy_buttons.append(b)
        for i, b in enumerate(self.copy_buttons):
            b.setVisible(i < len(heads))
            if i < len(heads):
                b.setToolTip(f"Copy this {label(blocks[i])} block's code to the clipboard")
        self.place_copy_buttons()

    def copy_code(self, i: int) -> None:
        """The block's code as it is now (what has streamed so far), without its fences."""
        if i >= len(self.code_blocks):
            return
        QApplication.clipboard().setText(self.code_blocks[i].code)
        b = self.copy_buttons[i]
        b.setText("Copied")
        self.place_copy_buttons()

        def back():
            b.setText("Copy")
            self.place_copy_buttons()

        QTimer.singleShot(1200, b, back)

    def place_copy_buttons(self) -> None:
        """Each button at the right end of its block's header line."""
        layout = self.document().documentLayout()
        for i, head in enumerate(self.code_heads[: len(self.copy_buttons)]):
            b = self.copy_buttons[i]
            r = layout.blockBoundingRect(self.document().findBlockByNumber(head))
            b.adjustSize()
            b.setFixedHeight(max(1, int(r.height())))  # as tall as the header line: the code stays uncovered
            x = int(r.right()) - b.width() - 2 - self.horizontalScrollBar().value()
            y = int(r.top() + (r.height() - b.height()) / 2) - self.verticalScrollBar().value()
            b.move(max(0, x), max(0, y))

    # -- hover ------------------------------------------------------------------------------
    def token_at(self, pos) -> ViewToken | None:
        p = self.document().documentLayout().hitTest(QPointF(pos), Qt.HitTestAccuracy.ExactHit)
        if 0 <= p < len(self.position_tokens):
            idx = self.position_tokens[p]
            if 0 <= idx < len(self.tokens):
                return self.tokens[idx]
        return None

    def viewportEvent(self, e):
        if e.type() == QEvent.Type.ToolTip:
            tok = self.token_at(e.pos())
            if tok is not None:
                QToolTip.showText(e.globalPos(), token_tooltip(tok), self.viewport())
            else:
                QToolTip.hideText()
                e.ignore()
            return True
        return super().viewportEvent(e)


def source_line(tok: ViewToken) -> str:
    """Which source proposed the token's step, in words ("" for a plain step or an old message)."""
    words = SOURCE_WORDS.get(tok.source or "")
    if not words:
        return ""
    return f"proposed by {words}" if tok.kind == "accepted" else f"in a step proposed by {words}"


def token_tooltip(tok: ViewToken) -> str:
    pos = "—" if tok.draft_position is None else str(tok.draft_position)
    shown = tok.text.replace("\n", "⏎").replace(" ", "·") or "(part of a character)"
    hint = KIND_HINTS.get(tok.kind, "")
    source = source_line(tok)
    return (
        f"<b>{tok.kind}</b>" + (f" · {html.escape(source)}" if source else "") + "<br>"
        + (f"{html.escape(hint, quote=False)}<br>" if hint else "")
        + f"step {tok.step} · draft position {pos}<br>"
        f"token {tok.token_id}: <code>{html.escape(shown)}</code>"
    )



# -- an answer rendered ----------------------------------------------------------------------
def render_answer(view: TokenText, text: str, tokens: list[ViewToken], theme: Theme, colours: bool) -> None:
    """`text` (the tokens' texts joined, after any text no token wrote) into the view's document: prose as markdown, code
    blocks highlighted under a header with their language; each character mapped to its token
    (`view.position_tokens`) and, with `colours`, given its kind's background."""
    doc = view.document()
    parts = split(text)
    blocks = [p for p in parts if isinstance(p, CodeBlock)]
    doc.setHtml(answer_html(text, parts, theme))
    heads, head_pos, code_pos = _find_blocks(doc, len(blocks))
    view.set_code_blocks(blocks, heads)
    view.position_tokens = []
    if not tokens:
        return
    # text before the tokens' (an edited answer's, the user's) belongs to no token: uncoloured
    owners: list[int] = [-1] * (len(text) - sum(len(t.text) for t in tokens))
    for idx, t in enumerate(tokens):
        owners.extend([idx] * len(t.text))
    chars = [doc.characterAt(p) for p in range(doc.characterCount())]
    view.position_tokens = _positions(doc, text, owners, parts, chars, head_pos, code_pos)
    if colours:
        _colour(doc, view.position_tokens, chars, tokens, theme)


def answer_html(text: str, parts: list, theme: Theme) -> str:
    v = theme.values
    palette = palette_for(theme.dark, v["code_bg"], [v[k]["bg"] for k in KINDS])
    out = []
    k = 0
    for p in parts:
        if isinstance(p, Prose):
            out.append(markdown_to_html(text[p.start : p.end]))
        else:
            out.append(_block_html(k, p, palette, v))
            k += 1
    return "".join(out)


def _block_html(k: int, block: CodeBlock, palette, v: dict) -> str:
    # the header line: the language on the left, the Copy button laid over its right end
    head = (f"<p style='-qt-user-state:{HEAD_STATE + k}; background-color:{v['border']}; color:{v['muted']}; "
            f"font-size:12px; text-indent:6px; margin-top:6px; margin-bottom:0px'>"
            f"{html.escape(label(block))}</p>")
    body = code_html(block.code, block.lang, palette) if block.code else " "
    if block.code.startswith("\n"):  # the HTML parser drops a newline right after <pre>
        body = "\n" + body
    return head + f"<pre style='-qt-user-state:{CODE_STATE + k}; margin-top:0px'><code>{body}</code></pre>"


def _find_blocks(doc: QTextDocument, n: int) -> tuple[list[int], list[int], list[int]]:
    """Each code block's header line (block number, position) and first code position, found by
    the user states `_block_html` gave them; -1 where the parser lost one."""
    heads, head_pos, code_pos = [-1] * n, [-1] * n, [-1] * n
    b = doc.begin()
    while b.isValid():
        s = b.userState()
        if HEAD_STATE <= s < HEAD_STATE + n:
            heads[s - HEAD_STATE], head_pos[s - HEAD_STATE] = b.blockNumber(), b.position()
        elif CODE_STATE <= s < CODE_STATE + n:
            code_pos[s - CODE_STATE] = b.position()
        b = b.next()
    return heads, head_pos, code_pos


def _positions(doc: QTextDocument, text: str, owners: list[int], parts: list, chars: list[str],
               head_pos: list[int], code_pos: list[int]) -> list[int]:
    """Document position -> token index: prose aligned (markdown syntax skipped), code exact."""
    out = [-1] * len(chars)
    at = k = 0  # where the next prose part's characters begin; the next code block
    for p in parts:
        if isinstance(p, Prose):
            stop = head_pos[k] if k < len(head_pos) and head_pos[k] >= 0 else len(chars)
            if p.end > p.start and stop > at:
                out[at:stop] = align(text[p.start : p.end], owners[p.start : p.end], chars[at:stop])
            continue
        c = code_pos[k]
        k += 1
        if c < 0:
            continue
        units = _code_owners(p, owners)
        if not _shown(doc, c, p.code, len(units)):  # the parser changed the code: find its characters
            units = align(p.code, [owners[o] for o in p.offsets], chars[c : c + len(units)])
        out[c : c + len(units)] = units[: max(0, len(chars) - c)]
        at = min(len(chars), c + len(units))
    return out


def _code_owners(block: CodeBlock, owners: list[int]) -> list[int]:
    """The token of each document position of the block's code (UTF-16: a character past the
    BMP takes two)."""
    out = [owners[o] for o in block.offsets]
    if len(block.code.encode("utf-16-le")) == 2 * len(block.code):
        return out
    wide: list[int] = []
    for ch, t in zip(block.code, out):
        wide.extend((t, t) if ord(ch) > 0xFFFF else (t,))
    return wide


def _shown(doc: QTextDocument, at: int, code: str, units: int) -> bool:
    cur = QTextCursor(doc)
    cur.setPosition(at)
    cur.setPosition(min(at + units, doc.characterCount() - 1), QTextCursor.MoveMode.KeepAnchor)
    return cur.selectedText() == code.replace("\n", "\u2029")


def _colour(doc: QTextDocument, pos_tokens: list[int], chars: list[str], tokens: list[ViewToken],
            theme: Theme) -> None:
    """Each run of characters of one token gets its kind's background (two shades alternating
    so neighbouring tokens of one kind stay distinguishable); the foreground is left as it is."""
    cur = QTextCursor(doc)
    cur.beginEditBlock()  # one layout pass for all the runs, not one per run
    formats = {(k, odd, copied): _fmt(theme, k, odd, copied) for k in KINDS for odd in (0, 1)
               for copied in (False, True)}
    count = len(chars)
    start = 0
    for p in range(1, count + 1):
        # a line's end is a run of its own: the indentation after it is coloured like any text
        if p == count or pos_tokens[p] != pos_tokens[start] or chars[p] in _SEPARATORS or chars[p - 1] in _SEPARATORS:
            idx = pos_tokens[start]
            if idx >= 0 and chars[start] not in _SEPARATORS:
                cur.setPosition(start)
                cur.setPosition(p, QTextCursor.MoveMode.KeepAnchor)
                tok = tokens[idx]
                cur.mergeCharFormat(formats[(tok.kind, idx % 2, tok.copied)])
            start = p
    cur.endEditBlock()


def _fmt(theme: Theme, kind: str, odd: int = 0, copied: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    c = theme.kind_bg(kind)
    if odd:
        c.setAlpha(min(255, int(c.alpha() * 1.6)))
    f.setBackground(c)
    if copied:  # lookup's: a dotted underline in the kind's own colour, the background unchanged
        f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
        f.setUnderlineColor(theme.kind_fg(kind))
    return f
