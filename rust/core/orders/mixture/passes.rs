//! The pass orders of a mixture's sources, kept between calls.
//!
//! A perm-v2 order of a source of at most 2^16 samples is an O(size) table (an exact
//! shuffle: no position of it can be had without building it). A mixture that up-samples
//! a small source reads many passes of it; a shuffled sampler asks for positions anywhere
//! in the epoch, so the passes it touches are any of them, in any order. Rebuilt for each
//! position, a table would cost O(size) a position; so the orders are kept until all of
//! them together pass [`CACHED_ENTRIES`] table entries, then the ones used least often
//! lately go first (random positions meet a large table's passes more often than a small
//! one's, and a large table costs more to build again: where not all of them fit, the
//! small ones go). The orders of the last few uses go last, least recent first: under
//! consecutive positions each source's current pass stays kept however small the budget.
//! A larger source's order is O(1) to build, but deriving its keys costs as much as the
//! walk of a position (a random position meets another pass at almost every slot): its
//! orders are kept too, at their overhead alone.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::permutation::Permutation;
use crate::splitmix::splitmix64;

/// Table entries kept over all sources, overheads included (2 bytes each: 32 MiB, the
/// inverses aside), unless [`TABLES_ENV`] says otherwise.
const CACHED_ENTRIES: u64 = 1 << 24;

/// The environment variable that sizes a mixture's store of tables, in MiB (read when the
/// mixture is built, in each process: DataLoader workers inherit it). A blend read at
/// random keeps its reads cheap while the tables of its passes fit: 2 bytes per sample of
/// each pass of a source of at most 2^16 samples.
const TABLES_ENV: &str = "PERMSHARD_MIX_TABLE_MIB";

/// The store's budget in table entries for the value of [`TABLES_ENV`] (`None`: unset).
fn budget_from(value: Option<&str>) -> Result<u64, Error> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(CACHED_ENTRIES);
    };
    match value.parse::<u64>() {
        Ok(mib) if (1..=1 << 20).contains(&mib) => Ok(mib << 19), // 2^20 bytes, 2 an entry
        _ => Err(Error::Invalid(format!(
            "{TABLES_ENV}={value:?} is not a size in MiB: set a whole number from 1 to \
             1048576 (the default is 32), or unset it"
        ))),
    }
}

/// Largest source whose perm-v2 order is a table: larger ones are O(1) to build.
pub(super) const TABLED_MAX: u64 = 1 << 16;

/// What a kept order costs beyond its table's entries, in entries of 2 bytes: the
/// permutation, the map's slot, and 128 bytes for the two reference counts, a table's
/// header and the allocator's (~150 entries, ~300 bytes). A walked order costs this alone.
pub(super) const KEPT_OVERHEAD: u64 =
    (std::mem::size_of::<Permutation>() + std::mem::size_of::<(Key, KeptOrder)>() + 128) as u64 / 2;

/// Uses counted in an order's priority: enough to tell the orders a random batch meets
/// often (a large table's: its passes hold more positions) from those it meets seldom,
/// few enough that an order used often long ago gives way to newer ones.
const USES_COUNTED: u64 = 8;

/// The store frees `1 / FREED` of its budget when full: a little, so that the orders
/// worth keeping stay however much of the budget they take (large tables that a random
/// reader meets at every batch), and enough that the sort it takes is seldom.
const FREED: u64 = 16;

/// `(source, pass)`.
type Key = (usize, u64);

/// Hashes a key's two words by splitmix64: a random batch looks up an order per pass it
/// touches, and the standard SipHash was a fifth of the lookup.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = splitmix64(self.0 ^ word);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A kept order, its cost, and how much it is worth keeping (cells: a batch reads several
/// orders at once and marks each as used).
#[derive(Debug)]
struct KeptOrder {
    order: Arc<Permutation>,
    cost: u64,
    /// Uses since it was kept, up to [`USES_COUNTED`].
    uses: Cell<u64>,
    /// The store's floor at its last use plus its uses: the lowest goes first (the
    /// greedy-dual rule: an order not used while others are dropped sinks below the floor).
    priority: Cell<u64>,
    /// When it was last used (the store's clock).
    used: Cell<u64>,
}

impl KeptOrder {
    fn new(order: Arc<Permutation>, cost: u64, floor: u64, clock: u64) -> KeptOrder {
        let kept = KeptOrder {
            order,
            cost,
            uses: Cell::new(0),
            priority: Cell::new(0),
            used: Cell::new(0),
        };
        kept.hit(floor, clock);
        kept
    }

