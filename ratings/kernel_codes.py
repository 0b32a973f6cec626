"""The codes the compiled loops (``ratings.kernels``) return, shared by their numba source
(``ratings.kernels_numba``) and their callers, who must read them without loading numba."""

# Fault kinds of ``ordered_table``, in the order ``bradley_terry`` reports them.
OUT_OF_RANGE, SELF, OUTCOME, COUNT = 0, 1, 2, 3

# A replicate's fit (``newton_fit``): converged, stopped short (the iteration cap, or no
# step helps), or a Hessian Cholesky refused (the caller refits with numpy's Newton).
FIT_CONVERGED, FIT_NOT_CONVERGED, FIT_NOT_POSITIVE_DEFINITE = 0, 1, 2

LOG2 = 0.6931471805599453
