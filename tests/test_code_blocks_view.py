"""Code blocks in an answer's bubble, offscreen: the language on each block, its own Copy button
(also while the answer streams), the syntax in the foreground and the origin kinds still in the
background, per character, in both themes."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import re  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF, Qt  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from pygments.token import Keyword  # noqa: E402

from app.chat_view import MessageWidget, ViewToken  # noqa: E402
from app.code_blocks import palette_for  # noqa: E402
from app.theme import KINDS, Theme  # noqa: E402
from specdec_core.events import TokenEvent, TokenKind  # noqa: E402

PY = "def area(r):\n    # a circle's\n    return 3.14 * r * r"
SH = "ls -l | wc -l"
ANSWER = f"Two ways:\n\n```python\n{PY}\n```\n\nand a shell line:\n\n```\n{SH}\n```\nDone."
CYCLE = ("accepted", "corrected", "bonus", "standard")


def pieces_of(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def tokens_of(pieces: list[str]) -> list[ViewToken]:
    return [ViewToken(i, p, CYCLE[i % 4], i, 0, "draft") for i, p in enumerate(pieces)]


def bubble(qtbot, theme: Theme, width: int = 640) -> MessageWidget:
    w = MessageWidget("assistant", theme)
    qtbot.addWidget(w)
    w.resize(width, 400)
    w.show()
    qtbot.waitExposed(w)
    return w


def block_rect(w: MessageWidget, number: int):
    doc = w.view.document()
    return doc.documentLayout().blockBoundingRect(doc.findBlockByNumber(number))


def test_each_block_shows_its_language_and_copies_exactly_its_code(qtbot):
    w = bubble(qtbot, Theme(False))
    w.set_tokens(tokens_of(pieces_of(ANSWER)))
    view = w.view
    doc = view.document()
    assert [doc.findBlockByNumber(n).text() for n in view.code_heads] == ["python", "code"]
    assert "```" not in doc.toPlainText() and PY.replace("\n", "\u2029") in doc.toPlainText().replace("\n", "\u2029")
    shown = [b for b in view.copy_buttons if b.isVisible()]
    assert len(shown) == 2
    for button, head, code in zip(shown, view.code_heads, (PY, SH)):
        head_rect = block_rect(w, head)
        assert head_rect.contains(QPointF(button.geometry().center()))  # on its block's header line
        next_line = block_rect(w, head + 1)  # the first code line stays uncovered
        assert button.geometry().bottom() <= next_line.top() + 1
        QApplication.clipboard().clear()
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert QApplication.clipboard().text() == code
        assert button.text() == "Copied"
        qtbot.waitUntil(lambda b=button: b.text() == "Copy", timeout=3000)
    w.copy()  # the bubble's own Copy still takes the whole message, fences and all
    assert QApplication.clipboard().text() == ANSWER


@pytest.mark.parametrize("dark", [False, True])
def test_syntax_in_the_foreground_and_the_kinds_in_the_background_per_character(qtbot, dark):
    theme = Theme(dark)
    w = bubble(qtbot, theme)
    toks = tokens_of(pieces_of(ANSWER))
    w.set_tokens(toks)
    doc = w.view.document()
    start = doc.findBlockByNumber(w.view.code_heads[0] + 1).position()
    owners = [i for i, t in enumerate(toks) for _ in t.text]
    raw_start = ANSWER.index(PY)
    v = theme.values
    palette = palette_for(dark, v["code_bg"], [v[k]["bg"] for k in KINDS])
    keyword = re.search(r"color:(#[0-9a-f]{6})", palette.css(Keyword)).group(1)
    cur = QTextCursor(doc)
    for i, ch in enumerate(PY):
        if ch == "\n":
            continue
        idx = owners[raw_start + i]
        assert w.view.position_tokens[start + i] == idx
        cur.setPosition(start + i + 1)
        fmt = cur.charFormat()
        bg = theme.kind_bg(toks[idx].kind)
        if idx % 2:
            bg.setAlpha(min(255, int(bg.alpha() * 1.6)))
        assert fmt.background().color().rgba() == bg.rgba(), (i, ch)
        if i < 3:  # "def"
            assert fmt.foreground().color().name() == keyword
    cur.setPosition(start + PY.index("area") + 1)  # a name: the theme's text colour, not the keyword's
    assert cur.charFormat().foreground().color().name() != keyword


def test_a_block_streams_highlighted_with_its_copy_button(qtbot):
    w = bubble(qtbot, Theme(False))
    w.set_streaming(True)
    pieces = pieces_of(ANSWER, 4)
    sent = ""
    button = None
    for i, p in enumerate(pieces):
        w.append_events([TokenEvent(i, p, TokenKind(CYCLE[i % 4]), i, 0, 0.01 * i)])
        sent += p
        code = sent.split("```python\n", 1)[1] if "```python\n" in sent else ""
        if code and "`" not in code:  # the first block open, its code partly come
            code = code.removesuffix("\n")  # a line just ended: nothing on the next one yet
            qtbot.waitUntil(lambda c=code: bool(w.view.code_blocks) and w.view.code_blocks[0].code == c, timeout=3000)
            assert not w.view.code_blocks[0].closed
            assert button is None or w.view.copy_buttons[0] is button  # kept across the updates
            button = w.view.copy_buttons[0]
            assert button.isVisible()
            qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
            assert QApplication.clipboard().text() == code  # what has come, no fence
            assert w.view.document().toPlainText().endswith(" ▍")
    qtbot.waitUntil(lambda: len(w.view.code_blocks) == 2 and w.view.code_blocks[1].closed, timeout=3000)
    assert button is not None and w.view.copy_buttons[0] is button
    w.set_streaming(False)
    assert "▍" not in w.view.document().toPlainText()
    assert [b.code for b in w.view.code_blocks] == [PY, SH]
    qtbot.mouseClick(w.view.copy_buttons[0], Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == PY
    assert w.text == ANSWER and len(w.tokens) == len(pieces)


def test_the_buttons_follow_the_text_and_go_with_the_blocks(qtbot):
    theme = Theme(False)
    w = bubble(qtbot, theme, width=900)
    w.set_tokens(tokens_of(pieces_of(ANSWER)))
    first = w.view.copy_buttons[0].pos()
    w.resize(420, 400)  # narrower: the prose wraps, the header line moves down and its right end in
    qtbot.waitUntil(lambda: w.view.copy_buttons[0].pos() != first, timeout=3000)
    head = block_rect(w, w.view.code_heads[0])
    assert head.contains(QPointF(w.view.copy_buttons[0].geometry().center()))
    theme.set_dark(True)  # a theme switch redraws the code in the dark style
    w.render()
    assert [b.isVisible() for b in w.view.copy_buttons] == [True, True]
    w.set_tokens(tokens_of(pieces_of("No code this time.")))
    assert w.view.code_blocks == [] and not any(b.isVisible() for b in w.view.copy_buttons)
