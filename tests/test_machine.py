"""The machine the kernels tune themselves to: detection of the caches and
cores, the tuning derived from them, and results that stay right (and the
same for any thread count) whatever the machine.

The rest of the suite runs on conftest's TEST_MACHINE; the machine really
detected here is checked in a process of its own."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fastnorm
from fastnorm import _machine, _simd
from fastnorm._machine import KIB, MIB, Machine
from reference import (assert_bitwise, assert_close, ref_layer_norm, ref_mean_var, ref_norm_grads,
                       ref_rms_norm)

# Caches far smaller and far larger than any this runs on, and two real ones.
TINY = Machine(l1d=4 * KIB, l2=64 * KIB, l3=256 * KIB, cores=1, source="test")
ZEN = Machine(l1d=32 * KIB, l2=512 * KIB, l3=32 * MIB, cores=2, source="test")
XEON = Machine(l1d=48 * KIB, l2=2 * MIB, l3=105 * MIB, cores=16, source="test")
HUGE = Machine(l1d=128 * KIB, l2=16 * MIB, l3=1 << 30, cores=256, source="test")
MACHINES = [TINY, ZEN, XEON, HUGE]


# ---- reading sizes and FASTNORM_CACHES --------------------------------

@pytest.mark.parametrize("text, value", [("32K", 32768), ("2M", 2 << 20), ("1G", 1 << 30),
                                          ("512", 512), (" 48k ", 48 << 10), ("32768K", 32 << 20),
                                          ("16KiB", 16 << 10)])
def test_sizes_read_as_the_os_writes_them(text, value):
    assert _machine.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-4K", "12Q", "ten"])
def test_a_size_that_is_not_one_says_so(text):
    with pytest.raises(ValueError, match="not a size"):
        _machine.parse_size(text)


def test_override_takes_any_subset():
    assert _machine.parse_override("l2=2M, cores=16") == {"l2": 2 << 20, "cores": 16}
    assert _machine.parse_override("l1d=48K,l2=2M,l3=105M,cores=4") == {
        "l1d": 48 << 10, "l2": 2 << 20, "l3": 105 << 20, "cores": 4}
    assert _machine.parse_override("guest=1,share=8M,prefetch_l1=0") == {
        "guest": True, "share": 8 << 20, "prefetch_l1": False}
    assert _machine.parse_override("guest=0") == {"guest": False}


@pytest.mark.parametrize("text, match", [("l4=8M", "not one of"), ("l2", "not one of"),
                                         ("l2=0", "must be positive"), ("cores=0", "must be positive"),
                                         ("l2=big", "not a size"), ("guest=yes", "guest is 0 or 1"),
                                         ("prefetch_l1=2", "prefetch_l1 is 0 or 1"),
                                         ("share=0", "must be positive"), ("cores=2K", "not a whole number")])
def test_a_wrong_override_names_what_is_wrong(text, match):
    with pytest.raises(ValueError, match=match):
        _machine.parse_override(text)


# ---- detection ----------------------------------------------------------

def _no_source():
    return {}


def test_override_wins_then_sources_in_turn_then_fallbacks():
    sources = (("first", lambda: {"l1d": 48 << 10}), ("second", lambda: {"l1d": 1, "l2": 1 << 20}))
    m = _machine.detect({"FASTNORM_CACHES": "cores=3"}, sources, guest=True,
                        model=("AuthenticAMD", 0x19, 1))
    assert (m.l1d, m.l2, m.l3, m.cores, m.guest, m.prefetch_l1) == (
        48 << 10, 1 << 20, _machine.FALLBACK["l3"], 3, True, True)
    assert m.source == ("l1d: first; l2: second; l3: fallback; cores: FASTNORM_CACHES; "
                        "guest: cpu flags; prefetch_l1: cpu model")


def test_nothing_found_takes_every_fallback_and_the_processors():
    m = _machine.detect({}, (("none", _no_source),), guest=False, model=None)
    assert (m.l1d, m.l2, m.l3) == tuple(_machine.FALLBACK[k] for k in ("l1d", "l2", "l3"))
    assert m.cores == _machine._processors() >= 1
    assert (m.guest, m.share) == (False, 0)
    assert m.source == ("l1d, l2, l3: fallback; cores: affinity; guest: cpu flags; "
                        "prefetch_l1: cpu model")


def test_a_guest_is_told_by_the_hypervisor_flag(tmp_path):
    flags = "fpu vme sse2 avx2 avx512f"
    (tmp_path / "host").write_text(f"processor\t: 0\nmodel name\t: A CPU\nflags\t\t: {flags}\n")
    (tmp_path / "guest").write_text(f"processor\t: 0\nflags\t\t: {flags} hypervisor lahf_lm\n")
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd hypervisorx\n")
    assert not _machine.is_guest(str(tmp_path / "host"))
    assert _machine.is_guest(str(tmp_path / "guest"))
    assert not _machine.is_guest(str(tmp_path / "arm"))      # a word, not a flag
    assert not _machine.is_guest(str(tmp_path / "none"))
    assert _machine.cpu_name(str(tmp_path / "host")) == "A CPU"
    m = _machine.detect({"FASTNORM_CACHES": "guest=1"}, (("none", _no_source),), guest=False)
    assert m.guest and "guest: FASTNORM_CACHES" in m.source


@pytest.mark.parametrize("model, fills", [
    (("AuthenticAMD", 0x17, 0x31), True),     # Zen 2 (Rome)
    (("AuthenticAMD", 0x19, 0x01), True),     # Zen 3 (Milan), the EPYC met
    (("AuthenticAMD", 0x19, 0x21), True),     # Zen 3 (Vermeer)
    (("AuthenticAMD", 0x19, 0x11), False),    # Zen 4 (Genoa)
    (("AuthenticAMD", 0x19, 0x61), False),    # Zen 4 (Raphael)
    (("AuthenticAMD", 0x1A, 0x02), False),    # Zen 5
    (("GenuineIntel", 6, 207), False),        # Emerald Rapids
    (("GenuineIntel", 6, 167), False),
    (None, False),                            # not known: as most machines
])
def test_prefetches_fill_l1_on_amds_cores_before_zen_4(model, fills, monkeypatch):
    assert _machine.prefetch_fills_l1(model) is fills
    # detect reads the model where none is given: this one, on any machine
    monkeypatch.setattr(_machine, "cpu_model", lambda *args: model)
    m = _machine.detect({}, (("none", _no_source),), guest=False)
    assert m.prefetch_l1 is fills
    assert _machine.derive(m)["prefetch_fills_l1"] == int(fills)


def test_the_cpu_model_is_read_from_proc_cpuinfo(tmp_path):
    (tmp_path / "amd").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                  "cpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n"
                                  "\nprocessor\t: 1\nvendor_id\t: Other\n")
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")
    assert _machine.cpu_model(str(tmp_path / "amd")) == ("AuthenticAMD", 25, 1)
    assert _machine.cpu_model(str(tmp_path / "arm")) is None
    assert _machine.cpu_model(str(tmp_path / "missing")) is None
    m = _machine.detect({"FASTNORM_CACHES": "prefetch_l1=1"}, (("none", _no_source),),
                        guest=False, model=None)
    assert m.prefetch_l1 and "prefetch_l1: FASTNORM_CACHES" in m.source


def test_a_source_that_fails_is_passed_over():
    def broken():
        raise OSError("no such file")
    m = _machine.detect({}, (("broken", broken), ("next", lambda: {"l2": 3 << 20})))
    assert m.l2 == 3 << 20 and "l2: next" in m.source


def _cache(root, cpu, index, level, kind, size):
    folder = root / f"cpu{cpu}" / "cache" / f"index{index}"
    folder.mkdir(parents=True)
    (folder / "level").write_text(f"{level}\n")
    (folder / "type").write_text(f"{kind}\n")
    (folder / "size").write_text(f"{size}\n")


def test_sysfs_gives_the_data_and_unified_caches(tmp_path, monkeypatch):
    monkeypatch.setattr(_machine, "_first_cpu", lambda: 0)
    _cache(tmp_path, 0, 0, 1, "Data", "48K")
    _cache(tmp_path, 0, 1, 1, "Instruction", "32K")
    _cache(tmp_path, 0, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 0, 3, 3, "Unified", "107520K")
    assert _machine.from_sysfs(str(tmp_path)) == {"l1d": 48 << 10, "l2": 2 << 20,
                                                  "l3": 105 << 20}


def test_sysfs_without_caches_gives_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(_machine, "_first_cpu", lambda: 0)
    assert _machine.from_sysfs(str(tmp_path)) == {}
    _cache(tmp_path, 0, 0, 1, "Data", "garbage")
    assert _machine.from_sysfs(str(tmp_path)) == {}


def test_sysctl_is_asked_on_macos_only(monkeypatch):
    # Elsewhere, looking for libc would start a process (ldconfig) at import.
    monkeypatch.setattr(_machine.sys, "platform", "linux")
    monkeypatch.setattr(_machine.ctypes.util, "find_library",
                        lambda name: pytest.fail("looked for libc off macOS"))
    assert _machine.from_sysctl() == {}


def _in_a_process_of_its_own(code, folder):
    """json of what code prints, run after importing fastnorm in a fresh
    process without the suite's FASTNORM_CACHES, in folder."""
    env = {k: v for k, v in os.environ.items() if k != "FASTNORM_CACHES"}
    out = subprocess.run([sys.executable, "-c", "import json, fastnorm; from fastnorm import "
                          "_machine, _simd; " + code], env=env, capture_output=True, text=True,
                         cwd=folder)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_machine_detected_here_is_the_one_in_force(tmp_path):
    # In a process of its own, without the suite's FASTNORM_CACHES, away
    # from the source tree (whose fastnorm has no compiled kernels).
    same_machine, same_tuning, source = _in_a_process_of_its_own(
        "m = _machine.load()[0]; "
        "print(json.dumps([m == _machine.MACHINE, "
        "_simd.kernels.tuning() == _machine.derive(m), m.source]))", tmp_path)
    assert same_machine and same_tuning
    assert "FASTNORM_CACHES" not in source
    if sys.platform.startswith("linux") and os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert "fallback" not in source, source


