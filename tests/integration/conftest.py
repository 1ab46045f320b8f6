from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.system import System, moto_system


@pytest.fixture
def system() -> Iterator[System]:
    with moto_system() as built:
        yield built
