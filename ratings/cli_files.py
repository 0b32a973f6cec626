"""The files ``python -m ratings fit`` reads (``ratings.cli``): CSV, JSON Lines and
Parquet, each turned into (line, cells) records that go through the same checks as CSV,
and the input errors a user can fix (:class:`CliError`). No Django, no database."""

import codecs
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path


class CliError(Exception):
    """A problem with the input the user can fix; becomes one line on stderr, exit 2."""


JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")


def file_format(path: Path, given: str = "auto") -> str:
    """csv, jsonl or parquet: ``given`` unless it is auto, else by the file's suffix."""
    if given != "auto":
        return given
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    return "csv"


def file_records(content: bytes, path: Path, given: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) per record of the file, the header first, whatever its format."""
    kind = file_format(path, given)
    if kind == "jsonl":
        return _json_records(_decode(content, path), path)
    if kind == "parquet":
        return _parquet_records(content, path)
    return _records(io.StringIO(_decode(content, path), newline="").readlines(), path)


def _cell(value: object) -> str:
    """A JSON or Parquet value as the text a CSV cell would hold: null is empty, a
    float keeps every digit (repr), anything nested is its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, sort_keys=True, default=str)


def _keyed_records(rows: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, list[str]]]:
    """Objects as records: the first object's keys are the header; a later object's
    keys beyond those are extra cells (reported like CSV's), a missing key a short row."""
    header: list[str] | None = None
    for line, row in rows:
        if header is None:
            header = list(row)
            yield 0, header
        cells = [_cell(row[key]) for key in header if key in row]
        if len(cells) == len(header):
            cells += [_cell(value) for key, value in row.items() if key not in header]
        yield line, cells


def _json_records(text: str, path: Path) -> Iterator[tuple[int, list[str]]]:
    def objects() -> Iterator[tuple[int, dict]]:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError as exc:
                raise CliError(
                    f"line {number} of {path} is not JSON ({exc.msg}); each line of a JSON "
                    "Lines file is one object"
                ) from None
            if not isinstance(row, dict):
                raise CliError(
                    f"line {number} of {path} is a JSON {type(row).__name__}, not an object; "
                    "each line of a JSON Lines file is one object"
                )
            yield number, row

    return _keyed_records(objects())


def _parquet_records(content: bytes, path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        import pyarrow.parquet as pq  # only for Parquet: CSV and JSONL need no pyarrow
    except ImportError:
        raise CliError(
            f"{path} is Parquet, and reading Parquet needs pyarrow (pip install pyarrow); "
            "or use the export's JSON Lines file"
        ) from None
    try:
        table = pq.read_table(io.BytesIO(content))
    except Exception as exc:  # pyarrow raises its own error types for a bad file
        raise CliError(f"{path} is not a readable Parquet file ({exc}); check the file") from None
    header = table.column_names

    def rows() -> Iterator[tuple[int, dict]]:
        for number, row in enumerate(table.to_pylist(), start=1):
            yield number, {key: row[key] for key in header}

    return _keyed_records(rows())


def _decode(content: bytes, path: Path) -> str:
    """The file's text; CliError naming where it is not UTF-8."""
    resave = "re-save it as UTF-8 (e.g. 'CSV UTF-8' in a spreadsheet's Save As)"
    if content.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise CliError(
            f"{path} is UTF-16 (it starts with a UTF-16 byte-order mark), not UTF-8; {resave}"
        )
    start = len(codecs.BOM_UTF8) if content.startswith(codecs.BOM_UTF8) else 0
    try:
        text = content[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = content.count(b"\n", 0, offset) + 1
        raise CliError(
            f"{path} is not UTF-8: line {line} (byte {offset}) has the byte "
            f"0x{content[offset]:02x} that UTF-8 cannot decode; {resave}"
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise CliError(
            f"{path} is not UTF-8 text: line {line} has a NUL byte (UTF-16 without a "
            f"byte-order mark, or not a CSV file); {resave}"
        )
    return text


def _records(lines: list[str], path: Path) -> Iterator[tuple[int, list[str]]]:
    """(the line it starts on, cells) per non-blank CSV record; CliError on bad quoting."""
    reader = csv.reader(lines, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            message = str(exc)
            if "unexpected end of data" in message:
                opened = _open_quote_line(lines, start, len(lines))
                raise CliError(
                    f'line {opened}: a quote (") is opened and never closed, so the rest '
                    f"of {path} would be one cell; close the quote or remove it"
                ) from None
            if "field larger than field limit" in message:
                opened = _open_quote_line(lines, start, reader.line_num)
                raise CliError(
                    f"line {start}: a cell is longer than {csv.field_size_limit()} "
                    f'characters, most likely because the quote (") opened on line '
                    f"{opened} is never closed; close the quote or remove it"
                ) from None
            raise CliError(
                f"line {reader.line_num}: bad CSV quoting ({message}); a quoted cell must "
                'end at its closing quote, and a quote inside it is written ""'
            ) from None
        if cells:
            yield start, cells


def _open_quote_line(lines: list[str], start: int, end: int) -> int:
    """The line of the last quote that opens a cell in lines start..end (1-based), read
    by the excel dialect's rules; ``start`` when there is none."""
    state, opened = "cell", start
    for number in range(start, end + 1):
        for char in lines[number - 1]:
            if state == "quoted":
                state = "closing" if char == '"' else "quoted"
            elif state == "closing" and char == '"':
                state = "quoted"  # "" inside a quoted cell
            elif char in ",\r\n":
                state = "cell"
            elif state == "cell" and char == '"':
                state, opened = "quoted", number
            else:
                state = "plain"
    return opened