def test_show_config_and_explain_say_what_was_detected_and_chosen(capsys):
    fastnorm.show_config()
    text = capsys.readouterr().out
    assert f"caches:   {_machine.describe()}" in text
    assert "FASTNORM_CACHES" in text          # the suite's machine, named as the source
    assert f"L3 share: {_machine.describe_share()}" in text
    assert "profile:  not read (FASTNORM_CACHES is set)" in text
    for name, value in _simd.kernels.tuning().items():
        assert re.search(rf"\n    {name} +{re.escape(_machine.value_text(name, value))}  "
                         rf"\({re.escape(_machine.RULE_TEXT[name])}\)\n", text), name
    r = fastnorm.explain(fastnorm.layer_norm, np.zeros((4, 8), np.float32))
    m = _machine.MACHINE
    share, rule = _machine.l3_share(m)
    assert r["machine"] == {"l1d": m.l1d, "l2": m.l2, "l3": m.l3, "cores": m.cores,
                            "guest": m.guest, "source": m.source, "share": share,
                            "share_rule": rule, "profile": _machine.PROFILE}
    assert r["tuning"] == _machine.derive(m)
    assert r["rules"] == _machine.RULE_TEXT


# ---- profiles: the share measured (python -m fastnorm --tune) -------------

EMR2 = Machine(l1d=48 * KIB, l2=2 * MIB, l3=300 * MIB, cores=2, source="l3: sysfs", guest=True)


