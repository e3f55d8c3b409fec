//! The exact proof of a mixture's passes, by the inverse (what `locate` computes).
//!
//! Position `p` reads occurrence `o` of source `s` (the tree), which is sample
//! `π_{s,j}(o mod size)` of pass `j = o div size`. The proof inverts both maps: the pass's
//! permutation back to the offset, the tree back from `(s, o)` to the position. When every
//! position of a range comes back to itself, position → (source, pass, sample) is
//! injective there; with each source's occurrences inside `[counts(start), counts(stop))`,
//! every pass wholly inside the range holds each sample of its source exactly once.
//! O(1) memory (a chunk) at any number of positions.

use super::cursor::Cursor;
use super::Mixture;
use crate::error::{range_len, Error};
use crate::permutation::Permutation;
use crate::pool::CHUNK;

/// What a mixture proof checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MixtureProof {
    /// Positions proven.
    pub positions: u64,
    /// Of them, per source.
    pub per_source: Vec<u64>,
    /// Per source: its passes whose every occurrence was proven.
    pub complete_passes: Vec<u64>,
}

/// What the forward maps give for consecutive or scattered positions.
#[derive(Clone, Debug, Default)]
struct Reads {
    positions: Vec<u64>,
    sources: Vec<u64>,
    occurrences: Vec<u64>,
    samples: Vec<u64>,
}

impl Mixture {
    /// Proves positions `[start, stop)`: each comes back to itself through the pass's
    /// inverse and the tree's, and each source's occurrences there are those `counts`
    /// gives. O(stop - start) time, O(1) memory.
    pub fn prove_range(&self, start: u64, stop: u64) -> Result<MixtureProof, Error> {
        range_len(start, stop, self.num_samples)?;
        let (first, last) = (self.counts(start), self.counts(stop));
        let mut proof = self.empty_proof();
        let mut cursor = Cursor::new(self, start);
        let mut reads = Reads::default();
        let mut lo = start;
        while lo < stop {
            let len = CHUNK.min(stop - lo);
            reads.positions.clear();
            reads.positions.extend(lo..lo + len);
            reads.sources.clear();
            reads.occurrences.clear();
            for _ in 0..len {
                let (s, o) = cursor.next_position();
                reads.sources.push(s as u64);
                reads.occurrences.push(o);
            }
            self.read_samples(&mut reads);
            self.check_reads(&reads, &first, &last, &mut proof)?;
            lo += len;
        }
        for (s, (&count, (&a, &b))) in proof
            .per_source
            .iter()
            .zip(first.iter().zip(&last))
            .enumerate()
        {
            if count != b - a {
                return Err(Error::Violation(format!(
                    "source {s} is read at {count} positions of [{start}, {stop}), its counts say {}",
                    b - a
                )));
            }
        }
        for (s, passes) in proof.complete_passes.iter_mut().enumerate() {
            let size = self.sizes[s];
            *passes = (last[s] / size).saturating_sub(first[s].div_ceil(size));
        }
        Ok(proof)
    }

