"""The facts of the machine a benchmark ran on, stored with its results (a ratio needs its context)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import psutil


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def disk_facts(path: Path) -> dict[str, object]:
    """df of `path`: the device, file system, mount point and sizes."""
    usage = shutil.disk_usage(path)
    facts: dict[str, object] = {"path": str(path), "total_bytes": usage.total, "free_bytes": usage.free}
    try:
        out = subprocess.run(["df", "--output=source,fstype,target", str(path)], capture_output=True,
                             text=True, timeout=10, check=True).stdout.splitlines()
        device, fstype, mount = out[-1].split(None, 2)
        facts.update(device=device, fstype=fstype, mount=mount)
        rotational = Path(f"/sys/class/block/{Path(device).name}/queue/rotational")
        if rotational.exists():
            facts["rotational"] = rotational.read_text().strip() == "1"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        facts["df_error"] = str(exc)
    return facts


def machine_facts(data_dir: Path) -> dict[str, object]:
    return {
        "cores": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "disk": disk_facts(data_dir),
        "python": sys.version.split()[0],
        "grpcio": _version("grpcio"),
        "pyspark": _version("pyspark"),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),  # other work on the machine skews every figure
    }