def _profile(path, machine, share=8 * MIB, **changes):
    data = {"format": _machine.PROFILE_FORMAT, "machine": _machine.fingerprint(machine),
            "share": share, "measured": "2026-11-28T12:00:00+00:00"}
    data.update(changes)
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_path_follows_the_environment(tmp_path):
    assert _machine.profile_path({"FASTNORM_PROFILE": "off"}) is None
    assert _machine.profile_path({"FASTNORM_PROFILE": " OFF "}) is None
    named = str(tmp_path / "p.json")
    assert _machine.profile_path({"FASTNORM_PROFILE": named}) == named
    if sys.platform.startswith("linux"):
        assert _machine.profile_path({"XDG_CACHE_HOME": str(tmp_path)}) == str(
            tmp_path / "fastnorm" / "profile.json")


def test_a_profile_of_this_machine_gives_its_share(tmp_path):
    path = _profile(tmp_path / "p.json", EMR2)
    m, line = _machine.read_profile(EMR2, path)
    assert m.share == 8 * MIB and m.source.endswith("share: profile")
    assert line == f"in use: {path}, measured 2026-11-28T12:00:00+00:00"
    assert _machine.derive(m)["stream_min_bytes"] == 8 * MIB
    assert _machine.derive(m)["cached_bytes"] == 4 * MIB       # two L2s still
    assert _machine.l3_share(m) == (8 * MIB, "as measured, not derived")


