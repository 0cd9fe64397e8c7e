"""Ingest: reads NDJSON, CSV, Parquet or a DataFrame into a landing datasource's schema. Rows that fit are
appended (or replace rows); rows that do not go to `<datasource>_quarantine` with the raw row and the reason."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pipeframe.datafiles.model import Column, Datasource
from pipeframe.datafiles.types import value_rules
from pipeframe.engine import deltaappend
from pipeframe.engine.conflicts import local_folder, retrying, table_lock
from pipeframe.engine.warehouse import DeployedResource, Warehouse
from pipeframe.errors import PipeframeError
from pipeframe.plan import records
from pipeframe.sqltext import first_line, quote_path, quote_string

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from pipeframe.engine.commits import Commit

FORMATS = {".ndjson": "ndjson", ".jsonl": "ndjson", ".json": "ndjson", ".csv": "csv", ".parquet": "parquet"}
QUARANTINE_SCHEMA = "raw STRING, reason STRING, source STRING, ingested_at TIMESTAMP"
RAW, REASON, UTF8, VALUE = "__pf_raw", "__pf_reason", "__pf_utf8", "__pf_value"
PART = "__pf_part"  # which request of a group commit a row came from (0 for a single write)
# A frame appended by way of the driver (`Ingestor.commit`) at most this big, as Spark's optimizer estimates it:
# from the size of the files read, so compressed input (snappy parquet, gzipped NDJSON) may take several times that.
DIRECT_BYTES = 16 * 1024 * 1024
# Plan nodes that make a frame's rows more than Spark's estimate says (explode) or that run Python: never sized.
_UNSIZED = re.compile(r"Generate|Python|Pandas|Arrow|MapPartitions|MapElements|AppendColumns")
MISFITS_COLLECTED = 10_000  # misfit rows of one commit brought to the driver to count them; more are aggregated
# How far back a datasource's commits are searched for idempotency keys (once per process and datasource).
KEY_COMMITS = 1000
REASONS_SHOWN = 100  # a request's answer lists the reason of each quarantined row, up to this many
# A JSON line as tokens: a whole string (an escaped character never ends it) or a run of anything else.
JSON_TOKENS = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[^"]++'
JSON_NUMBER = r"-?[0-9][0-9.eE+-]*+"  # outside strings, only numbers hold digits
BOM = r"^\x{FEFF}"  # a UTF-8 byte order mark starting a line
INFINITY = r"(?i)^\s*[+-]?inf(inity)?\s*$"  # how Spark spells an infinity it reads as one
COMPLEX = ("ARRAY<", "MAP<", "STRUCT<")

log = logging.getLogger("pipeframe.ingest")


@dataclass(frozen=True)
class Batch:
    """Input rows conformed to a datasource: the declared columns plus, per row, its raw text and the reason
    it does not fit (NULL when it does)."""

    frame: DataFrame | None  # None when `fitting` holds the rows
    source: str  # a file name, "stdin" or "dataframe", kept with quarantined rows
    # Lines typed without Spark (`jsonlines.type_lines`): the rows that fit, each with its request (`parts`), and
    # each misfit line's (request, raw text, reason). No Spark job conforms them.
    fitting: pa.Table | None = None
    size_bytes: int | None = None  # the input's size in memory when known beforehand (a pandas DataFrame)
    parts: tuple[int, ...] = ()  # the request of each row of `fitting`
    misfits: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True)
class IngestResult:
    datasource: str
    accepted: int
    quarantined: int
    version: int | None  # the source commit holding the accepted rows
    reasons: tuple[str, ...] = ()  # why each quarantined row was, in order (up to REASONS_SHOWN)
    views: tuple = ()  # the ViewRefresh of every view the new rows flowed into
    replayed: bool = False  # an idempotency key seen before: nothing was written this time
    mark: object = None  # what the committer's `on_commit` said of the commit (the materializer's round count)


def detect_format(path: str, fmt: str | None) -> str:
    if fmt:
        if fmt not in ("ndjson", "csv", "parquet"):
            raise PipeframeError("PF710", f"Unknown format `{fmt}`.", "Use ndjson, csv or parquet.")
        return fmt
    name = path.lower().removesuffix(".gz")
    for suffix, found in FORMATS.items():
        if name.endswith(suffix):
            return found
    raise PipeframeError("PF710", f"Cannot tell the format of `{path}` from its name.",
                         "Name it .ndjson, .csv or .parquet, or pass --format ndjson|csv|parquet.")


def read_file(spark: SparkSession, path: str, fmt: str, datasource: Datasource) -> Batch:
    """Read one input file and conform it to `datasource`."""
    local = Path(path)
    if "://" not in path and not local.exists():
        raise PipeframeError("PF711", f"File `{path}` does not exist.", "Check the path.")
    location = str(local.resolve()) if "://" not in path else path
    try:
        if fmt == "ndjson":
            lines = spark.read.text(location).where("trim(value) <> ''").withColumnRenamed("value", RAW)
            return Batch(_conform_json(lines, datasource), local.name)
        if fmt == "csv":
            # A record may span lines, so a line that is not UTF-8 cannot be pinned on one row: refuse the file.
            bad = spark.read.text(location).where("NOT is_valid_utf8(value)").limit(1).collect()
            if bad:
                raise PipeframeError("PF712", f"Cannot read `{path}` as csv: it is not valid UTF-8 (near "
                                     f"\"{bad[0][0][:60]}\").",
                                     "Convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`.")
            # RFC 4180: a quoted field may hold commas and line breaks; a quote inside one is doubled.
            reader = spark.read.options(header=True, multiLine=True, quote='"', escape='"')
            header = reader.csv(location).columns
            schema = ", ".join(f"`{c}` STRING" for c in header) + ", `__pf_corrupt` STRING"
            frame = (reader.options(mode="PERMISSIVE", columnNameOfCorruptRecord="__pf_corrupt")
                     .schema(schema).csv(location))
            return Batch(conform(frame, datasource, corrupt="__pf_corrupt"), local.name)
        frame = spark.read.parquet(location)
        return Batch(conform(frame, datasource), local.name)
    except PipeframeError:
        raise
    except Exception as exc:  # noqa: BLE001 — an unreadable file is the user's to fix, not a crash
        raise PipeframeError("PF712", f"Cannot read `{path}` as {fmt}: {first_line(exc)}",
                             "Check the file's format, or pass --format.") from None


def conform(frame: DataFrame, datasource: Datasource, corrupt: str | None = None) -> DataFrame:
    """Columns matched by name (CSV headers, Parquet or DataFrame columns), each cast to its declared type."""
    available = {c.lower(): c for c in frame.columns if c != corrupt}
    raw = f"to_json(struct({', '.join(f'`{c}`' for c in available.values())}))"
    if corrupt:
        raw = f"coalesce(`{corrupt}`, {raw})"
    values = {}
    for column in datasource.columns:
        name = available.get(column.name.lower())
        values[column] = f"`{name}`" if name else "NULL"
    checks = [f"CASE WHEN `{corrupt}` IS NOT NULL THEN 'row does not have the header\\'s columns' END"] \
        if corrupt else []
    return _typed(frame, datasource, values, raw, checks)


def conform_lines(spark: SparkSession, lines: list[str], datasource: Datasource,
                  parts: list[int] | None = None) -> DataFrame:
    """NDJSON lines held in memory (Python rows, HTTP events), conformed like an NDJSON file. `parts`: the request
    each line belongs to (a group commit), kept as `__pf_part`. Handed to Spark as one Arrow batch: the columns
    already parsed by pyarrow when `_parsed` can (every line a plain object of the declared columns), else the
    raw lines, for Spark to read column by column (`_conform_json`)."""
    import pyarrow as pa

    parts = parts if parts is not None else [0] * len(lines)
    kept = [i for i, line in enumerate(lines) if line.strip()]
    texts = [lines[i] for i in kept]
    part = pa.array([parts[i] for i in kept], pa.int32())
    try:
        raw = pa.array(texts, pa.string())
    except UnicodeEncodeError:  # a lone surrogate is no UTF-8: its bytes are kept, and the line quarantined as such
        raw = pa.array([text.encode("utf-8", "surrogatepass") for text in texts], pa.binary())
    parsed = _parsed(texts, datasource) if raw.type == pa.string() else None
    if parsed is not None:
        frame = spark.createDataFrame(parsed.append_column(RAW, raw).append_column(PART, part))
        values = {column: f"`{VALUE}{index}`" for index, column in enumerate(datasource.columns)}
        return _typed(frame, datasource, values, f"`{RAW}`", _none_of_the_columns(datasource, values), strings=True)
    frame = spark.createDataFrame(pa.table({RAW: raw, PART: part}))
    if raw.type == pa.binary():
        frame = frame.selectExpr(f"CAST(`{RAW}` AS STRING) AS `{RAW}`", PART)
    return _conform_json(frame, datasource)


# How pyarrow reads a declared column's JSON value when `_parsed` may: numbers and booleans as themselves (only
# where every JSON number that pyarrow accepts reads as Spark reads its text), dates and times as their strings.
_ARROW_READ = {"STRING": "string", "BOOLEAN": "bool_", "TINYINT": "int64", "SMALLINT": "int64", "INT": "int64",
               "BIGINT": "int64", "DOUBLE": "float64", "DATE": "string", "TIMESTAMP": "string",
               "TIMESTAMP_NTZ": "string"}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NESTING = 1000  # Spark's JSON reader (Jackson) refuses deeper lines: `_conform_json` quarantines them
# A decimal column's value `get_json_object` gave that Spark reads again from the number's text (`_needs_text`).
DECIMAL_TEXT = r"[eE]|[0-9.]{16}|(?i:inf|nan)"
LONG_NUMBER = r"[0-9.]{16}"  # a line where a number may have more digits than its double keeps


def _parsed(lines: list[str], datasource: Datasource) -> pa.Table | None:
    """The declared columns of `lines` parsed by pyarrow's JSON reader, one row per line, as `__pf_value<i>`;
    None whenever that might not be what `_conform_json` reads, so the lines take that path: a column of another
    type, read from a `json:` path other than one top-level key (`$.name`) or from a key another column reads, a
    line that is not one object (a top-level `null` would even crash the reader), nested more deeply than Spark
    reads, a key twice, a value of another JSON type than the column's, an integer out of range, NaN or Infinity."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    fields = []
    for column in datasource.columns:
        kind, key = _ARROW_READ.get(column.type.upper()), _json_path(column).removeprefix("$.")
        if kind is None or not _PLAIN_NAME.fullmatch(key) or any(f.name == key for f in fields):
            return None  # another type, a nested path, or a key two columns read
        fields.append(pa.field(key, getattr(pa, kind)()))
    # Every line one object, braces and brackets (an upper bound on its nesting) counted: in pyarrow, not per line
    # in Python (a 40,000-line group commit spent 0.05 s here).
    texts = pa.array(lines, pa.string())
    trimmed = pc.utf8_trim_whitespace(texts)
    nesting = pc.add(pc.count_substring(texts, "{"), pc.count_substring(texts, "["))
    objects = pc.and_(pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}")),
                      pc.less_equal(nesting, MAX_NESTING))
    if not pc.all(objects).as_py():
        return None
    data = "\n".join(lines).encode("utf-8")
    try:
        table = pj.read_json(pa.BufferReader(data),
                             read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
                             parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields),
                                                           unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(lines):  # two objects on one line
        return None
    for field in fields:
        if field.type == pa.float64() and pc.any(pc.invert(pc.is_finite(table[field.name]))).as_py():
            return None  # NaN or Infinity spelled as such (valid for pyarrow, not for Spark)
    return table.select([f.name for f in fields]).rename_columns([f"{VALUE}{i}" for i in range(len(fields))])


