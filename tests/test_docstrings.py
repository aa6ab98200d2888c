"""Every public docstring's example runs and prints what it shows."""
import doctest

import pytest

import fastnorm._api
import fastnorm._config
import fastnorm._family
import fastnorm._grad


@pytest.mark.parametrize("module", [fastnorm._api, fastnorm._config, fastnorm._family,
                                    fastnorm._grad],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted > 0, "no examples found"
    assert result.failed == 0
