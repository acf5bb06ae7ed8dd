"""The OpenAI request bodies of `specdec serve` as pydantic models, and how a pydantic
ValidationError becomes the OpenAI error shape (errors.py).

    ChatCompletionRequest   POST /v1/chat/completions
    CompletionRequest       POST /v1/completions (`suffix`: fill in the middle)
    InfillRequest           POST /infill (llama-server's fill in the middle)
    TokenizeChat / TokenizeText   POST /tokenize ({"messages"} or {"prompt"})
    Extension               the `specdec` object of a request (protocol.py)

Every field is one line: its JSON type (strict: no "7" for 7, no true for 1; an integer is a
number) and, in Annotated, the checks on its value. What the engine does not do is refused
with the field named rather than ignored (`refused_unless`, with the values that change
nothing); a field no model names (metadata, store, ...) is ignored, as OpenAI's own clients
send such fields freely. The extension alone is closed: a field it does not know is refused.
A nullable field's None means "absent or null"; requests.py puts the defaults in.

An error becomes one APIError, the first pydantic reports, with `param` its location
(messages[1].content, specdec.draft_tokens, stop[2]):

    a field of the wrong type        422 invalid_type           "{param} must be an integer, got a string"
    a required field absent or null  400 missing_required_parameter "{param} is missing"
    a value out of range             400 invalid_value          the check's own message
    what this server does not do     400 unsupported_parameter  "{param}: why"

A check raises `bad_value` / `not_served` / `wrong_type` with a message in which "{param}"
stands for the field's location (filled in here, where the location is known).
"""

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, TypeAdapter, \
    ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..settings import DEFAULT_DRAFT_TOKENS, MAX_TOP_LOGPROBS, MODES, PROPOSERS, SamplingParams, SettingsError
from . import errors
from .errors import APIError

MAX_STOPS = 16
# the roles served, and what each is to the chat template (OpenAI's "developer" is a system message)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


# -- the errors a check raises ------------------------------------------------------------------
def bad_value(message: str, **ctx: object) -> PydanticCustomError:
    """400 invalid_value. `message` names the field as "{param}"; {name}s in it come from ctx."""
    return PydanticCustomError("invalid_value", message, ctx or None)


def not_served(message: str, **ctx: object) -> PydanticCustomError:
    """400 unsupported_parameter: a field, or a value of it, that this server does not do."""
    return PydanticCustomError("unsupported_parameter", message, ctx or None)


def wrong_type(expected: str) -> PydanticCustomError:
    """422 invalid_type, in words pydantic's type errors do not have ("an array of messages")."""
    return PydanticCustomError("invalid_type", "{param} must be {expected}", {"expected": expected})


def missing() -> PydanticCustomError:
    return PydanticCustomError("missing", "{param} is missing")


# -- checks, each one Annotated[...] item -------------------------------------------------------
NOT_SERVED = ("{param}: not supported by this server: the engine decodes the distribution that temperature, "
              "top_k and top_p define, exactly, and nothing else")
NOT_HERE = "{param}: not supported by this server"


def refused_unless(*neutral: object, why: str = NOT_SERVED, same_type: bool = True) -> AfterValidator:
    """A field the engine does not do: refused, but for the values that change nothing (null,
    false, 0, [] ...), which pass. same_type: 0.0 is not 0 nor false is 0 (loose: Python's ==)."""

    def check(value: object) -> object:
        if same_type:
            ok = any(value is v or (type(value) is type(v) and value == v) for v in neutral)
        else:
            ok = value in neutral
        if not ok:
            raise not_served(why)
        return value

    return AfterValidator(check)


def at_least(least: int, note: str = "") -> AfterValidator:
    def check(value: int | str) -> int | str:
        if isinstance(value, int) and value < least:
            raise bad_value("{param} must be >= {least}" + note + ", got {value}", least=least, value=value)
        return value

    return AfterValidator(check)


def _seed_range(value: int) -> int:
    if not 0 <= value < 2**63:
        raise bad_value("{param} must be in [0, 2**63), got {value}", value=value)
    return value