def _none_of_the_columns(datasource: Datasource, values: dict[Column, str], is_object: str = "TRUE") -> list[str]:
    """An object with none of the datasource's columns (`{}`, or other keys only) would land as a row of NULLs
    that every view counts: the reason it does not fit (unless every column has a DEFAULT)."""
    if all(column.default is not None for column in datasource.columns):
        return []
    return [(f"CASE WHEN {is_object} AND {' AND '.join(f'{v} IS NULL' for v in values.values())} "
             f"THEN 'object has none of the datasource\\'s columns' END")]


def conform_frame_lines(lines: DataFrame, datasource: Datasource) -> DataFrame:
    """NDJSON lines already in a Spark frame (`line` STRING and `part` INT: which request of the commit each came
    from), conformed like an NDJSON file: Kafka messages read by Structured Streaming (connectors/kafka_stream.py)."""
    return _conform_json(lines.selectExpr(f"line AS `{RAW}`", f"part AS `{PART}`"), datasource)


def _conform_json(lines: DataFrame, datasource: Datasource) -> DataFrame:
    """NDJSON lines: each column read from its `json:` path (or its name), then cast. Numbers are read as sent where
    it matters: `get_json_object` reads them through a double (`1e400` would become "Infinity", a long decimal would
    lose digits, a string column would get "1.5E7" for 15000000.0). When the value read that way could differ from
    what was sent (`_needs_text`), the column is read again from the line with every number outside a string quoted,
    so the number is read as its text; other values skip that (a regex pass over the line). Objects and arrays are
    read from the line itself, so their numbers stay numbers."""
    # Decoding for the regex makes any bytes valid (U+FFFD), so what the line was is kept in `__pf_utf8`.
    part = f"`{PART}`" if PART in lines.columns else "0"
    lines = lines.selectExpr(f"regexp_replace(`{RAW}`, {quote_string(BOM)}, '') AS `{RAW}`",
                             f"is_valid_utf8(`{RAW}`) AS `{UTF8}`", f"{part} AS `{PART}`")
    tokens = f"regexp_extract_all(`{RAW}`, {quote_string(JSON_TOKENS)}, 0)"
    quoted = f"IF(startswith(t, '\"'), t, regexp_replace(t, {quote_string(JSON_NUMBER)}, '\"$0\"'))"
    exact_line = f"array_join(transform({tokens}, t -> {quoted}), '')"  # only evaluated where a column needs it
    read, values = [], {}
    for index, column in enumerate(datasource.columns):
        path = quote_string(_json_path(column))
        normal = f"get_json_object(`{RAW}`, {path})"
        if column.type.upper().startswith(COMPLEX):
            values[column] = normal
            continue
        needs_text = f"{normal} rlike {quote_string(_needs_text(column))}"
        if column.type.upper().startswith("DECIMAL"):
            # A number of 16 digits or more can come back from its double shorter than sent (8388608.000000101 as
            # 8388608.0000001), which no test of that text can see: decimals of a line holding one are read as sent.
            needs_text += f" OR `{RAW}` rlike {quote_string(LONG_NUMBER)}"
        read.append(f"IF({needs_text}, get_json_object({exact_line}, {path}), {normal}) AS `{VALUE}{index}`")
        values[column] = f"`{VALUE}{index}`"
    lines = lines.selectExpr(f"`{RAW}`", f"`{UTF8}`", f"`{PART}`", *read)
    checks = [(f"CASE WHEN NOT `{UTF8}` THEN 'line is not valid UTF-8' "
               f"WHEN get_json_object(`{RAW}`, '$') IS NULL THEN 'line is not valid JSON' "
               f"WHEN json_object_keys(`{RAW}`) IS NULL THEN 'line is JSON but not an object' END")]
    checks += _none_of_the_columns(datasource, values, f"json_object_keys(`{RAW}`) IS NOT NULL")
    return _typed(lines, datasource, values, f"`{RAW}`", checks, strings=True)


