"""The request fields of structured output and tool calls, as pydantic models over schema.py's
(the same strict JSON types, the same error shape):

    response_format    {"type": "text" | "json_object"} | {"type": "json_schema", "json_schema":
                       {"name", "schema", "strict", "description"}}          chat and completions
    tools              [{"type": "function", "function": {"name", "description", "parameters",
                       "strict"}}]                                            chat
    tool_choice        "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
    parallel_tool_calls  false: at most one call in an answer
    messages           also role "tool" (with tool_call_id) and an assistant's "tool_calls"
                       ({"id", "type": "function", "function": {"name", "arguments": JSON text}})

The requests here are schema.py's with these fields in place of the ones it refuses.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from .schema import ROLES, ChatCompletionRequest, CompletionRequest, Message, _Object, _some_messages, \
    bad_value, either, missing, not_served, served_role, NullIsMissing

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for a function's name


def _format_kind(kind: str) -> str:
    if kind not in ("text", "json_object", "json_schema"):
        raise bad_value('{param} must be one of "text", "json_object", "json_schema", got {kind}', kind=repr(kind))
    return kind


def _name(name: str) -> str:
    if not NAME.match(name):
        raise bad_value("{param} must be 1-64 letters, digits, _ or -, got {name}", name=repr(name))
    return name


class JsonSchema(_Object):
    name: Annotated[str, AfterValidator(_name)] = Field(None, validate_default=True)
    description: str | None = None
    schema_: dict | bool | None = Field(None, alias="schema")  # None: any JSON object
    strict: bool | None = None


class ResponseFormat(_Object):
    type: Annotated[str, AfterValidator(_format_kind)] = Field(None, validate_default=True)
    json_schema: JsonSchema | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise bad_value('{param}: type "json_schema" needs a json_schema object with its schema')
        return self

    def to_dict(self) -> dict:
        if self.type != "json_schema":
            return {"type": self.type}
        schema = self.json_schema.schema_
        return {"type": "json_schema", "json_schema": {"schema": {"type": "object"} if schema is None else schema}}


def _function_type(kind: str) -> str:
    if kind != "function":
        raise not_served('{param}: only "function" tools are served, got {kind}', kind=repr(kind))
    return kind


class Function(_Object):
    name: Annotated[str, AfterValidator(_name)] = Field(None, validate_default=True)
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None

    def to_dict(self) -> dict:
        out = {"name": self.name, "parameters": self.parameters or {"type": "object", "properties": {}}}
        if self.description:
            out["description"] = self.description
        return out


class Tool(_Object):
    type: Annotated[str, AfterValidator(_function_type)] = Field(None, validate_default=True)
    function: Function = Field(None, validate_default=True)


class NamedFunction(_Object):
    name: str = Field(None, validate_default=True)


class ToolChoiceFunction(_Object):
    type: Annotated[str, AfterValidator(_function_type)] = Field(None, validate_default=True)
    function: NamedFunction = Field(None, validate_default=True)


def _choice(choice: str) -> str:
    if choice not in ("none", "auto", "required"):
        raise bad_value('{param} must be "none", "auto", "required" or a function object, got {choice}',
                        choice=repr(choice))
    return choice


ToolChoice = Annotated[str | ToolChoiceFunction, either('"none", "auto", "required" or {"type": "function", ...}',
                                                         str, ToolChoiceFunction), AfterValidator(
    lambda c: _choice(c) if isinstance(c, str) else c)]


class CallFunction(_Object):
    name: str = Field(None, validate_default=True)
    arguments: str = Field(None, validate_default=True)  # JSON text, as OpenAI sends it


class ToolCall(_Object):
    id: str | None = None
    type: Annotated[str, AfterValidator(_function_type)] = "function"
    function: CallFunction = Field(None, validate_default=True)

    def to_template(self) -> dict:
        """As a chat template takes it: the arguments as an object (Qwen2.5's writes them `| tojson`)."""
        try:
            args = json.loads(self.function.arguments)
        except ValueError:
            args = self.function.arguments  # not JSON: the template gets the text as it is
        return {"type": "function", "function": {"name": self.function.name, "arguments": args}}


TOOL_ROLES = {**ROLES, "tool": "tool"}


class ToolMessage(Message):
    """A message that may be a tool's result or an assistant's calls (content null with calls)."""

    expected: ClassVar[str] = "an object with role and content"

    role: Annotated[str, AfterValidator(served_role(TOOL_ROLES, "system, user, assistant or tool"))] = Field(
        None, validate_default=True)
    content: Annotated[Any, either("a string or an array of text parts", str, list[Any], type(None))] = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _content_given(cls, data: Any) -> Any:
        """content may be absent or null only beside tool_calls: else it is missing, named as such."""
        if isinstance(data, dict) and data.get("content") is None and not data.get("tool_calls"):
            raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                type=missing(), loc=("content",), input=None)])
        return data

    @model_validator(mode="after")
    def _text_parts(self) -> ToolMessage:
        if isinstance(self.content, list):  # checked as Message checks its parts (text only)
            self.content = Message.model_validate({"role": "user", "content": self.content}, strict=True).content
        return self

    @property
    def text(self) -> str:
        return "" if self.content is None else super().text

    def to_template(self) -> dict:
        out = {"role": TOOL_ROLES[self.role], "content": self.text}
        if self.tool_calls:
            out["tool_calls"] = [c.to_template() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


ToolMessages = Annotated[list[ToolMessage], either("an array of messages", list[ToolMessage]),
                         AfterValidator(_some_messages), NullIsMissing]


class ChatRequest(ChatCompletionRequest):
    """Chat completions with structured output and tools."""

    messages: ToolMessages
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # None: true (several calls in one answer may come)

    @model_validator(mode="after")
    def _choice_names_a_tool(self) -> ChatRequest:
        choice = self.tool_choice
        names = [t.function.name for t in self.tools or []]
        if isinstance(choice, ToolChoiceFunction) and choice.function.name not in names:
            raise bad_value("tool_choice names {name}, which is not among the tools",
                            name=repr(choice.function.name))
        if choice == "required" and not names:
            raise bad_value('tool_choice "required" needs tools')
        if self.response_format is not None and self.response_format.type != "text" and names and choice != "none":
            raise not_served("response_format and tools together are not served: give one of them")
        return self


class TextRequest(CompletionRequest):
    """Completions with structured output."""

    response_format: ResponseFormat | None = None

