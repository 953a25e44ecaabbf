"""Code registered where it is defined, under a name its catalogue holds (as timm's
`@register_model`): a task's training class, a dataset kind's preparation and opening, a figure's
drawing, a table's making, a task's rows of the paper comparison.

The catalogues' records stay light (the Snakefile reads them without torch or pandas); the code
registers itself under a record's name when its module is imported, and whoever runs the code
imports the modules that define it, so the import graph is the true one. A name without a record
is refused when the module is imported; a record without code is refused, with the names there
are, when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class Registry:
    """`what` (in words, for errors) registered under the names `known()` gives."""

    def __init__(self, what: str, known: Callable[[], Iterable[str]]):
        self.what = what
        self.known = known
        self.code: dict[str, Any] = {}

    def register(self, *names: str) -> Callable[[Any], Any]:
        """Decorator: register the function or class under each of `names`."""

        def add(obj: Any) -> Any:
            known = list(self.known())
            for name in names:
                if name not in known:
                    raise ValueError(f"{self.what} {name!r} of {getattr(obj, '__qualname__', obj)}: no record of "
                                     f"that name (allowed: {', '.join(known)})")
                if self.code.get(name, obj) is not obj:
                    raise ValueError(f"{self.what} {name!r}: registered twice ({self.code[name].__qualname__} "
                                     f"and {getattr(obj, '__qualname__', obj)})")
                self.code[name] = obj
            return obj

        return add

    def __contains__(self, name: str) -> bool:
        return name in self.code

    def __getitem__(self, name: str) -> Any:
        try:
            return self.code[name]
        except KeyError:
            raise ValueError(f"{self.what} {name!r}: none registered (allowed: {', '.join(self.code) or 'none'})") \
                from None