def _needs_text(column: Column) -> str:
    """When a value `get_json_object` gave for `column` (a number read through a double and written back by Java)
    may not be what was sent, so the column must be read from the number's text: for a float column an infinity (an
    overflow such as 1e400) or an exponent (Java writes one for large and small values); for integers anything not
    an integer; for decimals an exponent or 16 digits; for any other type (strings, dates, ...) any number at
    all."""
    type_ = column.type.upper()
    if type_ in ("FLOAT", "DOUBLE"):
        return "[eE]|(?i)inf"
    if type_ in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        return "[.eE]|(?i)inf|nan"
    if type_.startswith("DECIMAL"):
        return DECIMAL_TEXT
    return "^-?([0-9]|Infinity|NaN)"


def _typed(frame: DataFrame, datasource: Datasource, values: dict[Column, str], raw: str,
           checks: list[str], strings: bool = False) -> DataFrame:
    selects, reasons = [], list(checks)
    for column, value in values.items():
        type_ = column.type
        if strings and column.type.upper().startswith(COMPLEX):
            converted = f"from_json({value}, {quote_string(type_)})"
        elif strings and column.type.upper() == "STRING":
            converted = value
        else:
            converted = f"try_cast({value} AS {type_})"
        if type_.upper() in ("FLOAT", "DOUBLE"):
            # Casting never fails for floats: a number beyond the type's range becomes infinite. Only an infinity
            # spelled as such (Infinity, -inf, ...) may land as one.
            converted = (f"CASE WHEN abs({converted}) = CAST('Infinity' AS DOUBLE) AND NOT CAST({value} AS STRING) "
                         f"rlike {quote_string(INFINITY)} THEN NULL ELSE {converted} END")
        rules = value_rules(column.written_type)
        if rules.bounds is not None:  # a ClickHouse width (UInt8 is stored as SMALLINT): out of it, as misfit
            converted = f"CASE WHEN {converted} BETWEEN {rules.bounds[0]} AND {rules.bounds[1]} THEN {converted} END"
        if rules.element_bounds is not None and type_.upper().startswith(("ARRAY<", "MAP<")):
            items = converted if type_.upper().startswith("ARRAY<") else f"map_values({converted})"
            converted = (f"CASE WHEN exists({items}, x -> x NOT BETWEEN {rules.element_bounds[0]} AND "
                         f"{rules.element_bounds[1]}) THEN NULL ELSE {converted} END")
        if column.default is not None:
            converted = f"CASE WHEN {value} IS NULL THEN CAST(({column.default}) AS {type_}) ELSE {converted} END"
        elif rules.takes_default:  # a missing field (or null) of a non-Nullable ClickHouse type: its default
            converted = f"CASE WHEN {value} IS NULL THEN CAST({rules.missing_sql} AS {type_}) ELSE {converted} END"
        selects.append(f"{converted} AS `{column.name}`")
        shown = f"substr(CAST({value} AS STRING), 1, 80)"
        reasons.append(f"CASE WHEN {value} IS NOT NULL AND {converted} IS NULL THEN "
                       f"concat('column `{column.name}`: cannot read \"', {shown}, '\" as {_plain(column)}') END")
    reason = f"nullif(concat_ws('; ', {', '.join(reasons)}), '')" if reasons else "CAST(NULL AS STRING)"
    part = f"`{PART}`" if PART in frame.columns else "0"
    return frame.selectExpr(*selects, f"{raw} AS `{RAW}`", f"{reason} AS `{REASON}`", f"{part} AS `{PART}`")


