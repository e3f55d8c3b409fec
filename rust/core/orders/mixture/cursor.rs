//! A cursor over consecutive positions of a mixture.

use super::tree::Child;
use super::Mixture;

/// Walks consecutive positions from `start`: each node keeps where its next local
/// position sits between two lefts, so a step is an add and a compare per level. Moves to
/// the next stage's tree at its first position.
pub(super) struct Cursor<'m> {
    mixture: &'m Mixture,
    stage: usize,
    /// Positions left in this stage before the next one starts (`u64::MAX` in the last).
    left_in_stage: u64,
    /// Per node of the stage's tree: `(2·q·a + t) mod 2t` for its next local position `q`.
    remainders: Vec<u64>,
    /// Per source: positions it took before the cursor.
    occurrences: Vec<u64>,
}

impl<'m> Cursor<'m> {
    pub(super) fn new(mixture: &'m Mixture, start: u64) -> Self {
        let stage = mixture.stages.partition_point(|st| st.start <= start) - 1;
        let mut cursor = Cursor {
            mixture,
            stage,
            left_in_stage: 0,
            remainders: Vec::new(),
            occurrences: mixture.counts(start),
        };
        cursor.enter(stage, start);
        cursor
    }

    /// Sets the cursor at `position` of stage `j`.
    fn enter(&mut self, j: usize, position: u64) {
        let stages = &self.mixture.stages;
        let (tree, local) = (&stages[j].tree, position - stages[j].start);
        self.stage = j;
        self.left_in_stage = stages
            .get(j + 1)
            .map_or(u64::MAX, |next| next.start - position);
        self.remainders = vec![0u64; tree.nodes.len()];
        let mut stack = vec![(tree.root, local)];
        while let Some((child, q)) = stack.pop() {
            if let Child::Node(i) = child {
                let split = &tree.nodes[i];
                self.remainders[i] = split.remainder(q);
                let left = split.lefts_before(q);
                stack.push((split.left, left));
                stack.push((split.right, q - left));
            }
        }
    }

    /// The source of the next position and its occurrence (positions it took before).
    #[inline]
    pub(super) fn next_position(&mut self) -> (usize, u64) {
        if self.left_in_stage == 0 {
            let j = self.stage + 1;
            self.enter(j, self.mixture.stages[j].start);
        }
        self.left_in_stage = self.left_in_stage.saturating_sub(1);
        let tree = &self.mixture.stages[self.stage].tree;
        let mut child = tree.root;
        loop {
            match child {
                Child::Source(s) => {
                    let occurrence = self.occurrences[s];
                    self.occurrences[s] += 1;
                    return (s, occurrence);
                }
                Child::Node(i) => {
                    let split = &tree.nodes[i];
                    let (a, t) = (split.left_weight, split.total);
                    let r = &mut self.remainders[i];
                    let left = split.goes_left(*r);
                    // r + 2a - [left]·2t is below 2t: exact in wrapping arithmetic.
                    *r = r.wrapping_add(2 * a).wrapping_sub(left as u64 * 2 * t);
                    child = split.child(left);
                }
            }
        }
    }
}
