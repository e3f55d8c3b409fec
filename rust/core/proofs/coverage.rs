//! The distributed coverage proof: every rank fingerprints what it yields and a 1/W slice
//! of the positions outside the pass; the fingerprints, added up across ranks, must be
//! the fingerprint of `[0, n)`. O((n + start) / W) time and O(1) memory per rank.

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::partition::Partition;
use crate::pool::CHUNK;
use crate::verdict::Verdict;

/// One rank's part of the coverage proof. Summed over the ranks of a pass,
/// `yielded + consumed + dropped` equals `reference` exactly when every sample of `[0, n)`
/// is yielded once in this pass, consumed before it (a resume) or declared dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoverageShare {
    /// The samples this rank yields at positions below `n`.
    pub yielded: Fingerprint,
    /// The samples this rank yields at padding positions (`>= n`).
    pub padding: Fingerprint,
    /// Its 1/W slice of the samples consumed before this pass (positions `[0, start)`).
    pub consumed: Fingerprint,
    /// Its 1/W slice of the samples no rank yields (`drop_last`, positions `[end, n)`).
    pub dropped: Fingerprint,
    /// Its 1/W slice of the ids `[0, n)`.
    pub reference: Fingerprint,
}

impl CoverageShare {
    /// Words of [`CoverageShare::to_words`]: what ranks exchange, one record each.
    pub const WORDS: usize = 5 * Fingerprint::WORDS;

    /// What `rank` contributes to the coverage proof of `part`.
    pub fn of_rank(part: &Partition, rank: u64) -> Result<CoverageShare, Error> {
        part.check_slice(rank, 0, 0)?;
        let (mut yielded, mut padding) = (Fingerprint::default(), Fingerprint::default());
        let first_padding = part.first_padding(rank)?;
        let per_rank = part.num_samples();
        let mut buf = vec![0u64; CHUNK.min(per_rank) as usize];
        let mut local = 0;
        while local < per_rank {
            let len = (buf.len() as u64).min(per_rank - local);
            let items = &mut buf[..len as usize];
            part.fill_rank(rank, local, items)?;
            // Items before first_padding sit below n; the rest repeat samples.
            let real = first_padding.saturating_sub(local).min(len) as usize;
            yielded.add_all(&items[..real]);
            padding.add_all(&items[real..]);
            local += len;
        }
        let w = part.num_replicas();
        let (consumed, dropped) = outside_fingerprints(part, rank, w);
        // This rank's slice of the sample ids, less the excluded ones among them.
        let n = part.order().domain();
        let cut = |r: u64| ((n as u128 * r as u128) / w as u128) as u64;
        let (lo, hi) = (cut(rank), cut(rank + 1));
        let mut reference = Fingerprint::of_range(lo, hi);
        for &id in part.order().excluded() {
            if (lo..hi).contains(&id) {
                reference.remove(id);
            }
        }
        Ok(CoverageShare {
            yielded,
            padding,
            consumed,
            dropped,
            reference,
        })
    }

    /// The shares of disjoint ranks added up.
    pub fn merge(&self, other: &CoverageShare) -> CoverageShare {
        CoverageShare {
            yielded: self.yielded.merge(&other.yielded),
            padding: self.padding.merge(&other.padding),
            consumed: self.consumed.merge(&other.consumed),
            dropped: self.dropped.merge(&other.dropped),
            reference: self.reference.merge(&other.reference),
        }
    }

    /// Items the rank yields (its fingerprints' counts).
    pub fn items(&self) -> u64 {
        self.yielded.count.wrapping_add(self.padding.count)
    }

    /// This share as a fixed-size record of words.
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        let mut w = [0u64; Self::WORDS];
        let parts = [
            self.yielded,
            self.padding,
            self.consumed,
            self.dropped,
            self.reference,
        ];
        for (chunk, f) in w.chunks_mut(Fingerprint::WORDS).zip(parts) {
            chunk.copy_from_slice(&f.to_words());
        }
        w
    }

    /// The share a record of [`CoverageShare::to_words`] holds.
    pub fn from_words(w: &[u64]) -> Result<CoverageShare, Error> {
        if w.len() != Self::WORDS {
            return Err(Error::Invalid(format!(
                "a coverage share is {} words, got {}",
                Self::WORDS,
                w.len()
            )));
        }
        let f = |i: usize| Fingerprint::from_words(&w[i * Fingerprint::WORDS..]);
        Ok(CoverageShare {
            yielded: f(0),
            padding: f(1),
            consumed: f(2),
            dropped: f(3),
            reference: f(4),
        })
    }
}

