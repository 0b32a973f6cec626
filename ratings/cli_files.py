"""The files ``python -m ratings fit`` reads (``ratings.cli``): CSV, JSON Lines and
Parquet, each turned into (line, cells) records that go through the same checks as CSV,
and the input errors a user can fix (:class:`CliError`). No Django, no database.

Every format is streamed: a record at a time (Parquet a batch of rows at a time, read
by a child process so that pyarrow never loads where the fit runs), never the whole
file as text or as one Python object per row, so a file of a million battles costs its
parsed columns and not its text (tests/bench/bench_cli_memory.py).
The text formats are checked first in one pass over the bytes (``file_check``: UTF-8,
no NUL, and the SHA-256 of the bytes as read), then parsed in a second."""

import codecs
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


class CliError(Exception):
    """A problem with the input the user can fix; becomes one line on stderr, exit 2."""


JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
BLOCK = 1 << 20  # bytes read at a time by the checking pass
PARQUET_BATCH = 8192  # rows turned into Python values at a time
RESAVE = "re-save it as UTF-8 (e.g. 'CSV UTF-8' in a spreadsheet's Save As)"


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


def file_check(path: Path, kind: str) -> str:
    """The SHA-256 of the file's bytes, read once in blocks; for the text formats also
    checks they are UTF-8 (an optional byte-order mark allowed) without NUL bytes,
    raising CliError naming the line and byte where they are not."""
    digest = hashlib.sha256()
    text = kind != "parquet"
    carry, base, newlines, nul_line = b"", 0, 0, None
    try:
        with path.open("rb") as handle:
            first = True
            while block := handle.read(BLOCK):
                digest.update(block)
                if not text:
                    continue
                data = carry + block
                if first:
                    first = False
                    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                        raise CliError(
                            f"{path} is UTF-16 (it starts with a UTF-16 byte-order mark), "
                            f"not UTF-8; {RESAVE}"
                        )
                carry = _decodable(data, base, newlines, path)
                done = data[: len(data) - len(carry)]
                if nul_line is None and b"\x00" in done:
                    nul_line = newlines + done.count(b"\n", 0, done.index(b"\x00")) + 1
                newlines += done.count(b"\n")
                base += len(done)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}; check the path") from exc
    if carry:  # the file ends inside a character
        _decodable(carry, base, newlines, path, final=True)
    if nul_line is not None:
        raise CliError(
            f"{path} is not UTF-8 text: line {nul_line} has a NUL byte (UTF-16 without a "
            f"byte-order mark, or not a CSV file); {RESAVE}"
        )
    return digest.hexdigest()


def _decodable(data: bytes, base: int, newlines: int, path: Path, final: bool = False) -> bytes:
    """The bytes at the end of ``data`` that may begin a character the next block
    completes (b"" for none); CliError where ``data`` (at file offset ``base``) is not
    UTF-8."""
    try:
        data.decode("utf-8")
        return b""
    except UnicodeDecodeError as exc:
        if not final and exc.end == len(data) and len(data) - exc.start < 4:
            try:  # an incomplete character at the end, or a wrong byte?
                data[exc.start :].decode("utf-8")
            except UnicodeDecodeError as tail:
                if tail.reason == "unexpected end of data":
                    return data[exc.start :]
        offset = base + exc.start
        line = newlines + data.count(b"\n", 0, exc.start) + 1
        raise CliError(
            f"{path} is not UTF-8: line {line} (byte {offset}) has the byte "
            f"0x{data[exc.start]:02x} that UTF-8 cannot decode; {RESAVE}"
        ) from None


