"""specdec_core: exact speculative decoding over Hugging Face causal LMs (no Qt here)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specdec-chat")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