    /// Marks a use at `clock`, the store's floor being `floor`.
    fn hit(&self, floor: u64, clock: u64) {
        let uses = (self.uses.get() + 1).min(USES_COUNTED);
        self.uses.set(uses);
        self.priority.set(floor + uses);
        self.used.set(clock);
    }
}

#[derive(Debug, Default)]
struct Kept {
    /// Each kept order.
    orders: HashMap<Key, KeptOrder, BuildHasherDefault<KeyHasher>>,
    /// Uses so far (the clock of the last uses).
    clock: u64,
    /// The priority of the last order dropped: what a use adds to.
    floor: u64,
    /// Entries (and overheads) of the kept orders.
    entries: u64,
}

#[derive(Debug)]
pub(super) struct Passes {
    /// Per source: the cost of keeping one of its orders.
    costs: Vec<u64>,
    /// Per source: whether its orders are tables.
    tables: Vec<bool>,
    budget: u64,
    kept: Mutex<Kept>,
}

impl Passes {
    /// An empty store for sources of `sizes`, those of at most `tabled_max` samples read
    /// in tables, of the size [`TABLES_ENV`] gives.
    pub(super) fn new(sizes: &[u64], tabled_max: u64) -> Result<Passes, Error> {
        let budget = budget_from(std::env::var(TABLES_ENV).ok().as_deref())?;
        Ok(Passes::with_budget(sizes, tabled_max, budget))
    }

    /// As [`Passes::new`], keeping at most `budget` entries.
    pub(super) fn with_budget(sizes: &[u64], tabled_max: u64, budget: u64) -> Passes {
        let tables: Vec<bool> = sizes.iter().map(|&size| size <= tabled_max).collect();
        let costs = (sizes.iter().zip(&tables))
            .map(|(&size, &table)| if table { size } else { 0 } + KEPT_OVERHEAD)
            .collect();
        Passes {
            costs,
            tables,
            budget,
            kept: Mutex::new(Kept::default()),
        }
    }

    /// An empty store of the same budget, its sources of at most `tabled_max` samples read
    /// in tables.
    pub(super) fn emptied(&self, sizes: &[u64], tabled_max: u64) -> Passes {
        Passes::with_budget(sizes, tabled_max, self.budget)
    }

    /// Source `s`'s order of pass `pass`: the kept one, or `build()` (then kept).
    pub(super) fn get(
        &self,
        s: usize,
        pass: u64,
        build: impl FnOnce() -> Permutation,
    ) -> Arc<Permutation> {
        if let Some(order) = self.lock().touch((s, pass)) {
            return order;
        }
        let order = Arc::new(build()); // outside the lock: other sources' reads go on
        let mut kept = self.lock();
        if kept.touch((s, pass)).is_none() {
            // Recent: two uses per source (a batch uses each source's current pass once).
            let recent = 2 * self.costs.len() as u64;
            kept.insert(
                (s, pass),
                Arc::clone(&order),
                self.costs[s],
                self.budget,
                recent,
            );
        }
        order
    }

    /// The orders of `keys` (`(source, pass)`): those kept, looked up under one lock, and
    /// the others built by `build` (then kept), one at a time outside it.
    pub(super) fn get_all(
        &self,
        keys: &[Key],
        mut build: impl FnMut(usize, u64) -> Permutation,
    ) -> Vec<Arc<Permutation>> {
        let found: Vec<Option<Arc<Permutation>>> = {
            let mut kept = self.lock();
            (keys.iter()).map(|&key| kept.touch(key)).collect()
        };
        (found.into_iter().zip(keys))
            .map(|(order, &(s, pass))| {
                order.unwrap_or_else(|| self.get(s, pass, || build(s, pass)))
            })
            .collect()
    }

    /// Whether source `s`'s orders are tables (kept here).
    pub(super) fn tabled(&self, s: usize) -> bool {
        self.tables[s]
    }

    /// Bytes of the tables of `passes[s]` passes of each tabled source `s`, overheads
    /// included: what keeping all of them at once costs.
    pub(super) fn table_bytes(&self, passes: &[u64]) -> u64 {
        let entries: u128 = (passes.iter().zip(&self.costs).zip(&self.tables))
            .filter(|(_, &table)| table)
            .map(|((&n, &cost), _)| u128::from(n) * u128::from(cost))
            .sum();
        u64::try_from(2 * entries).unwrap_or(u64::MAX)
    }

