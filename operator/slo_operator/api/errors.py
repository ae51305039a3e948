"""Turn validation failures into messages that name the field, as kubectl users expect."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True)
class FieldProblem:
    """One invalid field: its dotted CRD path and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        # A cross-field rule's message already starts with the field it names.
        if self.message.startswith(f"{self.field} "):
            return self.message
        return f"{self.field}: {self.message}"


def _path(prefix: str, loc: tuple[int | str, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def field_problems(err: ValidationError, prefix: str = "spec") -> list[FieldProblem]:
    """One problem per pydantic error, each with a dotted CRD path.

    Cross-field validators already put the field path in their message, so for those the
    message is used as it is rather than prefixed twice.
    """
    problems: list[FieldProblem] = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p not in ("function-after", "function-before"))
        msg = str(e["msg"]).removeprefix("Value error, ")
        if msg.startswith("spec."):
            field = msg.partition(" ")[0]
            problems.append(FieldProblem(field, msg))
            continue
        if msg.startswith(".") and ": " in msg:
            # A model validator naming one of its own fields: ".key: message".
            rel, _, rest = msg.partition(": ")
            problems.append(FieldProblem(_path(prefix, loc) + rel, rest))
            continue
        problems.append(FieldProblem(_path(prefix, loc), msg))
    return problems


def summarize(problems: list[FieldProblem]) -> str:
    """Join problems into one message (``field: message; ...``)."""
    return "; ".join(str(p) for p in problems)
