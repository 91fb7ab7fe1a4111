"""A GEMM's shape and tile from names: the tile from a kernel's name (cuBLAS/CUTLASS '..._128x64_...'),
M, N, K and batch from NVTX ranges ('M=.. N=.. K=..' or torch emit_nvtx(record_shapes=True) sizes)."""
from __future__ import annotations

import re

TILE_IN_NAME = (re.compile(r"tile(?:size)?_?(\d+)x(\d+)", re.I), re.compile(r"(?:^|_)(\d{2,3})x(\d{2,3})(?:x\d+)?(?:_|$)"))
SHAPE_MNK = re.compile(r"\bM\s*=\s*(\d+).*?\bN\s*=\s*(\d+)", re.S)
TORCH_SIZES = re.compile(r"aten::(mm|bmm|matmul|addmm|baddbmm|linear)\b.*?sizes\s*=\s*(\[\[.*?\]\])", re.S)


def gemm_tile(name: str) -> tuple[int, int] | None:
    for pat in TILE_IN_NAME:
        m = pat.search(name)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def gemm_shape(nvtx: list[str]) -> tuple[int, int] | None:
    """(M, N) from NVTX ranges: 'M=.. N=..' or torch emit_nvtx(record_shapes=True) 'sizes = [[..]]'."""
    dims = gemm_dims(nvtx)
    return (dims["M"], dims["N"]) if dims else None


SHAPE_K = re.compile(r"\bK\s*=\s*(\d+)")
SHAPE_BATCH = re.compile(r"\bbatch\s*=\s*(\d+)", re.I)


def gemm_dims(nvtx: list[str]) -> dict[str, int] | None:
    """{M, N} and, where the range says so, K and batch, from the innermost NVTX range naming a GEMM shape:
    'M=.. N=.. K=.. batch=..' or torch emit_nvtx(record_shapes=True) 'aten::mm ... sizes = [[..]]'."""
    import ast
    from math import prod

    for text in reversed(nvtx):  # innermost last
        m = SHAPE_MNK.search(text)
        if m:
            dims = {"M": int(m.group(1)), "N": int(m.group(2))}
            for key, pat in (("K", SHAPE_K), ("batch", SHAPE_BATCH)):
                found = pat.search(text)
                if found:
                    dims[key] = int(found.group(1))
            return dims
        t = TORCH_SIZES.search(text)
        if t:
            try:
                sizes = [s for s in ast.literal_eval(t.group(2)) if s]
            except (ValueError, SyntaxError):
                continue
            op = t.group(1)
            if op == "linear" and len(sizes) >= 2:
                x, w = sizes[0], sizes[1]
                return {"M": prod(x[:-1]) if len(x) > 1 else 1, "N": w[0], "K": x[-1]}
            mats = [s for s in sizes if len(s) >= 2][-2:]
            if len(mats) == 2:
                a, b = mats
                dims = {"M": a[-2], "N": b[-1], "K": a[-1]}
                if len(a) > 2:
                    dims["batch"] = prod(a[:-2])
                return dims
    return None