    /// The store's budget in bytes.
    pub(super) fn budget_bytes(&self) -> u64 {
        2 * self.budget
    }

    /// Maps `values[i]`, for each slot `i` of `slots` (of tabled sources), through the
    /// order of `(sources[i], passes[i])`. The kept orders are read in place under one
    /// lock, a table entry a slot (random positions touch another pass at almost every
    /// slot: grouping them first would cost more than the lookups), each source's last
    /// order reused while its pass repeats (consecutive positions). The orders not kept
    /// are built by `build` outside the lock (then kept) and their slots mapped after.
    pub(super) fn map_tabled(
        &self,
        slots: impl Iterator<Item = usize>,
        sources: &[u64],
        passes: &[u64],
        values: &mut [u64],
        mut build: impl FnMut(usize, u64) -> Permutation,
    ) {
        let mut missed = Vec::new();
        {
            let mut kept = self.lock();
            let (mut clock, floor) = (kept.clock, kept.floor);
            let mut last: Vec<Option<(u64, &Permutation)>> = vec![None; self.costs.len()];
            let mut found: Vec<(usize, &[u16])> = Vec::with_capacity(values.len());
            for i in slots {
                let (s, pass) = (sources[i] as usize, passes[i]);
                let order = match last[s] {
                    Some((p, order)) if p == pass => order,
                    _ => {
                        let Some(entry) = kept.orders.get(&(s, pass)) else {
                            missed.push(i);
                            continue;
                        };
                        clock += 1;
                        entry.hit(floor, clock);
                        last[s] = Some((pass, &*entry.order));
                        &*entry.order
                    }
                };
                found.push((i, order.forward_table().expect("a tabled source's order")));
            }
            // The table reads apart from the lookups: independent of each other, in a loop
            // short enough that the CPU keeps many in flight (random positions miss the
            // caches at almost every slot; interleaved with the lookups, two or three).
            for (i, table) in found {
                values[i] = u64::from(table[values[i] as usize]);
            }
            drop(last);
            kept.clock = clock;
        }
        for i in missed {
            let (s, pass) = (sources[i] as usize, passes[i]);
            values[i] = self
                .get(s, pass, || build(s, pass))
                .forward_unchecked(values[i]);
        }
    }

