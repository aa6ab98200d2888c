"""The machine the kernels tune themselves to, and the values derived from it.

Detected once at import: the data cache of one core (L1d), its L2, the
last-level cache (L3), the processors this process may run on, whether
the machine is a virtual one (the CPU's hypervisor flag), and whether a
prefetch into L2 fills L1 too (the CPU's model).  Every tuning
value that depends on the machine is derived from these by ``derive``, one
rule each with its reason (``RULES``); ``src/tuning.h`` holds the fixed ones
(register counts, numerics, data-structure sizes, memory budgets).

The rules that size work by the last-level cache use a core's share of it
(``l3_share``): L3 over the cores, at most ``SHARE_MAX``.  A profile
written by ``python -m fastnorm --tune`` (``fastnorm._tune``) replaces that
guess by the share measured on this machine; later imports read it
(``FASTNORM_PROFILE`` names its file, or ``off``).

``FASTNORM_CACHES`` overrides what is detected, any subset of
``l1d=48K,l2=2M,l3=105M,cores=16,guest=1,share=8M,prefetch_l1=0`` (sizes in bytes, with
an optional K, M or G): to reproduce another machine's routes, or where
detection is wrong; a profile is not read while it is set.  A size that
cannot be found takes its fallback (``FALLBACK``), and ``source`` says
which.
"""
import contextlib
import ctypes
import ctypes.util
import json
import os
import platform
import re
import sys
from dataclasses import dataclass

KIB = 1 << 10
MIB = 1 << 20


@dataclass(frozen=True)
class Machine:
    """What the tuning is derived from (bytes; cores: processors usable)."""
    l1d: int
    l2: int       # one core's
    l3: int       # the last-level cache a core shares with its neighbours
    cores: int
    source: str   # where each value came from, e.g. "l1d, l2, l3: sysfs; cores: affinity"
    guest: bool = False  # a virtual machine: its L3 is the host socket's, shared unseen
    share: int = 0       # a core's share of L3 as measured (a profile); 0: l3_share's rule
    prefetch_l1: bool = False  # a prefetch into L2 fills L1 too (AMD's cores before Zen 4)


# Taken where a size cannot be found: the smaller caches of current
# x86-64 and Arm server cores, so a machine with more loses a little speed,
# never the fit in cache that a value assumes.
FALLBACK = {"l1d": 32 * KIB, "l2": 512 * KIB, "l3": 8 * MIB}
NAMES = ("l1d", "l2", "l3", "cores", "guest", "share", "prefetch_l1")
FLAGS = ("guest", "prefetch_l1")
SIZES = ("l1d", "l2", "l3", "share")
# A core's share of the last-level cache at most.  A virtual machine sees
# its host socket's L3 (300 and 480 MiB on the Xeons met, for 2 vCPUs) and
# the cores it shares that with are out of its sight; so does a process
# pinned to a few cores of a large part.  On the guests measured, outputs
# gained from streaming from 8-16 MiB (Xeon) and 16-32 MiB (EPYC Zen 3)
# a core; docs/design.md has the figures.
SHARE_MAX = 16 * MIB
# Tuning values that count values or columns; the others are bytes.
COUNTS = ("parallel_min", "ahead_f32", "out_chunk", "paged_grad_rows", "prefetch_fills_l1")


def parse_size(text):
    """'48K', '2M', '105M', '1G' or plain bytes -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(I?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M or G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def parse_override(text):
    """FASTNORM_CACHES's value -> {name: int}."""
    values = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in NAMES:
            raise ValueError(f"FASTNORM_CACHES: {part!r} is not one of "
                             f"{', '.join(n + '=...' for n in NAMES)}")
        if name in FLAGS:
            if value.strip() not in ("0", "1"):
                raise ValueError(f"FASTNORM_CACHES: {name} is 0 or 1, not {value.strip()!r}")
            values[name] = value.strip() == "1"
            continue
        if name in SIZES:
            values[name] = parse_size(value)
        elif value.strip().isdigit():
            values[name] = int(value)
        else:
            raise ValueError(f"FASTNORM_CACHES: {name}={value.strip()} is not a whole number")
        if values[name] <= 0:
            raise ValueError(f"FASTNORM_CACHES: {name} must be positive")
    return values


def _processors():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API on this OS
        return os.cpu_count() or 1


