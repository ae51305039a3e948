"""Check ``vllm serve`` options against vLLM's own argument parser, as captured.

``slo_operator/data/serve-args-vllm-0.32.0.json`` is a dump of every action of
``vllm serve``'s argparse parser (flags, dest, type, nargs, choices) and of the
``--quantization`` method list, taken from vLLM 0.32.0 (copied from
``../shared/fixtures/vllm``). It is the operator's contract with vLLM: every generated
argument list and every user extra argument is checked against it before a pod is built.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

SPEC_FILE = "data/serve-args-vllm-0.32.0.json"

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# vLLM's human_readable_int (vllm/utils/argparse_utils.py): plain integers, or a number
# with a decimal (k, m, g, t; also M, G, T in later versions) or binary (K, M, G, T;
# Ki, Mi, Gi, Ti in later versions) suffix. Both spellings are accepted here.
# Decimals only with a decimal suffix; "8.5K" is rejected by both spellings.
_HUMAN_INT = re.compile(r"^\d+(?:\.\d+)?[kmgtMGT]?$|^\d+(?:[KMGT]|Ki|Mi|Gi|Ti)$")
# argparse types whose value must be JSON (vllm/engine/arg_utils.py: parse_dataclass
# and _parse_type wrap json.loads; "loads" is json.loads itself).
_JSON_TYPES = frozenset({"loads", "parse_dataclass", "_parse_type"})
# Options whose value is a config object, so dotted keys may address one field.
_CONFIG_TYPES = frozenset({"parse_dataclass", "_parse_type", "union_dict_and_str"})


@dataclass(frozen=True)
class ArgAction:
    flags: tuple[str, ...]
    dest: str
    type: str | None
    nargs: int | str | None
    choices: tuple[str, ...] | None
    takes_value: bool


@dataclass(frozen=True)
class Problem:
    """One thing wrong in an argument list. ``index`` is the offending token's position;
    ``path`` is set for user input (``spec.engine.extraArgs[i]``)."""

    index: int
    flag: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class ParsedOption:
    """One option occurrence: tokens ``args[start:end]``."""

    action: ArgAction
    flag: str
    values: tuple[str, ...]
    start: int
    end: int
    # "--compilation-config.mode=3" sets one key of a JSON config option.
    nested_key: str | None = None


def is_option(token: str) -> bool:
    # argparse treats "-1" as a value when the parser has no option that looks like a
    # negative number, which holds for vllm serve.
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


def normalize_flag(flag: str) -> str:
    """vLLM's FlexibleArgumentParser accepts underscores in long options
    (vllm/utils/argparse_utils.py: ``--max_num_seqs`` becomes ``--max-num-seqs``)."""
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


class VllmArgSpec:
    """The captured parser of one vLLM version."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.distribution: str = str(data.get("vllm_distribution", "unknown"))
        self.quantization_methods: tuple[str, ...] = tuple(data["quantization_methods"])
        actions: list[ArgAction] = []
        for raw in data["actions"]:
            choices = raw.get("choices")
            actions.append(
                ArgAction(
                    flags=tuple(raw["flags"]),
                    dest=str(raw["dest"]),
                    type=raw.get("type"),
                    nargs=raw.get("nargs"),
                    choices=(
                        tuple(str(c) for c in choices if c is not None)
                        if choices is not None
                        else None
                    ),
                    takes_value=bool(raw.get("takes_value")),
                )
            )
        self.actions: tuple[ArgAction, ...] = tuple(actions)
        self._by_flag: dict[str, ArgAction] = {f: a for a in actions for f in a.flags}
        self._by_dest: dict[str, ArgAction] = {a.dest: a for a in actions}

    @classmethod
    def load(cls) -> VllmArgSpec:
        """The spec shipped as package data."""
        return _load_default()

    def action(self, flag: str) -> ArgAction | None:
        return self._by_flag.get(normalize_flag(flag))

    def by_dest(self, dest: str) -> ArgAction | None:
        return self._by_dest.get(dest)

    # ------------------------------------------------------------------ parsing

    def parse(self, args: Sequence[str]) -> tuple[list[ParsedOption], list[Problem]]:
        """Split an argument list into options, the way argparse would."""
        options: list[ParsedOption] = []
        problems: list[Problem] = []
        n = len(args)
        i = 0
        while i < n:
            tok = args[i]
            if not is_option(tok):
                problems.append(
                    Problem(i, "", f"value {tok!r} does not follow an option that takes one")
                )
                i += 1
                continue
            inline: str | None = None
            flag = tok
            # argparse splits "--flag=value" and "-f=value" alike (_parse_optional).
            if "=" in tok:
                flag, inline = tok.split("=", 1)
            special = self._parse_special(args, i, flag, inline)
            if special is not None:
                opt, problem, i = special
                if opt is not None:
                    options.append(opt)
                if problem is not None:
                    problems.append(problem)
                continue
            flag = normalize_flag(flag)
            action = self._by_flag.get(flag)
            if action is None:
                problems.append(Problem(i, flag, f"{flag} is not an option of vllm serve"))
                i += 1
                # Skip its values so they are not reported again as stray values.
                while i < n and not is_option(args[i]):
                    i += 1
                continue
            values, j, msg = self._take_values(action, args, i, inline)
            if msg is not None:
                problems.append(Problem(i, flag, msg))
            options.append(ParsedOption(action, flag, tuple(values), i, j))
            i = j
        return options, problems

    def _parse_special(
        self, args: Sequence[str], i: int, flag: str, inline: str | None
    ) -> tuple[ParsedOption | None, Problem | None, int] | None:
        """Forms vLLM's FlexibleArgumentParser rewrites before argparse sees them
        (vllm/utils/argparse_utils.py parse_args): ``-O3``, ``-O=3``, ``-O 3`` for
        ``--optimization-level``, and dotted keys such as ``--compilation-config.mode=3``
        or ``-cc.mode 3`` that set one key of a JSON config option."""
        n = len(args)
        level = self._by_dest.get("optimization_level")
        if level is not None and flag.startswith("-O") and "." not in flag:
            if flag == "-O" and inline is None:
                if i + 1 < n and args[i + 1] in {"0", "1", "2", "3"}:
                    return ParsedOption(level, "-O", (args[i + 1],), i, i + 2), None, i + 2
                return None, Problem(i, "-O", "-O expects an optimization level 0-3"), i + 1
            value = inline if flag == "-O" and inline is not None else flag[2:]
            return ParsedOption(level, "-O", (value,), i, i + 1), None, i + 1
        if "." not in flag:
            return None
        base, key = flag.split(".", 1)
        base = normalize_flag(base)
        action = self._by_flag.get(base)
        if action is None or not action.takes_value or action.type not in _CONFIG_TYPES:
            j = i + 1
            while j < n and not is_option(args[j]):
                j += 1
            return None, Problem(i, flag, f"{base} is not a config option of vllm serve"), j
        if inline is not None:
            return ParsedOption(action, flag, (inline,), i, i + 1, key), None, i + 1
        if i + 1 < n and not is_option(args[i + 1]):
            return ParsedOption(action, flag, (args[i + 1],), i, i + 2, key), None, i + 2
        return None, Problem(i, flag, f"{flag} expects one value"), i + 1

    @staticmethod
    def _take_values(
        action: ArgAction, args: Sequence[str], i: int, inline: str | None
    ) -> tuple[list[str], int, str | None]:
        n = len(args)
        flag = args[i].split("=", 1)[0]
        nargs = action.nargs
        if nargs == 0 or not action.takes_value:
            if inline is not None:
                return [], i + 1, f"{flag} takes no value"
            return [], i + 1, None
        if inline is not None:
            return [inline], i + 1, None
        j = i + 1
        if nargs is None or nargs == 1:
            if j < n and not is_option(args[j]):
                return [args[j]], j + 1, None
            return [], j, f"{flag} expects one value"
        if nargs == "?":
            if j < n and not is_option(args[j]):
                return [args[j]], j + 1, None
            return [], j, None
        if nargs in ("+", "*"):
            values = []
            while j < n and not is_option(args[j]):
                values.append(args[j])
                j += 1
            if nargs == "+" and not values:
                return [], j, f"{flag} expects one or more values"
            return values, j, None
        if isinstance(nargs, int):
            values = list(args[j : j + nargs])
            if len(values) < nargs or any(is_option(v) for v in values):
                return [], j, f"{flag} expects {nargs} values"
            return values, j + nargs, None
        return [], j, f"{flag} has an unsupported nargs {nargs!r} in the captured spec"

    # --------------------------------------------------------------- validation

    def check_value(self, action: ArgAction, value: str) -> str | None:
        """Why ``value`` would be rejected by this option, or None."""
        flag = action.flags[0]
        if action.dest == "quantization":
            if value not in self.quantization_methods:
                return (
                    f"{flag} {value!r} is not a quantization method of {self.distribution} "
                    f"(known: {', '.join(self.quantization_methods)})"
                )
            return None
        if action.choices is not None:
            candidate = value.lower() if action.type == "<lambda>" else value
            if candidate not in action.choices:
                return f"{flag} {value!r} is not one of {', '.join(action.choices)}"
        t = action.type
        try:
            if t == "int":
                int(value)
            elif t == "float":
                float(value)
            elif t == "human_readable_int":
                if not _HUMAN_INT.match(value.strip()):
                    raise ValueError(value)
            elif t == "human_readable_int_or_auto":
                if (
                    value.strip().lower() != "auto"
                    and value.strip() != "-1"
                    and not (_HUMAN_INT.match(value.strip()))
                ):
                    raise ValueError(value)
            elif t in _JSON_TYPES:
                json.loads(value)
        except ValueError:
            kind = {
                "int": "an integer",
                "float": "a number",
                "human_readable_int": "an integer such as 8192 or 8k",
                "human_readable_int_or_auto": "an integer such as 32768 or 32k, or auto",
            }.get(t or "", "JSON")
            return f"{flag} {value!r} is not {kind}"
        return None

    def validate(self, args: Sequence[str]) -> list[Problem]:
        """Every problem vLLM's parser would raise for these options (flags only, no
        leading ``vllm serve``)."""
        options, problems = self.parse(args)
        for opt in options:
            if opt.nested_key is not None:
                continue  # one key of a config object; vLLM validates it on load
            for k, value in enumerate(opt.values):
                msg = self.check_value(opt.action, value)
                if msg is not None:
                    index = opt.start if opt.end == opt.start + 1 else opt.start + 1 + k
                    problems.append(Problem(index, opt.flag, msg))
        problems.sort(key=lambda p: p.index)
        return problems

    def validate_extra_args(
        self, extra: Sequence[str], path: str = "spec.engine.extraArgs"
    ) -> list[Problem]:
        """``validate`` for user input; each problem names ``path[i]``."""
        return [
            Problem(p.index, p.flag, p.message, f"{path}[{p.index}]") for p in self.validate(extra)
        ]


@cache
def _load_default() -> VllmArgSpec:
    text = resources.files("slo_operator").joinpath(SPEC_FILE).read_text("utf-8")
    return VllmArgSpec(json.loads(text))


def validate(args: Sequence[str]) -> list[Problem]:
    """Validate against the packaged vLLM spec."""
    return VllmArgSpec.load().validate(args)


def validate_extra_args(extra: Sequence[str], path: str = "spec.engine.extraArgs") -> list[Problem]:
    return VllmArgSpec.load().validate_extra_args(extra, path)
