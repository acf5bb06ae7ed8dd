"""A chat's messages as a tree, and the branch the window shows.

Each message follows its parent (history.Message.parent; None for a chat's first message).
Messages with the same parent are *versions* of one turn: an edited question is a sibling of the
question it replaces, a regenerated answer a sibling of the answer. The chat shows one branch:
the path from a first message to `leaf`. Switching a version shows that version and, below it,
the newest continuation it has (as LM Studio and ChatGPT do). Plain Python, no Qt.
"""

from __future__ import annotations

from .history import Message


class Conversation:
    def __init__(self, messages: list[Message] | None = None, leaf: Message | None = None):
        self.messages: list[Message] = list(messages or [])  # every branch, in the order they were written
        self.leaf: Message | None = leaf if leaf is not None else (self.messages[-1] if self.messages else None)

    def path(self) -> list[Message]:
        """The branch shown: first message to leaf."""
        out = []
        m = self.leaf
        while m is not None:
            out.append(m)
            m = m.parent
        return out[::-1]

    def children(self, parent: Message | None) -> list[Message]:
        return [m for m in self.messages if m.parent is parent]

    def versions(self, message: Message) -> list[Message]:
        """`message` and its siblings, oldest first."""
        return self.children(message.parent)

    def version(self, message: Message) -> tuple[int, int]:
        """(1-based position of `message` among its versions, how many there are)."""
        vs = self.versions(message)
        return vs.index(message) + 1, len(vs)

    def add(self, message: Message, parent: Message | None) -> Message:
        """`message` after `parent`, at the end of the branch shown."""
        message.parent = parent
        self.messages.append(message)
        self.leaf = message
        return message

    def newest_leaf(self, message: Message) -> Message:
        """The end of `message`'s newest continuation (itself when nothing follows it)."""
        while True:
            kids = self.children(message)
            if not kids:
                return message
            message = kids[-1]

    def show(self, message: Message) -> None:
        """Show the branch through `message` (its newest continuation below it)."""
        self.leaf = self.newest_leaf(message)

    def switch(self, message: Message, step: int) -> Message | None:
        """Show the version `step` places away from `message` (-1 previous, +1 next); returns
        it, or None when there is none that way."""
        vs = self.versions(message)
        i = vs.index(message) + step
        if not 0 <= i < len(vs):
            return None
        self.show(vs[i])
        return vs[i]

    def remove(self, message: Message) -> list[Message]:
        """`message` and everything that follows it; the branch shown ends at its parent. Returns
        what was removed, `message` first."""
        gone = {id(message)}
        for m in self.messages:  # parents come before their children
            if m.parent is not None and id(m.parent) in gone:
                gone.add(id(m))
        removed = [message] + [m for m in self.messages if id(m) in gone and m is not message]
        self.messages = [m for m in self.messages if id(m) not in gone]
        if self.leaf is not None and id(self.leaf) in gone:
            self.leaf = message.parent
        return removed
