import importlib.metadata

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import fastnorm
import fastnorm._simd as dispatch


def test_public_names():
    for name in ["mean_var", "layer_norm", "rms_norm", "batch_norm", "get_num_threads",
                 "set_num_threads", "show_config", "__version__"]:
        assert name in fastnorm.__all__
        assert hasattr(fastnorm, name)
        if name != "__version__":
            assert callable(getattr(fastnorm, name))


def test_version_matches_metadata():
    assert isinstance(fastnorm.__version__, str)
    assert fastnorm.__version__ == importlib.metadata.version("numpy-fastnorm")


# A build without OpenMP runs every call on one thread and says so in
# get_num_threads(); the thread-setting tests are about OpenMP builds.
needs_openmp = pytest.mark.skipif(not fastnorm._config.config()["openmp"],
                                  reason="built without OpenMP: always one thread")


def test_get_num_threads_default_is_a_positive_int():
    n = fastnorm.get_num_threads()
    assert isinstance(n, int) and n >= 1


@needs_openmp
@pytest.mark.parametrize("n", [1, 2, 3, 8, np.int64(4)])
def test_set_num_threads_round_trip(n):
    default = fastnorm.get_num_threads()
    fastnorm.set_num_threads(n)
    assert fastnorm.get_num_threads() == int(n)
    assert type(fastnorm.get_num_threads()) is int
    fastnorm.set_num_threads(None)
    assert fastnorm.get_num_threads() == default


@needs_openmp
@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                     ("2", TypeError), (2.0, TypeError), ([2], TypeError)])
def test_set_num_threads_rejects(bad, exc):
    fastnorm.set_num_threads(3)
    with pytest.raises(exc):
        fastnorm.set_num_threads(bad)
    assert fastnorm.get_num_threads() == 3, "a rejected value must not change the setting"


@needs_openmp
def test_threadpoolctl_caps_even_an_explicit_count():
    with threadpool_limits(limits=1, user_api="openmp"):
        assert fastnorm.get_num_threads() == 1
        fastnorm.set_num_threads(3)
        try:
            assert fastnorm.get_num_threads() == 1
        finally:
            fastnorm.set_num_threads(None)
        assert fastnorm.get_num_threads() == 1
    fastnorm.set_num_threads(3)
    try:
        assert fastnorm.get_num_threads() == 3
    finally:
        fastnorm.set_num_threads(None)


def test_omp_num_threads_is_honoured(run_python):
    r = run_python("import fastnorm; print(fastnorm.get_num_threads())", OMP_NUM_THREADS="3")
    assert r.returncode == 0, r.stderr
    # A build without OpenMP runs serially and says so.
    expected = "3" if fastnorm._config.config()["openmp"] else "1"
    assert r.stdout.strip() == expected


def test_show_config(capsys):
    assert fastnorm.show_config() is None
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert any(fastnorm.__version__ in line and "fastnorm" in line for line in lines), text
    assert any("OpenMP" in line for line in lines), text
    simd = [line for line in lines if "SIMD" in line]
    assert simd, text
    # The SIMD line names the level in use and those available.
    for level in dispatch.available_levels():
        assert level in simd[0], simd[0]
    assert any("thread" in line.lower() and str(fastnorm.get_num_threads()) in line
               for line in lines), text


@needs_openmp
def test_show_config_reports_set_threads(capsys):
    fastnorm.set_num_threads(5)
    fastnorm.show_config()
    text = capsys.readouterr().out
    assert any("thread" in line.lower() and "5" in line for line in text.splitlines()), text


def test_type_stub_matches_the_functions():
    # The stub (fastnorm/__init__.pyi) must list every public name with the
    # parameters the functions really take, in order and kind.
    import ast
    import inspect
    import pathlib

    stub = ast.parse(pathlib.Path(fastnorm.__file__).with_suffix(".pyi").read_text())
    declared = {}
    for node in stub.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            declared.setdefault(node.name, set()).add(
                (tuple(p.arg for p in a.posonlyargs + a.args), tuple(p.arg for p in a.kwonlyargs)))
        elif isinstance(node, ast.ClassDef):
            # A class: its constructor's parameters (self left out), as
            # inspect.signature gives them for the class.
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    a = f.args
                    declared.setdefault(node.name, set()).add(
                        (tuple(p.arg for p in a.posonlyargs + a.args)[1:],
                         tuple(p.arg for p in a.kwonlyargs)))
    for name in fastnorm.__all__:
        if name == "__version__":
            continue
        params = inspect.signature(getattr(fastnorm, name)).parameters.values()
        positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        keyword = tuple(p.name for p in params if p.kind == p.KEYWORD_ONLY)
        assert declared.get(name) == {(positional, keyword)}, name