def one_of(choices: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in choices:
            raise bad_value("{param} must be one of {choices}, got {value}", choices=", ".join(choices),
                            value=repr(value))
        return value

    return AfterValidator(check)


def engine_rule(name: str) -> AfterValidator:
    """A sampling value checked by the engine's own rule (SamplingParams, settings.py), alone:
    one place says what temperature, top_k, top_p, min_p and the penalties may be. top_k -1 is
    off, as 0 (vLLM's)."""

    def check(value: float) -> float:
        try:
            SamplingParams(**{name: 0 if name == "top_k" and value == -1 else value})
        except SettingsError as exc:
            raise bad_value(str(exc).replace(name.replace("_", "-"), name)) from None
        return value

    return AfterValidator(check)


def _null_is_missing(value: object) -> object:
    if value is None:
        raise missing()
    return value


NullIsMissing = BeforeValidator(_null_is_missing)  # a required field given as null: missing, as if absent


def _json_kind(shape: object):
    """Whether a JSON value has the kind of `shape` (str, int, list[...], a model, Literal[...])."""
    origin = get_origin(shape) or shape
    if origin is Literal:
        values = get_args(shape)
        return lambda v: any(type(v) is type(x) and v == x for x in values)
    kind = dict if isinstance(origin, type) and issubclass(origin, BaseModel) else \
        {float: (int, float)}.get(origin, origin)
    return lambda v: isinstance(v, kind) and (origin is bool or not isinstance(v, bool))


def either(expected: str, *shapes: object) -> PlainValidator:
    """A field of several JSON shapes, told apart by the value's own JSON kind (a string, an
    integer, an array...), then checked as that shape: an error inside it names its place
    (messages[0].content[1].text), never pydantic's names for a union's members; a value of
    none of the kinds is the wrong type, in the words of `expected`."""
    branches = [(_json_kind(s), None if get_origin(s) is Literal else TypeAdapter(s)) for s in shapes]

    def check(value: object) -> object:
        for fits, adapter in branches:
            if fits(value):
                return value if adapter is None else adapter.validate_python(value, strict=True)
        raise wrong_type(expected)

    return PlainValidator(check)


# -- the objects ----------------------------------------------------------------------------------
class _Object(BaseModel):
    """A JSON object of the protocol: strict JSON types, the fields it does not name ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")
    expected: ClassVar[str] = "an object"  # what a value that is not an object "must be"

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        if not isinstance(data, (dict, cls)):
            raise wrong_type(cls.expected)
        return data


def _text_part(kind: object) -> object:
    if kind != "text":
        raise not_served("{param}: {kind} content is not served: text only", kind=repr(kind))
    return kind


class ContentPart(_Object):
    expected: ClassVar[str] = "a content part object"

    type: Annotated[Any, AfterValidator(_text_part)] = Field(None, validate_default=True)
    text: str = Field(None, validate_default=True)  # absent: "must be a string, got null" (422)


def served_role(roles: dict[str, str], names: str) -> Callable[[str], str]:
    """A message role's check: one of `roles`, else not served, naming the ones that are."""
    def check(role: str) -> str:
        if role not in roles:
            raise not_served("{param}: {role} messages are not served; use " + names, role=repr(role))
        return role

    return check


class Message(_Object):
    """One message of a chat; fields other than role and content (name, ...) are ignored."""

    expected: ClassVar[str] = "an object with role and content"

    role: Annotated[str, AfterValidator(served_role(ROLES, "system, user or assistant"))] = Field(
        None, validate_default=True)  # absent: 422, as null
    content: Annotated[str | list[ContentPart], either("a string or an array of text parts", str, list[ContentPart])]

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


def _some_messages(messages: list[Message]) -> list[Message]:
    if not messages:
        raise bad_value("{param} is empty: give at least one message")
    return messages


Messages = Annotated[list[Message], either("an array of messages", list[Message]), AfterValidator(_some_messages),
                     NullIsMissing]


Seed = Annotated[int, AfterValidator(_seed_range)]
ADAPTIVE = Literal["adaptive"]
DraftLength = Annotated[int | ADAPTIVE, either('an integer k >= 1 or "adaptive"', int, ADAPTIVE),
                        at_least(1, ' or "adaptive"')]


class StreamOptions(_Object):
    include_usage: bool | None = None


class Extension(_Object):
    """The `specdec` object (protocol.py: its fields are protocol.REQUEST_FIELDS, in this order).
    Closed: a field it does not know is refused, naming it."""

    model_config = ConfigDict(extra="forbid")

    mode: Annotated[str, one_of(MODES)] | None = None  # None: speculative
    draft_tokens: DraftLength = DEFAULT_DRAFT_TOKENS  # null: the wrong type, as before
    proposer: Annotated[str, one_of(PROPOSERS)] | None = None  # None: the default for what is loaded
    reuse_cache: bool | None = None  # None: true
    running_stats: bool | None = None  # None: false
    engine_seed: Seed | None = None

    @model_validator(mode="before")
    @classmethod
    def _closed(cls, data: Any) -> Any:
        unknown = sorted(set(data) - set(cls.model_fields)) if isinstance(data, dict) else []
        if unknown:
            error = bad_value("{param} is not a field of the extension; it takes {fields}",
                              fields=", ".join(cls.model_fields))
            raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                type=error, loc=(unknown[0],), input=data[unknown[0]])])
        return data