/// Fingerprints of `rank`'s 1/W slice of the positions outside the pass: those consumed
/// before it, and those dropped.
fn outside_fingerprints(part: &Partition, rank: u64, w: u64) -> (Fingerprint, Fingerprint) {
    let outside = part.outside();
    let (lo, hi) = outside.slice(&(rank..rank + 1), w);
    let (mut consumed, mut dropped) = (Fingerprint::default(), Fingerprint::default());
    let mut buf = vec![0u64; CHUNK.min(hi - lo) as usize];
    let mut i = lo;
    while i < hi {
        let len = (buf.len() as u64).min(hi - i);
        let samples = &mut buf[..len as usize];
        for (k, slot) in samples.iter_mut().enumerate() {
            *slot = outside.position(i + k as u64);
        }
        part.samples_of(samples);
        // Numbers below `consumed()` are the consumed positions, the rest dropped ones.
        let split = outside.consumed().saturating_sub(i).min(len) as usize;
        consumed.add_all(&samples[..split]);
        dropped.add_all(&samples[split..]);
        i += len;
    }
    (consumed, dropped)
}

/// Judges the shares of every rank of `part`, in rank order: each rank yields the pass's
/// length, and together they yield every sample of `[0, n)` once, but for those consumed
/// before the pass and those dropped — up to a 2^-64-scale chance, the fingerprint's.
pub fn judge_coverage(part: &Partition, shares: &[CoverageShare]) -> Result<Verdict, Error> {
    let w = part.num_replicas();
    if shares.len() as u64 != w {
        return Err(Error::Violation(format!(
            "{} ranks sent a coverage share, the pass has {w}: every rank must take part",
            shares.len()
        )));
    }
    for (r, share) in shares.iter().enumerate() {
        if share.items() != part.num_samples() {
            return Err(Error::Violation(format!(
                "rank {r} yields {} samples in this pass, the pass deals {} to each; DDP \
                 would hang on the last step. Use the same dataset and num_replicas everywhere",
                share.items(),
                part.num_samples()
            )));
        }
    }
    let total = shares
        .iter()
        .fold(CoverageShare::default(), |t, s| t.merge(s));
    let all = total.yielded.merge(&total.consumed).merge(&total.dropped);
    if all != total.reference {
        return Err(Error::Violation(format!(
            "coverage fingerprint mismatch: the ranks together yield {} samples (+{} consumed \
             before the pass, +{} dropped), but not each of [0, {}) exactly once: some sample \
             is repeated and another missing although every rank announced the same \
             configuration. Check that every rank runs the same permshard build and sampler \
             class",
            total.yielded.count,
            total.consumed.count,
            total.dropped.count,
            part.n()
        )));
    }
    Ok(Verdict {
        start: part.start(),
        lengths: vec![part.num_samples(); w as usize],
        batches: None,
        covered: total.yielded.count,
        padding: total.padding.count,
        dropped: total.dropped.count,
        consumed: total.consumed.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;
    use crate::order::{Explicit, Identity, Order};
    use crate::permutation::Permutation;
    use std::sync::Arc;

    fn shuffled(version: Version, n: u64) -> Order {
        Arc::new(Permutation::new(version, n, 1, 0).unwrap())
    }

    fn shares(part: &Partition) -> Vec<CoverageShare> {
        (0..part.num_replicas())
            .map(|r| CoverageShare::of_rank(part, r).unwrap())
            .collect()
    }

    #[test]
    fn shares_add_up_after_any_resume_and_agree_with_the_exact_proof() {
        for version in Version::ALL {
            for (n, w, drop_last) in [(23, 5, false), (23, 5, true), (7, 9, false), (64, 4, true)] {
                for start in 0..=n + 2 {
                    let part =
                        Partition::new(n, w, start, drop_last, shuffled(version, n)).unwrap();
                    let shares = shares(&part);
                    let total = shares
                        .iter()
                        .fold(CoverageShare::default(), |t, s| t.merge(s));
                    assert_eq!(total.reference, Fingerprint::of_range(0, n));
                    for s in &shares {
                        assert_eq!(CoverageShare::from_words(&s.to_words()).unwrap(), *s);
                    }
                    let exact = crate::verify_inverse(&part, 1, &Default::default()).unwrap();
                    assert_eq!(
                        judge_coverage(&part, &shares).unwrap(),
                        exact,
                        "n={n} w={w} start={start}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_repeat_a_short_rank_or_a_missing_rank_fails() {
        // Sample 2 twice, sample 1 never.
        let order: Order = Arc::new(Explicit::new(vec![0, 2, 3, 2, 4]).unwrap());
        let part = Partition::new(5, 2, 0, false, order).unwrap();
        let e = judge_coverage(&part, &shares(&part)).unwrap_err();
        assert!(e.to_string().contains("fingerprint mismatch"), "{e}");
        let part = Partition::new(10, 2, 4, false, Arc::new(Identity::new(10).unwrap())).unwrap();
        let mut s = shares(&part);
        s[1].padding.add(0);
        let e = judge_coverage(&part, &s).unwrap_err().to_string();
        assert!(
            e.contains("rank 1 yields 4 samples in this pass, the pass deals 3"),
            "{e}"
        );
        let e = judge_coverage(&part, &s[..1]).unwrap_err().to_string();
        assert!(
            e.contains("1 ranks sent a coverage share, the pass has 2"),
            "{e}"
        );
        assert!(CoverageShare::from_words(&[0; 3]).is_err());
    }
}
