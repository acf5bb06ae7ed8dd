"""An answer's figures as the app keeps them: the engine's Stats of the whole answer (both parts
of a continued one, joined) and what the app knows beside them -- the settings it was written
with, its decode rate's curve, how often it was continued, an error that cut its stream, what a
server reported, and whether the user rewrote it.

One typed value from the worker's signal to the side panel, the message header and the history:
nothing reads figures through string keys. `to_dict` is the saved form (a message's `stats`
column and a chat file's "stats": Stats.to_dict() with the app's keys beside, the format every
release wrote), `from_dict` reads any of them back under today's names. Three figures had other
names before (specdec_core/renamed_figures.py): the history's migration and the chat file's
reader rename them before they come here. No Qt, no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from specdec_core.events import Stats  # light: no torch
from specdec_core.remote.generation import ServerStats  # light: no torch

# the figures that depend on counting speculative steps apart: absent from rows an early build
# saved (its τ meant another thing), and then not shown
STEP_KEYS = ("speculative_steps", "speculative_step_tokens", "tokens_per_speculative_step", "plain_steps",
             "plain_step_share")


@dataclass
class AnswerFigures:
    stats: Stats = field(default_factory=Stats)
    settings: dict | None = None  # DecodeSettings.to_dict() of the settings it was written with
    series: list[tuple[float, float]] = field(default_factory=list)  # (seconds, decode tok/s), oldest first
    continued: int = 0  # how often Continue wrote on in it
    error: str = ""  # why its stream broke off (stop reason "error")
    server: dict | None = None  # a server target's own figures (ServerStats.server)
    # the user rewrote it: until the model writes on in it (`continued`), no figures describe the
    # text; after that the figures are the model's part's
    edited: bool = False
    steps_counted: bool = True  # False: saved before speculative steps were counted apart

    @classmethod
    def of(cls, stats: Stats, settings: dict | None = None, series=(), error: str = "") -> AnswerFigures:
        """The figures of a generation: its Stats (a server's own figures taken from them)."""
        server = dict(stats.server) if isinstance(stats, ServerStats) and stats.server else None
        return cls(stats, settings, [tuple(p) for p in series], error=error, server=server)

    @property
    def edited_only(self) -> bool:
        """The user's text alone: an edited answer the model has not written on."""
        return self.edited and not self.continued and not self.stats.stop_reason

    @property
    def draft_setting(self) -> int | str | None:
        """The draft length it was asked for: a number or "adaptive" (None: not recorded)."""
        return (self.settings or {}).get("draft_tokens")

    def marked_cut(self) -> AnswerFigures:
        """The figures of an answer the app ended while it streamed (stop reason "cut")."""
        return dataclasses.replace(self, stats=dataclasses.replace(self.stats, stop_reason="cut"))

    def to_dict(self) -> dict:
        """The saved form (see the module's note)."""
        if self.edited_only:
            return {"edited": True}
        out = self.stats.to_dict()
        out.pop("server", None)  # kept beside, as every release saved it
        if not self.steps_counted:
            for key in STEP_KEYS:
                out.pop(key, None)
        if self.settings is not None:
            out["settings"] = dict(self.settings)
        out["series"] = [[t, v] for t, v in self.series]
        if self.continued:
            out["continued"] = self.continued
        if self.error:
            out["error"] = self.error
        if self.server is not None:
            out["server"] = dict(self.server)
        if self.edited:
            out["edited"] = True
        return out

    @classmethod
    def from_dict(cls, d: dict) -> AnswerFigures | None:
        """A saved form back (None for none: a question, an answer saved without figures). The
        rates and shares follow from the counts (Stats' properties); keys it does not know are
        left out."""
        if not d:
            return None
        if d.get("edited") and "stop_reason" not in d:  # the user's text, not written on
            return cls(edited=True)
        settings = d.get("settings")
        return cls(Stats.from_dict(d), dict(settings) if isinstance(settings, dict) else None,
                   [(float(t), float(v)) for t, v in d.get("series") or []], int(d.get("continued") or 0),
                   str(d.get("error") or ""), d.get("server") if isinstance(d.get("server"), dict) else None,
                   edited=bool(d.get("edited")), steps_counted=any(key in d for key in STEP_KEYS))
