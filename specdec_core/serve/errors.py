"""The OpenAI error shape, {"error": {"message", "type", "param", "code"}}, with its HTTP status:
every refusal of `specdec serve` is one of these, never a traceback.

    400  malformed JSON, a value out of range, a field this server does not do (n > 1, logprobs);
         a prompt (with its answer budget) over the target's context, code context_length_exceeded
         as OpenAI, vLLM and llama-server answer it (agents read that code to trim and retry)
    401  a missing or wrong API key, when the server has one
    404  an unknown model or path
    413  an oversized body
    422  a field of the wrong type
    429  the line of waiting requests is full (with Retry-After)
    500  the engine failed on a request it had accepted
"""

from __future__ import annotations


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def wrong_type(param: str, expected: str, value: object) -> APIError:
    got = "null" if value is None else type(value).__name__
    got = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean", "list": "an array",
           "dict": "an object"}.get(got, got)
    return APIError(422, f"{param} must be {expected}, got {got}", param=param, code="invalid_type")


def unsupported(param: str, why: str) -> APIError:
    return APIError(400, f"{param}: {why}", param=param, code="unsupported_parameter")


def unknown_model(model: str, served: str) -> APIError:
    return APIError(404, f"the model {model!r} does not exist here; this server serves {served!r} (GET /v1/models)",
                    param="model", code="model_not_found")


def too_long(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="context_length_exceeded")


def unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key")


def busy(message: str, retry_after: int) -> APIError:
    return APIError(429, message, type="rate_limit_error", code="queue_full",
                    headers={"Retry-After": str(retry_after)})


def internal(message: str) -> APIError:
    return APIError(500, message, type="server_error", code="internal_error")
