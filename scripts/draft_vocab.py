"""Token frequencies for a draft's reduced head (FR-Spec, arXiv 2502.14856), from text on this
machine: the draft proposes only among the most frequent tokens, the target still verifies over
the whole vocabulary (exactness untouched; a token outside the set is simply never proposed).

    pip install wordfreq   # word frequencies of everyday language (a tool for this script only)
    python scripts/draft_vocab.py TOKENIZER_JSON OUT.npy [--size 65536] [--counts COUNTS.npy]

Two kinds of text, counted with the model's own tokenizer:
- code and technical prose that any Debian machine with Python holds: the Python standard
  library's sources and the installed packages' (code and docstrings), the man pages (groff
  macros dropped), and Markdown, reST and text documents under /usr/share/doc and site-packages,
  each source capped so code does not drown prose;
- everyday language from `wordfreq` (Speer et al.: Wikipedia, subtitles, news, books, web text,
  Reddit, Twitter), which technical text lacks (" night", " money", " Australia" were missing
  from a table built on the first kind alone): each of a language's 100,000 most frequent words
  counts as if it made its share of a corpus the size of the first, as " word", " Word" and
  "Word"; English weighs most, the other languages the model speaks a share each (--languages).
OUT holds the `size` most frequent ids, most frequent first (uint32; the tokenizer's special and
added tokens first of all), so a head of any size up to it is its first n ids; tokens neither
source shows are ranked by id (a byte-pair vocabulary assigns low ids to its earliest, most
frequent merges).
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
import sysconfig
from pathlib import Path

import numpy as np

CAP_BYTES = {"stdlib": 20e6, "packages": 30e6, "man": 20e6, "docs": 20e6}


def sources() -> dict[str, list[Path]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    found = {
        "stdlib": [p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts],
        "packages": list(site.rglob("*.py")),
        "man": list(Path("/usr/share/man").glob("man[1-8]/*.gz")),
        "docs": [p for pat in ("*.md", "*.rst", "*.txt") for root in (Path("/usr/share/doc"), site)
                 for p in root.rglob(pat)],
    }
    rng = random.Random(0)  # a fixed sample: the same table from the same machine
    for files in found.values():
        files.sort()
        rng.shuffle(files)
    return found


def read(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            text = gzip.open(path, "rt", encoding="utf-8", errors="ignore").read()
            # groff: drop macro and comment lines, keep the prose between them
            return "\n".join(line for line in text.splitlines() if not line.startswith((".", "'", '\\"')))
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def count(tokenizer, found: dict[str, list[Path]], vocab: int) -> tuple[np.ndarray, dict[str, int]]:
    counts = np.zeros(vocab, np.float64)
    used: dict[str, int] = {}
    for name, files in found.items():
        batch, total = [], 0
        for path in files:
            text = read(path)
            if not text:
                continue
            batch.append(text)
            total += len(text)
            if len(batch) >= 128 or total >= CAP_BYTES[name]:
                for enc in tokenizer.encode_batch(batch):
                    np.add.at(counts, np.asarray(enc.ids, dtype=np.int64), 1)
                batch = []
            if total >= CAP_BYTES[name]:
                break
        for enc in tokenizer.encode_batch(batch):
            np.add.at(counts, np.asarray(enc.ids, dtype=np.int64), 1)
        used[name] = total
        print(f"{name}: {total / 1e6:.1f} MB", file=sys.stderr)
    return counts, used


def add_word_frequencies(tokenizer, counts: np.ndarray, languages: dict[str, float], tokens: float) -> None:
    """Count each language's frequent words as a corpus of `tokens` x its weight would hold them."""
    import wordfreq

    for lang, weight in languages.items():
        table = wordfreq.get_frequency_dict(lang)  # word -> share of that language's text
        words = sorted(table, key=table.get, reverse=True)[:100_000]
        freqs = np.array([table[w] for w in words])
        # a word starts a sentence about a tenth of the time, and a line now and then
        forms = ((" {}", 0.85), (" {}", 0.10), ("{}", 0.05))
        for (form, share), capital in zip(forms, (False, True, True)):
            texts = [form.format(w[:1].upper() + w[1:] if capital else w) for w in words]
            for enc, f in zip(tokenizer.encode_batch(texts, add_special_tokens=False), freqs):
                np.add.at(counts, np.asarray(enc.ids, dtype=np.int64), f * share * weight * tokens)
        print(f"wordfreq {lang}: {len(words)} words, weight {weight}", file=sys.stderr)


def ranking(counts: np.ndarray, special: list[int], size: int) -> np.ndarray:
    """The `size` most frequent ids, most frequent first, the special ones leading."""
    order = np.lexsort((np.arange(len(counts)), -counts))  # most frequent first, then by id
    first = set(special)
    rest = [int(i) for i in order if int(i) not in first][: max(size - len(special), 0)]
    return np.array(list(special) + rest, dtype=np.uint32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokenizer", help="a tokenizer.json")
    ap.add_argument("out", help="where to write the sorted ids (.npy)")
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--languages", default="en=1,zh=0.15,es=0.05,fr=0.05,de=0.05,ru=0.03,ja=0.03,pt=0.03,it=0.02,ko=0.02",
                    help="wordfreq languages and their weights against the code corpus ('' for none)")
    ap.add_argument("--counts", help="also save the raw counts here (.npy)")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    counts, _ = count(tok, sources(), vocab)
    counts = counts.astype(np.float64)
    if args.languages:
        langs = {k: float(v) for k, v in (x.split("=") for x in args.languages.split(","))}
        add_word_frequencies(tok, counts, langs, float(counts.sum()))
    special = sorted(tok.get_added_tokens_decoder())  # chat-template markers, end-of-text, ...
    if args.counts:
        np.save(args.counts, counts)
    ids = ranking(counts, special, args.size)
    np.save(args.out, ids)
    print(f"{len(ids)} ids of {vocab}; corpus tokens covered: {counts[ids].sum() / counts.sum():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
