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
    /// `floor(2^64 / 2t)`: divides by `2t` with a multiplication (see [`Split::divmod`]).
    reciprocal: u64,
}

impl Split {
    fn new(left_weight: u64, total: u64, left: Child, right: Child) -> Split {
        // 2t >= 2, so 2^64 / 2t <= 2^63 fits.
        let reciprocal = ((1u128 << 64) / (2 * total as u128)) as u64;
        Split {
            left_weight,
            total,
            left,
            right,
            reciprocal,
        }
    }

    /// `(2·m·a + t) div 2t` and `mod 2t`: of the node's first `m` positions, how many go
    /// left (`floor(m·a / t + 1/2)`), and where position `m` sits between two lefts. In
    /// 64 bits when the dividend fits; else one 128-by-64-bit division (the quotient,
    /// at most `m`, fits in 64 bits).
    #[inline]
    fn divmod(&self, m: u64) -> (u64, u64) {
        let (a, t) = (self.left_weight as u128, self.total as u128);
        let (x, d) = (2 * m as u128 * a + t, 2 * self.total); // t < 2^63: 2t fits
        if x >> 64 == 0 {
            // x·floor(2^64/d)/2^64 lies in (x/d - 1, x/d]: the quotient or one less, which
            // one comparison mends. A division by a constant without the divider, whose
            // latency a random position waits on at every level of the tree.
            let x = x as u64;
            let mut q = ((x as u128 * self.reciprocal as u128) >> 64) as u64;
            let mut r = x - q * d;
            if r >= d {
                (q, r) = (q + 1, r - d);
            }
            (q, r)
        } else {
            wide_divmod(x, d)
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

    /// Whether the node's position `q` goes left, and its position on that side.
    #[inline]
    fn side(&self, q: u64) -> (bool, u64) {
        // One division instead of two (lefts_before(q) and lefts_before(q + 1)).
        let (before, rem) = self.divmod(q);
        let left = self.goes_left(rem);
        (left, if left { before } else { q - before })
    }

    /// Whether the position whose remainder (see [`Split::remainder`]) is `rem` goes left:
    /// position q goes left when lefts_before(q + 1) > lefts_before(q), i.e. when adding
    /// 2a to the dividend carries the remainder past 2t: r + 2a >= 2t, r >= 2(t - a).
    #[inline]
    pub(super) fn goes_left(&self, rem: u64) -> bool {
        rem >= 2 * (self.total - self.left_weight)
    }

    /// The left child when `left`, else the right one: selected, not branched on (for
    /// random or interleaved positions the side is as unpredictable as a coin).
    #[inline]
    pub(super) fn child(&self, left: bool) -> Child {
        [self.right, self.left][left as usize]
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

/// `(x div d, x mod d)` for a quotient below 2^64 (`x < d·2^64`, `d > 0`).
#[inline]
fn wide_divmod(x: u128, d: u64) -> (u64, u64) {
    let (high, low) = ((x >> 64) as u64, x as u64);
    #[cfg(target_arch = "x86_64")]
    if high < d {
        let (quotient, remainder): (u64, u64);
        // SAFETY: `div` divides rdx:rax by a 64-bit register; it faults only on a zero
        // divisor or a quotient past 64 bits, and `high < d` rules out both.
        unsafe {
            std::arch::asm!(
                "div {d}",
                d = in(reg) d,
                inout("rax") low => quotient,
                inout("rdx") high => remainder,
                options(pure, nomem, nostack),
            );
        }
        return (quotient, remainder);
    }
    let _ = (high, low);
    let quotient = x / d as u128;
    (quotient as u64, (x - quotient * d as u128) as u64)
}

/// The tree of exact two-way splits of one stage.
#[derive(Clone, Debug)]
pub(super) struct Tree {
    pub(super) nodes: Vec<Split>,
    pub(super) root: Child,
    /// For each source with a weight, the path from the root: `(node, went_left)`.
    paths: Vec<Vec<(usize, bool)>>,
    /// The tree for positions that descend together (see [`Tree::occurrences`]).
    levels: Levels,
}

/// The tree as a table every position descends the same number of levels of: the nodes,
/// then one entry per source, a split whose every position goes "left" to itself (left
/// weight = total: `f(m) = m`). No branch depends on the depth a position stops at, so
/// the divisions of many random positions overlap instead of waiting on mispredictions.
#[derive(Clone, Debug)]
struct Levels {
    entries: Vec<(Split, [u32; 2])>,
    root: u32,
    depth: u32,
}

impl Levels {
    fn new(nodes: &[Split], root: Child, sources: usize) -> Levels {
        let index = |child: Child| match child {
            Child::Node(i) => i as u32,
            Child::Source(s) => (nodes.len() + s) as u32,
        };
        let mut entries: Vec<(Split, [u32; 2])> = nodes
            .iter()
            .map(|split| (*split, [index(split.right), index(split.left)]))
            .collect();
        // A source's entry: the root's total as its own (its divisions take the same
        // path as the nodes' where they can), every position going to itself.
        let total = match root {
            Child::Node(i) => nodes[i].total,
            Child::Source(_) => 1,
        };
        for s in 0..sources {
            let me = (nodes.len() + s) as u32;
            let leaf = Split::new(total, total, Child::Source(s), Child::Source(s));
            entries.push((leaf, [me, me]));
        }
        fn depth(nodes: &[Split], child: Child) -> u32 {
            match child {
                Child::Source(_) => 0,
                Child::Node(i) => 1 + depth(nodes, nodes[i].left).max(depth(nodes, nodes[i].right)),
            }
        }
        Levels {
            entries,
            root: index(root),
            depth: depth(nodes, root),
        }
    }
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
        let levels = Levels::new(&nodes, root, q.len());
        Ok(Tree {
            nodes,
            root,
            paths,
            levels,
        })
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
                Child::Node(i) => {
                    let split = &self.nodes[i];
                    let (left, local) = split.side(q);
                    (child, q) = (split.child(left), local);
                }
            }
        }
    }

    /// [`Tree::occurrence`] of many positions: `sources[i], qs[i]` become the source of
    /// tree position `qs[i]` and its occurrence. Every position descends `depth` levels,
    /// a batch of them a level at a time (independent divisions the CPU overlaps).
    pub(super) fn occurrences(&self, qs: &mut [u64], sources: &mut [u64]) {
        const LANES: usize = 8;
        let Levels {
            entries,
            root,
            depth,
        } = &self.levels;
        for (qs, sources) in qs.chunks_mut(LANES).zip(sources.chunks_mut(LANES)) {
            let mut at = [*root; LANES];
            for _ in 0..*depth {
                for (q, at) in qs.iter_mut().zip(at.iter_mut()) {
                    let (split, children) = &entries[*at as usize];
                    let (left, local) = split.side(*q);
                    (*q, *at) = (local, children[left as usize]);
                }
            }
            for (source, &at) in sources.iter_mut().zip(&at) {
                *source = at as u64 - self.nodes.len() as u64;
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
    nodes.push(Split::new(left_weight, total, left, right));
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `(2·m·a + t) div 2t` and `mod 2t` by a plain 128-bit division.
    fn plain(split: &Split, m: u64) -> (u64, u64) {
        let x = 2 * m as u128 * split.left_weight as u128 + split.total as u128;
        let d = 2 * split.total as u128;
        ((x / d) as u64, (x % d) as u64)
    }

    fn split(left_weight: u64, total: u64) -> Split {
        Split::new(left_weight, total, Child::Source(0), Child::Source(1))
    }

    #[test]
    fn divmod_at_the_edges() {
        let totals = [1, 2, 3, 7, 1 << 32, (1 << 62) + 1, (1 << 63) - 1];
        for &t in &totals {
            for a in [0, 1, t / 3, t / 2, t - 1, t] {
                let s = split(a.min(t), t);
                for m in [
                    0,
                    1,
                    2,
                    3,
                    1 << 31,
                    (1 << 32) + 5,
                    1 << 62,
                    u64::MAX - 1,
                    u64::MAX,
                ] {
                    assert_eq!(s.divmod(m), plain(&s, m), "a={a} t={t} m={m}");
                }
            }
        }
    }

    #[test]
    fn wide_divmod_is_the_division() {
        let divisors = [1u64, 2, 3, 1 << 32, (1 << 63) + 5, u64::MAX];
        for &d in &divisors {
            for x in [
                0u128,
                1,
                d as u128 - 1,
                d as u128,
                (d as u128) << 64,
                u128::MAX,
            ] {
                let (q, r) = wide_divmod(x, d);
                if x < (d as u128) << 64 {
                    assert_eq!(
                        (q as u128, r as u128),
                        (x / d as u128, x % d as u128),
                        "x={x} d={d}"
                    );
                }
            }
        }
    }

    /// The walk by the nodes, one branch per level (what `occurrence` does without them).
    fn walk(tree: &Tree, q: u64) -> (usize, u64) {
        let (mut child, mut q) = (tree.root, q);
        loop {
            match child {
                Child::Source(s) => return (s, q),
                Child::Node(i) => {
                    let split = &tree.nodes[i];
                    let before = split.lefts_before(q);
                    let left = split.lefts_before(q + 1) > before;
                    (child, q) = if left {
                        (split.left, before)
                    } else {
                        (split.right, q - before)
                    };
                }
            }
        }
    }

    proptest! {
        #[test]
        fn occurrence_is_the_walk_and_counts(
            weights in proptest::collection::vec(0u64..(1 << 40), 1..9),
            q in any::<u64>(),
            shift in 0u32..64,
        ) {
            prop_assume!(weights.iter().any(|&w| w > 0));
            let tree = Tree::new(&weights).unwrap();
            let q = (q >> shift).min(u64::MAX - 1);
            let (s, local) = tree.occurrence(q);
            prop_assert_eq!((s, local), walk(&tree, q));
            prop_assert!(weights[s] > 0);
            let mut counts = vec![0u64; weights.len()];
            tree.add_counts(q, &mut counts);
            prop_assert_eq!(counts[s], local); // positions before q that went to s
            let (mut qs, mut sources) = (vec![q; 11], vec![0; 11]);
            tree.occurrences(&mut qs, &mut sources);
            prop_assert!(qs.iter().zip(&sources).all(|(&o, &src)| (src as usize, o) == (s, local)));
        }

        #[test]
        fn divmod_is_the_division(t in 1u64..(1 << 63), share in 0u64..=1_000, m in any::<u64>(), shift in 0u32..64) {
            let s = split((t as u128 * share as u128 / 1_000) as u64, t);
            let m = m >> shift; // small positions too: the 64-bit path
            prop_assert_eq!(s.divmod(m), plain(&s, m));
        }
    }
}
