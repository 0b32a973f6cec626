"""The compiled loops of ``ratings.kernels_numba``, compiled ahead of time into a
CPython extension module (numba's ``pycc``), so a fit can run them with numpy alone.

Why: numba's just-in-time compiler costs memory before it compiles a thing. Loading
numba and LLVM and lowering the first (cached) loop puts about 150 MB in the process
(``tests/bench/bench_cli_memory.py``), which is most of ``python -m ratings fit``'s peak
at a million votes; the same loops built ahead of time cost the extension module's few
megabytes. The build runs once per environment (``scripts/setup.sh``) and is kept in the
environment (``<sys.prefix>/arena-kernels/``), named by a digest of the numba source,
this file and the numpy and numba versions (``digest``): ``ratings.kernels`` loads it only
when the digest is that of the source it runs beside, and otherwise compiles with numba
just in time as before. The two give the same bits (``tests/ratings/test_kernels_aot.py``):
neither uses fast-math, both call the same libm.

Each loop is exported with the one signature its callers use: int64 and float64 arrays,
C-contiguous (``ratings.kernels`` converts inputs and refuses outputs that are not), and
the loops release the GIL as their numba originals do (``nogil``).

Run: ``python -m ratings.kernels_aot build`` (idempotent: nothing to do when the module of
this digest exists), ``python -m ratings.kernels_aot path`` prints where it goes.
"""

import hashlib
import shutil
import sys
import tempfile
from importlib import machinery, metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "kernels_numba.py", HERE / "kernel_codes.py", Path(__file__).resolve())
PREFIX = "kernels_"

# name → (the loop in kernels_numba, its signature). ``ordered_table`` compiles twice:
# with counts, and without (count None), as numba's dispatcher compiles it for each.
I1, F1 = "int64[::1]", "float64[::1]"
I2, F2 = "int64[:, ::1]", "float64[:, ::1]"
EXPORTS = {
    "ordered_table": ("ordered_table", f"Tuple(({I1}, {I1}))({I1}, {I1}, {F1}, {I1}, int64)"),
    "ordered_table_uncounted": (
        "ordered_table",
        f"Tuple(({I1}, {I1}))({I1}, {I1}, {F1}, none, int64)",
    ),
    "fold": ("fold", f"UniTuple({I1}, 9)({I1}, int64)"),
    "laplacian": ("laplacian", f"{F2}({I1}, {I1}, {F1}, int64, float64)"),
    "cholesky_solve": ("_cholesky_solve", f"boolean({F2}, {F1}, {F1})"),
    "newton_fit": (
        "newton_fit",
        f"Tuple(({F1}, int64, int64))({I1}, {I1}, {F1}, {F1}, {F1}, float64, float64, int64,"
        " float64)",
    ),
    "tied_ranks": ("tied_ranks", f"none({F1}, float64, {I1}, {I1})"),
    "replicate_ranks": (
        "replicate_ranks",
        f"none({I2}, {I1}, {I1}, {F1}, {F1}, {I1}, {I1}, {F1}, float64, float64, int64,"
        f" float64, float64, {I2}, {I2}, {I1})",
    ),
    "summed_replicate_ranks": (
        "summed_replicate_ranks",
        f"none({F2}, {F2}, {I1}, {I1}, {F1}, float64, float64, int64, float64, float64,"
        f" {I2}, {I2}, {I1})",
    ),
}


def digest() -> str:
    """What the compiled module was built from: the sources, numpy's and numba's versions
    (the extension's own suffix names the Python)."""
    h = hashlib.sha256()
    for path in SOURCES:
        h.update(path.read_bytes())
    try:
        numba_version = metadata.version("numba")
    except metadata.PackageNotFoundError:
        numba_version = "none"
    h.update(f"numpy {np.__version__} numba {numba_version}".encode())
    return h.hexdigest()[:16]


def module_name() -> str:
    return PREFIX + digest()


def directory() -> Path:
    return Path(sys.prefix) / "arena-kernels"


def path() -> Path:
    return directory() / (module_name() + machinery.EXTENSION_SUFFIXES[0])


def build(out: Path | None = None) -> Path:
    """Compiles the loops into ``out`` (default ``path()``) unless it exists; returns it.
    Older builds in the same directory are removed."""
    target = path() if out is None else out
    if target.exists():
        return target
    from numba.core import compiler as numba_compiler
    from numba.pycc import CC
    from numba.pycc import compiler as pycc_compiler

    from ratings import kernels_numba

    class ReleasingFlags(numba_compiler.Flags):
        # pycc's wrappers hold the GIL (its Flags default); the loops are numba's
        # ``nogil`` ones, and the bootstrap runs them in threads side by side
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    name = target.name.split(".")[0]
    with tempfile.TemporaryDirectory() as scratch:
        cc = CC(name)
        cc.output_dir = scratch
        cc.verbose = False
        for exported, (loop, signature) in EXPORTS.items():
            cc.export(exported, signature)(getattr(kernels_numba, loop).py_func)
        saved = pycc_compiler.Flags
        pycc_compiler.Flags = ReleasingFlags
        try:
            cc.compile()
        finally:
            pycc_compiler.Flags = saved
        built = next(Path(scratch).glob(name + ".*"))
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_suffix(".partial")
        shutil.copyfile(built, staged)
        staged.replace(target)  # whole or not at all: a reader never sees half a module
    if out is None:
        for old in target.parent.glob(PREFIX + "*"):
            if old != target:
                old.unlink(missing_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["path"]:
        print(path())
        return 0
    if argv != ["build"]:
        print("usage: python -m ratings.kernels_aot build|path", file=sys.stderr)
        return 2
    if path().exists():
        print(f"kernels: compiled already ({path()})")
        return 0
    print(f"kernels: compiling ahead of time into {path()}")
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