@pytest.mark.parametrize("content, line", [
    (None, "none (python -m fastnorm --tune measures one)"),
    ("{not json", "is not readable"),
    ('{"format": 99, "share": 1}', "is not a profile of this version"),
    ('{"format": 1, "share": -5}', "is not a profile of this version"),
    ('{"format": 1, "share": "8M"}', "is not a profile of this version"),
    ('[1, 2]', "is not a profile of this version"),
])
def test_a_profile_that_cannot_be_used_is_ignored_and_says_why(tmp_path, content, line):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    m, said = _machine.read_profile(EMR2, str(path))
    assert m == EMR2
    assert line in said


def test_a_profile_of_another_machine_is_ignored(tmp_path):
    path = _profile(tmp_path / "p.json", EMR2)
    for other in (dict(cores=16), dict(l3=480 * MIB), dict(guest=False)):
        m = Machine(**dict(vars(EMR2), **other))
        got, said = _machine.read_profile(m, path)
        assert got == m and said.startswith(f"ignored: {path} was measured on another machine")


def test_no_profile_is_read_where_fastnorm_caches_stands_for_another_machine(tmp_path):
    path = _profile(tmp_path / "p.json", EMR2)
    env = {"FASTNORM_CACHES": "l1d=48K,l2=2M,l3=300M,cores=2,guest=1", "FASTNORM_PROFILE": path}
    m, said = _machine.load(env)
    assert m.share == 0 and said == "not read (FASTNORM_CACHES is set)"
    m, said = _machine.load({"FASTNORM_PROFILE": "off"})
    assert m.share == 0 and said == "off (FASTNORM_PROFILE=off)"


def test_tune_measures_writes_and_the_next_import_uses_its_profile(tmp_path, monkeypatch):
    from fastnorm import _tune
    path = tmp_path / "sub" / "profile.json"
    monkeypatch.setenv("FASTNORM_PROFILE", str(path))
    before = _simd.kernels.tuning()
    fastnorm.set_num_threads(2)
    assert _tune.main(rounds=1, largest=8 * MIB) == 0
    assert _simd.kernels.tuning() == before and fastnorm.get_num_threads() == 2
    data = json.loads(path.read_text())
    assert data["format"] == _machine.PROFILE_FORMAT
    assert [size for size, _ in data["kept_over_streamed"]] == _tune.sizes(
        _machine.detect({}), 8 * MIB)
    assert all(ratio > 0 for _, ratio in data["kept_over_streamed"])
    # The next import: its profile is read, and its share is in force.
    said, share, stream_min = _in_a_process_of_its_own(
        "print(json.dumps([_machine.PROFILE, _machine.MACHINE.share, "
        "_simd.kernels.tuning()['stream_min_bytes']]))", tmp_path)
    assert said.startswith(f"in use: {path}")
    assert share == data["share"] and stream_min == max(share, 2 * _machine.MACHINE.l2)


