"""Catalogue records name the code they run as "module:attribute", imported only when it runs
(the records stay light: the Snakefile reads them without torch or pandas)."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(target: str) -> Any:
    """The object `target` ("package.module:attribute") names."""
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{target!r}: cannot be imported ({err}) (allowed: 'package.module:attribute')") from None
