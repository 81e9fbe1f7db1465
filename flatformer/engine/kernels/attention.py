"""Softmax attention per window and head, causal or both ways, forward, backward and at one
query position a window (for the rule error), every loop along the positions."""

from __future__ import annotations

import math

import numpy as np

from .intrinsics import EXACT, INNER, exp, njit


@njit(**EXACT, **INNER)
def span(e, N):
    """The queries n in [lo, hi) whose key n - e lies in [0, N) (key offset e)."""
    return (e if e > 0 else 0), (N + e if e < 0 else N)


@njit(**EXACT, **INNER)
def attention(q, k, v, pat, z, H, dh, rows, causal):
    """Softmax attention per window and head; q, k, v, z are (H * dh, N). The pattern pat
    (H, R, N) holds at [h, r, n] the weight of key n - e for the query n, e = r - back: a
    causal model's R = T rows hold e = 0..T-1 (back 0), one attending both ways (`causal`
    0) R = 2T - 1 rows, e = -(T-1)..T-1 (back T - 1); 0 where key n - e lies outside the
    query's window. So every loop runs along the positions, in vector lanes. rows: (4, N)
    of scratch, rows[3] each position's index in its window. attention_at computes the same
    operations for one query a window."""
    R, N = pat.shape[1], pat.shape[2]
    T = R if causal else (R + 1) // 2
    back = 0 if causal else T - 1
    inv = 1.0 / math.sqrt(dh)
    top, norm, pos = rows[0], rows[1], rows[3]
    for h in range(H):
        for r in range(R):
            row, e = pat[h, r], r - back
            lo, hi = span(e, N)
            for j in range(dh):  # through views: k[j, n - e] would not vectorize (a
                rs, qs, ks = row[lo:hi], q[h * dh + j, lo:hi], k[h * dh + j, lo - e : hi - e]
                if j == 0:  # negative index wraps around, a select per n)
                    for n in range(hi - lo):
                        rs[n] = qs[n] * ks[n]
                else:
                    for n in range(hi - lo):
                        rs[n] += qs[n] * ks[n]
            for n in range(N):  # whole rows: faster than fused into the shorter rows above
                row[n] = row[n] * inv if pos[n] >= e and pos[n] < T + e else -np.inf
        for n in range(N):
            top[n] = pat[h, 0, n]
        for r in range(1, R):
            row = pat[h, r]
            for n in range(N):
                top[n] = row[n] if row[n] > top[n] else top[n]
        for n in range(N):
            norm[n] = 0.0
        for r in range(R):
            row = pat[h, r]
            for n in range(N):
                row[n] = exp(row[n] - top[n])  # exp(-inf) = 0 outside the window
                norm[n] += row[n]
        for n in range(N):
            norm[n] = 1.0 / norm[n]
        for r in range(R):
            row = pat[h, r]
            for n in range(N):
                row[n] *= norm[n]
        for j in range(dh):
            zj, vj = z[h * dh + j], v[h * dh + j]
            for i in range(R):  # e = 0 first: it covers every position, and assigns
                r = (i + back) % R
                e = r - back
                lo, hi = span(e, N)
                zs, ps, vs = zj[lo:hi], pat[h, r, lo:hi], vj[lo - e : hi - e]
                if i == 0:
                    for n in range(N):
                        zs[n] = ps[n] * vs[n]
                else:
                    for n in range(hi - lo):
                        zs[n] += ps[n] * vs[n]


