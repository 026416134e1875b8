"""What every benchmark records about the machine it ran on (standard library only).

Imported by the bench scripts (bench/<folder>/*.py put bench/ on sys.path)."""
import os
import platform
from typing import Dict, List, Optional


def host_info() -> Dict[str, object]:
    """CPU model, CPU count, kernel, Python and host name."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu_model": cpu, "cpus": os.cpu_count(), "machine": platform.machine(),
            "kernel": platform.release(), "python": platform.python_version(),
            "hostname": platform.node()}


def loadavg() -> Optional[List[float]]:
    """The 1, 5 and 15 minute load averages, or None where unknown."""
    try:
        return list(os.getloadavg())
    except OSError:
        return None
