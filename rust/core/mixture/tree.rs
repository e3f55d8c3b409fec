//! The tree of exact two-way splits that routes a mixture's positions to its sources.

use crate::error::Error;

/// A subtree: one source, or an internal node (index into `Mixture::nodes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Child {
    Source(usize),
    Node(usize),
}

/// An exact two-way split of a subtree of weight `total` into `left` and the rest.
/// Weights are below 2^63, so `2·m·a` and `(2l + 1)·t` fit in 128 bits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Split {
    pub(super) left_weight: u64,
    pub(super) total: u64,
    pub(super) left: Child,
    pub(super) right: Child,
}

impl Split {
    /// `(2·m·a + t) div 2t` and `mod 2t`: of the node's first `m` positions, how many go
    /// left (`floor(m·a / t + 1/2)`), and where position `m` sits between two lefts. In
    /// 64 bits when the dividend fits (a 128-bit division costs several times more).
    #[inline]
    fn divmod(&self, m: u64) -> (u64, u64) {
        let (a, t) = (self.left_weight as u128, self.total as u128);
        let (x, d) = (2 * m as u128 * a + t, 2 * self.total); // t < 2^63: 2t fits
        if x >> 64 == 0 {
            let x = x as u64;
            (x / d, x % d)
        } else {
            ((x / (2 * t)) as u64, (x % (2 * t)) as u64)
        }
    }

    /// Of the node's first `m` positions, how many go left: `floor(m·a / t + 1/2)`.
    #[inline]
    pub(super) fn lefts_before(&self, m: u64) -> u64 {
        self.divmod(m).0
    }

    /// `(2·m·a + t) mod 2t`: where position `m` sits between two lefts (see [`Cursor`]).
    pub(super) fn remainder(&self, m: u64) -> u64 {
        self.divmod(m).1
    }

    /// Whether the node's position `q` goes left, and its position in that child.
    #[inline]
    pub(super) fn route(&self, q: u64) -> (Child, u64) {
        // Position q goes left when lefts_before(q + 1) > lefts_before(q): adding 2a to
        // the dividend carries the remainder past 2t. One division instead of two.
        let (before, rem) = self.divmod(q);
        if rem as u128 + 2 * self.left_weight as u128 >= 2 * self.total as u128 {
            (self.left, before)
        } else {
            (self.right, q - before)
        }
    }

    /// The node position of the child's position `l` (the inverse of `route`).
    #[inline]
    pub(super) fn position_of(&self, from_left: bool, l: u64) -> u64 {
        let (a, t) = (self.left_weight as u128, self.total as u128);
        let l = l as u128;
        let q = if from_left {
            // Smallest q with f(q + 1) >= l + 1, i.e. 2·(q + 1)·a >= (2l + 1)·t.
            ((2 * l + 1) * t).div_ceil(2 * a) - 1
        } else {
            // Smallest q with (q + 1) - f(q + 1) >= l + 1, i.e. 2·(q + 1)·(t - a) > (2l + 1)·t.
            ((2 * l + 1) * t) / (2 * (t - a))
        };
        q as u64
    }
}

/// The tree of exact two-way splits of one stage.
#[derive(Clone, Debug)]
pub(super) struct Tree {
    pub(super) nodes: Vec<Split>,
    pub(super) root: Child,
    /// For each source with a weight, the path from the root: `(node, went_left)`.
    paths: Vec<Vec<(usize, bool)>>,
}

impl Tree {
    /// The tree over the sources with a positive integer weight in `q`.
    pub(super) fn new(q: &[u64]) -> Result<Self, Error> {
        let mut order: Vec<usize> = (0..q.len()).filter(|&s| q[s] > 0).collect();
        if order.is_empty() {
            return Err(Error::Invalid(
                "every weight is negligible next to the largest; give them one scale".into(),
            ));
        }
        // Heavy sources near the root: fewer levels of error where it counts most.
        order.sort_by(|&x, &y| q[y].cmp(&q[x]).then(x.cmp(&y)));
        let mut nodes = Vec::new();
        let root = build(&order, q, &mut nodes);
        let mut paths = vec![Vec::new(); q.len()];
        record_paths(root, &nodes, &mut Vec::new(), &mut paths);
        Ok(Tree { nodes, root, paths })
    }

    /// Adds to `out[s]` how many of the tree's positions `[0, n)` source `s` takes.
    pub(super) fn add_counts(&self, n: u64, out: &mut [u64]) {
        let mut stack = vec![(self.root, n)];
        while let Some((child, m)) = stack.pop() {
            match child {
                Child::Source(s) => out[s] += m,
                Child::Node(i) => {
                    let split = &self.nodes[i];
                    let left = split.lefts_before(m);
                    stack.push((split.left, left));
                    stack.push((split.right, m - left));
                }
            }
        }
    }

    /// The source of the tree's position `q` and how many positions before it that
    /// source took.
    #[inline]
    pub(super) fn occurrence(&self, q: u64) -> (usize, u64) {
        let (mut child, mut q) = (self.root, q);
        loop {
            match child {
                Child::Source(s) => return (s, q),
                Child::Node(i) => (child, q) = self.nodes[i].route(q),
            }
        }
    }

    /// The tree position of source `s`'s `occurrence`-th position (`s` has a weight).
    pub(super) fn position_of(&self, s: usize, occurrence: u64) -> u64 {
        let mut l = occurrence;
        for &(node, went_left) in self.paths[s].iter().rev() {
            l = self.nodes[node].position_of(went_left, l);
        }
        l
    }
}

/// Builds the subtree over `sources` (heaviest first): split where the two sides' weights
/// are closest to equal.
fn build(sources: &[usize], q: &[u64], nodes: &mut Vec<Split>) -> Child {
    if sources.len() == 1 {
        return Child::Source(sources[0]);
    }
    let total: u64 = sources.iter().map(|&s| q[s]).sum();
    let (mut best, mut best_gap, mut prefix) = (1, u64::MAX, 0u64);
    for (i, &s) in sources[..sources.len() - 1].iter().enumerate() {
        prefix += q[s];
        let gap = (2 * prefix as u128).abs_diff(total as u128) as u64;
        if gap < best_gap {
            (best, best_gap) = (i + 1, gap);
        }
    }
    let left_weight: u64 = sources[..best].iter().map(|&s| q[s]).sum();
    let left = build(&sources[..best], q, nodes);
    let right = build(&sources[best..], q, nodes);
    nodes.push(Split {
        left_weight,
        total,
        left,
        right,
    });
    Child::Node(nodes.len() - 1)
}

fn record_paths(
    child: Child,
    nodes: &[Split],
    path: &mut Vec<(usize, bool)>,
    out: &mut [Vec<(usize, bool)>],
) {
    match child {
        Child::Source(s) => out[s] = path.clone(),
        Child::Node(i) => {
            path.push((i, true));
            record_paths(nodes[i].left, nodes, path, out);
            path.pop();
            path.push((i, false));
            record_paths(nodes[i].right, nodes, path, out);
            path.pop();
        }
    }
}
