"""A tiny pair for structured output and tool calls: the tests' tiny Qwen2 models on a vocabulary
with every character JSON and a tool's description need, <tool_call> and </tool_call> as tokens of
their own, and a chat template that shows tools and renders calls and results as Qwen2.5's does."""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken

from tiny_models import make_model, make_tokenizer, save_model

WORDS = ["the", "cat", "sat", "on", "mat", "a", "hat", "is", "name", "age", "city", "paris", "rome", "true", "false",
         "null", "abcdefghijklmnopqrstuvwxyz", "0123456789", '{}[]":,<>/_-']
CALL_TOKENS = ["<tool_call>", "</tool_call>"]

# Qwen2.5's template, shortened: the tools in the system turn, an assistant's calls as
# <tool_call>{json}</tool_call>, tool results as <tool_response> in a user turn.
TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- endif %}{{- '\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}"
    "{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- set tool_call = tool_call.function %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content }}"
    "{{- '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def make_structured_tokenizer(extra_words: tuple[str, ...] = ()):
    """`extra_words`: more words, each a token of its own (with a leading space, as the words are)."""
    tok = make_tokenizer(WORDS + list(extra_words))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in CALL_TOKENS])
    tok.chat_template = TEMPLATE
    return tok


def save_structured_pair(root: Path | str, extra_words: tuple[str, ...] = ()) -> tuple[Path, Path]:
    tok = make_structured_tokenizer(extra_words)
    # a tool's description is spelled nearly a character a token here: room for two of them
    target = make_model(len(tok), seed=0, max_positions=2048)
    draft = make_model(len(tok), seed=1, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32,
                       max_positions=2048)
    return save_model(Path(root) / "target", target, tok), save_model(Path(root) / "draft", draft, tok)
