"""The compiled loops of a fit: one door to them. Pure: numpy.

The loops themselves are ``ratings.kernels_numba`` (what each does and why it is one
loop). They run from the extension module the setup compiled ahead of time from that very
source (``ratings.kernels_aot``), which needs only numpy: loading numba and its LLVM
would cost a fit about 150 MB before its data (``python -m ratings fit``'s peak at a
million votes). When that module is missing, or was built from another version of the
source, the loops are numba's, compiled just in time (and cached on disk), with the same
bits. ``ARENA_KERNELS=jit`` forces numba's; ``implementation()`` says which runs.

Each loop is compiled for int64 and float64 C-contiguous arrays: inputs are converted
here (no copy when they are so already), and an output array that is not so is refused,
since a copy would take the loop's writes. This module is imported only inside the
functions that fit (the rating worker, the CLI), never at the import of a module a web
request reaches.
"""

import importlib.util
import os
import sys
import threading
from functools import cache
from types import ModuleType

import numpy as np

from ratings.kernel_codes import (  # noqa: F401 - the codes, read from here by the callers
    COUNT,
    FIT_CONVERGED,
    FIT_NOT_CONVERGED,
    FIT_NOT_POSITIVE_DEFINITE,
    OUT_OF_RANGE,
    OUTCOME,
    SELF,
)

_loading = threading.Lock()


@cache
def _compiled() -> tuple[str, ModuleType]:
    """("aot", the module compiled ahead of time) when there is one of this source, else
    ("jit", ``ratings.kernels_numba``). Loaded once per process (the bootstrap's threads
    may ask at once)."""
    with _loading:
        return _load()


def _load() -> tuple[str, ModuleType]:
    if os.environ.get("ARENA_KERNELS", "") != "jit":
        from ratings import kernels_aot

        name, path = kernels_aot.module_name(), kernels_aot.path()
        if name in sys.modules:  # a second caller that missed the cache
            return "aot", sys.modules[name]
        if path.exists():
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[name] = module
                return "aot", module
    from ratings import kernels_numba

    return "jit", kernels_numba


def implementation() -> str:
    """ "aot" or "jit": which compiled loops run in this process."""
    return _compiled()[0]


def _i(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)


def _f(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)


def _out(x: np.ndarray, dtype) -> np.ndarray:
    if not (isinstance(x, np.ndarray) and x.dtype == dtype and x.flags.c_contiguous):
        raise TypeError(f"an output of the compiled loops must be a C-contiguous {dtype} array")
    if not x.flags.writeable:
        raise TypeError("an output of the compiled loops must be writeable")
    return x


def ordered_table(a, b, y, count, n: int) -> tuple[np.ndarray, np.ndarray]:
    kind, loops = _compiled()
    a, b, y = _i(a), _i(b), _f(y)
    if kind == "jit":
        return loops.ordered_table(a, b, y, None if count is None else _i(count), int(n))
    if count is None:
        return loops.ordered_table_uncounted(a, b, y, None, int(n))
    return loops.ordered_table(a, b, y, _i(count), int(n))


def fold(table, n: int) -> tuple[np.ndarray, ...]:
    return _compiled()[1].fold(_i(table), int(n))


def laplacian(i, j, h, n: int, diagonal: float) -> np.ndarray:
    return _compiled()[1].laplacian(_i(i), _i(j), _f(h), int(n), float(diagonal))


def cholesky_solve(a: np.ndarray, b, x: np.ndarray) -> bool:
    """x ← a⁻¹ b, overwriting ``a`` (``kernels_numba._cholesky_solve``)."""
    kind, loops = _compiled()
    solve = loops._cholesky_solve if kind == "jit" else loops.cholesky_solve
    return bool(solve(_out(a, np.float64), _f(b), _out(x, np.float64)))


def newton_fit(i, j, total, wins, theta0, ridge, tol, max_iterations, armijo):
    theta, iterations, status = _compiled()[1].newton_fit(
        _i(i), _i(j), _f(total), _f(wins), _f(theta0),
        float(ridge), float(tol), int(max_iterations), float(armijo),
    )  # fmt: skip
    return theta, int(iterations), int(status)


def tied_ranks(theta, tie: float, best: np.ndarray, worst: np.ndarray) -> None:
    _compiled()[1].tied_ranks(_f(theta), float(tie), _out(best, np.int64), _out(worst, np.int64))


def replicate_ranks(
    counts, unit, pair, total, wins, i, j, theta0, ridge, tol, max_iterations, armijo, tie,
    best: np.ndarray, worst: np.ndarray, status: np.ndarray,
) -> None:  # fmt: skip
    _compiled()[1].replicate_ranks(
        _i(counts), _i(unit), _i(pair), _f(total), _f(wins), _i(i), _i(j), _f(theta0),
        float(ridge), float(tol), int(max_iterations), float(armijo), float(tie),
        _out(best, np.int64), _out(worst, np.int64), _out(status, np.int64),
    )  # fmt: skip


def summed_replicate_ranks(
    sum_total, sum_wins, i, j, theta0, ridge, tol, max_iterations, armijo, tie,
    best: np.ndarray, worst: np.ndarray, status: np.ndarray,
) -> None:  # fmt: skip
    _compiled()[1].summed_replicate_ranks(
        _f(sum_total), _f(sum_wins), _i(i), _i(j), _f(theta0),
        float(ridge), float(tol), int(max_iterations), float(armijo), float(tie),
        _out(best, np.int64), _out(worst, np.int64), _out(status, np.int64),
    )  # fmt: skip
