"""Your own traffic as a benchmark workload (``slo-operator bench --trace-file/--rate-file``).

Two kinds of file, each CSV (a header row) or JSONL (one JSON object a line), optionally
gzip-compressed (``.gz``); the format is told by the suffix (``.csv``/``.tsv``,
``.jsonl``/``.ndjson``/``.json``), else by the first character (``{`` is JSONL):

* **Trace file**: one row per request, with its arrival time, prompt tokens and output
  tokens, and optionally a tenant (each tenant becomes one service with the same
  objectives). Column names are matched ignoring case and punctuation, and the usual
  aliases are accepted (:data:`TIME`, :data:`PROMPT`, :data:`OUTPUT`, :data:`TENANT`).
  Times are seconds (a column named ``..._ms``, or ``--time-unit ms``, says milliseconds)
  or ISO 8601 timestamps as in the Azure traces (``2023-11-16 18:17:03.9799600``; no zone
  means UTC).
* **Rate file**: the aggregate request rate per interval: a start time (or an interval
  index, with ``--rate-interval`` seconds per interval, 60 by default) and a rate in
  requests per second (or a request count per interval). Arrivals inside an interval are a
  Gamma renewal process at that rate (:func:`slo_devtools.sim.traces.gamma_arrivals`; CV 1
  is Poisson), lengths are drawn jointly from a shipped trace
  (:func:`slo_devtools.sim.traces.length_sampler`, the Azure conversation hour by default).

Decisions, stated in the report's notes:

* Rows out of time order are sorted (logs are often written at completion, not arrival);
  the number moved is reported. Arrival times are shifted so the first one is at 0.
* A token count of 0 counts as 1 (vLLM needs one prompt token and returns at least one
  token), as :func:`slo_devtools.sim.traces.read_azure` does; negative counts are errors.
* A request whose prompt plus output exceeds ``--max-model-len`` would be rejected by
  vLLM's OpenAI server (vllm-project/vllm, vllm/entrypoints/openai/serving_engine.py,
  ``OpenAIServing._validate_prompt_and_tokenize``: ``token_num + request.max_tokens >
  self.max_model_len`` is a 400), and one longer than a replica's KV cache can never be
  held whole: both are dropped from the simulated trace and counted, never served.

Everything but :func:`read_rows`, :func:`prepare` and :func:`replica_setup` (which read
the file or the packaged profiles and catalogue) is pure.
"""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import itertools
import json
import math
import random
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from slo_devtools.sim import traces as T
from slo_devtools.sim.bench import MAX_REPLICAS, TARGETS, TRACES
from slo_devtools.sim.policies import Objectives, policy_spec
from slo_devtools.sim.run import Tenant, Workload
from slo_operator.api.errors import field_problems
from slo_operator.control.capacity import hardware_ratios
from slo_operator.control.law import SPEED_MAX, SPEED_MIN
from slo_operator.engine import BatchBounds, EngineError, EnginePrefs, ModelFacts, plan_engine
from slo_operator.hardware import resolve_product
from slo_runtime.stepmodel import GIB, StepModel, load_profiles, model_params, select_profile

# Column aliases, after normalising a name to lower-case letters and digits
# ("ContextTokens" -> "contexttokens", "Request tokens" -> "requesttokens").
TIME = ("timestamp", "arrivaltime", "arrivaltimestamp", "arrival", "time", "t", "starttime",
        "requesttime", "createdat")
PROMPT = ("prompttokens", "inputtokens", "inputlength", "inputlen", "promptlength", "promptlen",
          "numprompttokens", "numinputtokens", "contexttokens", "requesttokens", "isl")
OUTPUT = ("outputtokens", "outputlength", "outputlen", "generatedtokens", "completiontokens",
          "numoutputtokens", "numgeneratedtokens", "responsetokens", "osl")
TENANT = ("tenant", "tenantid", "tenantname", "service")
# Rate files: the interval's start (TIME or these) or its index, and its rate or count.
WINDOW_START = (*TIME, "windowstart", "intervalstart", "start")
INDEX = ("interval", "intervalindex", "index", "window", "windowindex", "bucket")
RATE = ("rate", "rps", "qps", "requestrate", "requestspersecond", "reqpersec", "arrivalrate")
COUNT = ("requests", "count", "numrequests", "requestcount")
# What an error message suggests, per kind of field.
EXAMPLES = {
    "arrival time": "timestamp, arrival_time or time (seconds or ISO 8601)",
    "prompt tokens": "prompt_tokens, input_length or ContextTokens",
    "output tokens": "output_tokens, output_length or GeneratedTokens",
    "interval": "time or window_start (seconds or ISO 8601), or interval (an index)",
    "rate": "rate (requests/s) or count (requests in the interval)",
}
# A rate column not named as above is still found when exactly one name contains one of
# these (ServeGen's "total_rate_rps_sum_over_clients").
RATE_WORDS = ("rate", "rps", "qps")
# Unit suffixes a column name may carry: seconds are the default, milliseconds say so.
_SECONDS_SUFFIXES = ("seconds", "secs", "sec", "s")
_MS_SUFFIXES = ("milliseconds", "millis", "ms")