def _first_cpu():
    try:
        return min(os.sched_getaffinity(0))
    except (AttributeError, OSError, ValueError):
        return 0


def from_sysfs(root="/sys/devices/system/cpu"):
    """Linux: the caches of the first processor this process may run on,
    as the kernel lists them (per core for L1d and L2; L3 as shared by the
    core's neighbours, which cpuid-based sysconf overstates on some CPUs)."""
    found = {}
    folder = os.path.join(root, f"cpu{_first_cpu()}", "cache")
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return found
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(folder, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(folder, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(folder, entry, "size")) as f:
                size = parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size <= 0:
            continue
        name = {1: "l1d", 2: "l2", 3: "l3"}.get(level)
        if name and kind in ("Data", "Unified"):
            found[name] = size
    return found


def from_sysctl():
    """macOS: the performance cores' caches (Apple's L2 is shared by a
    cluster: a core's part is its size over the cores that share it; with no
    L3 that shared L2 is the last level)."""
    if sys.platform != "darwin":
        return {}
    path = ctypes.util.find_library("c")
    if not path:
        return {}
    libc = ctypes.CDLL(path)

    def get(name):
        value, size = ctypes.c_int64(0), ctypes.c_size_t(8)
        if libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0):
            return 0
        return value.value

    found = {}
    l1d = get("hw.perflevel0.l1dcachesize") or get("hw.l1dcachesize")
    l2 = get("hw.perflevel0.l2cachesize") or get("hw.l2cachesize")
    share = get("hw.perflevel0.cpusperl2") or 1
    l3 = get("hw.l3cachesize")
    if l1d > 0:
        found["l1d"] = l1d
    if l2 > 0:
        found["l2"] = l2 // max(1, share)
        found["l3"] = l3 if l3 > 0 else l2
    return found


def from_sysconf():
    """Other Unix (glibc's cpuid reading)."""
    found = {}
    for name, key in (("l1d", "SC_LEVEL1_DCACHE_SIZE"), ("l2", "SC_LEVEL2_CACHE_SIZE"),
                      ("l3", "SC_LEVEL3_CACHE_SIZE")):
        try:
            value = os.sysconf(key)
        except (ValueError, OSError, AttributeError):
            continue
        if value and value > 0:
            found[name] = value
    return found


def is_guest(cpuinfo="/proc/cpuinfo"):
    """Whether this is a virtual machine: the hypervisor flag x86 CPUs
    show a guest (Linux's /proc/cpuinfo; macOS's kern.hv_vmm_present)."""
    if sys.platform == "darwin":
        path = ctypes.util.find_library("c")
        if path:
            value, size = ctypes.c_int64(0), ctypes.c_size_t(8)
            if not ctypes.CDLL(path).sysctlbyname(b"kern.hv_vmm_present", ctypes.byref(value),
                                                   ctypes.byref(size), None, 0):
                return value.value != 0
        return False
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return "hypervisor" in line.split(":", 1)[-1].split()
    except OSError:
        pass
    return False