    /// Proves pass `pass` of source `source` wherever it lies among the positions: each
    /// occurrence's position (the tree's inverse), strictly increasing, reads that
    /// occurrence back, and its sample comes back to its offset through the pass's
    /// inverse. A complete pass is then a permutation of the source. O(size) time.
    pub fn prove_pass(&self, source: usize, pass: u64) -> Result<MixtureProof, Error> {
        let size = *self.sizes.get(source).ok_or_else(|| {
            Error::Invalid(format!(
                "source {source} does not exist: there are {} sources",
                self.sizes.len()
            ))
        })?;
        let taken = self.counts(self.num_samples)[source];
        let begin = pass.saturating_mul(size);
        if begin >= taken {
            return Err(Error::Invalid(format!(
                "source {source} is read {taken} times: pass {pass} is never reached (passes \
                 0 to {})",
                taken.saturating_sub(1) / size
            )));
        }
        let end = begin.saturating_add(size).min(taken);
        let (first, last) = (vec![0; self.sizes.len()], self.counts(self.num_samples));
        let mut proof = self.empty_proof();
        let mut reads = Reads::default();
        let mut previous = None;
        let mut lo = begin;
        while lo < end {
            let len = CHUNK.min(end - lo);
            reads.positions.clear();
            reads.sources.clear();
            reads.occurrences.clear();
            for o in lo..lo + len {
                let p = self.position_of(source, o);
                if previous.is_some_and(|q| p <= q) {
                    return Err(Error::Violation(format!(
                        "occurrence {o} of source {source} sits at position {p}, not after the \
                         previous one's ({})",
                        previous.unwrap_or(0)
                    )));
                }
                previous = Some(p);
                let (s, occurrence) = self.occurrence(p);
                reads.positions.push(p);
                reads.sources.push(s as u64);
                reads.occurrences.push(occurrence);
                if (s, occurrence) != (source, o) {
                    return Err(Error::Violation(format!(
                        "occurrence {o} of source {source} sits at position {p}, which reads \
                         occurrence {occurrence} of source {s}"
                    )));
                }
            }
            self.read_samples(&mut reads);
            self.check_reads(&reads, &first, &last, &mut proof)?;
            lo += len;
        }
        proof.complete_passes[source] = u64::from(end - begin == size);
        Ok(proof)
    }

    fn empty_proof(&self) -> MixtureProof {
        MixtureProof {
            positions: 0,
            per_source: vec![0; self.sizes.len()],
            complete_passes: vec![0; self.sizes.len()],
        }
    }

    /// The samples of `reads`' occurrences (the forward map under proof).
    fn read_samples(&self, reads: &mut Reads) {
        reads.samples.clear();
        reads.samples.extend_from_slice(&reads.occurrences);
        self.map_occurrences(&reads.sources, &mut reads.samples);
    }