    /// Entries (and overheads) of the orders kept now.
    #[cfg(test)]
    pub(super) fn kept_entries(&self) -> u64 {
        self.lock().entries
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A panic elsewhere cannot leave the store half-written: each step keeps it whole.
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Kept {
    /// The kept order of `key`, marked as just used.
    fn touch(&mut self, key: Key) -> Option<Arc<Permutation>> {
        self.clock += 1;
        let kept = self.orders.get(&key)?;
        kept.hit(self.floor, self.clock);
        Some(Arc::clone(&kept.order))
    }

    /// Keeps `order` (just used). Past `budget`, drops the orders of lowest priority (the
    /// least recently used among equals), never `key`, until [`FREED`] of the budget is
    /// free: one sort per many insertions, so a use costs a hash lookup, not an ordered
    /// index's upkeep. The orders used in the last `recent` uses go last, the least
    /// recently used first: consecutive positions use each source's current pass at every
    /// batch, and a current pass just begun has few uses yet.
    fn insert(&mut self, key: Key, order: Arc<Permutation>, cost: u64, budget: u64, recent: u64) {
        let kept = KeptOrder::new(order, cost, self.floor, self.clock);
        self.orders.insert(key, kept);
        self.entries += cost;
        if self.entries <= budget {
            return;
        }
        let since = self.clock.saturating_sub(recent);
        let mut by_worth: Vec<(bool, u64, u64, Key)> = self
            .orders
            .iter()
            .filter(|(&k, _)| k != key)
            .map(|(&k, kept)| match kept.used.get() {
                used if used > since => (true, 0, used, k), // the least recent first
                used => (false, kept.priority.get(), used, k),
            })
            .collect();
        by_worth.sort_unstable();
        for (_, _, _, lowest) in by_worth {
            if self.entries <= budget - budget / FREED {
                break;
            }
            let dropped = self.orders.remove(&lowest).expect("kept");
            self.entries -= dropped.cost;
            self.floor = self.floor.max(dropped.priority.get());
        }
    }
}

impl Clone for Passes {
    /// A copy keeps no orders: they are rebuilt on demand.
    fn clone(&self) -> Passes {
        Passes {
            costs: self.costs.clone(),
            tables: self.tables.clone(),
            budget: self.budget,
            kept: Mutex::new(Kept::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(size: u64, pass: u64, s: usize) -> Permutation {
        Permutation::of_version(crate::Version::V2, size, 0, pass, s as u64).unwrap()
    }

    #[test]
    fn the_store_is_sized_by_its_environment_variable() {
        assert_eq!(budget_from(None).unwrap(), CACHED_ENTRIES);
        assert_eq!(budget_from(Some("")).unwrap(), CACHED_ENTRIES);
        assert_eq!(budget_from(Some("32")).unwrap(), CACHED_ENTRIES);
        assert_eq!(budget_from(Some(" 256 ")).unwrap(), 256 << 19);
        for bad in ["0", "-1", "1.5", "32MiB", "1048577"] {
            let error = budget_from(Some(bad)).unwrap_err().to_string();
            assert!(
                error.contains(TABLES_ENV) && error.contains("unset it"),
                "{error}"
            );
        }
    }

    #[test]
    fn walked_orders_are_kept_at_their_overhead() {
        let passes = Passes::new(&[TABLED_MAX, 100, TABLED_MAX + 1], TABLED_MAX).unwrap();
        let costs = [
            TABLED_MAX + KEPT_OVERHEAD,
            100 + KEPT_OVERHEAD,
            KEPT_OVERHEAD,
        ];
        assert_eq!(passes.costs, costs);
        assert_eq!(passes.tables, [true, true, false]);
        let (a, b) = (
            passes.get(2, 0, || order(TABLED_MAX + 1, 0, 2)),
            passes.get(2, 0, || unreachable!("kept")),
        );
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(passes.lock().entries, KEPT_OVERHEAD);
        // Evicted at its own cost: room for one walked order at a time.
        let passes = Passes::with_budget(&[TABLED_MAX + 1], TABLED_MAX, KEPT_OVERHEAD);
        for pass in 0..3 {
            passes.get(0, pass, || order(TABLED_MAX + 1, pass, 0));
        }
        let kept = passes.lock();
        assert_eq!(kept.entries, KEPT_OVERHEAD);
        assert_eq!(kept.orders.keys().collect::<Vec<_>>(), [&(0, 2)]);
    }

    #[test]
    fn passes_in_any_order_are_built_once_within_the_budget() {
        let passes = Passes::new(&[10, 20], TABLED_MAX).unwrap();
        let mut built = 0;
        let mut get = |s: usize, pass: u64| {
            passes.get(s, pass, || {
                built += 1;
                order(10 * (s as u64 + 1), pass, s)
            })
        };
        let first = get(0, 3);
        for pass in [7, 0, 3, 9, 1, 7, 3] {
            get(0, pass);
            get(1, pass);
        }
        assert!(Arc::ptr_eq(&first, &get(0, 3)));
        assert_eq!(built, 2 * 5); // passes 0, 1, 3, 7, 9 of each source

        // Many at once: the kept ones as they are, the others built once.
        let mut built = Vec::new();
        let keys = [(0, 3), (1, 11), (0, 9), (1, 11), (0, 12)];
        let all = passes.get_all(&keys, |s, pass| {
            built.push((s, pass));
            order(10 * (s as u64 + 1), pass, s)
        });
        assert_eq!(built, [(1, 11), (0, 12)]);
        assert!(Arc::ptr_eq(&all[0], &first) && Arc::ptr_eq(&all[1], &all[3]));
        for (got, &(s, pass)) in all.iter().zip(&keys) {
            let want = order(10 * (s as u64 + 1), pass, s);
            assert!((0..want.len()).all(|i| got.forward(i).unwrap() == want.forward(i).unwrap()));
        }
    }

    #[test]
    fn the_least_recently_used_order_goes_first() {
        // Room for two orders of 10 entries.
        let passes = Passes::with_budget(&[10], TABLED_MAX, 2 * (10 + KEPT_OVERHEAD));
        let mut built = Vec::new();
        let mut get = |pass: u64| {
            passes.get(0, pass, || {
                built.push(pass);
                order(10, pass, 0)
            })
        };
        for pass in [0, 1, 0, 2, 0, 1] {
            get(pass);
        }
        // 2 evicts 1 (0 was used since), then 0 too (down to 3/4 of the budget); 0 and 1
        // are built again, and 1 then evicts the older two (2, 0).
        assert_eq!(built, [0, 1, 2, 0, 1]);
        let kept = passes.lock();
        assert_eq!(kept.entries, 10 + KEPT_OVERHEAD);
        assert_eq!(kept.orders.keys().collect::<Vec<_>>(), [&(0, 1)]);
    }

    #[test]
    fn consecutive_reads_build_each_pass_once_however_small_the_budget() {
        // Three sources read pass after pass, each pass in several batches, the sources'
        // passes changing at different times; room for the current passes and one more.
        let sizes = [10u64, 20, 30];
        let budget = (10 + 20 + 30 + 30) + 4 * KEPT_OVERHEAD;
        let passes = Passes::with_budget(&sizes, TABLED_MAX, budget);
        let mut built = Vec::new();
        for batch in 0..600u64 {
            for (s, &size) in sizes.iter().enumerate() {
                let pass = batch * 4 / size; // a pass lasts size / 4 batches
                passes.get(s, pass, || {
                    built.push((s, pass));
                    order(size, pass, s)
                });
            }
        }
        let mut once = built.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(
            built.len(),
            once.len(),
            "a current pass was dropped and built again"
        );
    }

    #[test]
    fn random_reads_keep_the_large_tables_and_build_the_small_ones_again() {
        // A small source read in many passes, a large one in three, positions drawn at
        // random (a slot lands in a pass as often as the pass is long); room for the
        // large tables and a few small ones, not for every small pass.
        let sizes = [10u64, 1000];
        let passes = Passes::with_budget(
            &sizes,
            TABLED_MAX,
            4 * (1000 + KEPT_OVERHEAD) + 8 * (10 + KEPT_OVERHEAD),
        );
        let mut built = [0u64; 2];
        let mut draw = 1u64;
        for _ in 0..20_000 {
            draw = splitmix64(draw);
            let slot = draw % (1000 * 10 + 3 * 1000);
            let (s, pass) = if slot < 10_000 {
                (0, slot / 10)
            } else {
                (1, (slot - 10_000) / 1000)
            };
            passes.get(s, pass, || {
                built[s] += 1;
                order(sizes[s], pass, s)
            });
        }
        assert_eq!(built[1], 3, "a large table was built again");
        assert!(
            built[0] > 1000,
            "every small pass was kept: the test keeps too much"
        );
    }

    #[test]
    fn tabled_slots_map_through_their_pass_order_kept_or_built_once() {
        let sources = [0u64, 0, 1, 0, 0, 1, 0];
        let pass_of = [4u64, 4, 1, 2, 4, 1, 9];
        let values: Vec<u64> = (0..7).map(|i| (i * 3 % 10) as u64).collect();
        let slots = [0usize, 1, 2, 3, 4, 6]; // slot 5 left as it is
                                             // Room for every order, and for one order at a time (built again as needed).
        for budget in [CACHED_ENTRIES, 20 + KEPT_OVERHEAD] {
            let passes = Passes::with_budget(&[10, 20], TABLED_MAX, budget);
            let (mut mapped, mut built) = (values.clone(), Vec::new());
            passes.map_tabled(
                slots.into_iter(),
                &sources,
                &pass_of,
                &mut mapped,
                |s, pass| {
                    built.push((s, pass));
                    order(10 * (s as u64 + 1), pass, s)
                },
            );
            for i in 0..7 {
                let (s, pass) = (sources[i] as usize, pass_of[i]);
                let want = match slots.contains(&i) {
                    true => order(10 * (s as u64 + 1), pass, s)
                        .forward(values[i])
                        .unwrap(),
                    false => values[i],
                };
                assert_eq!(mapped[i], want, "slot {i}, budget {budget}");
            }
            if budget == CACHED_ENTRIES {
                // Each (source, pass) built once, in the order first met.
                assert_eq!(built, [(0, 4), (1, 1), (0, 2), (0, 9)]);
            }
        }
    }

    #[test]
    fn a_copy_keeps_nothing() {
        let passes = Passes::new(&[10], TABLED_MAX).unwrap();
        passes.get(0, 0, || order(10, 0, 0));
        assert!(passes.clone().lock().orders.is_empty());
    }
}
