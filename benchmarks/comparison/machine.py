"""The machine in one line, for a report pasted into docs/performance.md:
the lscpu lines that decide the tables (the model, CPUs, threads per core,
the data caches), as lscpu prints them, so that two reports can be told
apart by the machine they ran on; where there is no lscpu (macOS, Windows,
a bare container), what Python knows (platform.processor(), os.cpu_count())."""
import os
import platform
import shutil
import subprocess

# lscpu's names of the lines kept, in this order.
LSCPU_FIELDS = ("Model name", "CPU(s)", "Thread(s) per core", "L1d cache", "L2 cache",
                "L3 cache")


def lscpu_fields(text):
    """{name: value} of lscpu's output for LSCPU_FIELDS (the first line of
    each name; values with their runs of spaces collapsed)."""
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        name = name.strip()
        if sep and name in LSCPU_FIELDS and name not in found:
            found[name] = " ".join(value.split())
    return found


def _lscpu_text():
    """lscpu's output in the C locale (its names untranslated), or None."""
    exe = shutil.which("lscpu")
    if exe is None:
        return None
    try:
        p = subprocess.run([exe], capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def summary(lscpu_text=None):
    """'Model name: ...; CPU(s): 2; ... (lscpu)', or where lscpu is absent
    (or prints none of the names) '<processor>, <n> CPUs (no lscpu)'.
    lscpu_text: lscpu's output, instead of running it."""
    text = _lscpu_text() if lscpu_text is None else lscpu_text
    fields = lscpu_fields(text or "")
    if fields:
        return "; ".join(f"{name}: {fields[name]}" for name in LSCPU_FIELDS
                         if name in fields) + " (lscpu)"
    processor = platform.processor() or platform.machine() or "unknown processor"
    return f"{processor}, {os.cpu_count() or '?'} CPUs (no lscpu)"
