"""One table written as JSON Lines and/or Parquet in one pass over its rows (Parquet in
row groups of ``BATCH`` rows, so memory stays bounded whatever the table's size)."""

from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arena_site import strict_json
from exports.schema import Table

BATCH = 10_000
FORMATS = ("jsonl", "parquet")
ARROW_TYPES = {
    "string": pa.string(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),
}


def arrow_schema(table: Table) -> pa.Schema:
    return pa.schema(
        [
            pa.field(c.name, ARROW_TYPES[c.type], nullable=c.nullable or c.type == "json")
            for c in table.columns
        ]
    )


def _arrow_value(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "timestamp":
        return datetime.fromisoformat(value)
    if kind == "json":
        return strict_json.dumps(value, sort_keys=True, ensure_ascii=False)
    return value


class TableWriter:
    """Writes rows of ``table`` to ``<directory>/<table>.<format>`` for each format."""

    def __init__(self, table: Table, directory: Path, formats: tuple[str, ...]) -> None:
        self.table = table
        self.rows = 0
        self.paths: list[Path] = []
        self._jsonl = None
        self._parquet = None
        self._batch: list[dict] = []
        if "jsonl" in formats:
            path = directory / f"{table.name}.jsonl"
            self._jsonl = path.open("w", encoding="utf-8", newline="\n")
            self.paths.append(path)
        if "parquet" in formats:
            path = directory / f"{table.name}.parquet"
            self._schema = arrow_schema(table)
            self._parquet = pq.ParquetWriter(path, self._schema, compression="zstd")
            self.paths.append(path)

    def write(self, row: dict[str, Any]) -> None:
        """One row, in both formats alike: a float that is not finite (which JSON has
        no number for) is null in each (``arena_site.strict_json``)."""
        self.rows += 1
        row = strict_json.finite(row)
        if self._jsonl is not None:
            self._jsonl.write(strict_json.dumps(row, ensure_ascii=False, separators=(",", ":")))
            self._jsonl.write("\n")
        if self._parquet is not None:
            self._batch.append(row)
            if len(self._batch) >= BATCH:
                self._flush()

    def _flush(self) -> None:
        columns = {
            c.name: [_arrow_value(c.type, row[c.name]) for row in self._batch]
            for c in self.table.columns
        }
        self._parquet.write_table(pa.table(columns, schema=self._schema))
        self._batch = []

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._parquet is not None:
            if self._batch or self.rows == 0:
                self._flush()  # an empty table still gets its schema and one empty group
            self._parquet.close()
