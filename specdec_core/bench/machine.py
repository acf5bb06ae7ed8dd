"""What machine the numbers came from (recorded in report.json and report.md)."""

from __future__ import annotations

import os
import platform
import sys


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, timeout=5).stdout.strip() or platform.processor()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The flags that matter for CPU inference speed (Linux only; [] elsewhere)."""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8", "fma")
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in have]
    except OSError:
        pass
    return []


def code_identity() -> dict:
    """Which code the numbers came from: the folder specdec_core was imported from, its git
    commit ("+changes" when tracked files differ from it; None outside a checkout) and the CPU
    kernel library loaded so far (its file name carries a hash of the kernel's sources; None
    when none was loaded). Why: a before/after pair run from one folder can import the same
    package twice -- an editable install, or the working directory ahead of PYTHONPATH -- and
    then compares a commit with itself (speed notes, item 109); the report says which ran."""
    import subprocess
    from pathlib import Path

    import specdec_core
    from ..cpu import build

    root = Path(specdec_core.__file__).resolve().parent  # reported only: nothing is read beside it
    git = None
    try:
        head = subprocess.run(["git", "-C", str(root.parent), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        lines = head.stdout.splitlines()  # (a path may hold spaces)
        # only the checkout the package is the top of (an installed copy in a venv inside some
        # other checkout is not that checkout's code)
        if head.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == root.parent:
            dirty = subprocess.run(["git", "-C", str(root.parent), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10)
            git = lines[1] + ("+changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    kernel = build.loaded()
    return {"specdec_core": str(root), "git": git, "cpu_kernel_library": kernel.path.name if kernel else None,
            "cpu_kernel": kernel.described if kernel else None}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info() -> dict:
    import psutil
    import torch
    import transformers

    gpu = None
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(i)
        gpu = {"name": torch.cuda.get_device_name(i), "memory_bytes": int(props.total_memory),
               "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_bytes": int(psutil.virtual_memory().total),
        "gpu": gpu,
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_average_start": load_average(),
    }
