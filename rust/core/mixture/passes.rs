//! The pass orders of a mixture's small sources, kept between calls.
//!
//! A perm-v2 order of a source of at most 2^16 samples is an O(size) table, and a mixture
//! of many small sources reads each source's pass a position or two per batch: rebuilt
//! every time, the table would cost O(size) a position. Passes advance in order, so one
//! slot per source (its latest pass) holds them; the slots of all sources together hold
//! at most [`CACHED_ENTRIES`] table entries (sources past that bound rebuild theirs).

use std::sync::{Arc, Mutex};

use crate::permutation::Permutation;

/// Table entries kept over all sources (4 bytes each: 16 MiB).
const CACHED_ENTRIES: u64 = 1 << 22;

/// Largest source whose order is a table (perm-v2's bound): larger ones are O(1) to build.
const TABLED_MAX: u64 = 1 << 16;

/// One source's latest pass order.
type Slot = Option<(u64, Arc<Permutation>)>;

#[derive(Debug)]
pub(super) struct Passes {
    /// Per source: whether its orders are kept.
    kept: Vec<bool>,
    slots: Mutex<Vec<Slot>>,
}

impl Passes {
    /// Slots for sources of `sizes`, the smallest sources first within the bound.
    pub(super) fn new(sizes: &[u64]) -> Passes {
        let mut by_size: Vec<usize> = (0..sizes.len())
            .filter(|&s| sizes[s] <= TABLED_MAX)
            .collect();
        by_size.sort_by_key(|&s| sizes[s]);
        let (mut kept, mut total) = (vec![false; sizes.len()], 0u64);
        for s in by_size {
            if total + sizes[s] > CACHED_ENTRIES {
                break;
            }
            total += sizes[s];
            kept[s] = true;
        }
        Passes {
            slots: Mutex::new(vec![None; sizes.len()]),
            kept,
        }
    }

    /// Source `s`'s order of pass `pass`: the kept one, or `build()` (then kept).
    pub(super) fn get(
        &self,
        s: usize,
        pass: u64,
        build: impl FnOnce() -> Permutation,
    ) -> Arc<Permutation> {
        if !self.kept[s] {
            return Arc::new(build());
        }
        if let Some((p, order)) = &self.lock()[s] {
            if *p == pass {
                return Arc::clone(order);
            }
        }
        let order = Arc::new(build()); // outside the lock: other sources' reads go on
        self.lock()[s] = Some((pass, Arc::clone(&order)));
        order
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // A panic elsewhere cannot leave a slot half-written: each holds a whole order.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clone for Passes {
    /// A copy keeps no orders: they are rebuilt on demand.
    fn clone(&self) -> Passes {
        Passes {
            kept: self.kept.clone(),
            slots: Mutex::new(vec![None; self.kept.len()]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_sources_are_kept_within_the_bound() {
        let sizes = [TABLED_MAX, 100, 1 << 20, TABLED_MAX, 5];
        let passes = Passes::new(&sizes);
        assert_eq!(passes.kept, [true, true, false, true, true]);
        let many = vec![TABLED_MAX; 70];
        let kept = Passes::new(&many).kept.iter().filter(|&&k| k).count() as u64;
        assert_eq!(kept, CACHED_ENTRIES / TABLED_MAX);
    }

    #[test]
    fn a_source_keeps_its_latest_pass() {
        let passes = Passes::new(&[10, 20]);
        let mut built = 0;
        let mut get = |s: usize, pass: u64| {
            passes.get(s, pass, || {
                built += 1;
                Permutation::of_version(crate::Version::V2, 10, 0, pass, s as u64).unwrap()
            })
        };
        let a = get(0, 0);
        assert!(Arc::ptr_eq(&a, &get(0, 0)));
        get(1, 0);
        get(0, 1);
        assert!(!Arc::ptr_eq(&a, &get(0, 0)));
        assert_eq!(built, 4);
    }
}
