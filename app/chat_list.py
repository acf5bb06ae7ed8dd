"""The left pane: New chat, the search box, and either the chats (pinned first) or the search
results. It shows what the History holds and says what the user asked for (signals); the window
does the rest.

Search runs on the History's FTS5 index (titles and every message on every branch) as the user
types; a result names its chat and shows the words around the match; choosing it opens the chat
at that message.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .history import HIGHLIGHT, ChatSummary, SearchHit

CHAT = Qt.ItemDataRole.UserRole
HIT = Qt.ItemDataRole.UserRole + 1
SEARCH_DELAY_MS = 150
PIN = "★ "  # a pinned chat's mark (a glyph every UI font has, unlike the pin emoji)


def hit_html(hit: SearchHit) -> str:
    """A result: the chat's title, then who said what (the matched words in bold)."""
    a, b = HIGHLIGHT

    def breakable(text: str) -> str:
        # a zero-width space after _ . / ( lets a long identifier wrap there: a label cannot break
        # inside a word, and reverse_words_with_punctuation( ran past the list's edge, clipped
        return html.escape("".join(c + "\u200b" if c in "_./(" else c for c in " ".join(text.split())))

    def marked(text: str) -> str:
        return breakable(text).replace(a, "<b>").replace(b, "</b>")

    if hit.message_id is None:
        return f"<b>{marked(hit.snippet)}</b><br><span style='color:gray'>chat title</span>"
    who = {"user": "You", "assistant": "Assistant"}.get(hit.role, hit.role)
    return f"{breakable(hit.title or '(untitled)')}<br><span style='color:gray'>{who}:</span> {marked(hit.snippet)}"


class EscapeClearsSearch(QObject):
    """Esc in the search box clears the search it holds. The window binds Esc too (stop the answer,
    cancel an edit), and a window's shortcut takes a key before the box sees it unless the box
    claims it first (ShortcutOverride); with nothing to clear, Esc is the window's as elsewhere.
    (A rename's editor needs none of this: Qt's item delegate claims Esc for itself.)"""

    def __init__(self, chat_list: ChatList):
        super().__init__(chat_list)
        self.chat_list = chat_list

    def eventFilter(self, obj, e) -> bool:
        if e.type() not in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress):
            return False
        if e.key() != Qt.Key.Key_Escape or e.modifiers() or not self.chat_list.search.text():
            return False
        if e.type() == QEvent.Type.ShortcutOverride:
            e.accept()  # the key press comes to the box, the window's shortcut is not triggered
        else:
            self.chat_list.clear_search()
        return True


