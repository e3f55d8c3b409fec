//! mix-v1, mix-v2 and mix-v3: a weighted mixture of sources as a map from position to
//! `(source, index)`.
//!
//! Nothing is built or cached: a position descends a binary tree of exact two-way splits.
//! A node of integer weight `t` whose left subtree weighs `a` sends its local position `q`
//! left when `f(q + 1) > f(q)` with `f(m) = floor(m·a / t + 1/2)` (a Beatty sequence), so
//! among its first `m` positions exactly `f(m)` go left: the exact share rounded, within
//! 1/2 of it for every `m`. The errors of the levels on a source's path add up, each scaled
//! by the fraction below it, so the count of source `s` among positions `[0, n)` stays
//! within `depth / 2` of `w_s · n` whatever `n` (within 1 when the tree is weight-balanced).
//!
//! A source's `ℓ`-th occurrence is sample `π_{s,j}(ℓ mod size_s)` with pass
//! `j = ℓ div size_s` and `π_{s,j}` the permutation keyed by `(seed, source, pass)`, perm-v1
//! for mix-v1 and perm-v2 for mix-v2 (nothing else differs): every sample of a source
//! exactly once per pass, a fresh order each pass. mix-v3 takes, by the source's size, the
//! one of the two that costs least at a random position (a shuffled sampler's reads):
//! perm-v2 up to [`V3_TABLED_MAX`] samples (a table, rebuilt in O(size)), perm-v1 up to
//! 2^16 (a walk of `2^16 / size` steps on average, no table), perm-v2 above (a walk of
//! fewer than two). mix-v2's tables of up to 2^16 entries are cheap while all the passes a
//! reader meets fit its store; a blend up-sampled beyond that rebuilt one at almost every
//! random position (25-80× mix-v1's cost per position, measured), where mix-v3 keeps every
//! size within mix-v1's cost.
//!
//! Weights are `f64` as given: each is an exact dyadic rational, and when they share a
//! common scale within 63 bits they are used exactly; otherwise they are scaled to integers
//! summing to about `2^62` (an error below `2^-62` of the total).
//!
//! A schedule changes the weights at given positions: each stage has its own tree, started
//! afresh at the stage's first position (the prefix bound holds within every stage), and a
//! source's occurrences, hence its passes, continue across stages.

mod cursor;
mod grouping;
mod pass_orders;
mod passes;
mod proof;
mod tree;
mod weights;

use crate::error::{check_below, Error};
use crate::permutation::{Version, ALGORITHM_V1, ALGORITHM_V2};
use cursor::Cursor;
use passes::{Passes, TABLED_MAX};
use tree::Tree;
use weights::integer_weights;

pub use proof::MixtureProof;

pub use crate::algorithm::{MIX_ALGORITHMS, MIX_ALGORITHM_V3};

/// The id of the mixture map of new runs: mix-v3.
pub const MIX_ALGORITHM: &str = MIX_ALGORITHM_V3;

/// mix-v3's largest source read in perm-v2's table: where rebuilding a table costs what
/// perm-v1's walk costs (measured at a random position with no table kept: 0.84 µs and
/// 0.83 µs at 512 samples; 0.36 µs and 2.8 µs at 128; 1.6 µs and 0.49 µs at 1,024).
pub const V3_TABLED_MAX: u64 = 512;

/// Which construction a mixture's passes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixVersion {
    /// mix-v1: every pass in perm-v1's order.
    V1,
    /// mix-v2: every pass in perm-v2's order (a table up to 2^16 samples).
    V2,
    /// mix-v3: by the source's size, perm-v2's table, perm-v1's walk or perm-v2's network.
    V3,
}

impl MixVersion {
    /// The version `algorithm` names: a mixture's id (`"mix-v3"`, `"mix-v2"`, `"mix-v1"`)
    /// or the permutation of mix-v1 and mix-v2 (`"perm-v1"`, `"perm-v2"`: 0.3's and 0.4's
    /// `algorithm=`).
    pub fn named(algorithm: &str) -> Result<MixVersion, Error> {
        if algorithm == MIX_ALGORITHM_V3 {
            return Ok(MixVersion::V3);
        }
        match Version::for_family(&MIX_ALGORITHMS, "mixture", algorithm) {
            Ok(Version::V1) => Ok(MixVersion::V1),
            Ok(Version::V2) => Ok(MixVersion::V2),
            Err(_) => Err(Error::Invalid(format!(
                "unknown mixture algorithm {algorithm:?}: use \"{MIX_ALGORITHM_V3}\" (the \
                 default), or \"{}\" / \"{}\" (\"{}\" / \"{}\") to continue a run started with them",
                MIX_ALGORITHMS[1], MIX_ALGORITHMS[0], ALGORITHM_V2, ALGORITHM_V1
            ))),
        }
    }

