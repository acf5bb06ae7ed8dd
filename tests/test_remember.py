"""The app remembers its user (issue 30, item 4), in real windows on the test's own data folder:
decoding and sampling settings kept across a restart, the models loaded last loaded again at
start (and the default pair, with a notice, when they are gone), saved system prompts, and a
chat exported as JSON and imported back identical -- a bad file refused with a dialog that
loses nothing. Offscreen."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QFileDialog, QMessageBox  # noqa: E402

from app import chat_json, user_memory  # noqa: E402
from app.chat_json import ChatFile  # noqa: E402
from app.history import Attachment, History  # noqa: E402
from app.main import build_parser, remembered_overrides  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.theme import Theme  # noqa: E402
from app.worker import LoadRequest  # noqa: E402
from app_fixtures import relay, tiny_factory  # noqa: E402
from test_chat_json import file_shape  # noqa: E402

TIMEOUT = 60_000


@pytest.fixture
def open_window(qtbot):
    """open(data_dir, request=None, restore=None) -> a MainWindow, not loading yet; shut down after."""
    made = []

    def make(data_dir, request=None, restore=None):
        win = MainWindow(data_dir, Theme(False), request or LoadRequest(factory=tiny_factory()), restore_models=restore)
        qtbot.addWidget(win)
        win.sig = relay(win.worker)
        made.append(win)
        return win

    yield make
    for win in made:
        assert win.shutdown()


def load(qtbot, win):
    with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
        win.models.start_loading()


def send_and_wait(qtbot, win, text):
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send(text)


def restart(win, open_window, data, **kw):
    assert win.shutdown()
    win.close()
    return open_window(data, **kw)


# -- settings ---------------------------------------------------------------------------------
def default_settings_shown(panel):
    from app.worker import default_settings

    return default_settings().replace(max_new_tokens=panel.max_new.value() or None)  # 0 is "off"


def test_decoding_and_sampling_settings_are_kept_across_a_restart(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    win = open_window(data)
    p = win.side_panel
    assert p.settings() == default_settings_shown(p)  # a first start: the defaults
    win.show()
    p.proposer.setFocus()
    QTest.keyClick(p.proposer, Qt.Key.Key_Down)  # the user's choice: "Draft model"
    assert p.proposer.currentData() == "draft"
    p.adaptive.setChecked(False)
    p.k_spin.setValue(7)
    p.temperature.setValue(0.8)
    p.top_k.setValue(40)
    p.top_p.setValue(0.9)
    p.seed.setValue(1234)
    p.max_new.setValue(99)
    p.mode_button.click()  # standard decoding
    before = p.settings()
    assert before.mode == "standard" and before.draft_tokens == 7 and before.proposer == "draft"

    again = restart(win, open_window, data)
    q = again.side_panel
    assert q.settings() == before
    assert (q.mode_button.isChecked(), q.adaptive.isChecked(), q.k_spin.isEnabled()) == (False, False, False)
    # speculative again: the fixed k comes back usable
    q.mode_button.click()
    assert q.k_spin.isEnabled() and q.settings().draft_tokens == 7


def test_a_proposer_stepped_off_for_want_of_a_draft_stays_remembered(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    win = open_window(data, LoadRequest(factory=tiny_factory(with_draft=False)))
    p = win.side_panel
    p.proposer.setCurrentIndex(p.proposer.findData("draft"))
    p.proposer.activated.emit(p.proposer.currentIndex())  # as a choice in the menu does
    load(qtbot, win)
    assert p.proposer.currentData() == "prompt-lookup"  # no draft loaded: stepped off
    p.seed.setValue(5)  # another setting changes later: the proposer is not taken from the menu
    win.memory.flush()
    # what the user set, and nothing else: the rest follows the app's defaults
    assert json.loads(win.store.history.pref(user_memory.SETTINGS_PREF)) == {"proposer": "draft", "seed": 5}
    again = restart(win, open_window, data)
    assert again.side_panel.proposer.currentData() == "draft" and again.side_panel.seed.value() == 5


def test_settings_the_app_cannot_use_are_left_at_their_defaults(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    h = History(data)
    h.set_pref(user_memory.SETTINGS_PREF, json.dumps({"mode": "turbo", "temperature": "hot", "top_k": 3.5,
                                                       "seed": 77, "adaptive": 1, "proposer": None}))
    h.close()
    p = open_window(data).side_panel
    assert (p.mode, p.temperature.value(), p.top_k.value(), p.seed.value(), p.adaptive.isChecked()) == (
        "speculative", 0.0, 0, 77, True)
    h = History(data)
    h.set_pref(user_memory.SETTINGS_PREF, "{not json")
    h.close()
    assert open_window(data).side_panel.seed.value() == 0


def test_the_race_settings_are_kept_across_a_restart(qtbot, open_window, tmp_path):
    """The Race tab's preset, prompt, proposer, k, token budget, temperature and seed come back
    after a restart, chosen the way a user chooses them (a menu's `activated`)."""
    data = tmp_path / "data"
    win = open_window(data)
    v = win.race_view
    first = (v.preset_box.currentText(), v.prompt.toPlainText(), v.proposer_box.currentData(),
             v.k_box.currentData(), v.max_tokens.value(), v.temperature.value(), v.seed.value())
    assert first[0] == "Code — Python function" and first[3] == "adaptive"  # a first start: the defaults
    i = v.preset_box.findText("Summarization — pasted passage")
    v.preset_box.setCurrentIndex(i)
    v.preset_box.activated.emit(i)  # as a choice in the menu does
    v.prompt.appendPlainText("\nIn one sentence.")  # the user edits the preset's prompt
    v.proposer_box.setCurrentIndex(v.proposer_box.findData("prompt-lookup"))
    v.proposer_box.activated.emit(v.proposer_box.currentIndex())
    v.k_box.setCurrentIndex(v.k_box.findData(3))
    v.k_box.activated.emit(v.k_box.currentIndex())
    v.max_tokens.setValue(77)
    v.temperature.setValue(0.7)
    v.seed.setValue(42)
    before = (v.preset_box.currentText(), v.prompt.toPlainText(), v.settings())
    assert before[1].endswith("In one sentence.") and before[2].draft_tokens == 3 and before[2].max_new_tokens == 77
    assert before != (first[0], first[1], v.settings())

    again = restart(win, open_window, data)
    w = again.race_view
    assert (w.preset_box.currentText(), w.prompt.toPlainText(), w.settings()) == before
    assert w.proposer_box.currentData() == "prompt-lookup" and w.k_box.currentData() == 3
    # the chat's own settings stay their own: nothing of the race's went into them
    assert json.loads(again.store.history.pref(user_memory.SETTINGS_PREF) or "{}") == {}


def test_race_settings_the_app_cannot_use_are_left_at_their_defaults(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    h = History(data)
    h.set_pref(user_memory.RACE_PREF, json.dumps({"preset": "a preset from another release", "draft_length": 99,
                                                  "proposer": "psychic", "seed": "x", "max_new_tokens": 64}))
    h.close()
    v = open_window(data).race_view
    assert (v.preset_box.currentText(), v.k_box.currentData(), v.proposer_box.currentData(), v.seed.value(),
            v.max_tokens.value()) == ("Code — Python function", "adaptive", "lookup+draft", 0, 64)


# -- the models loaded last -------------------------------------------------------------------
def test_the_models_loaded_last_load_at_start(qtbot, open_window, tmp_path):
    from tiny_models import save_folder

    target, draft = save_folder(tmp_path, "target"), save_folder(tmp_path, "draft")
    data = tmp_path / "data"
    win = open_window(data, LoadRequest(str(target), str(draft), device="cpu", api_key="secret"))
    load(qtbot, win)
    stored = json.loads(win.store.history.pref(user_memory.MODELS_PREF))
    assert stored == {"target": str(target), "draft": str(draft), "device": "cpu", "dtype": "auto",
                      "quantization": None}  # never the key

    # no --target, no --draft: the window starts on them, the command line's dtype over them
    args = build_parser().parse_args(["--dtype", "float32"])
    again = restart(win, open_window, data, request=LoadRequest(), restore=remembered_overrides(args))
    req = again.models.load_request
    assert (req.target, req.draft, req.device, req.dtype) == (str(target), str(draft), "cpu", "float32")
    load(qtbot, again)
    assert "target" in again.side_panel.target_label.text() and again.memory.notice is None
    # named on the command line: those load, and nothing is restored
    assert remembered_overrides(build_parser().parse_args(["--target", "x"])) is None


def test_a_remembered_model_that_is_gone_gives_a_notice_and_the_default_pair(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    gone = tmp_path / "models" / "deleted.gguf"
    h = History(data)
    h.set_pref(user_memory.MODELS_PREF, json.dumps({"target": str(gone), "draft": None, "device": "cpu"}))
    h.close()
    win = open_window(data, request=LoadRequest(), restore={})
    assert win.models.load_request == LoadRequest()  # the default pair, not the missing file
    qtbot.waitUntil(lambda: win.memory.notice is not None and win.memory.notice.isVisible(), timeout=5000)
    assert f"model path not found: {gone}" in win.memory.notice.text()
    assert "default pair loads instead" in win.memory.notice.informativeText()
    # the choice stays: back once the file is there again
    assert json.loads(win.store.history.pref(user_memory.MODELS_PREF))["target"] == str(gone)


def test_a_remembered_server_that_does_not_answer_gives_the_default_pair(qtbot, open_window, tmp_path):
    from llama_server import free_port

    data = tmp_path / "data"
    url = f"http://127.0.0.1:{free_port()}"
    h = History(data)
    h.set_pref(user_memory.MODELS_PREF, json.dumps({"target": url, "draft": None}))
    h.close()
    win = open_window(data, request=LoadRequest(), restore={})
    assert win.models.load_request.target == url
    win.memory.fallback = LoadRequest(factory=tiny_factory())  # the default pair, tiny in a test
    load(qtbot, win)  # the server fails, the stand-in loads
    assert win.models.load_request is win.memory.fallback and win.last_error_dialog is None
    assert url in win.memory.notice.informativeText() and win.memory.notice.isVisible()
    assert json.loads(win.store.history.pref(user_memory.MODELS_PREF))["target"] == url


def test_what_is_remembered_of_a_load():
    server = LoadRequest("http://10.0.0.5:8000", None, api_key="k1")
    assert user_memory.request_dict(server) == {"target": "http://10.0.0.5:8000", "draft": None, "device": "auto",
                                                "dtype": "auto", "quantization": None}
    assert user_memory.request_from(user_memory.request_dict(server)) == LoadRequest("http://10.0.0.5:8000", None)
    assert user_memory.request_dict(LoadRequest(factory=tiny_factory())) is None
    for bad in (None, [], {"target": ""}, {"target": 3}, {"target": "t", "device": 1}):
        assert user_memory.request_from(bad) is None
    assert user_memory.missing(server) is None and user_memory.missing(LoadRequest("Qwen/Qwen2.5-0.5B")) is None
    assert "not found" in user_memory.missing(LoadRequest("/no/such/model.gguf"))


# -- saved system prompts ---------------------------------------------------------------------
def test_saved_system_prompts_are_picked_renamed_deleted_and_kept(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    win = open_window(data)
    prompts, box = win.prompts, win.page.system_prompt
    prompts.fill_menu()
    texts = [a.text() for a in prompts.menu.actions()]
    assert texts[0] == "No saved prompts yet" and not prompts.menu.actions()[-2].isEnabled()  # nothing to save
    box.setPlainText("You are a concise assistant. Answer in one line.")
    prompts.fill_menu()
    save = next(a for a in prompts.menu.actions() if a.text() == "Save this prompt…")
    save.trigger()
    assert prompts.input.textValue() == "You are a concise assistant.…"  # its first words to start from
    prompts.input.setTextValue("Concise")
    prompts.input.accept()
    box.setPlainText("Reply in French.")
    prompts.save_dialog()
    prompts.input.setTextValue("French")
    prompts.input.accept()
    # the same name again with other text: asked first
    box.setPlainText("Reply in German.")
    prompts.save_dialog()
    prompts.input.setTextValue("French")
    prompts.input.accept()
    assert prompts.question.isVisible()
    prompts.question.button(QMessageBox.StandardButton.Cancel).click()
    assert prompts.library.get("French").text == "Reply in French."

    # picked from the box's menu
    win.chats.new_chat()
    assert box.toPlainText() == ""
    prompts.fill_menu()
    names = [a.text() for a in prompts.menu.actions() if a.isCheckable()]
    assert names == ["Concise", "French"]
    next(a for a in prompts.menu.actions() if a.text() == "Concise").trigger()
    assert box.toPlainText() == "You are a concise assistant. Answer in one line."
    prompts.fill_menu()
    assert [a.text() for a in prompts.menu.actions() if a.isChecked()] == ["Concise"]

    # renamed and deleted in the dialog
    prompts.manage_dialog()
    dlg = prompts.dialog
    items = [dlg.list.item(i) for i in range(dlg.list.count())]
    items[1].setText("Concise")  # taken: refused, said in the dialog
    assert "already called" in dlg.problem.text() and prompts.library.names() == ["Concise", "French"]
    dlg.list.item(1).setText("  En français ")
    assert prompts.library.names() == ["Concise", "En français"]
    dlg.list.setCurrentRow(0)
    assert dlg.preview.toPlainText().startswith("You are a concise")
    dlg.delete_button.click()
    next(b for b in dlg.question.buttons() if b.text() == "Delete").click()
    assert prompts.library.names() == ["En français"] and dlg.list.count() == 1
    dlg.use_button.click()
    assert box.toPlainText() == "Reply in French." and not dlg.isVisible()

    again = restart(win, open_window, data)
    assert [(p.name, p.text) for p in again.prompts.library.prompts] == [("En français", "Reply in French.")]


# -- chats as JSON ----------------------------------------------------------------------------
def stored_chat(win, chat_id) -> ChatFile:
    chat, conversation, system_prompt = win.store.load(chat_id)
    return ChatFile(chat.title, system_prompt, conversation.messages, conversation.leaf,
                    win.store.history.pinned(chat_id))


def test_a_chat_exports_as_json_and_imports_back_identical(qtbot, open_window, tmp_path, monkeypatch):
    data = tmp_path / "data"
    win = open_window(data)
    load(qtbot, win)
    win.side_panel.max_new.setValue(6)
    win.page.system_prompt.setPlainText("You are terse.")
    win.page.attachment_bar.add(Attachment("notes.txt", "the mat\n", 8, "file"))
    send_and_wait(qtbot, win, "the cat")
    win.generation.regenerate()  # a second version of the answer
    qtbot.waitUntil(lambda: win.generation.active is None, timeout=TIMEOUT)
    first = win.chats.messages[0]
    win.chats.edit_message(first)  # an edited question: a second branch
    win.page.composer.setPlainText("the hat")
    send_and_wait(qtbot, win, None)
    win.chats.switch_version(win.chats.messages[0], -1)  # back on the first branch
    win.chats.pin_chat(win.chats.chat_id, True)
    original_id = win.chats.chat_id
    original = stored_chat(win, original_id)
    assert len(original.messages) == 5 and {t.kind for m in original.messages for t in m.tokens} >= {"standard"}

    path = tmp_path / "out" / "chat.json"
    path.parent.mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), ""))
    file_menu = win.menuBar().actions()[0].menu()
    next(a for a in file_menu.actions() if a.text() == "Export chat as &JSON…").trigger()
    assert win.status_label.text() == f"Exported to {path}"
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == "specdec-chat"

    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    next(a for a in file_menu.actions() if a.text() == "&Import chat from JSON…").trigger()
    imported_id = win.chats.chat_id
    assert imported_id != original_id and win.chat_list.chats.count() == 2
    assert file_shape(stored_chat(win, imported_id)) == file_shape(original)
    # the window shows it on the branch it showed, with its versions and the system prompt
    assert [m.content for m in win.chats.messages] == [m.content for m in shown_path(original)]
    assert win.page.system_prompt.toPlainText() == "You are terse."
    bubble = win.page.chat_view.messages[1]
    assert [t.kind for t in bubble.tokens] == [t.kind for t in original.leaf.tokens]

    # it reached the disk: a restart opens it the same
    again = restart(win, open_window, data)
    assert file_shape(stored_chat(again, imported_id)) == file_shape(original)


def shown_path(chat: ChatFile):
    from app.conversation import Conversation

    return Conversation(chat.messages, chat.leaf).path()


def test_importing_a_bad_file_gives_a_dialog_and_loses_nothing(qtbot, open_window, tmp_path):
    data = tmp_path / "data"
    win = open_window(data)
    load(qtbot, win)
    win.side_panel.max_new.setValue(4)
    send_and_wait(qtbot, win, "the cat")
    shown = [m.content for m in win.chats.messages]
    chat_id = win.chats.chat_id
    md = tmp_path / "chat.md"
    win.chats.export_markdown(md)
    newer = tmp_path / "newer.json"
    win.transfer.export_json(newer)
    written = json.loads(newer.read_text(encoding="utf-8"))
    written["version"] = chat_json.VERSION + 1  # a file from a later release
    newer.write_text(json.dumps(written), encoding="utf-8")
    for path, why in ((md, "not JSON"), (newer, "newer SpecDec Chat"), (tmp_path / "nothing.json", "cannot be read")):
        assert win.transfer.import_path(str(path)) is None
        box = win.transfer.dialog
        assert box.isVisible() and why in box.text() and "nothing was imported" in box.informativeText()
        box.close()
        assert win.chats.chat_id == chat_id and [m.content for m in win.chats.messages] == shown
        assert win.chat_list.chats.count() == 1 and len(win.store.history.chats()) == 1
    # a disk that says no: the same dialog, nothing half written
    good = tmp_path / "good.json"
    win.transfer.export_json(good)
    h = win.store.history
    h.db.execute("PRAGMA query_only = ON")
    assert win.transfer.import_path(str(good)) is None
    assert "could not be saved" in win.transfer.dialog.text()
    h.db.execute("PRAGMA query_only = OFF")
    assert len(h.chats()) == 1 and win.chats.chat_id == chat_id


def test_a_chat_of_the_list_exports_without_being_opened(qtbot, open_window, tmp_path, monkeypatch):
    win = open_window(tmp_path / "data")
    load(qtbot, win)
    win.side_panel.max_new.setValue(4)
    send_and_wait(qtbot, win, "the cat")
    first = win.chats.chat_id
    win.chats.new_chat()
    assert win.transfer.chat_file() is None  # an empty chat: nothing to export
    win.transfer.export_dialog()
    assert win.status_label.text() == "Nothing to export yet"
    path = tmp_path / "first.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), ""))
    win.chat_list.export_json_requested.emit(first)
    assert win.chats.chat_id is None  # still the new chat
    assert file_shape(win.transfer.chat_file(first)) == file_shape(stored_chat(win, first))
    assert json.loads(path.read_text(encoding="utf-8"))["chat"]["title"] == "the cat"