def _json_path(column: Column) -> str:
    path = column.json_path or f"$.{column.name}"
    return path.removesuffix("[:]").removesuffix("[*]")


def _plain(column: Column) -> str:
    return column.written_type.replace("'", "")


@dataclass(frozen=True)
class Landed:
    """What one request of a commit landed: its accepted and quarantined rows, each quarantined row's reason."""

    accepted: int = 0
    quarantined: int = 0
    reasons: tuple[str, ...] = ()
    direct: bool = False  # its rows were committed by pyarrow and a commit file (`deltaappend`), not Spark's writer


class Ingestor:
    """Writes conformed batches into one warehouse."""

    def __init__(self, spark: SparkSession, warehouse: Warehouse) -> None:
        self.spark = spark
        self.warehouse = warehouse

    def write(self, table: DeployedResource, batch: Batch, mode: str = "append",
              where: str | None = None, metadata: records.IngestRecord | None = None, key: str | None = None,
              direct: bool = True) -> IngestResult:
        """Quarantine the rows that do not fit, then commit the rest to the datasource (append, or overwrite
        all rows / the rows matching `where`). `key`: an idempotency key recorded with the commit; `direct`: as
        `commit`'s."""
        version, [landed] = self.commit(table, batch, 1, [key], mode, where, metadata, direct=direct)
        return IngestResult(table.state.name, landed.accepted, landed.quarantined, version, landed.reasons)

    def commit(self, table: DeployedResource, batch: Batch, parts: int, keys: list[str | None],
               mode: str = "append", where: str | None = None, metadata: records.IngestRecord | None = None,
               sizes: list[int] | None = None, direct: bool = True) -> tuple[int | None, list[Landed]]:
        """Land a batch whose rows belong to `parts` requests (`__pf_part`; `sizes`: each request's rows) in one
        commit of the datasource: what each request landed, and the commit's version. Quarantine is written first:
        a crash in between loses nothing. The idempotency `keys` of the requests are kept in the commit's
        userMetadata with their counts, so a retried request is answered from there (`committed_keys`).

        An append to a local table `deltaappend` can write (unless `direct` is False: the `ingest.direct_commit`
        setting) of rows held in memory (`sizes` known: a group commit's, bounded by its flush settings) or of a
        frame Spark's optimizer estimates at most DIRECT_BYTES: the batch is brought to the driver as Arrow in one
        job, split there, and appended by `deltaappend` without a Spark write job. Otherwise the batch is evaluated
        once (persisted): one job finds the misfit rows (without a shuffle while they are few), the writes read the
        cache, and the accepted rows are counted by the commit."""
        self.warehouse.require_safe_writers()
        folder = local_folder(table.path or "")
        with table_lock(table.path or ""):
            if direct and mode == "append" and where is None and folder is not None and \
                    deltaappend.writable(folder) and (sizes is not None or _fits_driver(batch)):
                landed = self._commit_arrow(table, batch, folder, keys, metadata, sizes)
                if landed is not None:
                    return landed
            return self._commit_frame(table, batch, parts, keys, mode, where, metadata, sizes)

    def _commit_arrow(self, table: DeployedResource, batch: Batch, folder: str, keys: list[str | None],
                      metadata: records.IngestRecord | None,
                      sizes: list[int] | None) -> tuple[int | None, list[Landed]] | None:
        """`commit` by way of the driver (see there); None when the frame's rows did not reach it (more than
        `spark.driver.maxResultSize`): nothing is written then."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.functions import expr

        from pipeframe.engine import tables

        columns = [name for name, _ in table.state.columns]
        if batch.fitting is not None:
            good = batch.fitting.select(columns)
            quarantined, reasons = _counted(len(sizes), ((part, reason) for part, _raw, reason in batch.misfits))
            done = self._quarantined_before(table, keys, {part for part, _, _ in batch.misfits})
            misfits = [m for m in batch.misfits if m[0] not in done]
            if misfits:
                self._quarantine_arrow([m[1] for m in misfits], [m[2] for m in misfits], table, batch.source,
                                       _quarantine_record(keys, [m[0] for m in misfits]))
        else:
            # Only a misfit row's raw text is kept (quarantine): the rest need not travel to the driver.
            try:
                rows = batch.frame.withColumn(RAW, expr(f"CASE WHEN `{REASON}` IS NOT NULL THEN `{RAW}` END")) \
                    .toArrow()
            except Exception as exc:
                if sizes is not None or not tables.too_big_for_driver(exc):
                    raise
                # The estimate was wrong: Spark's writer takes the batch (nothing was written yet).
                log.warning("rows for %s not brought to the driver (%s): written by Spark", table.path,
                            first_line(exc))
                return None
            sizes = sizes or [rows.num_rows]
            misfit = pc.is_valid(rows.column(REASON))
            good = rows.filter(pc.invert(misfit)).select(columns)
            bad = rows.filter(misfit)
            parts = bad.column(PART).to_pylist()
            quarantined, reasons = _counted(len(sizes), zip(parts, bad.column(REASON).to_pylist(), strict=True))
            done = self._quarantined_before(table, keys, set(parts))
            if done:
                bad = bad.filter(pc.invert(pc.is_in(bad.column(PART), pa.array(sorted(done), bad.column(PART).type))))
            if bad.num_rows:
                self._quarantine(self.spark.createDataFrame(bad.select([RAW, REASON])), table, batch.source,
                                 _quarantine_record(keys, bad.column(PART).to_pylist()))
        accepted = [size - q for size, q in zip(sizes, quarantined, strict=True)]
        info = _commit_metadata(metadata, keys, accepted, quarantined)
        version = deltaappend.append(folder, good, records.encode(info),
                                     tables.checkpoint_later(self.spark, table.path or ""),
                                     self.spark.conf.get("spark.sql.session.timeZone"), fences_of(keys))
        direct = version is not None
        if version is None:  # the table changed meanwhile, or a checkpoint version on Spark Connect
            commit = self._save(table, self.spark.createDataFrame(good, schema=table.state.schema), "append", None, info)
            version = commit.version if commit else None
        return version, [Landed(a, q, r, direct) for a, q, r in zip(accepted, quarantined, reasons, strict=True)]

    def _commit_frame(self, table: DeployedResource, batch: Batch, parts: int, keys: list[str | None], mode: str,
                      where: str | None, metadata: records.IngestRecord | None,
                      sizes: list[int] | None) -> tuple[int | None, list[Landed]]:
        from pyspark import StorageLevel

        frame = batch.frame
        if frame is None:  # lines typed without Spark (`jsonlines`), to a table Spark's writer writes
            frame = self.spark.createDataFrame(_typed_rows(batch), schema=_with_raw(table))
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            bad = frame.where(f"`{REASON}` IS NOT NULL")
            quarantined, reasons = self._misfits(bad, parts)
            done = self._quarantined_before(table, keys, {p for p, q in enumerate(quarantined) if q})
            if done:
                bad = bad.where(f"`{PART}` NOT IN ({', '.join(str(p) for p in sorted(done))})")
            written = [p for p, q in enumerate(quarantined) if q and p not in done]
            if written:
                self._quarantine(bad, table, batch.source,
                                 _quarantine_record(keys, [p for p in written for _ in range(quarantined[p])]))
            columns = [f"`{name}`" for name, _ in table.state.columns]
            good = frame.where(f"`{REASON}` IS NULL").select(*columns)
            if sizes is None and any(keys):  # a key is kept with its counts: count the (cached) rows now
                sizes = [frame.count()]
            accepted = [size - q for size, q in zip(sizes, quarantined, strict=True)] if sizes else None
            commit = self._save(table, good, mode, where, _commit_metadata(metadata, keys, accepted, quarantined))
        finally:
            frame.unpersist()
        if accepted is None:  # one part whose size is not known beforehand (a file): the commit counted it
            accepted = [commit.added_rows if commit and "numOutputRows" in commit.metrics else good.count()]
        return (commit.version if commit else None), [Landed(a, q, r) for a, q, r in
                                                      zip(accepted, quarantined, reasons, strict=True)]

    def quarantine_file(self, table: DeployedResource, source: str, reason: str, key: str | None = None) -> None:
        """One quarantine entry for an input file that could not be read at all (an S3 import's): its name in
        `source`, why in `reason`, no raw text; none of its rows landed. `key`: the file's idempotency key, kept with
        the entry, so a pass killed before it recorded the file does not quarantine it twice."""
        self.warehouse.require_safe_writers()
        if not self._quarantined_before(table, [key], {0}):
            self._quarantine_arrow([""], [reason], table, source, _quarantine_record([key], [0]))

    def _quarantined_before(self, table: DeployedResource, keys: list[str | None], parts: set[int]) -> set[int]:
        """The requests among `parts` whose idempotency key a quarantine commit of `table` recorded already: sent
        again after their misfits landed but not their rows (a process killed between the two commits). Their
        misfits are not quarantined twice; their answer counts them all the same."""
        wanted = {keys[p]: p for p in parts if p < len(keys) and keys[p]}
        path = self.warehouse.quarantine_path(table.state.name)
        if not wanted or self.warehouse.version_of(path) < 0:
            return set()
        recorded = committed_keys(self.spark, path)
        return {p for key, p in wanted.items() if key in recorded}

    def _quarantine(self, bad: DataFrame, table: DeployedResource, source: str, record: str | None) -> None:
        """`record`: the commit's pipeframe userMetadata (the requests' keys, `_quarantine_record`)."""
        rows = bad.selectExpr(f"`{RAW}` AS raw", f"`{REASON}` AS reason", f"{quote_string(source)} AS source",
                              "current_timestamp() AS ingested_at")
        path = self.warehouse.quarantine_path(table.state.name)
        writer = rows.write.format("delta").mode("append")
        if record is not None:
            writer = writer.option("userMetadata", record)
        # Another writer may create the quarantine table first: its commit wins, this one is retried.
        with table_lock(path):
            retrying(lambda: writer.save(path))

    def _quarantine_arrow(self, raws: list[str], reasons: list[str], table: DeployedResource, source: str,
                          record: str | None) -> None:
        """Misfit lines typed without Spark, appended to the quarantine table by `deltaappend` where it can (the
        table exists, in a local folder), else by Spark's writer."""
        import pyarrow as pa

        path = self.warehouse.quarantine_path(table.state.name)
        now = datetime.now(UTC)
        rows = pa.table({"raw": pa.array(raws, pa.string()), "reason": pa.array(reasons, pa.string()),
                         "source": pa.array([source] * len(raws), pa.string()),
                         "ingested_at": pa.array([now] * len(raws), pa.timestamp("us", "UTC"))})
        folder = local_folder(path)
        if folder is not None:
            from pipeframe.engine import tables

            with table_lock(path):  # on a checkpoint version too: Delta writes the checkpoint after it
                if deltaappend.append(folder, rows, record, tables.checkpoint_later(self.spark, path)) is not None:
                    return
        self._quarantine(self.spark.createDataFrame(rows.rename_columns([RAW, REASON, "source", "ingested_at"])),
                         table, source, record)

    def _save(self, table: DeployedResource, good: DataFrame, mode: str, where: str | None,
              info: records.IngestRecord):
        """Spark's write of the accepted rows, with `info` as the commit's pipeframe userMetadata: the commit."""
        from pipeframe.engine import tables

        writer = good.write.format("delta").mode(mode).option("userMetadata", records.encode(info))
        if where:
            writer = writer.option("replaceWhere", where)
        try:
            retrying(lambda: writer.save(table.path or ""))
        except Exception as exc:
            if where:
                raise PipeframeError("PF713", f"Cannot replace rows of `{table.state.name}` where `{where}`: "
                                     f"{first_line(exc)}", "Every new row must match the --where "
                                     "condition, and the condition must be valid SQL over the "
                                     "datasource's columns.") from None
            raise
        return tables.find_commit(self.spark, table.path or "", info.commit)

    @staticmethod
    def _misfits(bad: DataFrame, parts: int) -> tuple[list[int], list[tuple[str, ...]]]:
        """How many rows of each part do not fit, and their reasons (up to REASONS_SHOWN each)."""
        rows = bad.select(PART, REASON).limit(MISFITS_COLLECTED).collect()
        if len(rows) < MISFITS_COLLECTED:
            return _counted(parts, rows)
        from pyspark.sql.functions import expr  # many: count them where they are

        quarantined, reasons = [0] * parts, [() for _ in range(parts)]
        for part, count, first in bad.groupBy(PART).agg(
                expr("count(*)"), expr(f"slice(collect_list(`{REASON}`), 1, {REASONS_SHOWN})")).collect():
            quarantined[part], reasons[part] = int(count), tuple(first)
        return quarantined, reasons

    def delete(self, table: DeployedResource, where: str | None) -> int:
        """Delete rows in place (all of them without `where`); returns how many."""
        self.warehouse.require_safe_writers()
        from pipeframe.engine import tables

        condition = f" WHERE {where}" if where else ""
        try:
            with table_lock(table.path or ""):
                self.spark.sql(f"DELETE FROM {quote_path(table.path or '')}{condition}")
        except Exception as exc:  # noqa: BLE001
            raise PipeframeError("PF714", f"Cannot delete from `{table.state.name}` where `{where}`: "
                                 f"{first_line(exc)}", "Write a Spark SQL condition over the datasource's "
                                 "columns.") from None
        commit = tables.latest_commit(self.spark, table.path or "")
        return int(commit.metrics.get("numDeletedRows", 0) or 0) if commit.operation == "DELETE" else 0