class ChatList(QWidget):
    new_requested = Signal()
    open_requested = Signal(int)  # chat id
    hit_chosen = Signal(int, object)  # chat id, message id (None: a title matched)
    rename_requested = Signal(int, str)  # chat id, new title
    pin_requested = Signal(int, bool)
    delete_requested = Signal(int)
    export_requested = Signal(int)
    export_json_requested = Signal(int)
    search_changed = Signal(str)  # the window answers with show_results()

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        self.new_button = QPushButton("+  New chat")
        self.new_button.clicked.connect(self.new_requested)
        lay.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setObjectName("SearchBox")
        self.search.setPlaceholderText("Search chats (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("every word, in titles and in every message (edited and regenerated versions too)")
        lay.addWidget(self.search)
        self._delay = QTimer(self)
        self._delay.setSingleShot(True)
        self._delay.setInterval(SEARCH_DELAY_MS)
        self._delay.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._delay.start())
        self.search.returnPressed.connect(self._open_first_hit)
        self.search.installEventFilter(EscapeClearsSearch(self))

        self.chats = QListWidget()
        self.chats.setObjectName("ChatList")
        self.chats.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chats.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.chats.setWordWrap(False)
        self.chats.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.chats.itemClicked.connect(lambda it: self.open_requested.emit(it.data(CHAT)))
        self.chats.itemChanged.connect(self._renamed)
        # a rename left with Esc changes nothing: the pinned mark taken off for the edit comes back
        self.chats.itemDelegate().closeEditor.connect(self._editor_closed)
        self.chats.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.chats.customContextMenuRequested.connect(self._menu)
        lay.addWidget(self.chats, 1)

        self.results = QListWidget()
        self.results.setObjectName("SearchResults")
        self.results.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.results.itemClicked.connect(self._hit_clicked)
        self.results.itemActivated.connect(self._hit_clicked)
        self.results.setVisible(False)
        lay.addWidget(self.results, 1)
        self.no_results = QLabel("")
        self.no_results.setObjectName("Muted")
        self.no_results.setWordWrap(True)
        self.no_results.setVisible(False)
        lay.addWidget(self.no_results)
        self._filling = False

    # -- chats ----------------------------------------------------------------------------
    def show_chats(self, chats: list[ChatSummary], current: int | None) -> None:
        self._filling = True
        self.chats.clear()
        for c in chats:
            it = QListWidgetItem(c.title or "(untitled)")
            it.setData(CHAT, c.id)
            it.setData(CHAT + 2, c.pinned)
            it.setToolTip(("pinned · " if c.pinned else "") + (c.title or "(untitled)")
                          + "\nright-click to rename (F2), pin, export or delete")
            it.setFlags(it.flags() | Qt.ItemFlag.ItemIsEditable)
            if c.pinned:
                it.setText(PIN + (c.title or "(untitled)"))
            self.chats.addItem(it)
            if c.id == current:
                it.setSelected(True)
                self.chats.setCurrentItem(it)
        if current is None:
            self.chats.clearSelection()
        self._filling = False

    def item_for(self, chat_id: int) -> QListWidgetItem | None:
        for i in range(self.chats.count()):
            if self.chats.item(i).data(CHAT) == chat_id:
                return self.chats.item(i)
        return None

    def start_rename(self, chat_id: int) -> None:
        it = self.item_for(chat_id)
        if it is not None:
            self.clear_search()
            self._filling = True
            it.setText(it.text().removeprefix(PIN))  # edit the title itself
            self._filling = False
            self.chats.setCurrentItem(it)
            self.chats.editItem(it)

    def _editor_closed(self, *_args) -> None:
        it = self.chats.currentItem()
        if it is not None and it.data(CHAT + 2) and not it.text().startswith(PIN):
            self._filling = True
            it.setText(PIN + it.text())
            self._filling = False

    def _renamed(self, it: QListWidgetItem) -> None:
        if self._filling:
            return
        title = " ".join(it.text().removeprefix(PIN).split())
        self.rename_requested.emit(it.data(CHAT), title)

    def _menu(self, pos) -> None:
        it = self.chats.itemAt(pos)
        if it is None:
            return
        chat_id, pinned = it.data(CHAT), bool(it.data(CHAT + 2))
        menu = QMenu(self)
        menu.addAction("Rename…\tF2", lambda: self.start_rename(chat_id))
        menu.addAction("Unpin" if pinned else "Pin to the top", lambda: self.pin_requested.emit(chat_id, not pinned))
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(chat_id))
        menu.addAction("Export as JSON…", lambda: self.export_json_requested.emit(chat_id))
        menu.addSeparator()
        menu.addAction("Delete chat", lambda: self.delete_requested.emit(chat_id))
        menu.popup(self.chats.viewport().mapToGlobal(pos))
        self.context_menu = menu

    # -- search ---------------------------------------------------------------------------
    def focus_search(self) -> None:
        self.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search.selectAll()

    def clear_search(self) -> None:
        self.search.clear()
        self.show_results("", [])

    def show_results(self, text: str, hits: list[SearchHit]) -> None:
        searching = bool(text.strip())
        self.chats.setVisible(not searching)
        self.results.setVisible(searching and bool(hits))
        self.no_results.setVisible(searching and not hits)
        self.no_results.setText(f"Nothing found for “{html.escape(text.strip())}”." if searching else "")
        self.results.clear()
        for hit in hits:
            it = QListWidgetItem()
            it.setData(HIT, (hit.chat_id, hit.message_id))
            label = QLabel(hit_html(hit))
            label.setObjectName("SearchHit")
            label.setWordWrap(True)
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
            label.setContentsMargins(6, 4, 6, 4)
            label.setFixedWidth(max(self.results.viewport().width() - 4, 120))
            it.setSizeHint(label.sizeHint())
            self.results.addItem(it)
            self.results.setItemWidget(it, label)

    def _hit_clicked(self, it: QListWidgetItem) -> None:
        chat_id, message_id = it.data(HIT)
        self.hit_chosen.emit(chat_id, message_id)

    def _open_first_hit(self) -> None:
        if self.results.isVisible() and self.results.count():
            self._hit_clicked(self.results.item(0))
