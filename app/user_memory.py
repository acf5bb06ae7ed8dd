"""What the app remembers of its user between runs: the models (or the server) loaded last, loaded
again at start, the side panel's decoding and sampling settings the user set, and the Race tab's
(its preset, prompt, proposer, k, token budget, temperature and seed). The ones never touched
follow the app's defaults, whatever a later release makes them.

Both live where the theme does, in the chats' own prefs table (app/history.py, under the data
folder: the user's, or --data-dir's, or a test's temporary one), written through the Saver like
every other write. A server's API key is never written: it comes from the command line or
$SPECDEC_API_KEY each run.

At start the remembered models load unless the command line named others. A remembered path that
is gone, or models that fail to load (a server that does not answer, a hub model not in the
cache offline), give a notice and the default pair instead; the remembered choice stays, so the
models come back once they are there again, until the user loads others.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from specdec_core.settings import MODES, PROPOSERS

from .model_loading import ModelLoading
from .persistence import ChatStore
from .side_panel import SidePanel
from .worker import LoadRequest

if TYPE_CHECKING:
    from .race_view import RaceView

MODELS_PREF = "last_models"
SETTINGS_PREF = "decode_settings"
RACE_PREF = "race_settings"
SAVE_DELAY_MS = 400  # a run of changes (an arrow key held on a number) is one write
REQUEST_FIELDS = ("target", "draft", "device", "dtype", "quantization")


# -- the models ---------------------------------------------------------------------------
def request_dict(request: LoadRequest) -> dict | None:
    """What is remembered of a load (None for a test's factory: nothing to load again)."""
    if request.factory is not None:
        return None
    return {name: getattr(request, name) for name in REQUEST_FIELDS}


def request_from(data, api_key: str | None = None) -> LoadRequest | None:
    """A remembered load as a request, or None when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("target"), str) or not data["target"].strip():
        return None
    if any(data.get(name) is not None and not isinstance(data.get(name), str) for name in REQUEST_FIELDS):
        return None
    return LoadRequest(data["target"], data.get("draft"), data.get("device") or "auto", data.get("dtype") or "auto",
                       data.get("quantization"), api_key=api_key)


def missing(request: LoadRequest) -> str | None:
    """Why a remembered local model cannot load now (its file or folder is gone), else None.
    A server and a hub model can only be tried."""
    from specdec_core.models.errors import ModelError  # light: no torch
    from specdec_core.models.spec import parse_spec
    from specdec_core.remote.engine import is_server_spec

    for spec in (request.target, request.draft):
        if spec is None or is_server_spec(spec):
            continue
        try:
            parse_spec(spec)
        except ModelError as exc:
            return str(exc)
    return None


def describe(request: LoadRequest) -> str:
    if request.draft is None or request.target.lower().startswith("http"):
        return request.target
    return f"{request.target} with the draft {request.draft}"


# -- the settings -------------------------------------------------------------------------
def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


@dataclass(frozen=True)
class Setting:
    """One remembered setting: how its widget (the side panel, the race view) shows it, takes it,
    and says the user changed it."""

    name: str
    read: Callable[[QWidget], object]
    write: Callable[[QWidget, object], None]
    valid: Callable[[object], bool]
    changed: Callable[[QWidget], object]  # the signal of a change


def _set_proposer(panel: SidePanel, name) -> None:
    panel.proposer.setCurrentIndex(panel.proposer.findData(name))


# restored in this order: the mode last, since it greys out what it does not use
SETTINGS = (
    # `activated` is the user's choice only: a proposer stepped off for want of a draft stays remembered
    Setting("proposer", lambda p: p.proposer.currentData(), _set_proposer, lambda v: v in PROPOSERS,
            lambda p: p.proposer.activated),
    Setting("draft_length", lambda p: p.k_spin.value(), lambda p, v: p.k_spin.setValue(v), _whole,
            lambda p: p.k_spin.valueChanged),
    Setting("adaptive", lambda p: p.adaptive.isChecked(), lambda p, v: p.adaptive.setChecked(v),
            lambda v: isinstance(v, bool), lambda p: p.adaptive.toggled),
    Setting("temperature", lambda p: p.temperature.value(), lambda p, v: p.temperature.setValue(v), _number,
            lambda p: p.temperature.valueChanged),
    Setting("top_k", lambda p: p.top_k.value(), lambda p, v: p.top_k.setValue(v), _whole,
            lambda p: p.top_k.valueChanged),
    Setting("top_p", lambda p: p.top_p.value(), lambda p, v: p.top_p.setValue(v), _number,
            lambda p: p.top_p.valueChanged),
    Setting("seed", lambda p: p.seed.value(), lambda p, v: p.seed.setValue(v), _whole,
            lambda p: p.seed.valueChanged),
    Setting("max_new_tokens", lambda p: p.max_new.value(), lambda p, v: p.max_new.setValue(v), _whole,
            lambda p: p.max_new.valueChanged),
    Setting("mode", lambda p: p.mode, lambda p, v: p.set_mode(v), lambda v: v in MODES,
            lambda p: p.mode_button.toggled),
)


def _pick(box, data) -> None:
    """Select the entry of a menu whose data is `data` (nothing changes when it is not listed)."""
    i = box.findData(data)
    if i >= 0:
        box.setCurrentIndex(i)


def _pick_preset(view: RaceView, name) -> None:
    i = view.preset_box.findText(name)
    if i > 0:  # a preset still in the list (0 is the "Preset prompts…" heading); it fills the prompt
        view.preset_box.setCurrentIndex(i)


# the race's own settings, restored in this order: the preset first (it fills the prompt and the
# token budget), then what the user set after it
RACE_SETTINGS = (
    Setting("preset", lambda v: v.preset_box.currentText(), _pick_preset, lambda v: isinstance(v, str),
            lambda v: v.preset_box.activated),
    Setting("prompt", lambda v: v.prompt.toPlainText(), lambda v, t: v.prompt.setPlainText(t),
            lambda v: isinstance(v, str), lambda v: v.prompt.textChanged),
    Setting("proposer", lambda v: v.proposer_box.currentData(), lambda v, name: _pick(v.proposer_box, name),
            lambda v: v in PROPOSERS, lambda v: v.proposer_box.activated),
    Setting("draft_length", lambda v: v.k_box.currentData(), lambda v, k: _pick(v.k_box, k),
            lambda v: v == "adaptive" or _whole(v), lambda v: v.k_box.activated),
    Setting("max_new_tokens", lambda v: v.max_tokens.value(), lambda v, n: v.max_tokens.setValue(n), _whole,
            lambda v: v.max_tokens.valueChanged),
    Setting("temperature", lambda v: v.temperature.value(), lambda v, t: v.temperature.setValue(t), _number,
            lambda v: v.temperature.valueChanged),
    Setting("seed", lambda v: v.seed.value(), lambda v, n: v.seed.setValue(n), _whole,
            lambda v: v.seed.valueChanged),
)


def read_settings(text: str | None, settings: tuple[Setting, ...] = SETTINGS) -> dict:
    """The remembered settings that are still valid (a bad or foreign value is left out)."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {s.name: data[s.name] for s in settings if s.name in data and s.valid(data[s.name])}


class Remembered(QObject):
    """One widget's settings kept under one pref: restored at start, and each change the user
    makes written after SAVE_DELAY_MS. Only what the user set is kept: a setting never touched
    follows the app's default, also when a later release changes it."""

    def __init__(self, store: ChatStore, pref: str, widget: QWidget, settings: tuple[Setting, ...],
                 parent: QObject):
        super().__init__(parent)
        self.store, self.pref, self.widget, self.settings = store, pref, widget, settings
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SAVE_DELAY_MS)
        self._timer.timeout.connect(self._save)
        saved = read_settings(store.history.pref(pref), settings)
        for s in settings:
            if s.name in saved:
                s.write(widget, saved[s.name])
        self.values = dict(saved)
        for s in settings:
            s.changed(widget).connect(lambda *_a, s=s: self._changed(s))

    def _changed(self, setting: Setting) -> None:
        self.values[setting.name] = setting.read(self.widget)
        self._timer.start()

    def _save(self) -> None:
        self.store.save_pref(self.pref, lambda: json.dumps(self.values))

    def flush(self) -> None:
        """Write a change still waiting for its delay (the window is closing)."""
        if self._timer.isActive():
            self._timer.stop()
            self._save()