def file_records(path: Path, given: str) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) per record of the file, the header first, whatever its format.
    Precondition: ``file_check`` passed on the file (the text formats are UTF-8)."""
    kind = file_format(path, given)
    if kind == "jsonl":
        return _json_records(path)
    if kind == "parquet":
        return _parquet_records(path)
    return _records(path)


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


def _json_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    def objects() -> Iterator[tuple[int, dict]]:
        with path.open(encoding="utf-8-sig") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except ValueError as exc:
                    raise CliError(
                        f"line {number} of {path} is not JSON ({exc.msg}); each line of a "
                        "JSON Lines file is one object"
                    ) from None
                if not isinstance(row, dict):
                    raise CliError(
                        f"line {number} of {path} is a JSON {type(row).__name__}, not an "
                        "object; each line of a JSON Lines file is one object"
                    )
                yield number, row

    return _keyed_records(objects())


def _parquet_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """The rows of a Parquet file, read by a child process (``parquet_to_csv``) and
    handed over as CSV text: pyarrow's libraries (~40 MB resident once imported, and
    never unloaded) and its buffers stay in the child, which has exited before the fit
    loads its own. The cells are those ``_cell`` makes of the values (CSV carries any
    text unchanged), the header first, rows numbered from 1."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from ratings.cli_files import parquet_to_csv; parquet_to_csv(sys.argv[2])"
    )
    root = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-c", script, root, str(path)],
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        try:
            text = io.TextIOWrapper(child.stdout, encoding="utf-8", newline="")
            cut = None
            try:
                yield from enumerate(csv.reader(text, strict=True))
            except (csv.Error, UnicodeDecodeError) as exc:  # cut short: the status says why
                cut = exc
            text.close()
            if child.wait() != 0:
                errors.seek(0)
                raise _parquet_error(path, child.returncode, errors.read())
            if cut is not None:
                raise CliError(f"{path} could not be read ({cut}); check the file") from None
        finally:
            if child.poll() is None:  # the reader stopped early: a bad row, an error
                child.kill()
                child.wait()
            child.stdout.close()


NO_PYARROW = 3  # parquet_to_csv's exit status without pyarrow; 4: an unreadable file


def _parquet_error(path: Path, status: int, message: bytes) -> CliError:
    if status == NO_PYARROW:
        return CliError(
            f"{path} is Parquet, and reading Parquet needs pyarrow (pip install pyarrow); "
            "or use the export's JSON Lines file"
        )
    reason = message.decode("utf-8", "replace").strip().splitlines()
    reason = reason[-1] if reason else f"the reader exited with status {status}"
    return CliError(f"{path} is not a readable Parquet file ({reason}); check the file")


def parquet_to_csv(name: str) -> None:
    """The child's side of ``_parquet_records``: the file's header and rows as CSV on
    stdout, a batch of rows at a time; exit status ``NO_PYARROW`` without pyarrow, 4
    (the reason on stderr) when the file cannot be read."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SystemExit(NO_PYARROW) from None
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="", write_through=False)
    writer = csv.writer(out, lineterminator="\n")
    try:
        parquet = pq.ParquetFile(name)
        header = parquet.schema_arrow.names
        writer.writerow(header)
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH):
            columns = [batch.column(k).to_pylist() for k in range(len(header))]
            rows = zip(*columns, strict=True)
            writer.writerows([_cell(value) for value in values] for values in rows)
        out.flush()
    except BrokenPipeError:  # the reader stopped early (it says why)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except Exception as exc:  # pyarrow raises its own error types for a bad file
        print(str(exc).replace("\n", " "), file=sys.stderr)
        raise SystemExit(4) from None


def _records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(the line it starts on, cells) per non-blank CSV record; CliError on bad quoting."""
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        while True:
            start = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise _quoting_error(path, str(exc), start, reader.line_num) from None
            if cells:
                yield start, cells


def _quoting_error(path: Path, message: str, start: int, at: int) -> CliError:
    """The one-line error for a CSV quoting fault found reading lines start..at."""
    if "unexpected end of data" in message:
        opened = _open_quote_line(path, start, None)
        return CliError(
            f'line {opened}: a quote (") is opened and never closed, so the rest '
            f"of {path} would be one cell; close the quote or remove it"
        )
    if "field larger than field limit" in message:
        opened = _open_quote_line(path, start, at)
        return CliError(
            f"line {start}: a cell is longer than {csv.field_size_limit()} "
            f'characters, most likely because the quote (") opened on line '
            f"{opened} is never closed; close the quote or remove it"
        )
    return CliError(
        f"line {at}: bad CSV quoting ({message}); a quoted cell must "
        'end at its closing quote, and a quote inside it is written ""'
    )


def _open_quote_line(path: Path, start: int, end: int | None) -> int:
    """The line of the last quote that opens a cell in lines start..end (1-based, to the
    end of the file for None), read by the excel dialect's rules; ``start`` when there
    is none. Only on the way to an error: the file is read again."""
    state, opened = "cell", start
    with path.open(encoding="utf-8-sig", newline="") as handle:
        for number, text in enumerate(handle, start=1):
            if number < start:
                continue
            if end is not None and number > end:
                break
            for char in text:
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
