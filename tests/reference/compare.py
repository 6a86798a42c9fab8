#!/usr/bin/python3
"""Compare two HDF5 result files (e.g. flexsp's output against tests/reference/llama_ref.py).

  /usr/bin/python3 tests/reference/compare.py A.h5 B.h5 [--rtol 1e-5] [--atol 0]
      [--keys loss,logits,grad,adamw]

Every dataset under the chosen top-level keys (a key may name a dataset or a group, walked
recursively; nested keys such as optimizer/exp_avg work too) that exists in either file is
compared: one line per tensor with its shape, max |a-b| and relative error
||a-b||_2 / max(||b||_2, tiny) (B is the reference). A tensor fails if it is missing in one
file, the shapes differ, a value is non-finite in one file but not the other, or the relative
error exceeds rtol (unless max |a-b| <= atol). A key absent from both files is reported and
skipped. Ends with "N passed, M failed"; exit status 1 if anything failed.
"""
import argparse
import sys

import h5py
import numpy as np

TINY = 1e-30


def datasets(f, key):
    """{path: dataset} of every dataset at or under key."""
    if key not in f:
        return {}
    obj = f[key]
    if isinstance(obj, h5py.Dataset):
        return {key: obj}
    out = {}
    obj.visititems(lambda n, o: out.__setitem__(f"{key}/{n}", o)
                   if isinstance(o, h5py.Dataset) else None)
    return out


def compare(pa, pb, keys, rtol, atol=0.0):
    passed = failed = 0
    with h5py.File(pa, "r") as fa, h5py.File(pb, "r") as fb:
        for key in keys:
            da, db = datasets(fa, key), datasets(fb, key)
            if not da and not db:
                print(f"SKIP {key}: absent from both files")
                continue
            for name in sorted(set(da) | set(db)):
                if name not in da or name not in db:
                    print(f"FAIL {name}: missing in {pa if name not in da else pb}")
                    failed += 1
                    continue
                a = np.asarray(da[name][...], dtype=np.float64)
                b = np.asarray(db[name][...], dtype=np.float64)
                if a.shape != b.shape:
                    print(f"FAIL {name}: shape {a.shape} vs {b.shape}")
                    failed += 1
                    continue
                fin_a, fin_b = np.isfinite(a), np.isfinite(b)
                if not np.array_equal(fin_a, fin_b) or \
                        not np.array_equal(a[~fin_a], b[~fin_b]):
                    print(f"FAIL {name} {a.shape}: non-finite values differ "
                          f"({(~fin_a).sum()} vs {(~fin_b).sum()})")
                    failed += 1
                    continue
                d = (a - b)[fin_a]
                maxabs = float(np.abs(d).max()) if d.size else 0.0
                rel = float(np.linalg.norm(d)) / max(float(np.linalg.norm(b[fin_b])), TINY)
                ok = rel <= rtol or maxabs <= atol
                print(f"{'ok  ' if ok else 'FAIL'} {name} {list(a.shape)} "
                      f"max_abs {maxabs:.3e} rel {rel:.3e}")
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return passed, failed


def main(argv=None):
    ap = argparse.ArgumentParser(description="compare two HDF5 result files")
    ap.add_argument("a")
    ap.add_argument("b", help="reference")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=0.0)
    ap.add_argument("--keys", default="loss,logits,grad,adamw")
    a = ap.parse_args(argv)
    _, failed = compare(a.a, a.b, [k for k in a.keys.split(",") if k], a.rtol, a.atol)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