def cpu_name(cpuinfo="/proc/cpuinfo"):
    """The processor's model name, as the OS gives it."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """(vendor, family, model) of the first processor, as Linux lists
    them; None elsewhere."""
    found = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if sep and key in ("vendor_id", "cpu family", "model") and key not in found:
                    found[key] = value.strip()
                if not line.strip() and found:
                    break
        return found["vendor_id"], int(found["cpu family"]), int(found["model"])
    except (OSError, KeyError, ValueError):
        return None


def prefetch_fills_l1(model):
    """Whether a prefetch into L2 (prefetcht1) fills L1 as well: AMD's Zen,
    Zen 2 (family 0x17) and Zen 3 (family 0x19, models 0x00-0x0f and
    0x20-0x5f); not Intel's cores, nor AMD's from Zen 4 (family 0x19,
    models 0x10-0x1f, 0x60 on; family 0x1a)."""
    if model is None or model[0] != "AuthenticAMD":
        return False
    _, family, number = model
    return family == 0x17 or (family == 0x19 and (number < 0x10 or 0x20 <= number < 0x60))


def detect(environ=None, sources=None, guest=None, model=None):
    """The Machine: FASTNORM_CACHES first, then the OS's sources in turn,
    then FALLBACK (guest: is_guest, or a value given; model: cpu_model's
    answer, or one given)."""
    environ = os.environ if environ is None else environ
    if sources is None:
        sources = (("sysfs", from_sysfs), ("sysctl", from_sysctl), ("sysconf", from_sysconf))
    values, origin = {}, {}
    override = environ.get("FASTNORM_CACHES", "").strip()
    for name, value in (parse_override(override) if override else {}).items():
        values[name], origin[name] = value, "FASTNORM_CACHES"
    for label, source in sources:
        if all(n in values for n in FALLBACK):
            break
        try:
            found = source()
        except OSError:
            continue
        for name, value in found.items():
            if name not in values:
                values[name], origin[name] = value, label
    for name, value in FALLBACK.items():
        if name not in values:
            values[name], origin[name] = value, "fallback"
    if "cores" not in values:
        values["cores"], origin["cores"] = _processors(), "affinity"
    if "guest" not in values:
        values["guest"] = is_guest() if guest is None else guest
        origin["guest"] = "cpu flags"
    if "prefetch_l1" not in values:
        values["prefetch_l1"] = prefetch_fills_l1(cpu_model() if model is None else model)
        origin["prefetch_l1"] = "cpu model"
    by_origin = {}
    for name in NAMES:
        if name in origin:
            by_origin.setdefault(origin[name], []).append(name)
    source = "; ".join(f"{', '.join(names)}: {where}" for where, names in by_origin.items())
    return Machine(values["l1d"], values["l2"], values["l3"], values["cores"], source,
                   values["guest"], values.get("share", 0), values["prefetch_l1"])


# ---- profiles: a core's share of L3 measured (python -m fastnorm --tune)

PROFILE_FORMAT = 1


def profile_path(environ=None):
    """Where the profile is read and written: FASTNORM_PROFILE, else the
    user's cache folder; None where FASTNORM_PROFILE is "off"."""
    environ = os.environ if environ is None else environ
    named = environ.get("FASTNORM_PROFILE", "").strip()
    if named:
        return None if named.lower() == "off" else os.path.abspath(os.path.expanduser(named))
    if sys.platform == "win32":
        root = environ.get("LOCALAPPDATA") or os.path.expanduser("~")
    elif sys.platform == "darwin":
        root = os.path.expanduser("~/Library/Caches")
    else:
        root = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(root, "fastnorm", "profile.json")


def fingerprint(m):
    """What a profile was measured on: the processor and what was detected."""
    return {"cpu": cpu_name(), "l1d": m.l1d, "l2": m.l2, "l3": m.l3, "cores": m.cores,
            "guest": m.guest, "prefetch_l1": m.prefetch_l1}


def read_profile(m, path):
    """(m with the profile's share, what became of the profile: a line)."""
    if path is None:
        return m, "off (FASTNORM_PROFILE=off)"
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return m, "none (python -m fastnorm --tune measures one)"
    except (OSError, ValueError) as e:
        return m, f"ignored: {path} is not readable ({e})"
    if not (isinstance(data, dict) and data.get("format") == PROFILE_FORMAT
            and type(data.get("share")) is int and data["share"] > 0):
        return m, f"ignored: {path} is not a profile of this version"
    if data.get("machine") != fingerprint(m):
        return m, f"ignored: {path} was measured on another machine ({data.get('machine')})"
    m = Machine(m.l1d, m.l2, m.l3, m.cores, f"{m.source}; share: profile", m.guest,
                data["share"], m.prefetch_l1)
    return m, f"in use: {path}, measured {data.get('measured', '?')}"


def load(environ=None):
    """The machine in force and the profile's line: detect(), then the
    profile unless FASTNORM_CACHES is set (it stands for another machine)."""
    environ = os.environ if environ is None else environ
    m = detect(environ)
    if environ.get("FASTNORM_CACHES", "").strip():
        return m, "not read (FASTNORM_CACHES is set)"
    return read_profile(m, profile_path(environ))


# ---- the tuning derived