    /// Its id.
    pub fn id(self) -> &'static str {
        match self {
            MixVersion::V1 => MIX_ALGORITHMS[0],
            MixVersion::V2 => MIX_ALGORITHMS[1],
            MixVersion::V3 => MIX_ALGORITHM_V3,
        }
    }

    /// Largest source whose passes are tables (0: none).
    fn tabled_max(self) -> u64 {
        match self {
            MixVersion::V1 => 0,
            MixVersion::V2 => TABLED_MAX,
            MixVersion::V3 => V3_TABLED_MAX,
        }
    }
}

/// Domain-separates the passes' keys from every other use of the seed.
const MIX_TAG: u64 = 0x6d69_782d_7631; // "mix-v1"

/// Positions `[start, next stage's start)` of a schedule, mixed with one set of weights.
#[derive(Clone, Debug)]
struct Stage {
    start: u64,
    weights: Vec<u64>,
    tree: Tree,
    /// Per source: positions it took in the stages before this one.
    before: Vec<u64>,
}

/// A weighted mixture of `sizes.len()` sources over positions `[0, num_samples)`, with
/// weights that may change at given positions (a schedule of stages).
#[derive(Clone, Debug)]
pub struct Mixture {
    sizes: Vec<u64>,
    stages: Vec<Stage>,
    num_samples: u64,
    seed: u64,
    /// The permutation of the passes.
    version: MixVersion,
    /// The small sources' latest pass orders (perm-v2's are tables).
    passes: Passes,
}

impl Mixture {
    /// The mixture of sources of `sizes` drawn in proportion to `weights`.
    ///
    /// `num_samples = None` gives the longest mixture in which no source repeats a sample.
    pub fn new(
        sizes: &[u64],
        weights: &[f64],
        num_samples: Option<u64>,
        seed: u64,
    ) -> Result<Self, Error> {
        Self::scheduled(sizes, &[(0, weights.to_vec())], num_samples, seed)
    }

    /// A mixture whose weights change: `stages[j] = (start, weights)` mixes positions from
    /// `start` (the first stage starts at 0, starts strictly increase) until the next stage.
    pub fn scheduled(
        sizes: &[u64],
        stages: &[(u64, Vec<f64>)],
        num_samples: Option<u64>,
        seed: u64,
    ) -> Result<Self, Error> {
        if sizes.is_empty() {
            return Err(Error::Invalid("a mixture needs at least one source".into()));
        }
        if let Some(s) = sizes.iter().position(|&n| n == 0) {
            return Err(Error::Invalid(format!(
                "source {s} is empty (size 0); every source needs at least one sample"
            )));
        }
        match stages.first() {
            None => return Err(Error::Invalid("a schedule needs at least one stage".into())),
            Some((start, _)) if *start != 0 => {
                return Err(Error::Invalid(format!(
                    "the first stage must start at position 0, not {start}"
                )))
            }
            _ => {}
        }
        if let Some(w) = stages.windows(2).find(|w| w[1].0 <= w[0].0) {
            return Err(Error::Invalid(format!(
                "stage starts must increase: {} is not after {} (the first stage starts at \
                 position 0, each next one after the one before)",
                w[1].0, w[0].0
            )));
        }
        let mut built: Vec<Stage> = Vec::with_capacity(stages.len());
        for (start, weights) in stages {
            let stage = match built.len() {
                0 if stages.len() == 1 => String::new(),
                _ => format!(" (in the stage from position {start})"),
            };
            if weights.len() != sizes.len() {
                return Err(Error::Invalid(format!(
                    "{} sizes but {} weights{stage}: give one weight per source",
                    sizes.len(),
                    weights.len()
                )));
            }
            let q = integer_weights(weights, &stage)?;
            let before = match built.last() {
                None => vec![0; sizes.len()],
                Some(last) => {
                    let mut b = last.before.clone();
                    last.tree.add_counts(start - last.start, &mut b);
                    b
                }
            };
            built.push(Stage {
                start: *start,
                tree: Tree::new(&q)?,
                weights: q,
                before,
            });
        }
        let mut mixture = Mixture {
            sizes: sizes.to_vec(),
            stages: built,
            num_samples: 1,
            seed,
            version: MixVersion::V1,
            passes: Passes::new(sizes, MixVersion::V1.tabled_max())?,
        };
        mixture.num_samples = match num_samples {
            Some(0) => {
                return Err(Error::Invalid(
                    "num_samples must be at least 1 (or None for one pass)".into(),
                ))
            }
            Some(n) => n,
            None => mixture.longest_without_repeats(),
        };
        Ok(mixture)
    }

    /// This mixture with passes of `version`'s permutation (mix-v1 by default in Rust).
    pub fn with_version(self, version: Version) -> Self {
        self.with_algorithm(match version {
            Version::V1 => MixVersion::V1,
            Version::V2 => MixVersion::V2,
        })
    }

    /// This mixture as the construction `version` (mix-v1 by default in Rust).
    pub fn with_algorithm(self, version: MixVersion) -> Self {
        let passes = self.passes.emptied(&self.sizes, version.tabled_max());
        Mixture {
            version,
            passes,
            ..self
        }
    }