@pytest.mark.parametrize("ratios, share", [
    ([1.1, 1.2, 1.5], 4 * MIB),      # streaming wins everywhere: from the smallest
    ([0.9, 1.0, 1.3], 8 * MIB),      # even from 8 MiB
    ([0.9, 0.95, 1.3], 16 * MIB),
    ([1.2, 0.9, 1.3], 16 * MIB),     # a size that went the other way counts
    ([0.8, 0.9, 0.95], 32 * MIB),    # never: twice the largest
])
def test_the_share_is_where_streaming_stops_losing(ratios, share):
    from fastnorm import _tune
    results = list(zip((4 * MIB, 8 * MIB, 16 * MIB), ratios))
    assert _tune.share_from(results) == share


def test_tune_is_refused_where_no_profile_would_be_read(monkeypatch, capsys):
    from fastnorm import _tune
    monkeypatch.setenv("FASTNORM_PROFILE", "off")
    assert _tune.main(rounds=1, largest=4 * MIB) == 2
    assert "FASTNORM_PROFILE=off" in capsys.readouterr().out


# ---- the tuning derived ---------------------------------------------------

@pytest.mark.parametrize("m", MACHINES, ids=["tiny", "zen", "xeon", "huge"])
def test_every_value_is_a_positive_int_the_kernels_accept(m):
    values = _machine.derive(m)
    assert list(values) == list(_simd.kernels.TUNING_FIELDS)
    assert all(type(v) is int and (v in (0, 1) if k in _simd.kernels.TUNING_FLAGS else v > 0)
               for k, v in values.items()), values
    with _machine.use(m):
        assert _simd.kernels.tuning() == values


def test_values_follow_the_caches_they_come_from():
    small, large = _machine.derive(ZEN), _machine.derive(XEON)
    for name in small:
        # a core's share of L3 (see below): the EPYC's two cores share more
        if name not in ("stream_min_bytes", "cached_bytes", "cached_bytes_f64"):
            assert small[name] <= large[name], name
    # L2-sized decisions scale with L2, L1-sized ones with L1d.
    assert large["sweep_bytes"] == 4 * small["sweep_bytes"]
    assert large["col_block_bytes"] == 4 * small["col_block_bytes"]
    assert large["prefetch_bytes"] * 2 == 3 * small["prefetch_bytes"]
    # one core's L2 times the cores: the split that keeps each part in its L2
    assert large["same_split_bytes"] == 2 * MIB * 16


