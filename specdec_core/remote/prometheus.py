"""Speculative-decoding counters from a server's Prometheus `/metrics` page.

vLLM exports, per engine (labels model_name, engine):

    vllm:spec_decode_num_drafts_total                 verification steps that checked a draft
    vllm:spec_decode_num_draft_tokens_total           tokens the drafter proposed
    vllm:spec_decode_num_accepted_tokens_total        of those, accepted
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}   accepted at draft position i

and llama-server (started with --metrics) the same four under the `llamacpp:` prefix. They
count the whole server since it started, so the figures of one answer are the difference of
two readings around its request -- exact when nothing else ran on the server meanwhile, and
said to be server-wide where they are shown. No I/O here: the text is parsed as given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# name{labels} value [timestamp]; label values may hold escaped quotes and commas
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')

COUNTERS = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition -> [(sample name, labels, value)]; comments and lines that
    are not samples are skipped (a page is read for a few names, not validated)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, _, body, value = m.group(1), m.group(2), m.group(3), m.group(4)
        try:
            v = float(value)
        except ValueError:
            continue
        labels = {}
        if body:
            for lm in _LABEL.finditer(body):
                labels[lm.group(1)] = re.sub(r"\\(.)", lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2))
        out.append((name, labels, v))
    return out


@dataclass(frozen=True)
class SpecCounters:
    """One reading of the four counters (summed over engines and models)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    present: bool = False  # the page had the counters at all (speculation configured)

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_position), len(before.accepted_per_position))
        a = list(self.accepted_per_position) + [0.0] * (n - len(self.accepted_per_position))
        b = list(before.accepted_per_position) + [0.0] * (n - len(before.accepted_per_position))
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted, tuple(x - y for x, y in zip(a, b)),
                            self.present and before.present)


def read_spec_counters(text: str, prefix: str) -> SpecCounters:
    """The counters under `prefix` ("vllm:" or "llamacpp:") in a /metrics page."""
    totals = {c: 0.0 for c in COUNTERS}
    per_pos: dict[int, float] = {}
    present = False
    for name, labels, value in parse_exposition(text):
        if not name.startswith(prefix) or name.endswith("_created") or math.isnan(value):
            continue
        base = name[len(prefix):]
        if base.endswith("_total"):
            base = base[: -len("_total")]
        if base == PER_POSITION:
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                continue
            per_pos[pos] = per_pos.get(pos, 0.0) + value
            present = True
        elif base in totals:
            totals[base] += value
            present = True
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(totals["spec_decode_num_drafts"], totals["spec_decode_num_draft_tokens"],
                        totals["spec_decode_num_accepted_tokens"], positions, present)


@dataclass
class SpecFigures:
    """One answer's speculative figures as a server reported them, whatever the source."""

    source: str  # where they came from, said wherever they are shown
    proposed: int = 0  # tokens the drafter proposed (vLLM's num_draft_tokens)
    accepted: int = 0
    steps: int | None = None  # verification steps that checked a draft (None: not reported)
    per_position_proposed: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    server_wide: bool = False  # counters of the whole server: other requests count too


def figures_from_counters(delta: SpecCounters) -> SpecFigures:
    """The difference of two /metrics readings -> figures. vLLM's per-position rate divides
    by the drafts (every step proposes its configured k), so each position's proposed count
    is the number of steps."""
    steps = round(delta.drafts)
    acc = [round(x) for x in delta.accepted_per_position]
    return SpecFigures("Prometheus counters (server-wide)", round(delta.draft_tokens), round(delta.accepted), steps,
                       [steps] * len(acc) if steps else [], acc if steps else [], server_wide=True)


def figures_from_vllm_request(spec: dict) -> SpecFigures:
    """vLLM's per-request `metrics.speculative_decoding` (server flag
    --per-request-spec-decode-metrics summary|detailed) -> figures. With the histogram by
    draft length, the per-position counts are exact: position i was proposed in the steps that
    drafted more than i tokens, and accepted in the steps that kept more than i."""
    steps = int(spec.get("num_spec_steps") or 0)
    proposed: list[int] = []
    accepted: list[int] = []
    by_len = spec.get("acceptance_histogram_by_draft_length") or {}
    per_step = (spec.get("per_step_drafted"), spec.get("per_step_accepted"))
    if per_step[0] and per_step[1]:
        pairs = list(zip(per_step[0], per_step[1]))
    elif by_len:
        pairs = [(int(k), j) for k, hist in by_len.items() for j, count in enumerate(hist) for _ in range(int(count))]
    else:
        pairs = []
    if pairs:
        k = max(d for d, _ in pairs)
        proposed, accepted = [0] * k, [0] * k
        for d, a in pairs:
            for i in range(int(d)):
                proposed[i] += 1
            for i in range(int(a)):
                accepted[i] += 1
    elif spec.get("acceptance_histogram"):
        hist = [int(x) for x in spec["acceptance_histogram"]]
        k = len(hist) - 1
        accepted = [sum(hist[j] for j in range(i + 1, k + 1)) for i in range(k)]
        proposed = [steps] * k  # the configured k each step: vLLM's own convention
    return SpecFigures("vLLM per-request metrics", int(spec.get("num_draft_tokens") or 0),
                       int(spec.get("num_accepted_draft_tokens") or 0), steps, proposed, accepted)
