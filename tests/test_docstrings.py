"""Every public function's docstring passes numpydoc's validation and says
what it raises, and every docstring's example runs and prints what it shows."""
import builtins
import doctest
import importlib

import numpydoc.docscrape
import numpydoc.validate
import pytest

import fastnorm
import fastnorm._api
import fastnorm._config
import fastnorm._explain
import fastnorm._family
import fastnorm._grad

PUBLIC = [name for name in fastnorm.__all__ if name != "__version__"]

# numpydoc's checks not enforced, each with its reason.
IGNORED = {
    "SS05",  # takes any first word ending in "s" for a verb; "Gradients of ..." is a noun
}

# Functions that take nothing to check, so raise nothing: no Raises section.
RAISE_NOTHING = {"get_num_threads", "show_config"}


def _resolve(name):
    """The object a docstring refers to: a dotted path, or a name in
    fastnorm or the builtins."""
    if "." in name:
        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)
    for namespace in (fastnorm, builtins):
        if hasattr(namespace, name):
            return getattr(namespace, name)
    raise LookupError(f"{name!r} names nothing in fastnorm or the builtins")


@pytest.mark.parametrize("name", PUBLIC)
def test_numpydoc_validation(name):
    result = numpydoc.validate.validate(f"fastnorm.{name}")
    errors = [f"{code} {message}" for code, message in result["errors"]
              if code not in IGNORED]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", PUBLIC)
def test_raises_warns_and_see_also_name_real_objects(name):
    # numpydoc has no check for a missing Raises section, nor for names
    # that refer to nothing.
    doc = numpydoc.docscrape.FunctionDoc(getattr(fastnorm, name))
    raises = [entry.type for entry in doc["Raises"]]
    if name not in RAISE_NOTHING:
        assert raises, f"{name} has no Raises section"
    for exc in raises:
        assert issubclass(_resolve(exc), BaseException), exc
    for entry in doc["Warns"]:
        assert issubclass(_resolve(entry.type), Warning), entry.type
    for refs, _ in doc["See Also"]:
        for ref, _ in refs:
            _resolve(ref)


@pytest.mark.parametrize("module", [fastnorm._api, fastnorm._config, fastnorm._family,
                                    fastnorm._grad, fastnorm._explain],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted > 0, "no examples found"
    assert result.failed == 0
