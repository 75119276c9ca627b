"""Replaces a fraction of the points of a simulated data set by outliers, in place.

Usage: add_outliers.py FILE.h5 [--seed S] [--hot-fraction F] [--hot-value V]

Each angle's two-time matrix (exchange/C2T_all/c2_NNNNN, symmetric, as homodyne-simulate writes
it) gets one dead row (row and column N*3/4 set to 0: a detector row that reads nothing) and hot
pixels at random points of the strict upper triangle (value offset + V, default 0.5, mirrored)
until the outliers make 0.5% of the triangle's points and the hot pixels at least F of them
(default 0: below about 400 frames the dead row alone is 0.5%, and no pixel is hot). Prints the
fraction replaced.
"""
import argparse

import h5py
import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--hot-fraction", type=float, default=0.0)
    parser.add_argument("--hot-value", type=float, default=0.5)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with h5py.File(args.file, "r+") as f:
        group = f["exchange/C2T_all"]
        replaced_total = 0
        points_total = 0
        for name in sorted(group):
            c2 = group[name][...]
            n = c2.shape[0]
            triangle = n * (n - 1) // 2
            target = int(round(0.005 * triangle))
            hot_target = int(round(args.hot_fraction * triangle))
            dead = (3 * n) // 4
            outlier = np.zeros((n, n), dtype=bool)
            outlier[dead, :] = True
            outlier[:, dead] = True
            np.fill_diagonal(outlier, False)
            c2[dead, :] = 0.0
            c2[:, dead] = 0.0
            count = n - 1  # the dead row's points of the strict upper triangle
            hot_value = float(np.median(c2[0, n // 2 :])) + args.hot_value
            hot = 0
            while count < target or hot < hot_target:
                i, j = sorted(rng.integers(0, n, size=2))
                if i == j or outlier[i, j]:
                    continue
                outlier[i, j] = outlier[j, i] = True
                c2[i, j] = c2[j, i] = hot_value
                count += 1
                hot += 1
            group[name][...] = c2
            replaced_total += count
            points_total += triangle
        print(f"replaced {replaced_total} of {points_total} points "
              f"({100.0 * replaced_total / points_total:.3f}%)")


if __name__ == "__main__":
    main()