@njit(**EXACT, **INNER)
def attention_back(q, k, v, pat, dz, dq, dk, dv, dpat, H, dh, rows, causal):
    """Through `attention`: dq, dk, dv from dz, all (H * dh, N); dpat (R, N) and rows (4,
    N) of scratch. Every loop runs along the positions (key n - e of the query n)."""
    R, N = pat.shape[1], pat.shape[2]
    back = 0 if causal else (R + 1) // 2 - 1
    inv = 1.0 / math.sqrt(dh)
    mix = rows[0]
    for h in range(H):
        for r in range(R):  # dloss/dpattern
            e = r - back
            lo, hi = span(e, N)
            for n in range(lo):
                dpat[r, n] = 0.0
            for n in range(hi, N):
                dpat[r, n] = 0.0
            for j in range(dh):
                ds, dzs, vs = dpat[r, lo:hi], dz[h * dh + j, lo:hi], v[h * dh + j, lo - e : hi - e]
                if j == 0:
                    for n in range(hi - lo):
                        ds[n] = dzs[n] * vs[n]
                else:
                    for n in range(hi - lo):
                        ds[n] += dzs[n] * vs[n]
        for r in range(R):
            row, drow = pat[h, r], dpat[r]
            if r == 0:
                for n in range(N):
                    mix[n] = drow[n] * row[n]
            else:
                for n in range(N):
                    mix[n] += drow[n] * row[n]
        for r in range(R):  # dloss/dscore, in place
            row, drow = pat[h, r], dpat[r]
            for n in range(N):
                drow[n] = row[n] * (drow[n] - mix[n]) * inv
        for j in range(dh):
            qj, kj, dzj = q[h * dh + j], k[h * dh + j], dz[h * dh + j]
            dqj, dkj, dvj = dq[h * dh + j], dk[h * dh + j], dv[h * dh + j]
            for i in range(R):  # e = 0 first: it covers every position, and assigns
                r = (i + back) % R
                e = r - back
                lo, hi = span(e, N)
                ps, ds, qs, dzs, dqs = (
                    pat[h, r, lo:hi],
                    dpat[r, lo:hi],
                    qj[lo:hi],
                    dzj[lo:hi],
                    dqj[lo:hi],
                )
                ks, dks, dvs = kj[lo - e : hi - e], dkj[lo - e : hi - e], dvj[lo - e : hi - e]
                if i == 0:
                    for n in range(N):
                        dvs[n] = ps[n] * dzs[n]
                        dqs[n] = ds[n] * ks[n]
                        dks[n] = ds[n] * qs[n]
                else:
                    for n in range(hi - lo):
                        dvs[n] += ps[n] * dzs[n]
                        dqs[n] += ds[n] * ks[n]
                        dks[n] += ds[n] * qs[n]


@njit(**EXACT, **INNER)
def attention_at(q, k, v, at, z, T, H, dh, sc, rows, causal):
    """`attention`'s output at the query position at[b] of each window b only, into z
    (H * dh, B), operation for operation (the keys outside a window add exact zeros there,
    nothing here), in vector lanes over the windows; sc (R, >= B), R as `attention`'s, and
    rows (2, >= B) of scratch."""
    B, N = at.shape[0], q.shape[1]
    R = T if causal else 2 * T - 1
    back = 0 if causal else T - 1
    inv = 1.0 / math.sqrt(dh)
    top, norm = rows[0], rows[1]
    for h in range(H):
        for r in range(R):  # the scores of key n - e, gathered
            e = r - back
            for b in range(B):
                n = b * T + at[b]
                s = 0.0
                for j in range(dh):
                    s += q[h * dh + j, n] * k[h * dh + j, min(max(n - e, 0), N - 1)]
                sc[r, b] = s * inv if at[b] >= e and at[b] < T + e else -np.inf
        for b in range(B):
            top[b] = sc[0, b]
        for r in range(1, R):
            for b in range(B):
                top[b] = sc[r, b] if sc[r, b] > top[b] else top[b]
        for b in range(B):
            norm[b] = 0.0
        for r in range(R):
            for b in range(B):
                sc[r, b] = exp(sc[r, b] - top[b])
                norm[b] += sc[r, b]
        for b in range(B):
            norm[b] = 1.0 / norm[b]
        for r in range(R):
            for b in range(B):
                sc[r, b] *= norm[b]
        for j in range(dh):
            for b in range(B):
                n, acc = b * T + at[b], 0.0
                for e in range(0 if causal else at[b] - T + 1, at[b] + 1):
                    acc += sc[e + back, b] * v[h * dh + j, n - e]
                z[h * dh + j, b] = acc
