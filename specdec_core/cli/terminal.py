"""What the commands share on the way out, to a terminal: progress while opening, what was
opened, and one line of a generation's figures (the engine's Stats, never recomputed)."""

from __future__ import annotations

import sys

KIND_COLOURS = {"accepted": "\x1b[32m", "corrected": "\x1b[33m", "bonus": "\x1b[36m", "standard": "",
                "server": "\x1b[35m"}


def progress_printer():
    """progress(message, fraction|None) -> a tqdm bar on stderr, one per message."""
    from tqdm import tqdm

    state: dict = {"bar": None, "msg": None}

    def progress(message: str, fraction: float | None) -> None:
        if message != state["msg"]:
            if state["bar"] is not None:
                state["bar"].close()
            state["msg"] = message
            state["bar"] = tqdm(total=100 if fraction is not None else None, desc=message, file=sys.stderr,
                                leave=False, bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}"
                                if fraction is not None else "{desc}... {elapsed}")
        bar = state["bar"]
        if fraction is not None:
            bar.n = round(100 * min(max(fraction, 0.0), 1.0))
            bar.refresh()
        if fraction is not None and fraction >= 1.0:
            bar.close()
            state["bar"] = state["msg"] = None

    return progress


def server_progress(message: str, fraction: float | None) -> None:
    """A server's connection steps, one line each."""
    if fraction is None:
        print(message, file=sys.stderr)


def print_loaded(engine) -> None:
    """What was opened, on stderr: one line per model, then its load notes (kernels, fallbacks)."""
    for role, info in (("target", engine.target_info), ("draft", engine.draft_info)):
        if info is not None:
            print(f"{role}: {info.summary()}", file=sys.stderr)
            for note in info.notes:
                print(f"  - {note}", file=sys.stderr)


def stats_line(s) -> str:
    """One line of a generation's Stats for the terminal, every figure labelled."""
    line = (f"[{s.mode}] {s.new_tokens} tokens in {s.seconds:.2f}s ({s.decode_tokens_per_second:.1f} tok/s decode, "
            f"{s.tokens_per_second:.1f} tok/s end-to-end)")
    if s.mode == "speculative":
        # no proposal at all (every step plain): no alpha or tau to show, rather than zeros
        alpha = f"{s.acceptance_rate:.0%}" if s.proposed_tokens else "-"
        tau = f"{s.tokens_per_speculative_step:.2f}" if s.speculative_steps else "-"
        line += (f", acceptance {alpha}, {tau} tokens per speculative step,"
                 f" {s.plain_step_share:.0%} plain steps, {s.target_forward_passes} target passes")
    return line + f", stop: {s.stop_reason}"


def server_line(stats) -> str:
    """One line of what the server reported about an answer (empty for a local model)."""
    from ..remote.generation import ServerStats, figure_notes

    if not isinstance(stats, ServerStats) or not stats.server:
        return ""
    server = stats.server
    bits = [f"server: {server.get('engine', '?')} at {server.get('url', '?')}"]
    bits += figure_notes(server, stats.proposed_tokens, stats.accepted_tokens)
    return ", ".join(bits)