    /// The inverse checks of `reads`: each occurrence within `[first[s], last[s])`, back at
    /// its position through the tree, its sample in the source and back at its offset
    /// through the pass's permutation.
    fn check_reads(
        &self,
        reads: &Reads,
        first: &[u64],
        last: &[u64],
        proof: &mut MixtureProof,
    ) -> Result<(), Error> {
        let size = |s: u64| self.sizes[s as usize];
        let passes: Vec<u64> = reads
            .sources
            .iter()
            .zip(&reads.occurrences)
            .map(|(&s, &o)| o / size(s))
            .collect();
        let mut offsets = reads.samples.clone();
        for (k, (&s, &x)) in reads.sources.iter().zip(&reads.samples).enumerate() {
            if x >= size(s) {
                return Err(Error::Violation(format!(
                    "position {} reads sample {x} of source {s}, which has {} samples",
                    reads.positions[k],
                    size(s)
                )));
            }
        }
        let invert = |order: &Permutation, values: &mut [u64]| order.invert_in_place(values);
        self.per_pass(&reads.sources, &passes, &mut offsets, invert, None);
        for k in 0..reads.positions.len() {
            let (p, s, o) = (reads.positions[k], reads.sources[k], reads.occurrences[k]);
            let su = s as usize;
            if o < first[su] || o >= last[su] {
                return Err(Error::Violation(format!(
                    "position {p} reads occurrence {o} of source {s}, outside the [{}, {}) \
                     its counts give",
                    first[su], last[su]
                )));
            }
            let back = self.position_of(su, o);
            if back != p {
                return Err(Error::Violation(format!(
                    "position {p} reads occurrence {o} of source {s}, which sits at position {back}"
                )));
            }
            if offsets[k] != o % size(s) {
                return Err(Error::Violation(format!(
                    "position {p} reads sample {} of source {s} in pass {}, whose inverse is \
                     offset {}, not {}: the pass repeats a sample",
                    reads.samples[k],
                    passes[k],
                    offsets[k],
                    o % size(s)
                )));
            }
            proof.per_source[su] += 1;
        }
        proof.positions += reads.positions.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permutation::Version;

    /// Three sources, one of a single sample (a pass a position), a stage change at a
    /// quarter of the `n` positions.
    fn mixture_of(version: Version, n: u64) -> Mixture {
        let stages = vec![(0, vec![3.0, 1.0, 0.5]), (n / 4, vec![1.0, 1.0, 1.0])];
        (Mixture::scheduled(&[700, 45, 1], &stages, Some(n), 11).unwrap()).with_version(version)
    }

    fn mixture() -> Mixture {
        mixture_of(Version::V1, 20_000)
    }

    #[test]
    fn ranges_and_passes_are_proven() {
        // mix-v1 on fewer positions: its order of a 1-sample source walks 2^16 steps a
        // position (the order of a frozen id); the proof is the same code for both.
        for m in [
            mixture_of(Version::V2, 20_000),
            mixture_of(Version::V1, 3000),
        ] {
            let n = m.num_samples();
            let whole = m.prove_range(0, n).unwrap();
            assert_eq!(whole.positions, n);
            assert_eq!(whole.per_source, m.counts(n));
            let passes: Vec<u64> = (m.counts(n).iter().zip(m.sizes()))
                .map(|(c, s)| c / s)
                .collect();
            assert_eq!(whole.complete_passes, passes);
            // Any range: the passes wholly inside it.
            let part = m.prove_range(n / 6, n - n / 7).unwrap();
            assert_eq!(part.positions, n - n / 7 - n / 6);
            for s in 0..3 {
                let last_complete = m.counts(n)[s] / m.sizes()[s] - 1;
                let pass = m.prove_pass(s, last_complete).unwrap();
                assert_eq!(pass.per_source[s], m.sizes()[s]);
                assert_eq!(pass.complete_passes[s], 1);
            }
            // The last pass of source 0 is cut short by the end of the mixture.
            let last = (m.counts(n)[0] - 1) / 700;
            assert!(m.counts(n)[0] % 700 != 0);
            let partial = m.prove_pass(0, last).unwrap();
            assert_eq!(
                (partial.per_source[0], partial.complete_passes[0]),
                (m.counts(n)[0] % 700, 0)
            );
            assert!(m
                .prove_pass(0, last + 1)
                .unwrap_err()
                .to_string()
                .contains("never reached"));
            assert!(m.prove_pass(3, 0).is_err());
        }
    }

    #[test]
    fn the_inverse_checks_catch_broken_reads() {
        let m = mixture();
        let (first, last) = (m.counts(0), m.counts(2000));
        let mut reads = Reads::default();
        let mut cursor = Cursor::new(&m, 0);
        for p in 0..2000 {
            let (s, o) = cursor.next_position();
            reads.positions.push(p);
            reads.sources.push(s as u64);
            reads.occurrences.push(o);
        }
        m.read_samples(&mut reads);
        let check = |r: &Reads| {
            let mut proof = m.empty_proof();
            m.check_reads(r, &first, &last, &mut proof)
                .map(|_| proof.positions)
        };
        assert_eq!(check(&reads), Ok(2000));
        let source0: Vec<usize> = (0..2000).filter(|&k| reads.sources[k] == 0).collect();
        let (a, b) = (source0[0], source0[1]);

        let mut repeat = reads.clone();
        repeat.samples[b] = repeat.samples[a]; // a pass reading one sample twice
        assert!(check(&repeat)
            .unwrap_err()
            .to_string()
            .contains("the pass repeats a sample"));
        let mut moved = reads.clone();
        moved.occurrences[a] = moved.occurrences[b]; // two positions claiming one occurrence
        assert!(check(&moved)
            .unwrap_err()
            .to_string()
            .contains("which sits at position"));
        let mut outside = reads.clone();
        outside.occurrences[a] = last[0];
        assert!(check(&outside)
            .unwrap_err()
            .to_string()
            .contains("its counts give"));
        let mut foreign = reads.clone();
        foreign.samples[a] = 700;
        assert!(check(&foreign)
            .unwrap_err()
            .to_string()
            .contains("which has 700 samples"));
    }
}
