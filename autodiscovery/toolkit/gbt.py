"""Gradient-boosted regression trees in numpy: the learner of a harness's cost model (TVM's Ansor learns
its cost model so, with XGBoost; a few thousand recorded benchmarks need nothing larger).

Least squares, trees of a few levels grown on quantile bins of each feature, each round fitted to a
sample of the rows. A feature may be NaN (a knob the configuration's family does not have): NaN is a
bin of its own, the lowest, so a split can set it apart from every value. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Node = tuple[int, int, int, int] | tuple[int, float]
"""(feature, highest bin on the left, left node, right node), or (-1, the leaf's value)."""


@dataclass
class Trees:
    rounds: int = 300
    rate: float = 0.05
    depth: int = 5
    min_leaf: int = 8
    bins: int = 64
    sample: float = 0.8
    l2: float = 1.0
    seed: int = 0
    edges: list[np.ndarray] = field(default_factory=list)
    base: float = 0.0
    trees: list[list[Node]] = field(default_factory=list)
    gain: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Each feature's share of the splits' gain: what the model leaned on."""
    _flat: list[list[tuple[int, float, int, int, float]]] | None = field(default=None, repr=False)

    def fit(self, X: np.ndarray, y: np.ndarray) -> Trees:
        rng = np.random.default_rng(self.seed)
        self.edges = [self._edges(X[:, j]) for j in range(X.shape[1])]
        B = self._bin(X)
        n, f = B.shape
        width = self.bins + 1
        flat = B + (np.arange(f) * width)[None, :]
        self.base = float(np.mean(y))
        pred = np.full(n, self.base)
        self.trees, self.gain, self._flat = [], np.zeros(f), None
        for _ in range(self.rounds):
            rows = np.flatnonzero(rng.random(n) < self.sample)
            tree = self._grow(flat, B, y - pred, rows, width)
            self.trees.append(tree)
            pred += self.rate * self._apply(tree, B)
        total = self.gain.sum()
        self.gain = self.gain / total if total > 0 else self.gain
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        B = self._bin(X)
        return self.base + self.rate * sum((self._apply(t, B) for t in self.trees), np.zeros(len(X)))

    def predict_one(self, x: list[float]) -> float:
        """`predict` of one row, in plain Python: a search asks for hundreds of single predictions, where
        numpy's per-call cost would outweigh the work. A value goes left where it is NaN or below the
        edge its node's bin ends at (what `_bin` and a split on bins say)."""
        if self._flat is None:
            self._flat = [[self._plain(n) for n in tree] for tree in self.trees]
        total = 0.0
        for tree in self._flat:
            feature, cut, left, right, value = tree[0]
            while feature >= 0:
                v = x[feature]
                feature, cut, left, right, value = tree[left if v != v or v < cut else right]
            total += value
        return self.base + self.rate * total

    def _plain(self, node: Node) -> tuple[int, float, int, int, float]:
        """(feature, the value below which a row goes left, left, right, the leaf's value)."""
        if node[0] == -1:
            return -1, 0.0, 0, 0, float(node[1])
        feature, last_bin, left, right = node  # type: ignore[misc]
        cut = float(self.edges[feature][last_bin - 1]) if last_bin >= 1 else -np.inf  # bin 0: NaN alone
        return feature, cut, left, right, 0.0

    def _edges(self, col: np.ndarray) -> np.ndarray:
        v = np.unique(col[~np.isnan(col)])
        if len(v) > self.bins - 1:
            v = np.unique(np.quantile(v, np.linspace(0, 1, self.bins - 1)))
        return (v[:-1] + v[1:]) / 2 if len(v) > 1 else np.zeros(0)

    def _bin(self, X: np.ndarray) -> np.ndarray:
        B = np.zeros(X.shape, dtype=np.int64)
        for j, e in enumerate(self.edges):
            col = X[:, j]
            B[:, j] = np.where(np.isnan(col), 0, np.searchsorted(e, np.nan_to_num(col), side="right") + 1)
        return B

    def _grow(self, flat: np.ndarray, B: np.ndarray, g: np.ndarray, rows: np.ndarray, width: int) -> list[Node]:
        f = B.shape[1]
        nodes: list[Node] = []

        def build(idx: np.ndarray, depth: int) -> int:
            G, n = float(g[idx].sum()), len(idx)
            me = len(nodes)
            nodes.append((-1, 0.0))
            if depth < self.depth and n >= 2 * self.min_leaf:
                cells = flat[idx].ravel()
                sums = np.bincount(cells, weights=np.repeat(g[idx], f), minlength=f * width).reshape(f, width)
                counts = np.bincount(cells, minlength=f * width).reshape(f, width).astype(float)
                GL, NL = np.cumsum(sums, 1)[:, :-1], np.cumsum(counts, 1)[:, :-1]
                GR, NR = G - GL, n - NL
                ok = (NL >= self.min_leaf) & (NR >= self.min_leaf)
                with np.errstate(divide="ignore", invalid="ignore"):
                    gain = np.where(ok, GL**2 / (NL + self.l2) + GR**2 / (NR + self.l2) - G**2 / (n + self.l2), -np.inf)
                j, t = np.unravel_index(int(np.argmax(gain)), gain.shape)
                if np.isfinite(gain[j, t]) and gain[j, t] > 1e-12:
                    self.gain[j] += gain[j, t]
                    go = B[idx, j] <= t
                    left = build(idx[go], depth + 1)
                    nodes[me] = (int(j), int(t), left, build(idx[~go], depth + 1))
                    return me
            nodes[me] = (-1, G / (n + self.l2))
            return me

        build(rows, 0)
        return nodes

    @staticmethod
    def _apply(tree: list[Node], B: np.ndarray) -> np.ndarray:
        out = np.empty(len(B))
        stack = [(0, np.arange(len(B)))]
        while stack:
            node, idx = stack.pop()
            t = tree[node]
            if t[0] == -1:
                out[idx] = t[1]
                continue
            j, thr, left, right = t  # type: ignore[misc]
            go = B[idx, j] <= thr
            stack.append((left, idx[go]))
            stack.append((right, idx[~go]))
        return out