def _counted(parts: int, misfits: Iterable[tuple[int, str]]) -> tuple[list[int], list[tuple[str, ...]]]:
    """How many of the misfit rows, each given as (its request, its reason), each of `parts` requests has, and
    their reasons (up to REASONS_SHOWN each)."""
    quarantined, reasons = [0] * parts, [[] for _ in range(parts)]
    for part, reason in misfits:
        quarantined[part] += 1
        if len(reasons[part]) < REASONS_SHOWN:
            reasons[part].append(reason)
    return quarantined, [tuple(r) for r in reasons]


def _typed_rows(batch: Batch) -> pa.Table:
    """A batch typed without Spark as the frame Spark's conform makes of it: the rows that fit, then the misfit lines
    (their columns NULL), each with its raw text, reason and request."""
    import pyarrow as pa

    rows, misfits = batch.fitting, batch.misfits
    good = rows.append_column(RAW, pa.nulls(rows.num_rows, pa.string())).append_column(
        REASON, pa.nulls(rows.num_rows, pa.string())).append_column(PART, pa.array(batch.parts, pa.int32()))
    bad = pa.table({**{field.name: pa.nulls(len(misfits), field.type) for field in rows.schema},
                    RAW: pa.array([m[1] for m in misfits], pa.string()),
                    REASON: pa.array([m[2] for m in misfits], pa.string()),
                    PART: pa.array([m[0] for m in misfits], pa.int32())})
    return pa.concat_tables([good, bad])


