"""Code registered where it is defined, under a name its catalogue holds (as timm's
`@register_model`): a task's training class, a figure's drawing, a table's making, a task's rows
of the paper comparison (a dataset kind's record carries its code itself: data/kinds.py). And
`scoped`, which puts every catalogue and registry back as it was.

The catalogues' records stay light (the Snakefile reads them without torch or pandas); the code
registers itself under a record's name when its module is imported, and whoever runs the code
imports the modules that define it, so the import graph is the true one. A name without a record
is refused when the module is imported; a record without code is refused, with the names there
are, when it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

_HELD: list[dict] = []  # every Registry's code and every catalogue marked by `scoped_catalogue`


def scoped_catalogue(records: dict) -> dict:
    """Mark a catalogue's dict of records as one `scoped` puts back; returns it."""
    _HELD.append(records)
    return records


def add_record(records: dict, what: str, record: Any) -> Any:
    """Add `record` to a catalogue under its `name` (refused where the name is taken); returns it."""
    if record.name in records:
        raise ValueError(f"{what} {record.name!r}: in the catalogue already")
    records[record.name] = record
    return record


@contextmanager
def scoped() -> Iterator[None]:
    """Every registration and record added inside is undone on leaving (what was there before is
    put back). Load the code that registers itself before entering (leaner.catalogues.scoped
    does): code first registered inside is undone too."""
    saved = [(held, dict(held)) for held in _HELD]
    try:
        yield
    finally:
        for held, before in saved:
            held.clear()
            held.update(before)


class Registry:
    """`what` (in words, for errors) registered under the names `known()` gives."""

    def __init__(self, what: str, known: Callable[[], Iterable[str]]):
        self.what = what
        self.known = known
        self.code: dict[str, Any] = scoped_catalogue({})

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