def test_a_cores_share_of_l3_is_l3_over_the_cores_at_most_16_mib():
    # Two cores of a 32 MiB L3 (the EPYC guests): half of it.
    assert _machine.l3_share(ZEN) == (16 * MIB, "L3 / 2 cores")
    # One core: still half, x and y both in L3.
    one = Machine(l1d=32 * KIB, l2=512 * KIB, l3=32 * MIB, cores=1, source="test")
    assert _machine.l3_share(one)[0] == 16 * MIB
    # More cores share the same L3: each one's share is less.
    assert _machine.l3_share(XEON) == (105 * MIB // 16, "L3 / 16 cores")
    # A guest of a large socket reports the socket's L3 for its few vCPUs:
    # the share is capped, guest or not (a process pinned to a few cores
    # of a large part overstates it alike).
    for guest in (True, False):
        emr = Machine(l1d=48 * KIB, l2=2 * MIB, l3=300 * MIB, cores=2, source="t", guest=guest)
        assert _machine.l3_share(emr) == (16 * MIB, "L3 / 2 cores = 150 MiB, at most 16 MiB")
    # A share measured (a profile) is taken as it is, in whole lines.
    measured = Machine(l1d=48 * KIB, l2=2 * MIB, l3=300 * MIB, cores=2, source="t",
                       share=40 * MIB + 5)
    assert _machine.l3_share(measured) == (40 * MIB, "as measured, not derived")


def test_outputs_stream_from_a_cores_share_of_the_last_level_cache():
    assert _machine.derive(ZEN)["stream_min_bytes"] == 16 * MIB
    emr16 = Machine(l1d=48 * KIB, l2=2 * MIB, l3=300 * MIB, cores=16, source="test")
    assert _machine.derive(emr16)["stream_min_bytes"] == 16 * MIB
    assert _machine.derive(XEON)["stream_min_bytes"] == 105 * MIB // 16
    # Never below two L2s, where the private caches hold more than the share.
    assert _machine.derive(HUGE)["stream_min_bytes"] == 2 * HUGE.l2
    measured = Machine(l1d=48 * KIB, l2=2 * MIB, l3=300 * MIB, cores=2, source="t",
                       share=40 * MIB)
    assert _machine.derive(measured)["stream_min_bytes"] == 40 * MIB


def test_rows_are_grouped_while_x_and_y_fit_a_quarter_of_a_cores_share_of_l3():
    # Two cores of 32 MiB: 4 MiB, float32 and float64 alike.
    assert _machine.derive(ZEN)["cached_bytes"] == 4 * MIB
    assert _machine.derive(ZEN)["cached_bytes_f64"] == 4 * MIB
    # Sixteen cores of 105 MiB: 1.6 MiB, less than two L2s (4 MiB) and
    # more than a quarter of them (float64).
    assert _machine.derive(XEON)["cached_bytes"] == 4 * MIB
    assert _machine.derive(XEON)["cached_bytes_f64"] == 105 * MIB // 64
    # One core: half of L3 its share, an eighth of L3 the bound.
    one = Machine(l1d=32 * KIB, l2=512 * KIB, l3=32 * MIB, cores=1, source="test")
    assert _machine.derive(one)["cached_bytes"] == 4 * MIB
    # 480 MiB for two vCPUs: a quarter of 16 MiB, not of 240.
    big = Machine(l1d=48 * KIB, l2=2 * MIB, l3=480 * MIB, cores=2, source="test", guest=True)
    assert _machine.derive(big)["cached_bytes"] == 4 * MIB


def test_every_rule_is_named_and_gives_its_value():
    assert [name for name, _, _ in _machine.RULES] == list(_simd.kernels.TUNING_FIELDS)
    assert all(text for text in _machine.RULE_TEXT.values())
    assert "share" in _machine.RULE_TEXT["stream_min_bytes"]
    assert "share" in _machine.RULE_TEXT["cached_bytes"]


def test_gradient_rows_a_page_apart_go_four_where_an_l1_set_holds_them():
    # 8 ways (32 KiB): four rows of x and dy fill a set; two go side by side.
    assert _machine.derive(ZEN)["paged_grad_rows"] == 2
    assert _machine.derive(TINY)["paged_grad_rows"] == 2
    # 12 ways (48 KiB) hold four rows' 8 lines and the partial buffers' 2.
    assert _machine.derive(XEON)["paged_grad_rows"] == 4
    assert _machine.derive(HUGE)["paged_grad_rows"] == 4


def test_values_keep_their_relations_on_any_machine():
    for m in MACHINES:
        t = _machine.derive(m)
        assert t["cached_row_bytes_f64"] <= t["cached_row_bytes"]
        assert t["cached_bytes_f64"] <= t["cached_bytes"]
        assert t["cached_row_bytes"] >= 4 * KIB and t["cached_row_bytes_f64"] >= 2 * KIB
        assert t["out_chunk"] % 64 == 0
        assert t["stats_ahead"] % 64 == 0 and t["sweep_bytes"] % 64 == 0
        assert t["stream_min_bytes"] >= 2 * m.l2


def test_the_kernels_refuse_a_tuning_that_is_not_whole():
    values = _machine.derive(ZEN)
    with pytest.raises(ValueError, match="missing: sweep_bytes"):
        _simd.kernels.set_tuning({k: v for k, v in values.items() if k != "sweep_bytes"})
    with pytest.raises(ValueError, match="out_chunk must be positive"):
        _simd.kernels.set_tuning(dict(values, out_chunk=0))
    with pytest.raises(ValueError, match="prefetch_fills_l1 is 0 or 1"):
        _simd.kernels.set_tuning(dict(values, prefetch_fills_l1=2))
    assert _simd.kernels.tuning() == _machine.TUNING    # unchanged by the refusals


# ---- results on any machine ----------------------------------------------

def _calls(rng, dtype):
    """A call per pattern and way the tuning steers, on shapes that cross its
    thresholds for the machines above: (name, thunk, reference)."""
    out = []
    for shape in [(33, 768), (600, 1000), (2000, 1100)]:        # rows, in cache and not
        x = (3 + rng.standard_normal(shape)).astype(dtype)
        g, b = rng.uniform(0.5, 2, shape[1]), rng.standard_normal(shape[1])
        out.append((f"layer_norm rows {shape}", lambda x=x, g=g, b=b: fastnorm.layer_norm(x, g, b),
                    ref_layer_norm(x, (1,), g, b)[0]))
        out.append((f"rms_norm rows {shape}", lambda x=x, g=g: fastnorm.rms_norm(x, g),
                    ref_rms_norm(x, (1,), g)[0]))
        out.append((f"mean_var columns {shape}", lambda x=x: fastnorm.mean_var(x, axis=0)[1],
                    ref_mean_var(x, (0,))[1][0]))
    x = (3 + rng.standard_normal((2500, 700))).astype(dtype)         # columns, strips and blocks
    out.append(("layer_norm axis 0", lambda x=x: fastnorm.layer_norm(x, axis=0),
                ref_layer_norm(x, (0,))[0]))
    x = (3 + rng.standard_normal((6, 24, 30, 30))).astype(dtype)     # images
    out.append(("batch_norm NCHW", lambda x=x: fastnorm.batch_norm(x),
                ref_layer_norm(x, (0, 2, 3))[0]))
    x = (3 + rng.standard_normal((4, 20, 20, 48))).astype(dtype)     # NHWC columns
    out.append(("batch_norm NHWC", lambda x=x: fastnorm.batch_norm(x, axis=(0, 1, 2)),
                ref_layer_norm(x, (0, 1, 2))[0]))
    # gradients, rows a page apart: two or four side by side by the machine
    x = (3 + rng.standard_normal((901, 1024))).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    g = rng.uniform(0.5, 2, x.shape[1])
    _, m, r = fastnorm.layer_norm(x, return_stats=True)
    grads = ref_norm_grads(dy, x, (1,), (1,), gamma=g[None])
    for i, name in enumerate(("dx", "dgamma")):
        out.append((f"layer_norm_backward rows {name}",
                    lambda x=x, dy=dy, m=m, r=r, g=g, i=i:
                        fastnorm.layer_norm_backward(dy, x, m, r, g)[i],
                    grads[name].reshape(-1 if name == "dgamma" else x.shape)))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [TINY, ZEN, XEON, HUGE, None],
                         ids=["tiny", "zen", "xeon", "huge", "detected"])
def test_results_are_right_and_thread_independent_on_any_machine(m, dtype):
    rng = np.random.default_rng(7)
    machine = _machine.detect({k: v for k, v in os.environ.items()
                               if k != "FASTNORM_CACHES"}) if m is None else m
    tol = 2e-5 if dtype == np.float32 else 1e-11
    with _machine.use(machine):
        for name, call, ref in _calls(rng, dtype):
            fastnorm.set_num_threads(1)
            one = np.asarray(call())
            fastnorm.set_num_threads(3)
            three = np.asarray(call())
            assert_bitwise(one, three, name)
            assert_close(one, ref, tol * (1 + np.abs(ref)), name)
