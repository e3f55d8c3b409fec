//! [`BudgetStart`]: where a pass of the token-budget plan starts (a resume point), and its
//! re-plan onto another world size.

use super::{Lengths, TokenBudget};
use crate::error::Error;

/// A resume point of the token-budget plan: window `window`, the positions of that window
/// taken before its plan was made (a resume onto another world size), and the steps of
/// that plan done. Later windows start whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetStart {
    window: u64,
    taken: Option<Vec<bool>>,
    steps: u64,
}

impl BudgetStart {
    /// The resume point of `budget` at `window` (`windows()` for the epoch's end) after
    /// `steps` steps of its plan, with `taken` one bit per position of the window, most
    /// significant bit first (numpy's `packbits`), or empty for none.
    pub fn new(budget: &TokenBudget, window: u64, taken: &[u8], steps: u64) -> Result<Self, Error> {
        if window > budget.windows() {
            return Err(Error::Invalid(format!(
                "window_index must be in [0, {}], got {window}: the state was saved with \
                 another configuration or edited",
                budget.windows()
            )));
        }
        let size = budget.window_positions(window).end - budget.window_positions(window).start;
        let taken = match taken {
            [] => None,
            bytes if bytes.len() as u64 != size.div_ceil(8) => {
                return Err(Error::Invalid(format!(
                    "taken holds {} bits for a window of {size} positions: the state was \
                     saved with another window or edited",
                    bytes.len() * 8
                )))
            }
            bytes => Some(
                (0..size)
                    .map(|p| bytes[(p / 8) as usize] & (0x80 >> (p % 8)) != 0)
                    .collect(),
            ),
        };
        Ok(BudgetStart {
            window,
            taken,
            steps,
        })
    }

    /// The window the pass starts in.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Steps of its plan done before.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The positions of the window taken before its plan, as [`BudgetStart::new`] reads
    /// them (empty: none).
    pub fn taken_bits(&self) -> Vec<u8> {
        let Some(taken) = &self.taken else {
            return Vec::new();
        };
        let mut bytes = vec![0u8; taken.len().div_ceil(8)];
        for (p, _) in taken.iter().enumerate().filter(|(_, &t)| t) {
            bytes[p / 8] |= 0x80 >> (p % 8);
        }
        bytes
    }

    /// The same window, after `steps` steps of its plan.
    pub fn after(&self, steps: u64) -> BudgetStart {
        BudgetStart {
            steps,
            ..self.clone()
        }
    }

    /// The taken positions of window `k` (none but in the first window).
    pub fn taken_in(&self, k: u64) -> Option<&[bool]> {
        self.taken.as_deref().filter(|_| k == self.window)
    }

    /// The first step of window `k`'s plan in the pass.
    pub fn first_step_in(&self, k: u64) -> u64 {
        if k == self.window {
            self.steps
        } else {
            0
        }
    }
}

impl TokenBudget {
    /// `saved`, a resume point under `saved_world` ranks, under `world` ranks: the samples
    /// of the saved window's plan in its steps done are taken, the rest of the window is
    /// planned again (from step 0). Every sample still exactly once.
    pub fn resume<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        saved: &BudgetStart,
        saved_world: u64,
        world: u64,
    ) -> Result<BudgetStart, Error> {
        let k = saved.window;
        if k >= self.windows() || (saved.steps == 0 && saved_world == world) {
            return Ok(saved.clone());
        }
        let plan = self.plan(lengths, k, saved.taken.as_deref(), saved_world)?;
        let steps = saved.steps;
        if steps > plan.steps(saved_world) {
            return Err(Error::Invalid(format!(
                "state_dict['steps'] is {steps}, but window {k}'s plan has {} steps on {saved_world} \
                 rank(s): the state was saved over other lengths or edited; pass the state the \
                 sampler saved, over the run's lengths",
                plan.steps(saved_world)
            )));
        }
        if saved_world == world {
            return Ok(saved.clone());
        }
        let positions = self.window_positions(k);
        let mut taken = saved
            .taken
            .clone()
            .unwrap_or_else(|| vec![false; (positions.end - positions.start) as usize]);
        let mut done: Vec<u64> = plan.bounds[..(steps * saved_world) as usize]
            .iter()
            .flat_map(|&(i, j)| plan.samples[i as usize..j as usize].iter().copied())
            .collect();
        self.order.invert_in_place(&mut done); // each sample's position, in O(1)
        for p in done {
            taken[(p - positions.start) as usize] = true;
        }
        Ok(BudgetStart {
            window: k,
            taken: Some(taken),
            steps: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_bits_round_trip_as_numpy_packs_them() {
        let b =
            crate::budget::test_budget(crate::Version::V1, 20, 100, 10, 0, 0, true, false).unwrap();
        // numpy.packbits([1,0,0,0,0,0,0,1, 1,1]) == [0x81, 0xC0]
        let start = BudgetStart::new(&b, 1, &[0x81, 0xC0], 3).unwrap();
        let want = [
            true, false, false, false, false, false, false, true, true, true,
        ];
        assert_eq!(start.taken_in(1), Some(&want[..]));
        assert_eq!(start.taken_in(0), None);
        assert_eq!(start.taken_bits(), [0x81, 0xC0]);
        assert_eq!((start.first_step_in(1), start.first_step_in(2)), (3, 0));
        let e = BudgetStart::new(&b, 1, &[0], 0).unwrap_err().to_string();
        assert!(
            e.contains("taken holds 8 bits for a window of 10 positions"),
            "{e}"
        );
        let e = BudgetStart::new(&b, 3, &[], 0).unwrap_err().to_string();
        assert!(e.contains("window_index must be in [0, 2], got 3"), "{e}");
        assert!(BudgetStart::new(&b, 2, &[], 0)
            .unwrap()
            .taken_bits()
            .is_empty());
    }
}
