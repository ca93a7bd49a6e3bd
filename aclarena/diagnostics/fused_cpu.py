"""A fused CPU kernel for the per-position sums of :mod:`aclarena.diagnostics.token_drift`.

The torch path of :func:`~aclarena.diagnostics.token_drift.pair_stats_` makes about 17
passes over every ``positions × vocabulary`` chunk (``amax``, ``sub``, two ``exp``, one
``log``, top-k and blocked dot products, each a separate operator): on CPU it is bound by
memory traffic and cost ~0.45 × the output-head matmul itself. This kernel reads each row
of both models' logits three times while it sits in cache:

1. the row maximum, the top-k (a block maximum decides whether a block of 64 can hold a
   top-k entry at all), the target's logit and a check that every logit is finite;
2. ``e = exp(z - max)`` written back in place, and the sums ``s = Σ e``, ``a = Σ e·z'``,
   ``d = Σ e·(z'_ref - z'_ckpt)`` for both models;
3. ``Σ m·log m`` with ``m = p_ref + p_ckpt`` for the Jensen-Shannon divergence.

Sums accumulate in float32 over blocks of 512 entries (vector lanes) and the blocks in
float64, so the error stays near float32 rounding of the inputs. Rows holding a NaN or an
infinite logit are skipped (flagged) and left to the torch path, which defines what they
give. The caller turns the sums into statistics (:mod:`aclarena.diagnostics.token_drift`).

The kernel is C, compiled on first use with the system C compiler (``$CC``, else ``cc``)
into ``$ACLARENA_CACHE/kernels`` (default ``~/.cache/aclarena/kernels``; keyed by the
source, the flags, the compiler and the CPU's instruction-set flags) and loaded with
ctypes; calls release the GIL and the rows are split over ``torch.get_num_threads()``
threads. It is checked against float64 torch on random rows before first use. Without a
compiler, on a failed build or check, for float64 or non-CPU tensors, or with
``ACLARENA_FUSED_CPU=0``, the torch path is used: the numbers agree to float32 rounding
either way.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

#: The most top-k entries the kernel keeps itself (more: ``torch.topk`` first).
MAX_K = 64

_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <float.h>
#include <string.h>

#define BLK 512
#define TB 64

/* 1 when some entry of x is NaN or infinite: an integer test, which -ffinite-math-only cannot fold away */
static int nonfinite(const float *restrict x, int64_t n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t bad = 0;
    #pragma omp simd reduction(|:bad)
    for (int64_t i = 0; i < n; i++) bad |= ((u[i] & 0x7f800000u) == 0x7f800000u);
    return bad != 0;
}

static float block_max(const float *restrict x, int64_t n) {
    float m = x[0];
    #pragma omp simd reduction(max:m)
    for (int64_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* row maximum and top-k (most probable first; equal values keep the lower index first) */
static float max_topk(const float *restrict z, int64_t V, int k, float *restrict vals, int64_t *restrict ids) {
    int cnt = 0;
    float thr = -FLT_MAX, m = -FLT_MAX;
    for (int64_t b = 0; b < V; b += TB) {
        int64_t n = V - b < TB ? V - b : TB;
        float bm = block_max(z + b, n);
        m = bm > m ? bm : m;
        if (cnt < k || bm > thr) {
            for (int64_t i = b; i < b + n; i++) {
                float x = z[i];
                if (cnt < k || x > thr) {
                    int pos = cnt < k ? cnt : k - 1;
                    while (pos > 0 && vals[pos - 1] < x) {
                        vals[pos] = vals[pos - 1];
                        ids[pos] = ids[pos - 1];
                        pos--;
                    }
                    vals[pos] = x;
                    ids[pos] = i;
                    if (cnt < k) cnt++;
                    thr = cnt == k ? vals[k - 1] : -FLT_MAX;
                }
            }
        }
    }
    return m;
}

/* One model's rows [r0, r1): max, top-k, target logit, s = sum e, a = sum e z' (z' = z - max).
   out_f: [n, 2] (max, target logit); out_d: [n, 2] (s, a); flag: [n]; topv/topi: [n, k]. */
void aclarena_dist_rows(float *z, int64_t r0, int64_t r1, int64_t V, const int64_t *targets, int k,
                        float *out_f, double *out_d, int8_t *flag, float *topv, int64_t *topi) {
    for (int64_t r = r0; r < r1; r++) {
        float *restrict x = z + r * V;
        flag[r] = (int8_t)nonfinite(x, V);
        if (flag[r]) continue;
        float m = max_topk(x, V, k, topv + r * k, topi + r * k);
        out_f[2 * r] = m;
        out_f[2 * r + 1] = targets ? x[targets[r]] : 0.0f;
        double s = 0.0, a = 0.0;
        for (int64_t b = 0; b < V; b += BLK) {
            int64_t n = V - b < BLK ? V - b : BLK;
            const float *restrict xb = x + b;
            float sb = 0.0f, ab = 0.0f;
            #pragma omp simd reduction(+:sb, ab)
            for (int64_t i = 0; i < n; i++) {
                float y = xb[i] - m;
                float e = expf(y);
                sb += e;
                ab += e * y;
            }
            s += sb;
            a += ab;
        }
        out_d[2 * r] = s;
        out_d[2 * r + 1] = a;
    }
}

/* Both models' rows [r0, r1). zr and zc are overwritten with exp(z - max).
   out_f: [n, 4] (max_r, max_c, target logit r, target logit c);
   out_d: [n, 7] (s_r, s_c, a_r, a_c, d_r, d_c, sum m log m) with d = z'_r - z'_c, m = p_r + p_c + tiny;
   topv_r/topi_r may be NULL (the reference's top-k is not needed). */
void aclarena_pair_rows(float *zr, float *zc, int64_t r0, int64_t r1, int64_t V, const int64_t *targets, int k,
                        float *out_f, double *out_d, int8_t *flag, float *topv_r, int64_t *topi_r,
                        float *topv_c, int64_t *topi_c) {
    float dummy_v[1];
    int64_t dummy_i[1];
    for (int64_t r = r0; r < r1; r++) {
        float *restrict xr = zr + r * V;
        float *restrict xc = zc + r * V;
        flag[r] = (int8_t)(nonfinite(xr, V) | nonfinite(xc, V));
        if (flag[r]) continue;
        float mr = topv_r ? max_topk(xr, V, k, topv_r + r * k, topi_r + r * k) : max_topk(xr, V, 1, dummy_v, dummy_i);
        float mc = max_topk(xc, V, k, topv_c + r * k, topi_c + r * k);
        float *of = out_f + 4 * r;
        of[0] = mr;
        of[1] = mc;
        of[2] = targets ? xr[targets[r]] : 0.0f;
        of[3] = targets ? xc[targets[r]] : 0.0f;
        double sr = 0, sc = 0, ar = 0, ac = 0, dr = 0, dc = 0;
        for (int64_t b = 0; b < V; b += BLK) {
            int64_t n = V - b < BLK ? V - b : BLK;
            float *restrict pr = xr + b;
            float *restrict pc = xc + b;
            float srb = 0, scb = 0, arb = 0, acb = 0, drb = 0, dcb = 0;
            #pragma omp simd reduction(+:srb, scb, arb, acb, drb, dcb)
            for (int64_t i = 0; i < n; i++) {
                float yr = pr[i] - mr;
                float yc = pc[i] - mc;
                float er = expf(yr);
                float ec = expf(yc);
                float d = yr - yc;
                pr[i] = er;
                pc[i] = ec;
                srb += er;
                scb += ec;
                arb += er * yr;
                acb += ec * yc;
                drb += er * d;
                dcb += ec * d;
            }
            sr += srb; sc += scb; ar += arb; ac += acb; dr += drb; dc += dcb;
        }
        float ir = (float)(1.0 / sr), ic = (float)(1.0 / sc);
        double sl = 0;
        for (int64_t b = 0; b < V; b += BLK) {
            int64_t n = V - b < BLK ? V - b : BLK;
            const float *restrict pr = xr + b;
            const float *restrict pc = xc + b;
            float slb = 0;
            #pragma omp simd reduction(+:slb)
            for (int64_t i = 0; i < n; i++) {
                float q = pr[i] * ir + pc[i] * ic + FLT_MIN;
                slb += q * logf(q);
            }
            sl += slb;
        }
        double *od = out_d + 7 * r;
        od[0] = sr; od[1] = sc; od[2] = ar; od[3] = ac; od[4] = dr; od[5] = dc; od[6] = sl;
    }
}
"""