def _with_raw(table: DeployedResource) -> str:
    """The schema of `_typed_rows`: the datasource's columns, the raw text, the reason and the request."""
    return f"{table.state.schema}, `{RAW}` STRING, `{REASON}` STRING, `{PART}` INT"


def _fits_driver(batch: Batch) -> bool:
    """Whether the batch's input is known to be at most DIRECT_BYTES: a pandas DataFrame's size in memory, or what
    Spark's optimizer estimates for its frame (no job runs; estimated from the files read or the table's size).
    False when neither can say (a frame made from Python rows or an RDD; Spark Connect)."""
    if batch.size_bytes is not None:
        return batch.size_bytes <= DIRECT_BYTES
    try:
        plan = batch.frame._jdf.queryExecution().optimizedPlan()  # type: ignore[union-attr]
        if int(str(plan.stats().sizeInBytes())) > DIRECT_BYTES:
            return False
        nodes = [plan]
        while nodes:  # a handful of nodes: the conform's projection over the input's plan
            node = nodes.pop()
            if _UNSIZED.search(node.nodeName()):
                return False
            children = node.children()
            nodes += [children.apply(i) for i in range(children.size())]
        return True
    except Exception:  # noqa: BLE001 — Spark Connect has no JVM plan in this process
        return False


SEQUENCED = "kafka/"  # keys whose requests number their rows: a Kafka partition's batch (connectors/kafka.py)