# Each tenant is a service simulated on its own, with its own row in every table and its
# own plot: a column of user ids instead of tenants would make thousands. Sixteen is well
# above the shipped workloads (two) and keeps one report readable.
MAX_TENANTS = 16
# Intervals of a rate file given by index, when --rate-interval is not set: a rate per
# minute is the commonest export of request-rate dashboards (Prometheus rate over 1m).
DEFAULT_RATE_INTERVAL_S = 60.0
# Longest span of arrivals or rate intervals replayed: a week holds every daily and weekly
# shape, and a longer one is nearly always a unit slip (epoch milliseconds read as seconds
# make one day a thousand).
MAX_SPAN_S = 7 * 86400.0
# Most requests one report simulates (after --rate-scale, and generated from a rate file):
# about 13 times the largest built-in workload (the Azure pair, 151,472 requests). Each is
# simulated once per policy and sweep point, so the bound keeps a report to hours of CPU
# rather than a typo's worth of memory.
MAX_REQUESTS = 2_000_000
# The trace ends this long after its last arrival, as slo_devtools.sim.traces.azure does.
TAIL_S = 1.0
# Context window of each shipped model (max_position_embeddings of the Hugging Face
# config.json of meta-llama/Llama-3.1-8B and Llama-3.1-70B): vLLM's max-model-len when
# none is set.
MODEL_CONTEXT = {"llama-3.1-8b": 131072, "llama-3.1-70b": 131072}
# The context length of the profile the built-in benchmark runs (bench.PROFILE).
PROFILE_CTX = 1024
# GPUs per node the planner may spread one replica over (resolve_product's default).
GPUS_PER_NODE = 8
DEFAULT_GPU = "NVIDIA H200"
DEFAULT_MODEL = "llama-3.1-8b"
LENGTH_SOURCES = tuple(T.AZURE_FILES)
# The engine settings every simulated replica runs (the benchmark's Tenant defaults).
_TENANT_DEFAULTS = {f.name: f.default for f in fields(Tenant)}


class TraceFileError(ValueError):
    """A file the benchmark cannot read, with where: file, line and field when known."""

    def __init__(self, path: str, message: str, line: int | None = None,
                 field: str | None = None) -> None:
        where = path + (f", line {line}" if line is not None else "") + \
            (f", field {field!r}" if field is not None else "")
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field, self.detail = path, line, field, message


@dataclass(frozen=True)
class Row:
    """One record of a file: its line number (1-based), its fields as read and the line
    its field names come from (a CSV header; the record itself in JSONL)."""

    line: int
    fields: Mapping[str, object]
    header: int | None = None

    @property
    def names_line(self) -> int:
        """Where a missing or ambiguous column is to be fixed."""
        return self.line if self.header is None else self.header


# --- reading ------------------------------------------------------------------------------
def _format(name: str, text: str) -> str:
    base = name[:-3] if name.endswith(".gz") else name
    suffix = Path(base).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    return "jsonl" if text.lstrip().startswith("{") else "csv"