# -ffast-math for vectorised expf/logf (glibc's libmvec) and no errno; but no reassociation outside
# the reductions marked `omp simd` (it turned z'_r - z'_c into a sum of products that is not exactly 0 for
# identical rows), and no flush-to-zero linked into the process (see _LINK)
_COMPILE = ["-O3", "-march=native", "-ffast-math", "-fno-associative-math", "-fopenmp-simd", "-fPIC", "-std=c99"]
_LINK = ["-shared"]  # no -ffast-math when linking: it would set flush-to-zero for the whole process


@dataclass
class _State:
    lib: ctypes.CDLL | None = None
    tried: bool = False
    reason: str = ""
    pool: ThreadPoolExecutor | None = None
    workers: int = 0


_STATE = _State()
_LOCK = threading.Lock()


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _cache_dir() -> Path:
    root = os.environ.get("ACLARENA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "aclarena")
    return Path(root) / "kernels"


def _build() -> ctypes.CDLL:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (set CC)")
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256("\0".join([_SOURCE, " ".join(_COMPILE + _LINK), cc, version, _cpu_flags(),
                                     platform.machine()]).encode()).hexdigest()[:16]
    out = _cache_dir() / f"token_sums_{key}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            src, obj, so = Path(tmp) / "k.c", Path(tmp) / "k.o", Path(tmp) / "k.so"
            src.write_text(_SOURCE)
            for cmd in ([cc, *_COMPILE, "-c", str(src), "-o", str(obj)], [cc, *_LINK, str(obj), "-o", str(so), "-lm"]):
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if res.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd[:2])} failed: {res.stderr.strip()[-300:]}")
            os.replace(so, out)  # atomic: concurrent processes (torchrun ranks) race harmlessly
    lib = ctypes.CDLL(str(out))
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.aclarena_dist_rows.argtypes = [p, i64, i64, i64, p, i32, p, p, p, p, p]
    lib.aclarena_dist_rows.restype = None
    lib.aclarena_pair_rows.argtypes = [p, p, i64, i64, i64, p, i32, p, p, p, p, p, p, p]
    lib.aclarena_pair_rows.restype = None
    return lib