def fence_of(key: str | None) -> tuple[str, int, int] | None:
    """(appId, first, last) of a key that numbers its request's rows — a Kafka batch `kafka/<topic>/<p>/<first>-<last>`
    continues the sequence `kafka/<topic>/<p>` (Kafka topic names hold no `/`) —; None for any other key. Such a
    request lands fenced (`deltaappend.Fenced`): never a number of its sequence the table holds already."""
    if not key or not key.startswith(SEQUENCED):
        return None
    app, _, span = key.rpartition("/")
    first, _, last = span.partition("-")
    try:
        numbers = int(first), int(last)
    except ValueError:
        return None
    return (app, *numbers) if 0 <= numbers[0] <= numbers[1] else None


def fences_of(keys: Iterable[str | None]) -> dict[str, tuple[int, int]]:
    """The sequences the requests of one commit continue: appId -> (its first number, its last) over them."""
    found: dict[str, tuple[int, int]] = {}
    for key in keys:
        if (fence := fence_of(key)) is not None:
            app, first, last = fence
            known = found.get(app, (first, last))
            found[app] = (min(known[0], first), max(known[1], last))
    return found


def committed_keys(spark: SparkSession | None, path: str, limit: int | None = KEY_COMMITS) -> dict[str, IngestResult]:
    """The idempotency keys recorded in a table's newest `limit` commits (None: all it keeps), each with what its
    request landed: a datasource's (the group committer, appends, S3 imports, Kafka batches) or its quarantine's."""
    from pipeframe.engine import tables

    found: dict[str, IngestResult] = {}
    for commit in tables.history(spark, path, limit):
        keys = commit.metadata.keys if isinstance(commit.metadata, records.IngestRecord) else {}
        for key, (accepted, quarantined) in keys.items():
            if key not in found:
                found[key] = IngestResult("", accepted, quarantined, commit.version, replayed=True)
    return found


