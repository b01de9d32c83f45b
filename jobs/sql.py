"""The engine's SQL, read once from ``jobs/queries.sql``: one complete, named, documented statement
per operation, with its guard in its name (``job_fail_if_lease_held``). Use them as
``queries.job_fail_if_lease_held``; ``queries.doc(name)`` is a statement's documentation.

The same format holds the current text of every database function and trigger (``functions.sql`` of
the app that owns them; ``Queries.read(path)``)."""

from __future__ import annotations

import re
from pathlib import Path

SOURCE = Path(__file__).with_name("queries.sql")
_NAME = re.compile(r"^-- (name|fragment): ([a-z][a-z0-9_]*)$", re.M)
_INCLUDE = re.compile(r"^[ \t]*-- include: ([a-z][a-z0-9_]*)$", re.M)
_CONSTANT = re.compile(r"\{([a-z_]+\.[A-Z_]+)\}")


class Queries:
    """Statements (``-- name: <name>``) and the fragments they share (``-- fragment: <name>``, put in
    place of a line ``-- include: <name>``: a part several statements need, written once)."""

    def __init__(self, text: str, *, source: str = SOURCE.name, constants: dict[str, str] | None = None) -> None:
        """``constants``: SQL literals put in place of ``{group.NAME}`` (states from the declaration,
        say); an unknown one is refused."""
        self.source = source
        self._sql: dict[str, str] = {}
        self._doc: dict[str, str] = {}
        fragments: dict[str, str] = {}
        starts = list(_NAME.finditer(text))
        if len(starts) != len(re.findall(r"^-- (?:name|fragment):", text, re.M)):
            raise ValueError(f"{source}: a '-- name:' line does not name a statement as [a-z][a-z0-9_]*")
        for match, following in zip(starts, [*starts[1:], None]):
            kind, name = match.groups()
            if name in self._sql or name in fragments:
                raise ValueError(f"{source}: statement {name!r} is defined twice")
            lines = text[match.end() : following.start() if following else len(text)].strip("\n").split("\n")
            doc = []
            while lines and lines[0].startswith("--"):
                doc.append(lines.pop(0).removeprefix("--").strip())
            body = "\n".join(lines).strip()
            if kind == "fragment":
                fragments[name] = body
            else:
                self._sql[name], self._doc[name] = body, " ".join(doc)

        def included(use: re.Match) -> str:
            if use.group(1) not in fragments:
                raise ValueError(f"{source}: no fragment {use.group(1)!r} to include")
            return fragments[use.group(1)]

        def constant(use: re.Match) -> str:
            if use.group(1) not in (constants or {}):
                raise ValueError(f"{source}: no constant {use.group(1)!r}")
            return constants[use.group(1)]

        self._raw = {name: _INCLUDE.sub(included, sql) for name, sql in self._sql.items()}
        self._sql = {name: _CONSTANT.sub(constant, sql) for name, sql in self._raw.items()}
        self._names = {sql: name for name, sql in self._sql.items()}

    @classmethod
    def read(cls, path: Path, *, constants: dict[str, str] | None = None) -> Queries:
        return cls(path.read_text(), source=path.name, constants=constants)

    def __getattr__(self, name: str) -> str:
        try:
            return self._sql[name]
        except KeyError:
            raise AttributeError(f"{self.source} has no statement {name!r}") from None

    def name_of(self, sql: str) -> str:
        """The name of a statement of this file, given its text; '' for any other SQL."""
        return self._names.get(sql, "")

    def names(self) -> list[str]:
        return list(self._sql)

    def doc(self, name: str) -> str:
        return self._doc[name]

    def written(self, name: str) -> str:
        """A statement as the file writes it (its constants not rendered)."""
        return self._raw[name]


queries = Queries(SOURCE.read_text())