def _self_check() -> None:
    """Compare the kernel with float64 torch on random rows (a wrong build must not be used)."""
    g = torch.Generator().manual_seed(0)
    n, v, k = 5, 1237, 3
    zr = torch.randn(n, v, generator=g) * 4
    zc = zr + torch.randn(n, v, generator=g)
    t = torch.randint(0, v, (n,), generator=g)
    s = pair_sums(zr.clone(), zc.clone(), t, k, ref_topk=True, check=False)
    assert s is not None
    for z, col, m_col, tk in ((zr, 0, 0, s.topk_r), (zc, 1, 1, s.topk_c)):
        z64 = z.double()
        m = z64.amax(-1)
        y = z64 - m[:, None]
        e = y.exp()
        want = torch.stack([e.sum(-1), (e * y).sum(-1)], 1)
        got = s.sums[:, [col, 2 + col]]
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6) or not torch.equal(s.maxes[:, m_col].double(), m):
            raise RuntimeError("kernel disagrees with torch on the check rows")
        assert tk is not None
        if not torch.equal(tk[1], z.topk(k, dim=-1).indices):
            raise RuntimeError("kernel's top-k disagrees with torch.topk on the check rows")
    p = (zr.double().log_softmax(-1).exp() + zc.double().log_softmax(-1).exp())
    if not torch.allclose(s.sums[:, 6], (p * p.log()).sum(-1), rtol=1e-5, atol=1e-6):
        raise RuntimeError("kernel disagrees with torch on the check rows (JS sum)")
    if not torch.equal(s.targets[:, 0], zr.gather(1, t[:, None])[:, 0]):
        raise RuntimeError("kernel disagrees with torch on the target logits")


