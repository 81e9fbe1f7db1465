"""Causal softmax attention per window and head, forward, backward and at one query position
a window (for the rule error), every loop along the positions."""

from __future__ import annotations

import math

import numpy as np

from .intrinsics import EXACT, INNER, exp, njit


@njit(**EXACT, **INNER)
def attention(q, k, v, pat, z, H, dh, rows):
    """Causal softmax attention per window and head; q, k, v, z are (H * dh, N). The
    pattern pat (H, T, N) holds at [h, e, n] the weight of key n - e for the query n (0
    where e reaches past the window's start), so that every loop runs along the positions,
    in vector lanes. rows: (4, N) of scratch, rows[3] each position's index in its window.
    attention_at computes the same operations for one query a window."""
    T, N = pat.shape[1], pat.shape[2]
    inv = 1.0 / math.sqrt(dh)
    top, norm, pos = rows[0], rows[1], rows[3]
    for h in range(H):
        for e in range(T):
            row = pat[h, e]
            for j in range(dh):  # through views: k[j, n - e] would not vectorize (a
                rs, qs, ks = row[e:], q[h * dh + j, e:], k[h * dh + j, : N - e]  # negative
                if j == 0:  # index wraps around, a select per n)
                    for n in range(N - e):
                        rs[n] = qs[n] * ks[n]
                else:
                    for n in range(N - e):
                        rs[n] += qs[n] * ks[n]
            for n in range(N):  # whole rows: faster than fused into the shorter rows above
                row[n] = row[n] * inv if pos[n] >= e else -np.inf
        for n in range(N):
            top[n] = pat[h, 0, n]
        for e in range(1, T):
            row = pat[h, e]
            for n in range(N):
                top[n] = row[n] if row[n] > top[n] else top[n]
        for n in range(N):
            norm[n] = 0.0
        for e in range(T):
            row = pat[h, e]
            for n in range(N):
                row[n] = exp(row[n] - top[n])  # exp(-inf) = 0 past the window's start
                norm[n] += row[n]
        for n in range(N):
            norm[n] = 1.0 / norm[n]
        for e in range(T):
            row = pat[h, e]
            for n in range(N):
                row[n] *= norm[n]
        for j in range(dh):
            zj, vj = z[h * dh + j], v[h * dh + j]
            for e in range(T):  # e = 0 covers every position: it assigns
                zs, ps, vs = zj[e:], pat[h, e, e:], vj[: N - e]
                if e == 0:
                    for n in range(N):
                        zs[n] = ps[n] * vs[n]
                else:
                    for n in range(N - e):
                        zs[n] += ps[n] * vs[n]


@njit(**EXACT, **INNER)
def attention_back(q, k, v, pat, dz, dq, dk, dv, dpat, H, dh, rows):
    """Through `attention`: dq, dk, dv from dz, all (H * dh, N); dpat (T, N) and rows (4,
    N) of scratch. Every loop runs along the positions (key n - e of the query n)."""
    T, N = pat.shape[1], pat.shape[2]
    inv = 1.0 / math.sqrt(dh)
    mix = rows[0]
    for h in range(H):
        for e in range(T):  # dloss/dpattern
            for n in range(e):
                dpat[e, n] = 0.0
            for j in range(dh):
                ds, dzs, vs = dpat[e, e:], dz[h * dh + j, e:], v[h * dh + j, : N - e]
                if j == 0:
                    for n in range(N - e):
                        ds[n] = dzs[n] * vs[n]
                else:
                    for n in range(N - e):
                        ds[n] += dzs[n] * vs[n]
        for e in range(T):
            row, drow = pat[h, e], dpat[e]
            if e == 0:
                for n in range(N):
                    mix[n] = drow[n] * row[n]
            else:
                for n in range(N):
                    mix[n] += drow[n] * row[n]
        for e in range(T):  # dloss/dscore, in place
            row, drow = pat[h, e], dpat[e]
            for n in range(N):
                drow[n] = row[n] * (drow[n] - mix[n]) * inv
        for j in range(dh):
            qj, kj, dzj = q[h * dh + j], k[h * dh + j], dz[h * dh + j]
            dqj, dkj, dvj = dq[h * dh + j], dk[h * dh + j], dv[h * dh + j]
            for e in range(T):  # e = 0 covers every position: it assigns
                ps, ds, qs, dzs, dqs = pat[h, e, e:], dpat[e, e:], qj[e:], dzj[e:], dqj[e:]
                ks, dks, dvs = kj[: N - e], dkj[: N - e], dvj[: N - e]
                if e == 0:
                    for n in range(N):
                        dvs[n] = ps[n] * dzs[n]
                        dqs[n] = ds[n] * ks[n]
                        dks[n] = ds[n] * qs[n]
                else:
                    for n in range(N - e):
                        dvs[n] += ps[n] * dzs[n]
                        dqs[n] += ds[n] * ks[n]
                        dks[n] += ds[n] * qs[n]


@njit(**EXACT, **INNER)
def attention_at(q, k, v, at, z, T, H, dh, sc, rows):
    """`attention`'s output at the query position at[b] of each window b only, into z
    (H * dh, B), operation for operation (the keys past a window's start add exact zeros
    there, nothing here), in vector lanes over the windows; sc (T, >= B) and rows (2, >= B)
    of scratch."""
    B = at.shape[0]
    inv = 1.0 / math.sqrt(dh)
    top, norm = rows[0], rows[1]
    for h in range(H):
        for e in range(T):  # the scores of key n - e, gathered
            for b in range(B):
                n = b * T + at[b]
                s = 0.0
                for j in range(dh):
                    s += q[h * dh + j, n] * k[h * dh + j, max(n - e, 0)]
                sc[e, b] = s * inv if at[b] >= e else -np.inf
        for b in range(B):
            top[b] = sc[0, b]
        for e in range(1, T):
            for b in range(B):
                top[b] = sc[e, b] if sc[e, b] > top[b] else top[b]
        for b in range(B):
            norm[b] = 0.0
        for e in range(T):
            for b in range(B):
                sc[e, b] = exp(sc[e, b] - top[b])
                norm[b] += sc[e, b]
        for b in range(B):
            norm[b] = 1.0 / norm[b]
        for e in range(T):
            for b in range(B):
                sc[e, b] *= norm[b]
        for j in range(dh):
            for b in range(B):
                n, acc = b * T + at[b], 0.0
                for e in range(at[b] + 1):
                    acc += sc[e, b] * v[h * dh + j, n - e]
                z[h * dh + j, b] = acc
