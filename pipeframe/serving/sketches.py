"""Aggregate states finalized without Spark: the HLL and KLL sketches Spark writes (Apache DataSketches binaries) read,
merged and queried by the `datasketches` library, registered as DuckDB functions.

DuckDB takes no Python aggregate functions, so a Spark aggregate over sketches is read as DuckDB's `list(...)` of
the group's sketches handed to one of these scalar functions (`serving.translate` rewrites the calls):

| Spark | DuckDB |
|---|---|
| `hll_union_agg(c, true)` | `pf_hll_union(list(c))` |
| `hll_sketch_estimate(s)` | `pf_hll_estimate(s)` |
| `kll_merge_agg_double(c)` | `pf_kll_merge(list(c))` |
| `kll_sketch_get_quantile_double(s, r)` | `pf_kll_quantile(s, r)` (`pf_kll_quantiles` for an array of ranks) |
| `kll_sketch_get_n_double(s)` | `pf_kll_n(s)` |
| `hll_sketch_agg(x)` (a view's state query, in the in-memory store only) | `pf_hll_sketch(list(x))` |
| `kll_sketch_agg_double(x)` (the same) | `pf_kll_sketch(list(x))` |

Each mirrors Spark's own (datasketches-java): a union of HLL sketches is kept at the largest lgConfigK it is given
and read back as an HLL_8 sketch; an estimate is rounded half up to a whole number (Java's `Math.round`); a KLL rank
is inclusive. KLL merges that compact choose items at random, in Spark as here: such answers agree with Spark's
within the sketch's rank error, not to the digit (Spark's own answers differ between runs).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

HLL_LG_K = 12  # Spark's hll_sketch_agg default lgConfigK
KLL_K = 200  # Spark's kll_sketch_agg_double default k


def hll_union(sketches: list[bytes | None]) -> bytes | None:
    """The union of serialized HLL sketches, serialized as `hll_union_agg(…, true)` does; None without any."""
    import datasketches as ds

    found = [ds.hll_sketch.deserialize(bytes(s)) for s in sketches if s is not None]
    if not found:
        return None
    union = ds.hll_union(max(s.lg_config_k for s in found))
    for sketch in found:
        union.update(sketch)
    return bytes(union.get_result(ds.tgt_hll_type.HLL_8).serialize_compact())


def hll_sketch(values: list[str | None]) -> bytes:
    """`hll_sketch_agg(x)` with Spark's default lgConfigK (12): a sketch of the strings given, NULLs left out (Spark
    hashes a string's UTF-8 bytes, as `datasketches` does). Serialized as an HLL_8 sketch, which unions and estimates
    read as they read Spark's."""
    import datasketches as ds

    sketch = ds.hll_sketch(HLL_LG_K, ds.tgt_hll_type.HLL_8)
    for value in values:
        if value is not None:
            sketch.update(value)
    return bytes(sketch.serialize_compact())


def kll_sketch(values: list[float | None]) -> bytes:
    """`kll_sketch_agg_double(x)` with Spark's default k (200), NULLs left out."""
    import datasketches as ds

    sketch = ds.kll_doubles_sketch(KLL_K)
    for value in values:
        if value is not None:
            sketch.update(value)
    return bytes(sketch.serialize())


def hll_estimate(sketch: bytes) -> int:
    """`hll_sketch_estimate`: the distinct count of a serialized HLL sketch, rounded as Java's Math.round."""
    import datasketches as ds

    return math.floor(ds.hll_sketch.deserialize(bytes(sketch)).get_estimate() + 0.5)


def kll_merge(sketches: list[bytes | None]) -> bytes | None:
    """The merge of serialized KLL sketches of doubles (`kll_merge_agg_double`); None without any."""
    import datasketches as ds

    found = [ds.kll_doubles_sketch.deserialize(bytes(s)) for s in sketches if s is not None]
    if not found:
        return None
    merged = ds.kll_doubles_sketch(max(s.k for s in found))
    for sketch in found:
        merged.merge(sketch)
    return bytes(merged.serialize())


def kll_quantile(sketch: bytes, rank: float) -> float | None:
    """`kll_sketch_get_quantile_double`: the value at a normalized rank (inclusive, as Spark's); None when empty."""
    import datasketches as ds

    found = ds.kll_doubles_sketch.deserialize(bytes(sketch))
    return None if found.is_empty() else found.get_quantile(_rank(rank), True)


def kll_quantiles(sketch: bytes, ranks: list[float]) -> list[float] | None:
    """`kll_sketch_get_quantile_double` with an array of ranks."""
    import datasketches as ds

    found = ds.kll_doubles_sketch.deserialize(bytes(sketch))
    return None if found.is_empty() else [found.get_quantile(_rank(r), True) for r in ranks]


def kll_n(sketch: bytes) -> int:
    """`kll_sketch_get_n_double`: how many values the sketch has seen."""
    import datasketches as ds

    return int(ds.kll_doubles_sketch.deserialize(bytes(sketch)).n)


def _rank(rank: float) -> float:
    if not 0.0 <= rank <= 1.0:
        raise ValueError(f"[KLL_SKETCH_INVALID_QUANTILE_RANGE] a quantile rank must be between 0 and 1, not {rank}")
    return rank


def register(connection: duckdb.DuckDBPyConnection) -> None:
    """Make the functions above callable by their `pf_` names in every cursor of `connection`'s database."""
    functions = (
        ("pf_hll_union", hll_union, ["BLOB[]"], "BLOB"),
        ("pf_hll_estimate", hll_estimate, ["BLOB"], "BIGINT"),
        ("pf_kll_merge", kll_merge, ["BLOB[]"], "BLOB"),
        ("pf_kll_quantile", kll_quantile, ["BLOB", "DOUBLE"], "DOUBLE"),
        ("pf_kll_quantiles", kll_quantiles, ["BLOB", "DOUBLE[]"], "DOUBLE[]"),
        ("pf_kll_n", kll_n, ["BLOB"], "BIGINT"),
        ("pf_hll_sketch", hll_sketch, ["VARCHAR[]"], "BLOB"),
        ("pf_kll_sketch", kll_sketch, ["DOUBLE[]"], "BLOB"),
    )
    for name, function, params, returns in functions:
        connection.create_function(name, function, params, returns, side_effects=False)