class UserMemory(QObject):
    def __init__(self, store: ChatStore, models: ModelLoading, side_panel: SidePanel, race_view: RaceView | None,
                 status_label: QLabel, window: QWidget):
        super().__init__(window)
        self.store, self.models, self.side_panel, self.status_label, self.window = (
            store, models, side_panel, status_label, window)
        self.remembered: LoadRequest | None = None  # the load asked for at start from memory
        self.fallback = LoadRequest()  # what loads when it cannot: the default pair
        self.instead: LoadRequest | None = None  # the fallback, once it is loading in its place
        self.notice: QMessageBox | None = None
        self.settings = [Remembered(store, SETTINGS_PREF, side_panel, SETTINGS, self)]
        if race_view is not None:
            self.settings.append(Remembered(store, RACE_PREF, race_view, RACE_SETTINGS, self))
        models.loaded.connect(self._remember_models)

    def flush(self) -> None:
        """Write the changes still waiting for their delay (the window is closing)."""
        for kept in self.settings:
            kept.flush()

    # -- models -------------------------------------------------------------------------
    def restore_models(self, overrides: dict | None = None) -> None:
        """At start: the models loaded last become the load the window starts with (the command
        line's `overrides` -- device, dtype, quantization, api_key -- over them)."""
        try:
            data = json.loads(self.store.history.pref(MODELS_PREF) or "null")
        except ValueError:
            data = None
        request = request_from(data)
        if request is None:
            return
        request = LoadRequest(**{**{n: getattr(request, n) for n in REQUEST_FIELDS}, **(overrides or {})})
        if request == self.fallback:
            return  # the default pair: nothing else to fall back on
        self.remembered = request
        why = missing(request)
        if why is not None:
            self.models.load_request = self.instead = self.fallback
            QTimer.singleShot(0, lambda: self._notify(request, why))
            return
        self.models.load_request = request
        self.models.instead = self._load_failed

    def _load_failed(self, message: str) -> bool:
        """The remembered models did not load: say so and load the default pair (True: handled)."""
        self.models.instead = None
        if self.remembered is None or self.models.load_request is not self.remembered:
            return False
        self.instead = self.fallback
        self._notify(self.remembered, message)
        self.models.start_loading(self.instead)
        return True

    def _notify(self, request: LoadRequest, why: str) -> None:
        self.status_label.setText("The models used last are not there: loading the default pair")
        box = QMessageBox(QMessageBox.Icon.Warning, "The models used last could not be loaded",
                          f"The models used last could not be loaded: {why}", QMessageBox.StandardButton.Ok,
                          self.window)
        box.setInformativeText(f"The default pair loads instead. The models used last ({describe(request)}) load "
                               "again at the next start once they are there; File ▸ Load models… chooses others.")
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.notice = box

    def _remember_models(self) -> None:
        self.models.instead = None  # a later load that fails is the user's to see
        request = self.models.load_request
        data = request_dict(request)
        if data is None or request is self.instead:  # a test's models; the stand-in for models not there
            return
        self.store.save_pref(MODELS_PREF, lambda: json.dumps(data))