# -- the requests ---------------------------------------------------------------------------------
def _text_format(fmt: object) -> object:
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise not_served('{param}: only {"type": "text"} is served')
    return fmt


def _logit_bias(bias: dict[str, float]) -> dict[str, float]:
    """{"token id": bias in [-100, 100]}, as OpenAI's (whether an id is in the vocabulary is the
    server's check: it knows the vocabulary)."""
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):
            raise bad_value("{param} keys are token ids (strings of digits), got {key}", key=repr(key))
        if not -100 <= value <= 100:
            raise bad_value("{param}[{key}] must be in [-100, 100], got {value}", key=repr(key), value=value)
    return bias


def _top_count(n: int) -> int:
    if not 0 <= n <= MAX_TOP_LOGPROBS:
        raise bad_value("{param} must be in [0, {most}], got {n}", most=MAX_TOP_LOGPROBS, n=n)
    return n


TopCount = Annotated[int, AfterValidator(_top_count)]


def _one_answer(n: int) -> int:
    if n != 1:
        raise not_served("{param}: only n = 1 is served (one answer per request), got {n}", n=n)
    return n


def _stops(stop: str | list[str]) -> str | list[str]:
    stops = [stop] if isinstance(stop, str) else stop
    if len(stops) > MAX_STOPS:
        raise bad_value("{param} takes at most {most} strings, got {count}", most=MAX_STOPS, count=len(stops))
    if any(not s for s in stops):
        raise bad_value("{param} strings must not be empty")
    return stop


