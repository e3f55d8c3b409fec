//! [`Verdict`]: what an exact proof established, whichever the proof and the dealing.

use crate::partition::Partition;

/// What an exact proof established about a pass: the counts a certificate reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Global positions consumed before the proven pass (a resume point; `0`: a whole epoch).
    pub start: u64,
    /// Items each rank yields in the pass, padding included.
    pub lengths: Vec<u64>,
    /// Batches per rank, the same on every rank, for a dealing that plans its batches.
    pub batches: Option<u64>,
    /// Distinct samples yielded, all ranks together.
    pub covered: u64,
    /// Items that repeat a sample to make ranks even.
    pub padding: u64,
    /// Samples of the epoch no rank yields (`drop_last`), beside those consumed before.
    pub dropped: u64,
    /// Samples consumed before the pass, which it must not yield again.
    pub consumed: u64,
}

impl Verdict {
    /// The verdict on `part` of a proof that found `covered` distinct samples, `padding`
    /// repeats and `not_yielded` samples of `[0, n)` outside the pass.
    pub fn of_pass(part: &Partition, covered: u64, padding: u64, not_yielded: u64) -> Verdict {
        let consumed = part.start().min(part.n());
        Verdict {
            start: part.start(),
            lengths: vec![part.num_samples(); part.num_replicas() as usize],
            batches: None,
            covered,
            padding,
            dropped: not_yielded - consumed,
            consumed,
        }
    }
}