def ingest_paths(commits: Iterable[Commit]) -> dict[str, int]:
    """How the group commits among `commits` (a landing datasource's newest: `status`) were made: how many, how
    many had their lines typed without Spark (`jsonlines`: the record's `parse`) and how many were written by pyarrow
    and a commit file (`deltaappend`: the commit's engineInfo) instead of Spark's Delta writer."""
    read = list(commits)
    groups = [c for c in read if isinstance(c.metadata, records.GroupCommit)]
    return {"commits_read": len(read), "group_commits": len(groups),
            "typed_without_spark": sum(c.metadata.parse == "arrow" for c in groups),
            "committed_by_pyarrow": sum(c.engine == deltaappend.ENGINE for c in groups)}


def _quarantine_record(keys: list[str | None], parts: list[int]) -> str | None:
    """A quarantine commit's pipeframe record: each idempotency key of the requests whose misfits it holds, with
    (0, how many), as a datasource commit keeps them (`committed_keys` reads both); None without a key."""
    counts: dict[str, int] = {}
    for part in parts:
        if part < len(keys) and keys[part]:
            counts[keys[part]] = counts.get(keys[part], 0) + 1
    if not counts:
        return None
    return records.encode(records.Ingest(commit=uuid.uuid4().hex, keys={k: (0, n) for k, n in counts.items()}))


def _commit_metadata(metadata: records.IngestRecord | None, keys: list[str | None], accepted: list[int] | None,
                     quarantined: list[int]) -> records.IngestRecord:
    """A datasource commit's pipeframe record: `metadata` (its kind), a unique commit id, and each idempotency key
    with what its request landed (accepted, quarantined)."""
    known = {key: (a, q) for key, a, q in zip(keys, accepted or (), quarantined, strict=False) if key}
    return replace(metadata or records.Ingest(), commit=uuid.uuid4().hex, keys=known)


def ndjson_lines(rows: list | tuple) -> list[str]:
    """Python rows as NDJSON lines: dicts encoded, strings taken as lines already."""
    return [row if isinstance(row, str) else json.dumps(row, default=str) for row in rows]


def conform_data(spark: SparkSession, data: object, datasource: Datasource) -> Batch:
    """`Project.append` input: a Spark DataFrame or pandas DataFrame (columns by name), or a list of dicts or of
    NDJSON lines (read like NDJSON events, through the `json:` paths; a line that is not JSON is quarantined)."""
    from pyspark.sql import DataFrame as SparkFrame

    if isinstance(data, SparkFrame):
        return Batch(conform(data, datasource), "dataframe")
    if isinstance(data, list | tuple):
        return Batch(conform_lines(spark, ndjson_lines(data), datasource), "rows")
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        return Batch(conform(spark.createDataFrame(data), datasource), "dataframe",  # pandas
                     size_bytes=int(data.memory_usage(deep=True).sum()))
    raise PipeframeError("PF715", f"Cannot append a {type(data).__name__}.",
                         "Pass a Spark DataFrame, a pandas DataFrame, a list of dicts, or a file path.")
