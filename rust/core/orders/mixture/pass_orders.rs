//! How a source's occurrences become samples: each pass over a source is read in its own
//! order, keyed by `(seed, source, pass)` — built where needed, or kept (`passes.rs`) —
//! and a batch's occurrences go through their orders slot by slot (kept tables) or a
//! pass at a time (batched walks).

use std::sync::Arc;

use super::grouping::by_source_and_pass;
use super::passes::TABLED_MAX;
use super::{MixVersion, Mixture, MIX_TAG};
use crate::permutation::{Permutation, Version};
use crate::splitmix::chain;

/// Slots of one walked pass that go through its order as a batch of their own (the
/// lanes share its keys); fewer join the batched walk of their source's other passes.
const BATCHED_FROM: usize = 8;

/// Slots of a source's short runs that go through one batched walk: fewer cost more in
/// the batch's setup than their walks one pass at a time.
const EACH_FROM: usize = 32;

/// Maps values, each through its own order of one source (`Permutation::map_each`).
type MapEach = fn(&[&Permutation], &mut [u64]);

impl Mixture {
    /// The permutation of source `s` in pass `pass`: perm-v1's without its table (O(1) to
    /// build), perm-v2's kept for small sources (their table is O(size) to build), or, in
    /// mix-v3, one of them by the source's size.
    pub(super) fn pass_order(&self, s: usize, pass: u64) -> Arc<Permutation> {
        self.pass_orders(&[(s, pass)]).remove(0)
    }

    /// [`Mixture::pass_order`] of each `(source, pass)` of `keys`, the kept ones looked up
    /// together.
    fn pass_orders(&self, keys: &[(usize, u64)]) -> Vec<Arc<Permutation>> {
        match self.version {
            MixVersion::V1 => (keys.iter())
                .map(|&(s, pass)| Arc::new(self.build_pass_order(s, pass)))
                .collect(),
            MixVersion::V2 | MixVersion::V3 => self
                .passes
                .get_all(keys, |s, pass| self.build_pass_order(s, pass)),
        }
    }

    /// The permutation of source `s` in pass `pass`, built (perm-v1's without its table).
    fn build_pass_order(&self, s: usize, pass: u64) -> Permutation {
        let (key, size) = (chain(MIX_TAG, &[self.seed]), self.sizes[s]);
        let walked_v1 = match self.version {
            MixVersion::V1 => true,
            MixVersion::V2 => false,
            // Between a table cheaper to rebuild than a walk and perm-v2's short walks.
            MixVersion::V3 => size > self.version.tabled_max() && size <= TABLED_MAX,
        };
        match walked_v1 {
            true => Permutation::untabled(size, key, pass, s as u64),
            false => Permutation::of_version(Version::V2, size, key, pass, s as u64),
        }
        .expect("size >= 1")
    }

    /// Replaces each `occurrences[i]` of source `sources[i]` by the sample it reads.
    pub(super) fn map_occurrences(&self, sources: &[u64], occurrences: &mut [u64]) {
        // One pass: the quotient and the remainder of one division.
        let passes: Vec<u64> = (sources.iter().zip(occurrences.iter_mut()))
            .map(|(&s, o)| {
                let size = self.sizes[s as usize];
                let pass = *o / size;
                *o -= pass * size;
                pass
            })
            .collect();
        let walk = |order: &Permutation, offsets: &mut [u64]| order.map_in_place(offsets);
        let each: Option<MapEach> = Some(Permutation::map_each);
        // mix-v2 and mix-v3: the small sources' orders are kept tables, read slot by slot; the
        // others' walks go through the permutations batched, pass by pass.
        let is_tabled = |i: &usize| self.passes.tabled(sources[*i] as usize);
        let (tabled, walked): (Vec<usize>, Vec<usize>) = match self.version {
            MixVersion::V1 => (Vec::new(), Vec::new()),
            MixVersion::V2 | MixVersion::V3 => (0..sources.len()).partition(is_tabled),
        };
        if tabled.is_empty() {
            return self.per_pass(sources, &passes, occurrences, walk, each);
        }
        let build = |s: usize, pass: u64| self.build_pass_order(s, pass);
        (self.passes).map_tabled(tabled.into_iter(), sources, &passes, occurrences, build);
        if walked.is_empty() {
            return;
        }
        let pick = |values: &[u64]| -> Vec<u64> { walked.iter().map(|&i| values[i]).collect() };
        let mut values = pick(occurrences);
        self.per_pass(&pick(sources), &pick(&passes), &mut values, walk, each);
        for (&i, v) in walked.iter().zip(values) {
            occurrences[i] = v;
        }
    }

