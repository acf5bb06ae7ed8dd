"""`specdec-chat`: the desktop chat window.

    specdec-chat                                  # the models loaded last (at first: the embedded default pair)
    specdec-chat --target SPEC --draft SPEC       # any compatible pair (folder, .gguf, hub id)
    specdec-chat --draft none                     # target only (standard / prompt lookup)
    specdec-chat --target http://HOST:PORT        # a server (llama-server, vLLM) decodes with its own draft
    specdec-chat --data-dir DIR                   # chats stored under DIR instead of the user data folder
    specdec-chat --version
    specdec-chat --self-test                      # offscreen smoke test, one line per check, exit 0/1
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specdec-chat", description="Chat with exact speculative decoding, live.")
    p.add_argument("--target", default=None, metavar="SPEC",
                   help="target model SPEC, or a server http://HOST:PORT (default: the models loaded last, at first "
                        "the embedded pair)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="a server target's API key (default: $SPECDEC_API_KEY)")
    p.add_argument("--draft", default=None, metavar="SPEC",
                   help="draft model SPEC, or 'none' for no draft (default: the models loaded last, at first the "
                        "embedded pair)")
    p.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N | mps (default: auto)")
    p.add_argument("--dtype", default=None, help="auto | float32 | float16 | bfloat16 (default: auto)")
    p.add_argument("--quantization", default=None,
                   help="none | nf4 | int8: a safetensors target through bitsandbytes (default: nf4 on CUDA, "
                        "none on CPU, where nf4/int8 run too, slowly)")
    p.add_argument("--data-dir", default=None, metavar="DIR", help="where chats are stored (default: user data folder)")
    p.add_argument("--theme", default=None, choices=("auto", "light", "dark"),
                   help="colour theme: auto follows the system (default: what View chose last, else auto)")
    p.add_argument("--self-test", action="store_true", help="open offscreen, generate a few tokens, check, exit 0/1")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def load_request_from_args(args):
    from .worker import LoadRequest

    draft = "default" if args.draft is None else None if args.draft.lower() in ("none", "") else args.draft
    quant = args.quantization  # None = the default for the device; "none" = really unquantized
    return LoadRequest(args.target or "default", draft, args.device or "auto", args.dtype or "auto", quant,
                       api_key=args.api_key)


def remembered_overrides(args) -> dict | None:
    """Without --target and --draft the window loads the models used last (app/user_memory.py),
    with the options the command line did give over them; None: it loads what the line names."""
    if args.target is not None or args.draft is not None:
        return None
    given = {"device": args.device, "dtype": args.dtype, "quantization": args.quantization, "api_key": args.api_key}
    return {name: value for name, value in given.items() if value is not None}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        from specdec_core import __version__

        print(f"specdec-chat {__version__}")
        return 0
    if args.self_test:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from .selftest import run_self_test

        return run_self_test(load_request_from_args(args), args.data_dir)

    from PySide6.QtWidgets import QApplication

    from .gui_gc import GuiThreadCollector
    from .main_window import MainWindow
    from .theme import app_icon, apply_theme

    app = QApplication.instance() or QApplication(sys.argv[:1])
    collector = GuiThreadCollector(app)  # cycles are collected in this thread only (see gui_gc)
    app.setApplicationName("SpecDec Chat")
    app.setOrganizationName("specdec-chat")
    app.setDesktopFileName("specdec-chat")
    app.setWindowIcon(app_icon())
    theme = apply_theme(app, args.theme or "auto")
    # the window keeps the theme from here: the command line's, else the one View chose last
    win = MainWindow(args.data_dir, theme, load_request_from_args(args), theme_mode=args.theme or "saved",
                     restore_models=remembered_overrides(args))
    win.show()
    win.models.start_loading()
    rc = app.exec()
    ended = win.shutdown()
    collector.stop()
    if not ended:  # a model load still running in the worker cannot be interrupted: leave now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