def _line(n, low):
    """n bytes down to whole 64-byte lines, at least low."""
    return max(low, n // 64 * 64)


def _pow2(n, low):
    """n down to a power of two, at least low."""
    return max(low, 1 << (max(1, n).bit_length() - 1))


def l3_share(m):
    """(a core's share of the last-level cache, the rule that gave it): as
    measured where a profile (or FASTNORM_CACHES) gives it; else L3 over
    the cores (two at least: a core beside its neighbour), at most
    SHARE_MAX."""
    if m.share:
        return _line(m.share, 64 * KIB), "as measured, not derived"
    cores = max(2, m.cores)
    share = _line(max(m.l3, m.l2), 64 * KIB) // cores
    if share > SHARE_MAX:
        return SHARE_MAX, f"L3 / {cores} cores = {size_text(share)}, at most {size_text(SHARE_MAX)}"
    return share, f"L3 / {cores} cores"


class _Sizes:
    """A machine's sizes as the rules read them: whole lines, at least a
    few of them."""

    def __init__(self, m):
        self.l1d = _line(m.l1d, 4 * KIB)
        self.l2 = _line(m.l2, 64 * KIB)
        self.cores = m.cores
        self.share = l3_share(m)[0]
        self.prefetch_l1 = m.prefetch_l1


# Every machine-dependent tuning value, in src/tuning.h's fn_tuning order:
# (name, the rule in words, the rule on a machine's _Sizes).  The reason
# for each is beside it.
RULES = (
    # Calls of fewer values run on one thread: one core works through twice
    # its L1d in values (from L1 and L2) sooner than a team starts and joins.
    ("parallel_min", "2 L1d, in values", lambda c: _pow2(2 * c.l1d, 4096)),
    # Calls on x that fits the cores' L2s split their work the same way
    # every time, so each thread finds its part in its own cache.
    ("same_split_bytes", "L2 x cores", lambda c: c.l2 * c.cores),
    # Contiguous statistics fetch a quarter of L1d ahead: far enough for the
    # reads from memory in flight, near enough to stay in L1.
    ("stats_ahead", "L1d / 4", lambda c: _line(c.l1d // 4, 1 * KIB)),
    # Rows are grouped (one vector lane a row) while x and y together fit a
    # quarter of a core's share of the last-level cache, two L2s at least
    # (they come from cache, where a row's reductions cost more than its
    # values; from memory, each row a page, they lose the prefetchers at
    # every row; a quarter, since other processes' data shares L3 too), and
    # a row an 128th of L2 (16 rows of a group, read twice, stay in an
    # eighth of it).  float64 rows take two looks: a quarter of the L2
    # terms.  From cache, rows at least twice as long as from memory
    # (tuning.h's SHORT_ROW_BYTES, 1 KiB) are grouped.
    ("cached_bytes", "max(2 L2, share / 4)", lambda c: max(2 * c.l2, c.share // 4)),
    ("cached_row_bytes", "L2 / 128", lambda c: _line(c.l2 // 128, 4 * KIB)),
    ("cached_bytes_f64", "max(L2 / 2, share / 4)", lambda c: max(c.l2 // 2, c.share // 4)),
    ("cached_row_bytes_f64", "L2 / 512", lambda c: _line(c.l2 // 512, 2 * KIB)),
    # The next slice of a strided slice, fetched while it is written: half
    # of L1d, beside what is being written.
    ("prefetch_bytes", "L1d / 2", lambda c: _line(c.l1d // 2, 1 * KIB)),
    # A slice of one contiguous run fetches the whole next slice as its
    # output is written while the two fit half of L2 (else the fetched
    # lines are pushed out before its statistics read them).
    ("next_slice_bytes", "L2 / 4", lambda c: _line(c.l2 // 4, 16 * KIB)),
    # Each run of the next slice of several runs (NCHW channels are too many
    # streams for the prefetchers): an eighth of L1d; runs of that many
    # bytes hand the next run to the output pass to fetch.
    ("run_ahead_bytes", "L1d / 8", lambda c: _line(c.l1d // 8, 512)),
    # Values ahead of the float32 output pass of several-run slices: a
    # quarter of L1d.
    ("ahead_f32", "L1d / 4, in float32 values", lambda c: max(128, c.l1d // 4 // 4)),
    # Runs up to a quarter of L1d go image by image; longer ones slice by
    # slice, which keeps the slice in L2 between its two looks.
    ("image_run_bytes", "L1d / 4", lambda c: _line(c.l1d // 4, 1 * KIB)),
    # A row block of the column statistics reads half of L2 of its tile (and
    # at least tuning.h's ROW_BLOCK_AIM rows).
    ("col_block_bytes", "L2 / 2", lambda c: c.l2 // 2),
    # Rows x tile bytes of a column sweep: the sweep and the next one,
    # fetched meanwhile, stay in L2 beside the output of the strip.
    ("sweep_bytes", "L2 / 16", lambda c: _line(c.l2 // 16, 4 * KIB)),
    # The columns' output chunk: its float32 coefficients (3 a column, 12
    # bytes) within three eighths of L1d, in whole vectors of 64.
    ("out_chunk", "L1d / 32, in columns", lambda c: max(64, c.l1d // 32 // 64 * 64)),
    # float64 rows run with periodic coefficients (24 bytes a column) while
    # those stay within three eighths of L1d beside the stream.
    ("periodic_bytes", "3/8 L1d", lambda c: _line(c.l1d * 3 // 8, 1 * KIB)),
    # Outputs of a core's share of the last-level cache or more are written
    # around the caches: the other cores' data shares it, so beside x they
    # would not stay there, and would evict x and the caller's data on
    # their way out.
    ("stream_min_bytes", "max(share, 2 L2)", lambda c: max(c.share, 2 * c.l2)),
    # Gradient rows an L1 way apart (4 KiB) read side by side: tuning.h's
    # GRAD_ROWS (4) where an L1 set holds their 8 lines of x and dy and the
    # partial buffers' 2, half as many where it does not.  A set has L1d /
    # 4 KiB ways (x86 indexes L1d within a page).
    ("paged_grad_rows", "4 where L1d has 10 ways of 4 KiB, else 2",
     lambda c: 4 if c.l1d // (4 * KIB) >= 2 * 4 + 2 else 2),
    # Where a prefetch into L2 fills L1 too (1), column sweeps from memory
    # over rows an L1 way apart (a multiple of 4 KiB) fetch only the next
    # rows' heads (the next sweep's lines, all in the same L1 sets, would
    # push out those the strips still read), and the gradients' first pass
    # over rows fetches nothing ahead.  Elsewhere (0) sweeps fetch the
    # next sweep whole and that pass the next rows.
    ("prefetch_fills_l1", "1 where a prefetch into L2 fills L1 too, else 0",
     lambda c: 1 if c.prefetch_l1 else 0),
)
RULE_TEXT = {name: text for name, text, _ in RULES}


def derive(m):
    """Every machine-dependent tuning value, from m; names as in
    src/tuning.h's fn_tuning (RULES gives each rule and its reason)."""
    c = _Sizes(m)
    return {name: rule(c) for name, _, rule in RULES}



def _loaded_kernels():
    return [m for name, m in list(sys.modules.items())
            if name.startswith("fastnorm._kernels_") and m is not None]


@contextlib.contextmanager
def use(machine):
    """Run the enclosed calls with the tuning derived for `machine` (a
    Machine) in every kernel module loaded: how the tests reach another
    machine's routes.  Process-wide; not for use beside calls in flight."""
    values = derive(machine)
    modules = _loaded_kernels()
    previous = [m.tuning() for m in modules]
    for m in modules:
        m.set_tuning(values)
    try:
        yield values
    finally:
        for m, old in zip(modules, previous):
            m.set_tuning(old)


def size_text(n):
    """Bytes as the caches are usually quoted: 48 KiB, 2 MiB, 1.5 MiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.3g} {unit}"
    return f"{n} B"


def value_text(name, value):
    """A tuning value as show_config prints it: a count, or bytes."""
    return str(value) if name in COUNTS else size_text(value)


def describe(machine=None):
    """One line of what was detected, as show_config prints it."""
    m = MACHINE if machine is None else machine
    kind = "a virtual machine" if m.guest else "not a virtual machine"
    fill = "fill L1 too" if m.prefetch_l1 else "leave L1 alone"
    return (f"L1d {size_text(m.l1d)}, L2 {size_text(m.l2)} a core, L3 {size_text(m.l3)}; "
            f"{m.cores} cores; {kind}; prefetches into L2 {fill} ({m.source})")


def describe_share(machine=None):
    """One line of a core's share of L3 and the rule that gave it."""
    share, rule = l3_share(MACHINE if machine is None else machine)
    return f"{size_text(share)} a core ({rule})"


MACHINE, PROFILE = load()
TUNING = derive(MACHINE)
