//! Small-n tables: both directions of a permutation precomputed (perm-v1 up to 2^15),
//! and perm-v2's exact keyed shuffle up to 2^16.

use std::sync::OnceLock;

use crate::splitmix::splitmix64;

/// Both directions of a small permutation: the forward one precomputed, the inverse on
/// first use (a mixture's passes and a block order's windows map positions only).
#[derive(Debug)]
pub(super) struct Table {
    pub(super) forward: Vec<u16>,
    pub(super) inverse: OnceLock<Vec<u16>>,
}

impl Table {
    pub(super) fn of(forward: Vec<u16>) -> Table {
        Table {
            forward,
            inverse: OnceLock::new(),
        }
    }

    pub(super) fn forward(&self) -> &[u16] {
        &self.forward
    }

    pub(super) fn inverse(&self) -> &[u16] {
        self.inverse.get_or_init(|| {
            let mut inverse = vec![0u16; self.forward.len()];
            for (p, &x) in self.forward.iter().enumerate() {
                inverse[x as usize] = p as u16;
            }
            inverse
        })
    }

    /// perm-v2's table of `n <= 2^16`: Fisher–Yates (`i` from `n - 1` down to 1 swaps
    /// entry `i` with a uniform `j` in `[0, i]`), each `j` drawn by Lemire's unbiased
    /// multiply-and-reject from a counter-based generator, `splitmix64(key + c·φ)` for
    /// `c = 0, 1, ...`: every one of the `n!` orders is reachable, any parity.
    pub(super) fn shuffled(n: u64, key: u64) -> Table {
        let mut forward: Vec<u16> = (0..n).map(|p| p as u16).collect(); // n <= 2^16
        let mut counter = 0u64;
        let mut draw = |bound: u64| loop {
            let r = splitmix64(key.wrapping_add(counter.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            counter += 1;
            let m = u128::from(r) * u128::from(bound);
            // Accept when the low word is at least (2^64 - bound) mod bound; that
            // threshold is below bound, so a low word >= bound needs no division.
            let low = m as u64;
            if low >= bound || low >= bound.wrapping_neg() % bound {
                return (m >> 64) as u64;
            }
        };
        for i in (1..n).rev() {
            let j = draw(i + 1);
            forward.swap(i as usize, j as usize);
        }
        Table::of(forward)
    }
}