    /// Its algorithm id: mix-v1, mix-v2 or mix-v3.
    pub fn algorithm(&self) -> &'static str {
        self.version.id()
    }

    /// Positions in the mixture.
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// Number of sources (zero-weight ones included).
    pub fn num_sources(&self) -> usize {
        self.sizes.len()
    }

    /// The sources' sizes.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The stage that holds `position`.
    fn stage_of(&self, position: u64) -> &Stage {
        let j = self.stages.partition_point(|st| st.start <= position) - 1;
        &self.stages[j]
    }

    /// The largest `n` with `counts(n)[s] <= size_s` for every source, at least 1.
    fn longest_without_repeats(&self) -> u64 {
        let fits = |n: u64| {
            self.counts(n)
                .iter()
                .zip(&self.sizes)
                .all(|(c, size)| c <= size)
        };
        // Past the last stage's start, a source of weight w takes about w·m of m positions.
        let last = self.stages.last().expect("at least one stage");
        let total: u128 = last.weights.iter().map(|&w| w as u128).sum();
        let upper = (0..self.sizes.len())
            .filter(|&s| last.weights[s] > 0)
            .map(|s| {
                let room = (self.sizes[s] as u128 + 64).saturating_sub(last.before[s] as u128);
                last.start as u128 + room * total / last.weights[s] as u128 + 1
            })
            .min()
            .unwrap_or(1)
            .min(u64::MAX as u128) as u64;
        let (mut lo, mut hi) = (1u64, upper.max(1)); // fits(lo): one position, one sample
        if fits(hi) {
            return hi;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The smallest `n` at which every source weighted in the last stage has been read in
    /// full at least once (`counts(n)[s] >= size_s`): one epoch of the blend, the sources
    /// with smaller shares of their size repeating. `u64::MAX` if no `n` that large fits.
    pub fn covering_length(&self) -> u64 {
        let last = self.stages.last().expect("at least one stage");
        let weighted: Vec<usize> = (0..self.sizes.len())
            .filter(|&s| last.weights[s] > 0)
            .collect();
        let covers = |n: u64| {
            let c = self.counts(n);
            weighted.iter().all(|&s| c[s] >= self.sizes[s])
        };
        // Past the last stage's start, a source of weight w takes about w·m of m positions.
        let total: u128 = last.weights.iter().map(|&w| w as u128).sum();
        let upper = weighted
            .iter()
            .map(|&s| {
                let need = (self.sizes[s] as u128 + 64).saturating_sub(last.before[s] as u128);
                last.start as u128 + need * total / last.weights[s] as u128 + 1
            })
            .max()
            .unwrap_or(1)
            .min(u64::MAX as u128) as u64;
        if !covers(upper) {
            return u64::MAX;
        }
        let (mut lo, mut hi) = (0u64, upper); // covers(hi), !covers(0)
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if covers(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Bytes of the tables of all its passes (mix-v2's orders of sources of at most 2^16
    /// samples, mix-v3's of at most [`V3_TABLED_MAX`]: 2 bytes a sample a pass, and each
    /// kept order's overhead; mix-v1 has none, 0). Consecutive positions need one pass of a source at a time; random positions
    /// over the whole mixture (a shuffled sampler) meet every pass at every stretch of the
    /// epoch, and cost O(1) a position only while all of them fit the store
    /// ([`Mixture::table_store_bytes`]); beyond, most rebuild a table, O(size).
    pub fn table_bytes(&self) -> u64 {
        if self.version == MixVersion::V1 {
            return 0;
        }
        let passes: Vec<u64> = (self.counts(self.num_samples).iter().zip(&self.sizes))
            .map(|(&taken, &size)| taken.div_ceil(size))
            .collect();
        self.passes.table_bytes(&passes)
    }

    /// Bytes of tables its store keeps (`PERMSHARD_MIX_TABLE_MIB` when the mixture was
    /// built, else 32 MiB), in each process that reads it.
    pub fn table_store_bytes(&self) -> u64 {
        self.passes.budget_bytes()
    }

    /// How many of the positions `[0, n)` each source takes. O(sources), any `n`.
    pub fn counts(&self, n: u64) -> Vec<u64> {
        let stage = self.stage_of(n);
        let mut out = stage.before.clone();
        stage.tree.add_counts(n - stage.start, &mut out);
        out
    }

    fn check_position(&self, position: u64) -> Result<(), Error> {
        check_below("position", position, self.num_samples)?;
        Ok(())
    }

    /// `(source, occurrence)`: the source of `position` and how many positions before it
    /// that source took.
    #[inline]
    fn occurrence(&self, position: u64) -> (usize, u64) {
        let stage = self.stage_of(position);
        let (s, local) = stage.tree.occurrence(position - stage.start);
        (s, stage.before[s] + local)
    }

    /// `(source, index)` at `position`.
    pub fn at(&self, position: u64) -> Result<(usize, u64), Error> {
        self.check_position(position)?;
        let (s, occurrence) = self.occurrence(position);
        let size = self.sizes[s];
        let order = self.pass_order(s, occurrence / size);
        Ok((s, order.forward_unchecked(occurrence % size)))
    }

    /// `sources[i], indices[i]` = the `(source, index)` at position `start + i`. Batched:
    /// a cursor walks the tree, then each source's pass maps all its offsets at once.
    pub fn fill(&self, start: u64, sources: &mut [u64], indices: &mut [u64]) -> Result<(), Error> {
        let len = check_lengths(sources, indices)?;
        if start > self.num_samples || len > self.num_samples - start {
            return Err(Error::SliceOutOfRange {
                start,
                len,
                n: self.num_samples,
            });
        }
        // Consecutive positions: a cursor walks the tree without a division per level.
        let mut cursor = Cursor::new(self, start);
        for (source, occurrence) in sources.iter_mut().zip(indices.iter_mut()) {
            let (s, o) = cursor.next_position();
            (*source, *occurrence) = (s as u64, o);
        }
        self.map_occurrences(sources, indices);
        Ok(())
    }

    /// As [`Mixture::fill`], for the positions `positions` (any order).
    pub fn fill_at(
        &self,
        positions: &[u64],
        sources: &mut [u64],
        indices: &mut [u64],
    ) -> Result<(), Error> {
        if check_lengths(sources, indices)? != positions.len() as u64 {
            return Err(Error::Invalid(
                "positions, sources and indices must have the same length".into(),
            ));
        }
        for &p in positions {
            self.check_position(p)?;
        }
        if let [stage] = &self.stages[..] {
            // One tree: the positions descend it together.
            indices.copy_from_slice(positions);
            stage.tree.occurrences(indices, sources);
        } else {
            self.occurrences_by_stage(positions, sources, indices);
        }
        self.map_occurrences(sources, indices);
        Ok(())
    }

    /// `sources[i], occurrences[i]` of `positions[i]` under a schedule: each stage's
    /// positions descend its tree together.
    fn occurrences_by_stage(
        &self,
        positions: &[u64],
        sources: &mut [u64],
        occurrences: &mut [u64],
    ) {
        let stage_index = |p: u64| self.stages.partition_point(|st| st.start <= p) - 1;
        let mut slots: Vec<usize> = (0..positions.len()).collect();
        slots.sort_by_cached_key(|&i| stage_index(positions[i]));
        let (mut qs, mut found) = (Vec::new(), Vec::new());
        for run in slots.chunk_by(|&a, &b| stage_index(positions[a]) == stage_index(positions[b])) {
            let stage = &self.stages[stage_index(positions[run[0]])];
            qs.clear();
            qs.extend(run.iter().map(|&i| positions[i] - stage.start));
            found.resize(run.len(), 0);
            stage.tree.occurrences(&mut qs, &mut found);
            for ((&i, &q), &s) in run.iter().zip(&qs).zip(&found) {
                (sources[i], occurrences[i]) = (s, stage.before[s as usize] + q);
            }
        }
    }

    /// Every position at which `(source, index)` appears, in increasing order: one per pass
    /// over the source that the mixture reaches.
    pub fn locate(&self, source: usize, index: u64) -> Result<Vec<u64>, Error> {
        if source >= self.sizes.len() {
            return Err(Error::Invalid(format!(
                "source {source} does not exist: there are {} sources",
                self.sizes.len()
            )));
        }
        let size = self.sizes[source];
        if index >= size {
            return Err(Error::Invalid(format!(
                "index {index} is not in range({size}) of source {source}"
            )));
        }
        let taken = self.counts(self.num_samples)[source];
        let mut out = Vec::new();
        let mut pass = 0u64;
        while pass.saturating_mul(size) < taken {
            let occurrence = pass * size + self.pass_order(source, pass).inverse(index)?;
            if occurrence < taken {
                out.push(self.position_of(source, occurrence));
            }
            pass += 1;
        }
        Ok(out)
    }

    /// The position of source `s`'s `occurrence`-th position (it must exist).
    fn position_of(&self, s: usize, occurrence: u64) -> u64 {
        // The stage in which the source took its occurrence-th position.
        let j = self.stages.partition_point(|st| st.before[s] <= occurrence) - 1;
        let stage = &self.stages[j];
        stage.start + stage.tree.position_of(s, occurrence - stage.before[s])
    }
}

/// The common length of two output slices.
fn check_lengths(sources: &[u64], indices: &[u64]) -> Result<u64, Error> {
    if sources.len() != indices.len() {
        return Err(Error::Invalid(
            "sources and indices must have the same length".into(),
        ));
    }
    Ok(sources.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splitmix::splitmix64;

    fn brute_counts(m: &Mixture, n: u64) -> Vec<u64> {
        let mut counts = vec![0u64; m.num_sources()];
        for p in 0..n {
            counts[m.at(p).unwrap().0] += 1;
        }
        counts
    }

    #[test]
    fn counts_agree_with_positions_and_stay_near_the_weights() {
        let cases: &[(&[u64], &[f64])] = &[
            (&[100, 200, 300], &[0.2, 0.3, 0.5]),
            (
                &[7; 16],
                &[
                    1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 1.5, 2.5, 0.1, 9.0, 0.7, 0.3, 4.4, 1.0,
                ],
            ),
            (&[50, 50], &[1.0, 0.0]),
            (&[1000, 3], &[0.999, 0.001]),
        ];
        for &(sizes, weights) in cases {
            let m = Mixture::new(sizes, weights, Some(5000), 3).unwrap();
            let total: f64 = weights.iter().sum();
            let mut running = vec![0u64; sizes.len()];
            for p in 0..5000u64 {
                running[m.at(p).unwrap().0] += 1;
                for (s, &c) in running.iter().enumerate() {
                    let want = weights[s] / total * (p + 1) as f64;
                    assert!(
                        (c as f64 - want).abs() <= 2.0,
                        "{weights:?} n={} s={s}",
                        p + 1
                    );
                }
                if p % 97 == 0 {
                    assert_eq!(m.counts(p + 1), running);
                }
            }
            assert_eq!(m.counts(5000), brute_counts(&m, 5000));
        }
    }

    #[test]
    fn table_bytes_is_what_random_positions_keep() {
        // Tables read in 1 to ~160 passes, the last one partly, 2^16 the largest table.
        let sizes = [300, 1_000, 7_000, 1 << 16];
        let n = 160_000;
        let mut m = Mixture::new(&sizes, &[0.3, 0.2, 0.1, 0.4], Some(n), 5)
            .unwrap()
            .with_version(Version::V2);
        if std::env::var_os("PERMSHARD_MIX_TABLE_MIB").is_none() {
            assert_eq!(m.table_store_bytes(), 32 << 20);
        }
        m.passes = Passes::with_budget(&sizes, TABLED_MAX, u64::MAX / 4); // keeps every order it builds
        let shuffled = crate::Permutation::new(Version::V2, n, 1, 0).unwrap();
        for p in 0..n {
            m.at(shuffled.forward(p).unwrap()).unwrap();
        }
        assert!(m.table_bytes() > 2 * n); // every position is a table entry
        assert_eq!(m.table_bytes(), 2 * m.passes.kept_entries());
        // No tables: a source above 2^16 (walked), or mix-v1.
        let walked = Mixture::new(&[(1 << 16) + 1], &[1.0], Some(1 << 20), 5).unwrap();
        assert_eq!(walked.with_version(Version::V2).table_bytes(), 0);
        let mix_v1 = Mixture::new(&sizes, &[0.3, 0.2, 0.1, 0.4], Some(n), 5).unwrap();
        assert_eq!(mix_v1.table_bytes(), 0);
    }

    #[test]
    fn each_pass_over_a_source_is_a_permutation() {
        let m = Mixture::new(&[5, 11, 2], &[1.0, 1.0, 1.0], Some(300), 9).unwrap();
        let mut sources = vec![0u64; 300];
        let mut indices = vec![0u64; 300];
        m.fill(0, &mut sources, &mut indices).unwrap();
        for s in 0..3 {
            let seen: Vec<u64> = (0..300)
                .filter(|&i| sources[i] == s as u64)
                .map(|i| indices[i])
                .collect();
            let size = m.sizes()[s] as usize;
            for pass in seen.chunks(size).filter(|c| c.len() == size) {
                let mut sorted = pass.to_vec();
                sorted.sort();
                assert_eq!(sorted, (0..size as u64).collect::<Vec<_>>());
            }
            // Passes are fresh orders, not one order repeated.
            assert_ne!(seen[..size], seen[size..2 * size]);
        }
        for p in 0..300u64 {
            let (s, i) = m.at(p).unwrap();
            assert_eq!((s as u64, i), (sources[p as usize], indices[p as usize]));
            assert!(m.locate(s, i).unwrap().contains(&p));
        }
        // A fill from any start (the cursor set up mid-way) and at scattered positions.
        for start in [1u64, 37, 150, 299] {
            let len = (300 - start) as usize;
            let (mut s2, mut i2) = (vec![0u64; len], vec![0u64; len]);
            m.fill(start, &mut s2, &mut i2).unwrap();
            assert_eq!(s2, sources[start as usize..]);
            assert_eq!(i2, indices[start as usize..]);
        }
        let scattered = [299u64, 0, 17, 17, 150];
        let (mut s3, mut i3) = (vec![0u64; 5], vec![0u64; 5]);
        m.fill_at(&scattered, &mut s3, &mut i3).unwrap();
        for (k, &p) in scattered.iter().enumerate() {
            assert_eq!((s3[k], i3[k]), (sources[p as usize], indices[p as usize]));
        }
    }

    #[test]
    fn locate_finds_every_position_of_a_sample() {
        let m = Mixture::new(&[4, 9, 1], &[0.5, 0.3, 0.2], Some(200), 1).unwrap();
        for s in 0..3 {
            for i in 0..m.sizes()[s] {
                let want: Vec<u64> = (0..200).filter(|&p| m.at(p).unwrap() == (s, i)).collect();
                assert_eq!(m.locate(s, i).unwrap(), want, "source {s} index {i}");
            }
        }
    }

    #[test]
    fn the_default_length_is_the_longest_without_repeats() {
        for (sizes, weights) in [
            (vec![100u64, 200, 300], vec![0.2, 0.3, 0.5]),
            (vec![10, 1000], vec![0.5, 0.5]),
            (vec![1, 1, 1], vec![1.0, 1.0, 1.0]),
        ] {
            let m = Mixture::new(&sizes, &weights, None, 0).unwrap();
            let n = m.num_samples();
            let fits = |c: Vec<u64>| c.iter().zip(&sizes).all(|(c, s)| c <= s);
            assert!(fits(m.counts(n)), "{sizes:?}");
            assert!(
                !fits(m.counts(n + 1)),
                "{sizes:?}: one more position still fits"
            );
        }
    }

    #[test]
    fn the_covering_length_is_the_first_that_reads_every_source() {
        for (sizes, weights) in [
            // Sources above perm-v1's table size: the brute count walks every position.
            (vec![40_000u64, 33_000, 70_000], vec![0.5, 0.25, 0.25]),
            (vec![33_001, 90_000], vec![0.9, 0.1]),
            (vec![40_000, 40_000, 40_000], vec![1.0, 0.0, 2.0]),
        ] {
            let n = Mixture::new(&sizes, &weights, Some(1), 3)
                .unwrap()
                .covering_length();
            let m = Mixture::new(&sizes, &weights, Some(n), 3).unwrap();
            let full = |n: u64| {
                let c = brute_counts(&m, n);
                (0..sizes.len()).all(|s| weights[s] == 0.0 || c[s] >= sizes[s])
            };
            assert!(full(n), "{sizes:?} {weights:?}: not covered at {n}");
            assert!(!full(n - 1), "{sizes:?} {weights:?}: covered before {n}");
        }
    }

    #[test]
    fn batched_fills_agree_with_one_position_at_a_time() {
        // Small sources (long walks, many passes in one call) beside a large one; mix-v2's
        // kept tables also with room for a few only (orders dropped and built again).
        let sizes = [100, 3, 1000, 70_000];
        let base = Mixture::new(&sizes, &[0.4, 0.1, 0.3, 0.2], Some(20_000), 7).unwrap();
        let cramped = Mixture {
            passes: Passes::with_budget(&sizes, TABLED_MAX, 2_500),
            ..base.clone().with_version(Version::V2)
        };
        let mut seen = Vec::new();
        for m in [base.clone(), base.with_version(Version::V2), cramped] {
            let one: Vec<(u64, u64)> = (0..20_000)
                .map(|p| {
                    let (s, i) = m.at(p).unwrap();
                    (s as u64, i)
                })
                .collect();
            let (mut sources, mut indices) = (vec![0u64; 15_000], vec![0u64; 15_000]);
            m.fill(5_000, &mut sources, &mut indices).unwrap();
            let filled: Vec<(u64, u64)> = sources
                .iter()
                .copied()
                .zip(indices.iter().copied())
                .collect();
            assert_eq!(filled, one[5_000..]);
            // Any order, repeats included; few slots (sorted) and many (counting sort).
            let positions: Vec<u64> = (0..20_000u64).map(|k| (k * 7_919 + 13) % 20_000).collect();
            for len in [5usize, 64, 20_000] {
                let (mut sources, mut indices) = (vec![0u64; len], vec![0u64; len]);
                m.fill_at(&positions[..len], &mut sources, &mut indices)
                    .unwrap();
                for (k, &p) in positions[..len].iter().enumerate() {
                    assert_eq!((sources[k], indices[k]), one[p as usize], "position {p}");
                }
            }
            seen.push(one);
        }
        assert_eq!(seen[1], seen[2], "the kept tables change no position");
    }

    #[test]
    fn random_positions_over_many_passes_of_walked_sources_agree_with_one_at_a_time() {
        // Sources above perm-v2's tables, read many times: a batch of random positions
        // meets most passes a few times, and those slots go through their orders in one
        // batched walk per source.
        let sizes = [65_537, 70_000, 1 << 18];
        for version in [Version::V1, Version::V2] {
            let m = Mixture::new(&sizes, &[0.3, 0.3, 0.4], Some(20_000_000), 5)
                .unwrap()
                .with_version(version);
            // ~2 slots a pass (batched together), ~10 (some passes in blocks of their own).
            for count in [600u64, 3_000] {
                let positions: Vec<u64> = (0..count)
                    .map(|k| splitmix64(k ^ count) % 20_000_000)
                    .collect();
                let mut sources = vec![0u64; count as usize];
                let mut indices = vec![0u64; count as usize];
                m.fill_at(&positions, &mut sources, &mut indices).unwrap();
                for (k, &p) in positions.iter().enumerate() {
                    let (s, i) = m.at(p).unwrap();
                    let found = (sources[k], indices[k]);
                    assert_eq!(found, (s as u64, i), "{version:?} position {p}");
                }
            }
        }
    }

    #[test]
    fn mix_v3_reads_each_source_as_mix_v1_or_mix_v2_does_by_its_size() {
        // Sources on both sides of each size bound, up-sampled: many passes each.
        let sizes = [7, 512, 513, 4_000, 1 << 16, (1 << 16) + 1, 200_000];
        let weights = [0.05, 0.1, 0.1, 0.2, 0.2, 0.15, 0.2];
        let n = 3_000_000;
        let of =
            |version| (Mixture::new(&sizes, &weights, Some(n), 9).unwrap()).with_algorithm(version);
        let (v1, v2, v3) = (of(MixVersion::V1), of(MixVersion::V2), of(MixVersion::V3));
        assert_eq!(v3.algorithm(), "mix-v3");
        let positions: Vec<u64> = (0..4_000u64).map(|k| splitmix64(k) % n).collect();
        let mut sources = vec![0u64; positions.len()];
        let mut indices = vec![0u64; positions.len()];
        v3.fill_at(&positions, &mut sources, &mut indices).unwrap();
        for (k, &p) in positions.iter().enumerate() {
            let (s, i) = v3.at(p).unwrap();
            assert_eq!(
                (sources[k], indices[k]),
                (s as u64, i),
                "batched, position {p}"
            );
            let walked_v1 = sizes[s] > V3_TABLED_MAX && sizes[s] <= 1 << 16;
            let reference = if walked_v1 { &v1 } else { &v2 };
            assert_eq!(reference.at(p).unwrap(), (s, i), "position {p}");
            assert!(v3.locate(s, i).unwrap().contains(&p), "position {p}");
        }
        // Only the sources of at most 512 samples keep tables.
        let passes: Vec<u64> = (v3.counts(n).iter().zip(&sizes))
            .map(|(&taken, &size)| taken.div_ceil(size))
            .collect();
        let tabled = |s: usize| passes[s] * (sizes[s] + passes::KEPT_OVERHEAD);
        assert_eq!(v3.table_bytes(), 2 * (tabled(0) + tabled(1)));
        assert!(v2.table_bytes() > v3.table_bytes());
    }

    #[test]
    fn a_mixture_algorithm_is_named_by_its_id_or_its_permutation() {
        let named = |id| MixVersion::named(id).unwrap();
        assert_eq!(named("mix-v3"), MixVersion::V3);
        assert_eq!(
            (named("mix-v2"), named("perm-v2")),
            (MixVersion::V2, MixVersion::V2)
        );
        assert_eq!(
            (named("mix-v1"), named("perm-v1")),
            (MixVersion::V1, MixVersion::V1)
        );
        for version in [MixVersion::V1, MixVersion::V2, MixVersion::V3] {
            assert_eq!(named(version.id()), version);
        }
        let err = MixVersion::named("mix-v9").unwrap_err().to_string();
        assert!(
            err.contains("\"mix-v3\" (the default)") && err.contains("\"perm-v1\""),
            "{err}"
        );
    }

    #[test]
    fn weights_are_exact_when_they_share_a_scale() {
        assert_eq!(integer_weights(&[0.25, 0.75], "").unwrap(), vec![1, 3]);
        assert_eq!(
            integer_weights(&[3.0, 1.0, 0.0], "").unwrap(),
            vec![3, 1, 0]
        );
        assert_eq!(
            integer_weights(&[0.1, 0.2], "").unwrap()[1],
            2 * integer_weights(&[0.1, 0.2], "").unwrap()[0]
        );
        // Scales 2^-1000 apart cannot share 63 bits: scaled instead, the tiny one to 0.
        let q = integer_weights(&[1.0, 1e-300], "").unwrap();
        assert_eq!(q[1], 0);
        assert!(q[0] > 1 << 61);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(Mixture::new(&[], &[], None, 0).is_err());
        assert!(Mixture::new(&[1, 2], &[1.0], None, 0).is_err());
        assert!(Mixture::new(&[0, 2], &[1.0, 1.0], None, 0).is_err());
        assert!(Mixture::new(&[1, 2], &[1.0, -1.0], None, 0).is_err());
        assert!(Mixture::new(&[1, 2], &[f64::NAN, 1.0], None, 0).is_err());
        assert!(Mixture::new(&[1, 2], &[0.0, 0.0], None, 0).is_err());
        assert!(Mixture::new(&[1, 2], &[1.0, 1.0], Some(0), 0).is_err());
        let m = Mixture::new(&[1, 2], &[1.0, 1.0], Some(10), 0).unwrap();
        assert!(m.at(10).is_err());
        assert!(m.fill(5, &mut [0; 6], &mut [0; 6]).is_err());
        assert!(m.locate(2, 0).is_err() && m.locate(1, 2).is_err());
        // locate is exactly the positions holding the sample (brute force over all ten).
        let holding: Vec<u64> = (0..10).filter(|&p| m.at(p).unwrap() == (0, 0)).collect();
        assert_eq!(m.locate(0, 0).unwrap(), holding);
        assert_eq!(holding.len(), 5); // source 0 has one sample and half the positions
    }

    fn schedule() -> Mixture {
        let stages = vec![
            (0u64, vec![0.7, 0.2, 0.1]),
            (250, vec![0.0, 0.5, 0.5]),
            (400, vec![0.1, 0.1, 0.8]),
        ];
        Mixture::scheduled(&[9, 13, 5], &stages, Some(700), 4).unwrap()
    }

    #[test]
    fn a_schedule_fills_random_positions_as_one_at_a_time() {
        for m in [schedule(), schedule().with_version(Version::V2)] {
            // Every stage, in any order, repeats included.
            let positions: Vec<u64> = (0..1_000u64).map(|k| (k * 389 + 7) % 700).collect();
            let (mut sources, mut indices) = (vec![0u64; 1_000], vec![0u64; 1_000]);
            m.fill_at(&positions, &mut sources, &mut indices).unwrap();
            for (k, &p) in positions.iter().enumerate() {
                let (s, i) = m.at(p).unwrap();
                assert_eq!((sources[k], indices[k]), (s as u64, i), "position {p}");
            }
        }
    }

    #[test]
    fn a_schedule_keeps_the_proportions_within_each_stage_and_continues_passes() {
        let m = schedule();
        let (mut sources, mut indices) = (vec![0u64; 700], vec![0u64; 700]);
        m.fill(0, &mut sources, &mut indices).unwrap();
        let stages = [
            (0usize, 250usize, [0.7, 0.2, 0.1]),
            (250, 400, [0.0, 0.5, 0.5]),
            (400, 700, [0.1, 0.1, 0.8]),
        ];
        for (start, end, weights) in stages {
            let mut running = [0f64; 3];
            for p in start..end {
                running[sources[p] as usize] += 1.0;
                for s in 0..3 {
                    let want = weights[s] * (p + 1 - start) as f64;
                    assert!(
                        (running[s] - want).abs() <= 2.0,
                        "stage at {start}, p={p}, s={s}"
                    );
                }
            }
        }
        for p in 0..700u64 {
            assert_eq!(
                m.at(p).unwrap(),
                (sources[p as usize] as usize, indices[p as usize])
            );
            if p % 50 == 0 {
                let mut want = vec![0u64; 3];
                sources[..p as usize]
                    .iter()
                    .for_each(|&s| want[s as usize] += 1);
                assert_eq!(m.counts(p), want, "counts({p})");
            }
        }
        // Passes continue across stages: every full pass over a source is a permutation.
        for s in 0..3u64 {
            let size = m.sizes()[s as usize] as usize;
            let stream: Vec<u64> = (0..700)
                .filter(|&p| sources[p] == s)
                .map(|p| indices[p])
                .collect();
            for pass in stream.chunks(size).filter(|c| c.len() == size) {
                let mut sorted = pass.to_vec();
                sorted.sort();
                assert_eq!(sorted, (0..size as u64).collect::<Vec<_>>(), "source {s}");
            }
        }
        // A fill across stage boundaries from anywhere, and locate.
        for start in [1u64, 249, 250, 399, 401] {
            let len = (700 - start) as usize;
            let (mut s2, mut i2) = (vec![0u64; len], vec![0u64; len]);
            m.fill(start, &mut s2, &mut i2).unwrap();
            assert_eq!(
                (s2.as_slice(), i2.as_slice()),
                (&sources[start as usize..], &indices[start as usize..])
            );
        }
        for s in 0..3usize {
            for i in 0..m.sizes()[s] {
                let want: Vec<u64> = (0..700).filter(|&p| m.at(p).unwrap() == (s, i)).collect();
                assert_eq!(m.locate(s, i).unwrap(), want, "source {s} index {i}");
            }
        }
    }

    #[test]
    fn bad_schedules_are_refused() {
        let w = vec![1.0, 1.0];
        assert!(Mixture::scheduled(&[5, 5], &[], None, 0).is_err());
        assert!(Mixture::scheduled(&[5, 5], &[(1, w.clone())], None, 0).is_err());
        assert!(Mixture::scheduled(&[5, 5], &[(0, w.clone()), (0, w.clone())], None, 0).is_err());
        assert!(Mixture::scheduled(&[5, 5], &[(0, w.clone()), (3, vec![1.0])], None, 0).is_err());
        let m =
            Mixture::scheduled(&[5, 5], &[(0, w.clone()), (4, vec![0.0, 1.0])], None, 0).unwrap();
        // The longest schedule without repeats: source 1 runs out first.
        assert!(m.counts(m.num_samples()).iter().all(|&c| c <= 5));
        assert!(m.counts(m.num_samples() + 1).iter().any(|&c| c > 5));
    }
}