    /// Applies `apply` (a pass's permutation, either way) to each `values[i]` of source
    /// `sources[i]` in pass `passes[i]`. The slots are grouped by (source, pass) and each
    /// group goes through the permutation together: the batched (SIMD) walk, instead of
    /// one scalar walk per position (a small source's walk is long: `2^16 / size` steps).
    /// With `each`, the slots of a source's walked passes met by fewer than
    /// [`BATCHED_FROM`] slots each, when there are [`EACH_FROM`] of them in several passes
    /// (random positions: a few slots a pass), go through `each` together, every slot with
    /// its own pass's order: one batched walk instead of a short one per pass.
    pub(super) fn per_pass(
        &self,
        sources: &[u64],
        passes: &[u64],
        values: &mut [u64],
        apply: impl Fn(&Permutation, &mut [u64]),
        each: Option<MapEach>,
    ) {
        let order = by_source_and_pass(sources, passes, self.sizes.len());
        // The runs of slots of one (source, pass), and their orders fetched together.
        let runs: Vec<&[usize]> = order
            .chunk_by(|&a, &b| sources[a] == sources[b] && passes[a] == passes[b])
            .collect();
        let keys: Vec<(usize, u64)> = (runs.iter())
            .map(|run| (sources[run[0]] as usize, passes[run[0]]))
            .collect();
        let orders = self.pass_orders(&keys);
        let mut batch: Vec<u64> = Vec::new();
        let (mut lone, mut lone_orders): (Vec<usize>, Vec<&Permutation>) = Default::default();
        let ks: Vec<usize> = (0..runs.len()).collect();
        for source_runs in ks.chunk_by(|&a, &b| sources[runs[a][0]] == sources[runs[b][0]]) {
            // The short runs of walked passes (random positions: a few slots in each of many
            // passes), in one batched walk when there are enough of them.
            let short = |k: &&usize| {
                runs[**k].len() < BATCHED_FROM && orders[**k].forward_table().is_none()
            };
            let (passes_met, slots) = (source_runs.iter().filter(short))
                .fold((0, 0), |(passes, slots), &k| {
                    (passes + 1, slots + runs[k].len())
                });
            let batched = each.filter(|_| passes_met > 1 && slots >= EACH_FROM);
            if let Some(each) = batched {
                lone.clear();
                lone_orders.clear();
                for &k in source_runs.iter().filter(short) {
                    lone.extend_from_slice(runs[k]);
                    lone_orders.extend(std::iter::repeat_n(&*orders[k], runs[k].len()));
                }
                through(values, &mut batch, &lone, |batch| each(&lone_orders, batch));
            }
            for &k in source_runs
                .iter()
                .filter(|k| !(batched.is_some() && short(k)))
            {
                let order = &*orders[k];
                through(values, &mut batch, runs[k], |batch| apply(order, batch));
            }
        }
    }
}

/// `values[i]` of the slots `slots`, gathered into `batch`, mapped by `map` and written
/// back.
fn through(
    values: &mut [u64],
    batch: &mut Vec<u64>,
    slots: &[usize],
    map: impl FnOnce(&mut [u64]),
) {
    batch.clear();
    batch.extend(slots.iter().map(|&i| values[i]));
    map(batch);
    for (&i, &v) in slots.iter().zip(batch.iter()) {
        values[i] = v;
    }
}