def _load() -> ctypes.CDLL | None:
    if os.environ.get("ACLARENA_FUSED_CPU", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if _STATE.tried:
        return _STATE.lib
    with _LOCK:
        if not _STATE.tried:
            try:
                _STATE.lib = _build()
                _self_check()
                _STATE.tried = True
            except Exception as exc:  # any failure: the torch path, said once
                _STATE.lib, _STATE.tried = None, True
                _STATE.reason = str(exc)
                warnings.warn(f"aclarena: the fused CPU kernel for token scoring is not used ({exc}); "
                              "scoring falls back to torch operators (same numbers, slower)", RuntimeWarning,
                              stacklevel=3)
    return _STATE.lib


def available() -> bool:
    """Whether the kernel is built, checked and enabled (``ACLARENA_FUSED_CPU`` not 0)."""
    return _load() is not None


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the kernel applies to these ``[n, V]`` buffers (float32, CPU, rows contiguous)."""
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.ndim == 2 and t.is_contiguous()
               for t in tensors) and available()


def _run(fn: Callable[..., Any], n: int, args_of: Callable[[int, int], tuple[Any, ...]]) -> None:
    workers = max(1, min(torch.get_num_threads(), n // 4 or 1))
    if workers == 1:
        fn(*args_of(0, n))
        return
    if _STATE.pool is None or _STATE.workers < workers:
        _STATE.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aclarena-fused")
        _STATE.workers = workers
    step = max(4, -(-n // (4 * workers)))  # a few pieces per thread: a descheduled thread delays little
    pool = _STATE.pool
    futures = [pool.submit(fn, *args_of(r, min(n, r + step))) for r in range(0, n, step)]
    for f in futures:
        f.result()


@dataclass(frozen=True)
class Sums:
    """What the kernel returns for ``n`` rows (float64 sums; see the module doc).

    ``sums``: ``[n, 2]`` (s, a) for one model, ``[n, 7]`` (s_r, s_c, a_r, a_c, d_r, d_c,
    Σ m log m) for a pair; ``maxes`` ``[n, 1 or 2]``; ``targets`` ``[n, 1 or 2]`` target
    logits; ``topk_*`` (values, ids) ``[n, k]`` or None; ``bad`` ``[n]`` bool: rows with a
    non-finite logit, not computed (their other entries are garbage).
    """

    sums: torch.Tensor
    maxes: torch.Tensor
    targets: torch.Tensor
    topk_r: tuple[torch.Tensor, torch.Tensor] | None
    topk_c: tuple[torch.Tensor, torch.Tensor] | None
    bad: torch.Tensor


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def dist_sums(z: torch.Tensor, targets: torch.Tensor | None, k: int) -> Sums | None:
    """The kernel over one model's logits ``z`` ``[n, V]`` (not modified), or None when it cannot run."""
    lib = _load()
    if lib is None or not usable(z) or not 1 <= k <= MAX_K:
        return None
    n, v = z.shape
    t = None if targets is None else targets.to(torch.int64).contiguous()
    out_f = torch.empty(n, 2, dtype=torch.float32)
    out_d = torch.empty(n, 2, dtype=torch.float64)
    flag = torch.zeros(n, dtype=torch.int8)
    topv = torch.empty(n, k, dtype=torch.float32)
    topi = torch.empty(n, k, dtype=torch.int64)
    if n:
        _run(lib.aclarena_dist_rows, n, lambda r0, r1: (z.data_ptr(), r0, r1, v, _ptr(t), k, out_f.data_ptr(),
                                                        out_d.data_ptr(), flag.data_ptr(), topv.data_ptr(),
                                                        topi.data_ptr()))
    return Sums(sums=out_d, maxes=out_f[:, :1], targets=out_f[:, 1:], topk_r=None, topk_c=(topv, topi),
                bad=flag.bool())


def pair_sums(zr: torch.Tensor, zc: torch.Tensor, targets: torch.Tensor | None, k: int, *, ref_topk: bool = True,
              check: bool = True) -> Sums | None:
    """The kernel over both models' logits (``[n, V]`` each, overwritten), or None when it cannot run."""
    lib = _load() if check else _STATE.lib
    if lib is None or (check and not usable(zr, zc)) or zr.shape != zc.shape or not 1 <= k <= MAX_K:
        return None
    n, v = zr.shape
    t = None if targets is None else targets.to(torch.int64).contiguous()
    out_f = torch.empty(n, 4, dtype=torch.float32)
    out_d = torch.empty(n, 7, dtype=torch.float64)
    flag = torch.zeros(n, dtype=torch.int8)
    topv_c, topi_c = torch.empty(n, k, dtype=torch.float32), torch.empty(n, k, dtype=torch.int64)
    topv_r = torch.empty(n, k, dtype=torch.float32) if ref_topk else None
    topi_r = torch.empty(n, k, dtype=torch.int64) if ref_topk else None
    if n:
        _run(lib.aclarena_pair_rows, n, lambda r0, r1: (
            zr.data_ptr(), zc.data_ptr(), r0, r1, v, _ptr(t), k, out_f.data_ptr(), out_d.data_ptr(), flag.data_ptr(),
            _ptr(topv_r), _ptr(topi_r), topv_c.data_ptr(), topi_c.data_ptr()))
    return Sums(sums=out_d, maxes=out_f[:, :2], targets=out_f[:, 2:], bad=flag.bool(),
                topk_r=None if topv_r is None or topi_r is None else (topv_r, topi_r), topk_c=(topv_c, topi_c))