class BaseRequest(_Object):
    """The fields chat completions and completions share, in the order they are checked."""

    model: str | None = None
    # what would change the answer in a way the engine does not do: refused (their neutral values pass)
    tools: Annotated[Any, refused_unless(None, [])] = None
    functions: Annotated[Any, refused_unless(None, [])] = None
    tool_choice: Annotated[Any, refused_unless(None, "none")] = None
    function_call: Annotated[Any, refused_unless(None, "none")] = None
    response_format: Annotated[Any, AfterValidator(_text_format)] = None
    # what shapes the distribution before the warp (penalties.py), for target and draft alike
    logit_bias: Annotated[dict[str, float], AfterValidator(_logit_bias)] | None = None
    frequency_penalty: Annotated[float, engine_rule("frequency_penalty")] | None = None  # None: 0
    presence_penalty: Annotated[float, engine_rule("presence_penalty")] | None = None  # None: 0
    repetition_penalty: Annotated[float, engine_rule("repetition_penalty")] | None = None  # vLLM's; None: 1
    min_p: Annotated[float, engine_rule("min_p")] | None = None  # vLLM's and llama.cpp's; None: 0
    # what applies
    n: Annotated[int, AfterValidator(_one_answer)] | None = None
    max_completion_tokens: Annotated[int, at_least(1)] | None = None  # OpenAI's newer name: wins
    max_tokens: Annotated[int, at_least(1)] | None = None  # not read beside max_completion_tokens
    temperature: Annotated[float, engine_rule("temperature")] | None = None  # None: 1
    top_p: Annotated[float, engine_rule("top_p")] | None = None  # None: 1
    top_k: Annotated[int, engine_rule("top_k")] | None = None  # vLLM's and llama.cpp's; None, 0, -1: off
    seed: Seed | None = None  # None: a fresh random one, reported back
    stream: bool | None = None
    stream_options: StreamOptions | None = None  # only with stream: true
    stop: Annotated[str | list[str], either("a string or an array of strings", str, list[str]),
                    AfterValidator(_stops)] | None = None
    user: Any = None  # ignored, whatever it is
    specdec: Extension | None = None

    @field_validator("max_tokens", mode="wrap")
    @classmethod
    def _shadowed(cls, value: Any, handler, info: ValidationInfo) -> Any:
        """Beside max_completion_tokens, max_tokens is not read (nor checked)."""
        return None if info.data.get("max_completion_tokens") is not None else handler(value)

    @field_validator("stream_options")
    @classmethod
    def _with_stream(cls, value: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise bad_value("{param} is only allowed with stream: true")
        return value


class ChatCompletionRequest(BaseRequest):
    messages: Messages
    logprobs: bool | None = None  # the target's, for each emitted token (events.Logprobs)
    top_logprobs: TopCount | None = None  # only with logprobs: true

    @field_validator("top_logprobs")
    @classmethod
    def _with_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and not info.data.get("logprobs"):
            raise bad_value("{param} is only allowed with logprobs: true")
        return value


def _one_prompt(prompt: object) -> str | list[int]:
    """A string, token ids, or either wrapped in a one-item array; several prompts are refused."""
    _null_is_missing(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) != 1:
            raise not_served("{param}: one prompt per request is served, got {count}", count=len(prompt))
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise bad_value("{param} is empty")
        return prompt
    if isinstance(prompt, list):
        if not prompt:
            raise bad_value("{param} is empty: give text or at least one token id")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise wrong_type("a string or an array of token ids (integers)")
        if min(prompt) < 0:
            raise bad_value("{param}: token ids are >= 0, got {least}", least=min(prompt))
        return list(prompt)
    raise wrong_type("a string or an array of token ids")


class CompletionRequest(BaseRequest):
    echo: Annotated[Any, refused_unless(None, False, why=NOT_HERE, same_type=False)] = None
    best_of: Annotated[Any, refused_unless(None, 1, why=NOT_HERE, same_type=False)] = None
    prompt: Annotated[str | list[int], PlainValidator(_one_prompt)]
    logprobs: TopCount | None = None  # completions' logprobs: how many alternatives (0: the token's own)
    top_logprobs: Annotated[Any, refused_unless(None, why="{param}: completions take logprobs: N (how many "
                                                "alternatives), not top_logprobs")] = None
    suffix: str | None = None  # fill in the middle: the text after the gap (the prompt is before it)

    @field_validator("suffix")
    @classmethod
    def _text_prompt(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not isinstance(info.data.get("prompt"), str):
            raise bad_value("{param} needs the prompt as text (the code before the gap), not token ids")
        return value


class InfillExtra(_Object):
    """One chunk of input_extra (llama-server's /infill): another file of the project."""

    expected: ClassVar[str] = 'an object {"filename", "text"}'
    filename: str = "tmp"
    text: str = ""


LLAMA_ONLY = ("{param}: not supported by this server: its sampling is temperature, top_k, top_p, min_p, "
              "logit_bias and the OpenAI/vLLM penalties (repetition_penalty, presence_penalty, frequency_penalty)")


def _predict(n: int) -> int:
    if n < 1 and n != -1:
        raise bad_value("{param} must be >= 1, or -1 (up to the context), got {n}", n=n)
    return n


class InfillRequest(BaseRequest):
    """POST /infill, llama-server's fill in the middle: the code before the gap (input_prefix),
    after it (input_suffix), other files (input_extra), and text the middle starts with (prompt).
    llama-server's n_predict is max_tokens; its answer has llama-server's shape (app.py)."""

    input_prefix: str = ""
    input_suffix: str = ""
    # llama.cpp's own samplers: refused where they would change the distribution (samplers, the
    # chain's order, and cache_prompt are not read: the warp is this engine's, the cache always on)
    repeat_penalty: Annotated[Any, refused_unless(None, 1, 1.0, same_type=False, why=LLAMA_ONLY)] = None
    n_probs: Annotated[Any, refused_unless(None, 0, same_type=False, why=LLAMA_ONLY)] = None
    mirostat: Annotated[Any, refused_unless(None, 0, same_type=False, why=LLAMA_ONLY)] = None
    typical_p: Annotated[Any, refused_unless(None, 1, 1.0, same_type=False, why=LLAMA_ONLY)] = None
    dry_multiplier: Annotated[Any, refused_unless(None, 0, 0.0, same_type=False, why=LLAMA_ONLY)] = None
    xtc_probability: Annotated[Any, refused_unless(None, 0, 0.0, same_type=False, why=LLAMA_ONLY)] = None
    dynatemp_range: Annotated[Any, refused_unless(None, 0, 0.0, same_type=False, why=LLAMA_ONLY)] = None
    top_n_sigma: Annotated[Any, refused_unless(None, -1, -1.0, same_type=False, why=LLAMA_ONLY)] = None
    input_extra: list[InfillExtra] = []
    prompt: str = ""
    n_predict: Annotated[int, AfterValidator(_predict)] | None = None  # -1: up to the context, as llama-server


class TokenizeChat(_Object):
    model: str | None = None
    messages: Messages


class TokenizeText(_Object):
    model: str | None = None
    prompt: Annotated[str, NullIsMissing]  # may be empty here: "the prompt makes no tokens" (app.py)


# -- a ValidationError into the OpenAI error shape ----------------------------------------------
M = TypeVar("M", bound=BaseModel)

# pydantic's type errors, in the words of the error shape (the others: pydantic's own)
TYPE_NAMES = {"int_type": "an integer", "float_type": "a number", "string_type": "a string", "bool_type": "a boolean",
              "list_type": "an array", "dict_type": "an object", "model_type": "an object"}


def parse(model: type[M], body: dict) -> M:
    """`body` as `model`, or the APIError of the first thing wrong in it."""
    try:
        return model.model_validate(body, strict=True)
    except ValidationError as exc:
        raise api_error(exc.errors(include_url=False)[0]) from None


def param_of(loc: tuple[str | int, ...]) -> str | None:
    """("messages", 1, "content") -> "messages[1].content"; () (the body itself) -> None."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or None


def api_error(error: dict) -> APIError:
    """One pydantic error (ValidationError.errors()'s item) as the OpenAI error with its status."""
    param = param_of(error["loc"])
    where = param or "the body"
    kind = error["type"]
    if kind == "missing":
        return errors.invalid(f"{where} is missing", param, code="missing_required_parameter")
    if kind == "invalid_type":
        return errors.wrong_type(where, error["ctx"]["expected"], error["input"])
    if kind.endswith("_type"):
        expected = TYPE_NAMES.get(kind) or error["msg"].removeprefix("Input should be ")
        return errors.wrong_type(where, expected, error["input"])
    message = error["msg"].replace("{param}", where)
    if kind == "unsupported_parameter":
        return APIError(400, message, param=param, code="unsupported_parameter")
    if kind == "invalid_value":
        return errors.invalid(message, param)
    return errors.invalid(f"{where}: {message}", param)  # pydantic's own check, in its own words
