"""Every public docstring's example runs and prints what it shows."""
import doctest

import pytest

import fastnorm._api
import fastnorm._family
import fastnorm._grad


@pytest.mark.parametrize("module", [fastnorm._api, fastnorm._family, fastnorm._grad],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, "no examples found"
    assert result.failed == 0