def read_rows(path: Path) -> tuple[str, list[Row]]:
    """The file's format ("csv" or "jsonl") and its rows (the only I/O of loading)."""
    name = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceFileError(name, "no such file") from None
    except IsADirectoryError:
        raise TraceFileError(name, "is a directory, not a file") from None
    except OSError as err:
        raise TraceFileError(name, f"cannot be read: {err.strerror or err}") from None
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise TraceFileError(name, f"not a gzip file: {err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TraceFileError(name, f"not UTF-8 text (byte {err.start})") from None
    fmt = _format(name, text)
    return fmt, parse_jsonl(text, name) if fmt == "jsonl" else parse_csv(text, name)


def parse_jsonl(text: str, name: str) -> list[Row]:
    """One JSON object per line; blank lines are skipped."""
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            if line.lstrip().startswith("["):
                raise TraceFileError(name, "a JSON array; write one JSON object per line "
                                           "(JSONL)", i) from None
            raise TraceFileError(name, f"not valid JSON: {err}", i) from None
        if isinstance(obj, list):
            raise TraceFileError(name, "a JSON array; write one JSON object per line (JSONL)",
                                 i)
        if not isinstance(obj, dict):
            raise TraceFileError(name, f"must be a JSON object, got {type(obj).__name__}", i)
        rows.append(Row(i, obj))
    return rows


def parse_csv(text: str, name: str) -> list[Row]:
    """A header row, then one row per record (comma, semicolon or tab separated)."""
    first = text.split("\n", 1)[0]
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(first, ",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(io.StringIO(text, newline=""), dialect=dialect)
    try:
        header = reader.fieldnames
        if not header:
            return []
        rows = []
        for rec in reader:
            rows.append(Row(reader.line_num, {k: v for k, v in rec.items() if k is not None},
                            header=1))
    except csv.Error as err:
        raise TraceFileError(name, f"not valid CSV: {err}", reader.line_num) from None
    return rows


# --- columns and values -----------------------------------------------------------------
def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def _unit_split(key: str) -> tuple[str, float | None]:
    """(name without a unit suffix, seconds per unit or None when there is none)."""
    parts = [p for p in re.split(r"[^a-z0-9]+", key.lower()) if p]
    if len(parts) > 1 and parts[-1] in _MS_SUFFIXES:
        return "".join(parts[:-1]), 1e-3
    if len(parts) > 1 and parts[-1] in _SECONDS_SUFFIXES:
        return "".join(parts[:-1]), 1.0
    return "".join(parts), None


def find_column(keys: Iterable[str], aliases: Sequence[str], *, units: bool = False
                ) -> tuple[str, float | None] | None:
    """The one key among ``keys`` that names ``aliases`` (and its unit when ``units``);
    None when none does. Two keys that both match raise ValueError naming them."""
    hits: list[tuple[str, float | None]] = []
    for k in keys:
        if not isinstance(k, str):
            continue
        if _norm(k) in aliases:
            hits.append((k, None))
        elif units:
            base, unit = _unit_split(k)
            if unit is not None and base in aliases:
                hits.append((k, unit))
    if len(hits) > 1:
        raise ValueError(f"columns {', '.join(repr(k) for k, _ in hits)} name the same "
                         "thing; keep one")
    return hits[0] if hits else None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def parse_time(value: object) -> tuple[float, bool]:
    """(seconds, is an ISO timestamp): a number as it is, an ISO 8601 timestamp as seconds
    since the epoch (UTC when it names no zone). ValueError when it is neither."""
    x = _number(value)
    if x is not None:
        if not math.isfinite(x):
            raise ValueError(f"must be a finite number, got {value!r}")
        return x, False
    if isinstance(value, str):
        try:
            d = datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            if d.tzinfo is None:
                d = d.replace(tzinfo=datetime.UTC)
            return d.timestamp(), True
    raise ValueError(f"must be a number of seconds or an ISO 8601 timestamp, got {value!r}")


def parse_tokens(value: object) -> int:
    """A whole number of tokens >= 0 (``12`` or ``12.0``; not ``12.5``, ``-1`` or ``true``)."""
    x = _number(value)
    if x is None or not math.isfinite(x) or x != int(x) or x < 0:
        raise ValueError(f"must be a whole number >= 0, got {value!r}")
    return int(x)


# --- trace files --------------------------------------------------------------------------
@dataclass(frozen=True)
class Loaded:
    """Requests of a trace file, sorted, the first arrival at 0, and how they were read."""

    requests: tuple[T.Request, ...]
    columns: tuple[str, ...]  # the file's column names used, in role order
    out_of_order: int  # rows moved by sorting
    zero_tokens: int  # requests with a 0 token count, counted as 1
    time_unit: str  # "s", "ms" or "ISO 8601"


class _Columns:
    """Column lookup per set of keys (a CSV header once, a JSONL row's keys when they
    change)."""

    def __init__(self, name: str, time_scale: float) -> None:
        self.name, self.time_scale = name, time_scale
        self.cache: dict[tuple[str, ...], tuple[tuple[str, float], str, str, str | None]] = {}

    def get(self, row: Row) -> tuple[tuple[str, float], str, str, str | None]:
        keys = tuple(row.fields)
        hit = self.cache.get(keys)
        if hit is None:
            hit = self.cache[keys] = self._resolve(keys, row.names_line)
        return hit

    def _resolve(self, keys: tuple[str, ...], line: int
                 ) -> tuple[tuple[str, float], str, str, str | None]:
        def need(aliases: Sequence[str], what: str, units: bool = False
                 ) -> tuple[str, float | None]:
            got = one(aliases, units)
            if got is None:
                raise TraceFileError(self.name, f"no {what} field; name it {EXAMPLES[what]} "
                                     f"(or an alias, docs/benchmark.md); fields: "
                                     f"{', '.join(map(str, keys)) or 'none'}", line)
            return got

        def one(aliases: Sequence[str], units: bool = False) -> tuple[str, float | None] | None:
            try:
                return find_column(keys, aliases, units=units)
            except ValueError as err:
                raise TraceFileError(self.name, str(err), line) from None

        tcol, unit = need(TIME, "arrival time", units=True)
        pcol, _ = need(PROMPT, "prompt tokens")
        ocol, _ = need(OUTPUT, "output tokens")
        tenant = one(TENANT)
        return (tcol, self.time_scale if unit is None else unit), pcol, ocol, \
            tenant[0] if tenant else None


def requests_from_rows(rows: Sequence[Row], name: str, time_scale: float = 1.0,
                       default_tenant: str = "") -> Loaded:
    """Validate and normalise a trace file's rows (``time_scale``: seconds per time unit of
    a column that names no unit)."""
    if not rows:
        raise TraceFileError(name, "no requests (the file has no data rows)")
    cols = _Columns(name, time_scale)
    out: list[tuple[float, int, int, str]] = []
    zeros = 0
    iso_seen: bool | None = None
    first_cols: tuple[str, ...] = ()
    unit_name = ""
    for row in rows:
        (tcol, unit), pcol, ocol, ncol = cols.get(row)
        if not first_cols:
            first_cols = tuple(c for c in (tcol, pcol, ocol, ncol) if c)
            unit_name = "ms" if unit == 1e-3 else "s" if unit == 1.0 else f"units of {unit:g} s"
        f = row.fields

        def value(col: str, line: int = row.line, f: Mapping[str, object] = f) -> object:
            v = f.get(col)
            if _missing(v):
                raise TraceFileError(name, "missing value", line, col)
            return v

        try:
            t, iso = parse_time(value(tcol))
        except ValueError as err:
            raise TraceFileError(name, str(err), row.line, tcol) from None
        if iso_seen is not None and iso != iso_seen:
            raise TraceFileError(name, "mixes ISO timestamps and numbers of seconds",
                                 row.line, tcol)
        iso_seen = iso
        toks = []
        for col in (pcol, ocol):
            try:
                toks.append(parse_tokens(value(col)))
            except ValueError as err:
                raise TraceFileError(name, str(err), row.line, col) from None
        zeros += sum(1 for k in toks if k == 0)
        tenant = default_tenant
        if ncol is not None and not _missing(f.get(ncol)):
            tenant = tenant_name(f.get(ncol), name, row.line, ncol)
        out.append((t if iso else t * unit, toks[0], toks[1], tenant))
    order = sorted(range(len(out)), key=lambda i: out[i][0])
    moved = sum(1 for k, i in enumerate(order) if k != i)
    t0 = out[order[0]][0]
    span = out[order[-1]][0] - t0
    if span > MAX_SPAN_S:
        raise TraceFileError(name, f"arrivals span {_days(span)} from line "
                                   f"{rows[order[0]].line}; {_span_hint()}",
                             rows[order[-1]].line, first_cols[0] if first_cols else None)
    reqs = tuple(T.Request(out[i][0] - t0, max(1, out[i][1]), max(1, out[i][2]), out[i][3])
                 for i in order)
    return Loaded(reqs, first_cols, moved, zeros, "ISO 8601" if iso_seen else unit_name)


def tenant_name(value: object, name: str, line: int, col: str) -> str:
    """A tenant cell as a name: text or a number, never a JSON object, list or boolean."""
    if isinstance(value, (dict, list, bool)):
        raise TraceFileError(name, f"must be a name (text or a number), got {value!r}"[:200],
                             line, col)
    return str(value).strip()


def _days(seconds: float) -> str:
    days = seconds / 86400
    if days < 100:
        return f"{days:.3g} days"
    return f"{days:,.0f} days" if days < 1e9 else f"{days:.2e} days"


def _span_hint() -> str:
    return (f"at most {_days(MAX_SPAN_S)} (times in milliseconds need --time-unit ms or a "
            "column named like timestamp_ms)")


def check_requests(count: float, what: str) -> None:
    """Refuse more than :data:`MAX_REQUESTS` requests to simulate, before making them."""
    if count > MAX_REQUESTS:
        raise ValueError(f"{what} would simulate {count:,.0f} requests; at most "
                         f"{MAX_REQUESTS:,} (lower --rate-scale or shorten the file)")


def safe_name(raw: str, fallback: str = "trace") -> str:
    """``raw`` usable in a file name and a Markdown link (plots are named after it)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.") or fallback


def workload_name(path: Path) -> str:
    """The file's name without its suffixes, never one of the built-in workloads' names
    (the report judges those by their own targets)."""
    base = path.name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".txt"):
        base = base.removesuffix(suffix)
    name = safe_name(base)
    return f"{name}-file" if name in TRACES else name


def rename_tenants(requests: Sequence[T.Request], name: str) -> tuple[T.Request, ...]:
    """Tenant names made safe for file names; at most :data:`MAX_TENANTS`."""
    raw = list(dict.fromkeys(r.tenant for r in requests))
    if len(raw) > MAX_TENANTS:
        raise TraceFileError(name, f"{len(raw)} tenants; at most {MAX_TENANTS} (each is a "
                                   "service simulated apart): merge them or drop the tenant "
                                   "column")
    safe: dict[str, str] = {}
    for r in raw:
        s = safe_name(r, "default")
        if s in safe.values():
            other = next(k for k, v in safe.items() if v == s)
            raise TraceFileError(name, f"tenants {other!r} and {r!r} differ only in "
                                       "punctuation; rename one")
        safe[r] = s
    if all(k == v for k, v in safe.items()):
        return tuple(requests)
    return tuple(T.Request(r.t, r.prompt, r.output, safe[r.tenant]) for r in requests)


def scale_requests(requests: Sequence[T.Request], factor: float, rng: random.Random
                   ) -> list[T.Request]:
    """Each tenant's requests rate-scaled by :func:`slo_devtools.sim.traces.scale_rate`
    (copies placed between that tenant's arrivals; after its last one, within
    :data:`TAIL_S`), merged in arrival order."""
    if factor == 1.0:
        return list(requests)
    out: list[T.Request] = []
    for tenant in dict.fromkeys(r.tenant for r in requests):
        own = [r for r in requests if r.tenant == tenant]
        out += T.scale_rate(own, factor, rng, own[-1].t + TAIL_S)
    out.sort(key=lambda r: r.t)
    return out


# --- rate files ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RateWindow:
    """One interval of a rate file: start (s, first interval at 0), length (s), rate."""

    start: float
    length: float
    rate: float  # requests per second
    tenant: str = ""


def rate_windows_from_rows(rows: Sequence[Row], name: str, interval_s: float | None = None,
                           time_scale: float = 1.0, default_tenant: str = ""
                           ) -> list[RateWindow]:
    """Validate a rate file's rows: by start time, an interval lasts until the next row's
    start (the last one ``interval_s``, by default the median spacing); by index, every
    interval lasts ``interval_s`` (default :data:`DEFAULT_RATE_INTERVAL_S`)."""
    if not rows:
        raise TraceFileError(name, "no rates (the file has no data rows)")
    if interval_s is not None and not interval_s > 0:
        raise ValueError(f"--rate-interval: must be > 0, got {interval_s}")
    keys = tuple(rows[0].fields)
    at = rows[0].names_line
    try:
        start_col = find_column(keys, WINDOW_START, units=True)
        index_col = find_column(keys, INDEX)
        rate_col = find_column(keys, RATE)
        count_col = find_column(keys, COUNT)
        tenant_col = find_column(keys, TENANT)
    except ValueError as err:
        raise TraceFileError(name, str(err), at) from None
    if rate_col is None and count_col is None:
        loose = [k for k in keys if any(w in _norm(k) for w in RATE_WORDS)]
        if len(loose) == 1:
            rate_col = (loose[0], None)
    if start_col and index_col:
        raise TraceFileError(name, f"both a start time ({start_col[0]!r}) and an interval "
                                   f"index ({index_col[0]!r}); keep one", at)
    if rate_col and count_col:
        raise TraceFileError(name, f"both a rate ({rate_col[0]!r}) and a count "
                                   f"({count_col[0]!r}); keep one", at)
    for what, found in (("interval", start_col or index_col), ("rate", rate_col or count_col)):
        if not found:
            raise TraceFileError(name, f"no {what} field; name it {EXAMPLES[what]} (or an "
                                       f"alias, docs/benchmark.md); fields: "
                                       f"{', '.join(map(str, keys)) or 'none'}", at)
    vcol = (rate_col or count_col)
    assert vcol is not None
    value_col = vcol[0]
    parsed: list[tuple[str, float, float, int]] = []  # (tenant, position, value, line)
    iso_seen: bool | None = None
    for row in rows:
        f = row.fields
        tenant = default_tenant
        if tenant_col and not _missing(f.get(tenant_col[0])):
            tenant = tenant_name(f.get(tenant_col[0]), name, row.line, tenant_col[0])
        pos_col = (start_col or index_col)
        assert pos_col is not None
        raw_pos = f.get(pos_col[0])
        if _missing(raw_pos):
            raise TraceFileError(name, "missing value", row.line, pos_col[0])
        try:
            if start_col:
                pos, iso = parse_time(raw_pos)
                if iso_seen is not None and iso != iso_seen:
                    raise ValueError("mixes ISO timestamps and numbers of seconds")
                iso_seen = iso
                if not iso:
                    pos *= start_col[1] if start_col[1] is not None else time_scale
            else:
                pos = float(parse_tokens(raw_pos))
        except ValueError as err:
            msg = str(err).replace("whole number >= 0", "whole interval index >= 0")
            raise TraceFileError(name, msg, row.line, pos_col[0]) from None
        raw = f.get(value_col)
        x = _number(raw)
        if _missing(raw):
            raise TraceFileError(name, "missing value", row.line, value_col)
        if x is None or not math.isfinite(x) or x < 0:
            raise TraceFileError(name, f"must be a number >= 0, got {raw!r}", row.line,
                                 value_col)
        parsed.append((tenant, pos, x, row.line))
    out: list[RateWindow] = []
    tenants = list(dict.fromkeys(p[0] for p in parsed))
    origin = min(p[1] for p in parsed)  # the first interval starts the trace
    final = max(parsed, key=lambda p: p[1])
    span = (final[1] - origin) * ((interval_s or DEFAULT_RATE_INTERVAL_S) if index_col else 1.0)
    if span > MAX_SPAN_S:
        hint = _span_hint() if start_col else (
            f"at most {_days(MAX_SPAN_S)} (each index is one interval of "
            f"{interval_s or DEFAULT_RATE_INTERVAL_S:g} s, --rate-interval)")
        raise TraceFileError(name, f"intervals span {_days(span)}; {hint}", final[3],
                             (start_col or index_col or ("",))[0])
    for tenant in tenants:
        own = sorted((p for p in parsed if p[0] == tenant), key=lambda p: p[1])
        for a, b in itertools.pairwise(own):
            if a[1] == b[1]:
                raise TraceFileError(name, f"a second rate for the same interval (line "
                                           f"{a[3]} has one)", b[3], (start_col or
                                                                     index_col or ("",))[0])
        if index_col:
            length = interval_s or DEFAULT_RATE_INTERVAL_S
            spans = [((p[1] - origin) * length, length) for p in own]
        else:
            gaps = [b[1] - a[1] for a, b in itertools.pairwise(own)]
            last = interval_s or (statistics.median(gaps) if gaps else None)
            if last is None:
                raise TraceFileError(name, "one interval only: give its length with "
                                           "--rate-interval SECONDS")
            spans = [(p[1] - origin, g) for p, g in zip(own, [*gaps, last], strict=True)]
        for (start, length), p in zip(spans, own, strict=True):
            rate = p[2] / length if count_col else p[2]
            out.append(RateWindow(start, length, rate, tenant))
    return out


def rate_trace(windows: Sequence[RateWindow], *, lengths: Sequence[tuple[int, int]],
               cv: float, rate_scale: float, rng: random.Random) -> tuple[T.Request, ...]:
    """Requests from rate windows: Gamma-renewal arrivals at each window's rate x
    ``rate_scale`` (restarted at every window, as :func:`T.gamma_arrivals` does), lengths
    drawn jointly from ``lengths``."""
    if not lengths:
        raise ValueError("lengths: no (prompt, output) pairs to draw from")
    out: list[T.Request] = []
    for w in windows:
        for t in T.gamma_arrivals([w.rate * rate_scale], w.length, cv, rng):
            p, o = lengths[rng.randrange(len(lengths))]
            out.append(T.Request(w.start + t, p, o, w.tenant))
    out.sort(key=lambda r: r.t)
    return tuple(out)


# --- what fits a replica ------------------------------------------------------------------
@dataclass(frozen=True)
class Dropped:
    """Requests left out of the simulated trace because no replica could serve them."""

    too_long: int = 0  # prompt + output > max-model-len
    beyond_kv: int = 0  # prompt + output > one replica's KV capacity
    max_model_len: int | None = None
    kv_capacity: int = 0

    @property
    def total(self) -> int:
        return self.too_long + self.beyond_kv

    def describe(self, of: int) -> str:
        """'N of M requests dropped: ...' or '' when none were."""
        if not self.total:
            return ""
        parts = []
        if self.too_long:
            parts.append(f"{self.too_long:,} longer than max-model-len {self.max_model_len:,} "
                         "(prompt + output; vLLM rejects them)")
        if self.beyond_kv:
            parts.append(f"{self.beyond_kv:,} longer than one replica's KV cache "
                         f"({self.kv_capacity:,} tokens)")
        return f"{self.total:,} of {of:,} requests dropped, not simulated: " + "; ".join(parts)


def fit_requests(requests: Sequence[T.Request], max_model_len: int | None, kv_capacity: int
                 ) -> tuple[tuple[T.Request, ...], Dropped]:
    """The requests a replica can serve, and what was dropped (max-model-len first)."""
    kept: list[T.Request] = []
    too_long = beyond = 0
    for r in requests:
        need = r.prompt + r.output
        if max_model_len is not None and need > max_model_len:
            too_long += 1
        elif kv_capacity > 0 and need > kv_capacity:
            beyond += 1
        else:
            kept.append(r)
    return tuple(kept), Dropped(too_long, beyond, max_model_len, kv_capacity)


# --- the replica --------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaSetup:
    """What every replica of the workload runs: the step model and how it was chosen."""

    model: StepModel
    shape: str
    gpu: str  # catalogue product
    gpu_name: str  # display name
    precision: str
    tensor_parallel: int
    max_model_len: int | None  # the limit requests are checked against (None: KV only)

    def describe(self) -> str:
        tp = f", tensor parallel {self.tensor_parallel} (the operator's engine plan)" \
            if self.tensor_parallel > 1 else ""
        kv = self.model.kv_capacity_tokens
        limit = f"max-model-len {self.max_model_len:,}" if self.max_model_len else \
            "no max-model-len"
        if self.max_model_len and self.max_model_len > kv:
            limit += f" (above the KV cache: vLLM needs --max-model-len <= {kv:,} to start)"
        return (f"replicas: {self.shape} in {self.precision.upper()} on {self.gpu_name}{tp}; "
                f"KV cache {kv:,} tokens, cold start {self.model.cold_start_s:.0f} s, {limit}; "
                f"--max-num-seqs {_TENANT_DEFAULTS['max_num_seqs']}, --max-num-batched-tokens "
                f"{_TENANT_DEFAULTS['max_num_batched_tokens']} as in the built-in workloads "
                "(slo-operator renders its own from the inter-token objective)")


def _profiles() -> list[dict[str, object]]:
    path = Path(str(resources.files("slo_operator") / "data" / "profiles"))
    return load_profiles(path)


def replica_setup(model: str = DEFAULT_MODEL, gpu: str = DEFAULT_GPU,
                  max_model_len: int | None = None) -> ReplicaSetup:
    """The shipped profile of ``model`` (context 1024, as the built-in benchmark) moved to
    ``gpu`` as the operator's capacity model does (``control.capacity.hardware_ratios``;
    KV capacity from the catalogue's memory), with the tensor-parallel size the operator's
    engine planner chooses. ValueError names the option at fault."""
    profiles = _profiles()
    shapes = sorted({str(p.get("shape")) for p in profiles})
    if model not in shapes:
        raise ValueError(f"--model: unknown model {model!r}; known: {', '.join(shapes)}")
    res = resolve_product(gpu)
    hw = res.hardware
    if hw is None:
        raise ValueError(f"--gpu: {res.message}")
    prof = select_profile(profiles, model, PROFILE_CTX)
    # fp16 runs at the bf16 speed (slo_runtime.stepmodel, assumption 4).
    precision: Literal["bf16", "fp16"] = "bf16" if hw.bf16 else "fp16"
    shape = prof["model"]
    assert isinstance(shape, dict)
    facts = ModelFacts(name=model, params_billion=model_params(shape) / 1e9,
                       max_model_len=max_model_len, num_layers=int(shape["num_layers"]),
                       num_kv_heads=int(shape["num_kv_heads"]),
                       num_attention_heads=int(shape["num_heads"]),
                       head_dim=int(shape.get("head_dim") or 0) or None)
    try:
        plan = plan_engine(hw, GPUS_PER_NODE, facts, EnginePrefs(precision=precision),
                           BatchBounds())
    except EngineError as err:
        raise ValueError(f"--gpu: {model} cannot run on {hw.display_name}: {err.message}"
                         ) from None
    tp = plan.tensor_parallel_size
    m = StepModel.from_profile(prof, precision, tensor_parallel=tp)
    hw_prof = prof.get("hardware")
    ref = resolve_product(str(hw_prof.get("product") if isinstance(hw_prof, dict) else "")
                          ).hardware
    if ref is None or ref.product != hw.product:
        bandwidth, compute = hardware_ratios(hw.product, precision)
        memory = int(hw.memory_gib * GIB) if hw.memory_gib else None
        m = m.for_hardware(hw.product, bandwidth, compute, memory)
    if m.kv_capacity_tokens <= 0:
        raise ValueError(f"--gpu: {model} leaves no KV cache on {hw.display_name} at tensor "
                         f"parallel {tp}")
    limit = max_model_len or MODEL_CONTEXT.get(model)
    return ReplicaSetup(m, model, hw.product, hw.display_name, precision, tp, limit)


# --- objectives ---------------------------------------------------------------------------
def parse_objectives(text: str) -> Objectives:
    """``E2E_MS,TTFT_MS,ITL_MS`` (P99 end-to-end, P95 first token, P99 inter-token, in
    milliseconds) -> :class:`Objectives` named "custom"."""
    parts = [p.strip() for p in text.split(",")]
    vals = [_number(p) for p in parts]
    if len(parts) != 3 or any(v is None or not math.isfinite(v) or v <= 0 for v in vals):
        raise ValueError(f"--objectives: expected three positive numbers of milliseconds "
                         f"E2E_MS,TTFT_MS,ITL_MS (e.g. 20000,3000,100), got {text!r}")
    e2e, ttft, itl = (float(v) for v in vals if v is not None)
    # The SLOPolicy takes whole milliseconds: a fraction would be judged here and cut
    # off in the policy the simulated operator is given.
    if any(v != math.floor(v) for v in (e2e, ttft, itl)):
        raise ValueError(f"--objectives: the SLOPolicy takes whole milliseconds, got {text!r}")
    obj = Objectives(e2e, ttft, itl, name="custom")
    _check_policy("--objectives", obj, MAX_REPLICAS)
    return obj


def _check_policy(option: str, obj: Objectives, max_replicas: int) -> None:
    """Refuse what the SLOPolicy the simulated operator is given would refuse, naming the
    option and the policy's field (before any policy runs, not halfway through)."""
    try:
        policy_spec(obj, max_replicas)
    except ValidationError as err:
        problems = "; ".join(str(p) for p in field_problems(err, prefix="spec"))
        raise ValueError(f"{option}: the SLOPolicy would refuse it: {problems}") from None


def objective_sets(custom: Objectives | None, target_sets: Sequence[str]
                   ) -> list[tuple[str, Objectives]]:
    """The objectives to judge by: ``custom``, else the chat objectives of each named
    built-in set (the file says nothing of its tenants' kind)."""
    if custom is not None:
        return [("custom", custom)]
    return [(s, TARGETS[s]["chat"]) for s in target_sets]


# --- the workload -------------------------------------------------------------------------
@dataclass(frozen=True)
class TrafficSpec:
    """What ``bench --trace-file/--rate-file`` was asked for."""

    trace_file: Path | None = None
    rate_file: Path | None = None
    rate_scale: float = 1.0
    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    max_model_len: int | None = None
    max_replicas: int = MAX_REPLICAS
    time_unit: str = "s"
    rate_interval: float | None = None
    cv: float = T.SERVEGEN_DEFAULT_CV
    lengths: str = "azure-conv"
    seed: int = 0


@dataclass(frozen=True)
class Prepared:
    """The user's traffic ready to simulate, and what the report and stderr should say."""

    trace: T.Trace
    replica: ReplicaSetup
    dropped: Dropped
    read: int  # requests before dropping (after rate scaling)
    max_replicas: int
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def workloads(self, sets: Sequence[tuple[str, Objectives]]) -> list[tuple[str, Workload]]:
        """One workload per objective set: a tenant per tenant of the trace."""
        out = []
        for set_name, obj in sets:
            tenants = tuple(Tenant(n, self.replica.model, obj, max_replicas=self.max_replicas,
                                   precision=self.replica.precision, budget_settable=True)
                            for n in self.trace.tenants)
            out.append((set_name, Workload(self.trace.name, self.trace, tenants)))
        return out


def check_spec(spec: TrafficSpec) -> None:
    """Reject option values no file could make right, naming the option."""
    if (spec.trace_file is None) == (spec.rate_file is None):
        raise ValueError("--trace-file / --rate-file: give exactly one")
    if not spec.rate_scale > 0 or not math.isfinite(spec.rate_scale):
        raise ValueError(f"--rate-scale: must be > 0, got {spec.rate_scale}")
    if not spec.cv > 0 or not math.isfinite(spec.cv):
        raise ValueError(f"--cv: must be > 0, got {spec.cv}")
    if spec.rate_interval is not None and not spec.rate_interval > 0:
        raise ValueError(f"--rate-interval: must be > 0, got {spec.rate_interval}")
    if spec.time_unit not in ("s", "ms"):
        raise ValueError(f"--time-unit: must be s or ms, got {spec.time_unit!r}")
    if spec.lengths not in LENGTH_SOURCES:
        raise ValueError(f"--lengths: unknown trace {spec.lengths!r}; known: "
                         f"{', '.join(LENGTH_SOURCES)}")
    if spec.max_replicas < 1:
        raise ValueError(f"--max-replicas: must be >= 1, got {spec.max_replicas}")
    _check_policy("--max-replicas", TARGETS["strict"]["chat"], spec.max_replicas)


def build(spec: TrafficSpec, rows: Sequence[Row], replica: ReplicaSetup,
          lengths: Callable[[str], Sequence[tuple[int, int]]] = T.length_sampler) -> Prepared:
    """The workload's trace from a file's rows (pure but for ``lengths``, which reads the
    shipped trace a rate file's lengths come from)."""
    check_spec(spec)
    path = spec.trace_file or spec.rate_file
    assert path is not None
    source = str(path)
    wl_name = workload_name(path)
    scale = 1e-3 if spec.time_unit == "ms" else 1.0
    rng = random.Random(spec.seed)
    notes: list[str] = []
    end = 0.0  # where the trace's source ends (a rate file's last interval)
    if spec.trace_file is not None:
        loaded = requests_from_rows(rows, source, scale, default_tenant=wl_name)
        check_requests(len(loaded.requests) * spec.rate_scale,
                       f"--rate-scale {spec.rate_scale:g} of {len(loaded.requests):,} requests")
        reqs = scale_requests(rename_tenants(loaded.requests, source), spec.rate_scale, rng)
        notes.append(f"{wl_name}: your trace file {path.name} ({len(rows):,} rows; columns "
                     f"{', '.join(loaded.columns)}; times in {loaded.time_unit}, shifted to "
                     "start at 0)")
        if loaded.out_of_order:
            notes.append(f"{loaded.out_of_order:,} rows out of time order were sorted")
        if loaded.zero_tokens:
            notes.append(f"{loaded.zero_tokens:,} token counts of 0 counted as 1")
        if spec.rate_scale != 1.0:
            notes.append(f"rate x{spec.rate_scale:g} (each tenant's requests kept floor(x) "
                         "times plus once with probability frac(x); copies between arrivals)")
    else:
        windows = rate_windows_from_rows(rows, source, spec.rate_interval, scale,
                                         default_tenant=wl_name)
        end = max(w.start + w.length for w in windows)
        check_requests(sum(w.rate * w.length for w in windows) * spec.rate_scale,
                       f"{path.name} at --rate-scale {spec.rate_scale:g}")
        reqs = list(rename_tenants(rate_trace(windows, lengths=lengths(spec.lengths),
                                              cv=spec.cv, rate_scale=spec.rate_scale,
                                              rng=rng), source))
        notes.append(f"{wl_name}: your rate file {path.name} ({len(windows):,} intervals, "
                     f"median {statistics.median(w.length for w in windows):g} s), rate "
                     f"x{spec.rate_scale:g}")
        notes.append(f"arrivals: Gamma renewal per interval, CV {spec.cv:g} (1 is Poisson), "
                     f"seed {spec.seed}; lengths drawn jointly from {spec.lengths} (shipped "
                     "Azure 2023 trace, CC-BY 4.0)")
    read = len(reqs)
    if not reqs:
        raise TraceFileError(source, "no requests to simulate (every rate is 0)")
    kept, dropped = fit_requests(reqs, replica.max_model_len, replica.model.kv_capacity_tokens)
    warnings = []
    if dropped.total:
        warnings.append(f"{source}: {dropped.describe(read)}")
        notes.append(dropped.describe(read))
    if not kept:
        raise TraceFileError(source, f"no request fits a replica: {dropped.describe(read)}")
    notes.append(replica.describe())
    notes.append(f"at most {spec.max_replicas} replicas per service")
    if replica.tensor_parallel > 1:
        notes.append(f"one replica holds {replica.tensor_parallel} GPUs: GPU-h in the tables "
                     "count replica-hours")
    if replica.shape != DEFAULT_MODEL or replica.gpu != _product(DEFAULT_GPU):
        notes.append("the simulated slo-operator seeds its capacity model for Llama-3.1-8B "
                     "on an H200 (the simulator passes neither GPU nor model size to the "
                     "policies) and corrects it only by the speed it measures "
                     f"(x{SPEED_MIN:g} to x{SPEED_MAX:g})")
    trace = T.Trace(wl_name, kept, max(kept[-1].t + TAIL_S, end), spec.rate_scale, 1.0,
                    tuple(notes))
    return Prepared(trace, replica, dropped, read, spec.max_replicas, tuple(warnings))


def _product(name: str) -> str:
    hw = resolve_product(name).hardware
    return hw.product if hw is not None else name


def prepare(spec: TrafficSpec) -> Prepared:
    """Read the file, check it and build the trace (ValueError names file, line, field or
    the option at fault)."""
    check_spec(spec)
    replica = replica_setup(spec.model, spec.gpu, spec.max_model_len)
    path = spec.trace_file or spec.rate_file
    assert path is not None
    _, rows = read_rows(path)
    return build(spec, rows, replica)
