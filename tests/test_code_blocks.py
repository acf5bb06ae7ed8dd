"""Code blocks found in an answer and highlighted, without Qt (app/code_blocks.py): hand-built
answers, and exact equalities against the raw text the tokens wrote."""

import html
import json
import re

import pytest
from pygments.token import Keyword, Name, String, Token

from app.code_blocks import (
    CodeBlock,
    Prose,
    code_blocks,
    code_html,
    contrast,
    label,
    lex,
    palette_for,
    readable,
    split,
)
from specdec_core import assets

KINDS = ("accepted", "corrected", "bonus", "standard", "server")


def owners_of(pieces: list[str]) -> list[int]:
    """Token index of each raw character, tokens being `pieces` in order."""
    return [i for i, p in enumerate(pieces) for _ in p]


def plain(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_a_python_block_between_prose():
    text = "Intro:\n```python\ndef f():\n    return 'x'\n```\nAfter."
    parts = split(text)
    assert [type(p) for p in parts] == [Prose, CodeBlock, Prose]
    intro, block, after = parts
    assert text[intro.start : intro.end] == "Intro:\n" and text[after.start : after.end] == "After."
    assert (block.lang, block.code, block.closed) == ("python", "def f():\n    return 'x'", True)
    assert text[block.start : block.end] == "```python\ndef f():\n    return 'x'\n```\n"
    assert "".join(text[o] for o in block.offsets) == block.code  # each code character's raw place

    def kind_at(i):
        return next(t for s, e, t in lex(block.code, block.lang) if s <= i < e)

    code = block.code
    assert kind_at(0) in Keyword and kind_at(code.index("f(")) in Name.Function
    assert kind_at(code.index("'x'")) in String and kind_at(code.index("'x'") + 1) in String
    assert label(block) == "python"


def test_an_unclosed_block_while_streaming_is_code_already():
    assert code_blocks("Here:\n```js\nconst a = 1;\nconst b") == [
        CodeBlock(6, 32, "js", "const a = 1;\nconst b", tuple(range(12, 32)), False)
    ]
    just_opened = code_blocks("Here:\n```")[0]  # the fence's token came, not yet its language
    assert (just_opened.lang, just_opened.code, just_opened.closed) == ("", "", False)
    assert code_blocks("```pyth")[0].lang == "pyth"  # the language streams in; no lexer yet: plain
    assert lex("x = 1", "pyth") == ((0, 5, Token.Text),)
    line_ended = code_blocks("```py\nx = 1\n")[0]  # a new line begun, nothing on it yet
    assert line_ended.code == "x = 1" and not line_ended.closed


def test_a_block_without_language_is_plain_code_labelled_code():
    block = code_blocks("```\nx = 1  # not python\n```")[0]
    assert block.lang == "" and label(block) == "code" and block.closed
    assert lex(block.code, block.lang) == ((0, len(block.code), Token.Text),)
    palette = palette_for(False, "#f3f4f6", ["#2fb86a48"])
    assert code_html(block.code, block.lang, palette) == "x = 1  # not python"


def test_a_token_whose_text_spans_the_fence_keeps_its_characters():
    pieces = ["Intro:\n``", "`py\nx", " = 1\n``", "`\nok", "\n```\n", "tail"]
    text = "".join(pieces)
    owners = owners_of(pieces)
    block, second = code_blocks(text)
    assert block.code == "x = 1" and block.closed
    assert [owners[o] for o in block.offsets] == [1, 2, 2, 2, 2]  # "x" from "`py\nx", the rest from " = 1\n``"
    assert second.code == "tail" and not second.closed  # "```" on its own line opens another block
    assert [owners[o] for o in second.offsets] == [5, 5, 5, 5]


def test_kinds_are_preserved_per_character_of_the_code():
    """Every code character's token, found through the block's offsets, is the token that wrote it
    (the reference: walking the tokens' texts)."""
    answer = ("Sure:\n\n```python\nimport os\n\n\ndef walk(root):\n    for d, _, files in os.walk(root):\n"
              "        yield from (os.path.join(d, f) for f in files)\n```\n\nAnd in C:\n~~~c\nint main(void) {\n"
              "\treturn 0;\n}\n~~~\n")
    cuts = [0] + [i for i in range(3, len(answer), 3)] + [len(answer)]
    pieces = [answer[a:b] for a, b in zip(cuts, cuts[1:])]
    kinds = [KINDS[i % 4] for i in range(len(pieces))]
    reference = [kinds[i] for i, p in enumerate(pieces) for _ in p]
    owners = owners_of(pieces)
    blocks = code_blocks(answer)
    assert [b.lang for b in blocks] == ["python", "c"]
    for b in blocks:
        assert "".join(answer[o] for o in b.offsets) == b.code
        assert [kinds[owners[o]] for o in b.offsets] == [reference[o] for o in b.offsets]
        runs = lex(b.code, b.lang)  # the syntax runs cover the code exactly, in order
        assert runs[0][0] == 0 and runs[-1][1] == len(b.code)
        assert all(r[1] == n[0] for r, n in zip(runs, runs[1:]))
        assert plain(code_html(b.code, b.lang, palette_for(True, "#11141c", ["#22c55e40"]))) == b.code


def test_fences_follow_commonmark():
    assert code_blocks("use ```x``` inline\n") == []  # backticks in the info string: inline code
    indented = code_blocks("1. step:\n   ```py\n   x = 1\n     y\n   ```\n2. next")[0]
    assert indented.code == "x = 1\n  y" and indented.closed  # the fence's indentation comes off
    assert code_blocks("    ```\nnot a fence")[0:] == []  # four spaces: an indented code line, not a fence
    longer = code_blocks("````md\n```\ninner\n```\n````\nafter")[0]
    assert longer.code == "```\ninner\n```" and longer.closed
    tilde = code_blocks("~~~ {.rust}\nfn main() {}\n~~~")[0]
    assert (tilde.lang, tilde.code, tilde.closed) == ("rust", "fn main() {}", True)
    assert code_blocks("```bash\n```")[0].code == ""  # an empty block


def test_the_code_survives_html_escaping_in_every_language():
    palette = palette_for(False, "#f3f4f6", ["#f9731655"])
    for lang, code in [("html", "<a href='x'>&amp;</a>"), ("cpp", "if (a < b && c > d) {}"),
                       ("sql", "SELECT 'a&b' FROM t;"), ("json", '{"k": [1, "<v>"]}'), ("rust", "let s = \"\\n\";"),
                       ("bash", "echo $HOME > /tmp/x &"), ("javascript", "const f = (a) => a < 2;")]:
        out = code_html(code, lang, palette)
        assert plain(out) == code, lang
        assert "<span style='color:" in out, lang  # the language is known: something is coloured


@pytest.mark.parametrize("name", ["light", "dark"])
def test_syntax_colours_read_on_every_kind_background(name):
    """Each foreground the theme's style gives, moved to WCAG AA contrast on the code background
    and on each kind's two shades over it."""
    v = json.loads(assets.read_text("palette.json"))[name]
    palette = palette_for(name == "dark", v["code_bg"], [v[k]["bg"] for k in KINDS])
    assert len(palette.backgrounds) == 1 + 2 * len(KINDS)
    from pygments.styles import get_style_by_name

    seen = set()
    for ttype, _ in get_style_by_name(palette.style):
        css = palette.css(ttype)
        m = re.search(r"color:(#[0-9a-f]{6})", css)
        if m:
            seen.add(m.group(1))
            rgb = tuple(int(m.group(1)[i : i + 2], 16) / 255 for i in (1, 3, 5))
            assert min(contrast(rgb, bg) for bg in palette.backgrounds) >= 4.45, (ttype, css)
    assert len(seen) >= 5  # still a highlighter, not one colour


def test_readable_keeps_a_readable_colour_and_the_hue_of_one_it_moves():
    white, black = ((1.0, 1.0, 1.0),), ((0.0, 0.0, 0.0),)
    assert readable("#0000ff", white, dark=False) == "#0000ff"  # already 8.6:1
    moved = readable("#00ff00", white, dark=False)  # 1.4:1 on white
    r, g, b = (int(moved[i : i + 2], 16) for i in (1, 3, 5))
    assert r == 0 and b == 0 and 0 < g < 255
    assert contrast((r / 255, g / 255, b / 255), white[0]) >= 4.5
    assert contrast(tuple(int(readable("#000080", black, dark=True)[i : i + 2], 16) / 255 for i in (1, 3, 5)),
                    black[0]) >= 4.5


def test_a_closed_block_is_highlighted_once():
    palette = palette_for(False, "#f3f4f6", ["#2fb86a48"])
    code = "def cached():\n    return 42\n" * 3
    first = code_html(code, "python", palette)
    hits = code_html.cache_info().hits
    assert code_html(code, "python", palette) is first and code_html.cache_info().hits == hits + 1
