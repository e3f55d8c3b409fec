//! Every way a call into the core can be refused.

use std::fmt;

/// A refused argument or a failed proof. `Display` names the bad value and the valid range.
///
/// Only [`Error::Violation`] means a proof failed; every other variant is an argument the
/// call cannot accept, so a binding maps the two kinds to different exceptions without
/// checking anything itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// `n` must be in `[1, 2^64 - 1]`.
    EmptyDomain,
    /// A position or a sample id outside `[0, n)`.
    OutOfRange {
        /// `"position"` or `"sample"`.
        what: &'static str,
        /// The refused value.
        value: u64,
        /// The domain size.
        n: u64,
    },
    /// A slice `[start, start + len)` that does not fit in `[0, n)`.
    SliceOutOfRange {
        /// First position of the slice.
        start: u64,
        /// Its length.
        len: u64,
        /// The domain size.
        n: u64,
    },
    /// `num_replicas` must be at least 1.
    InvalidReplicas {
        /// The refused value.
        num_replicas: u64,
    },
    /// `rank` must be in `[0, num_replicas)`.
    InvalidRank {
        /// The refused rank.
        rank: u64,
        /// The number of ranks.
        num_replicas: u64,
    },
    /// A range `[start, stop)` with `stop < start` or past its limit.
    InvalidRange {
        /// First position of the range.
        start: u64,
        /// One past its last position.
        stop: u64,
        /// The largest `stop` allowed.
        limit: u64,
    },
    /// A rank's local slice `[start, start + len)` past its `num_samples`.
    LocalOutOfRange {
        /// The rank.
        rank: u64,
        /// First local item of the slice.
        start: u64,
        /// Its length.
        len: u64,
        /// Items the rank has.
        num_samples: u64,
    },
    /// A sample that is excluded from the epoch (it has no position).
    Excluded {
        /// The sample.
        sample: u64,
    },
    /// An index into a sequence (a record, a window) outside `[-len, len)`.
    IndexOutOfRange {
        /// `"row"` or `"window"`.
        what: &'static str,
        /// The refused index.
        index: i64,
        /// The sequence's length.
        len: u64,
    },
    /// Any other argument the call cannot accept; the message names the value and the fix.
    Invalid(String),
    /// A value of the wrong type (a state dict's `1.5` for an integer); the message names
    /// it and the fix.
    WrongType(String),
    /// Memory for `bytes` bytes could not be had (e.g. the proof's bitmap for a huge `n`).
    OutOfMemory {
        /// Bytes asked for.
        bytes: u128,
        /// What they were for.
        what: &'static str,
    },
    /// The exact proof found a counter-example.
    Violation(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyDomain => write!(f, "n must be in [1, 2**64 - 1], got 0"),
            Error::OutOfRange { what, value, n } => {
                write!(
                    f,
                    "{what} {value} is out of range: expected 0 <= {what} < {n}"
                )
            }
            Error::SliceOutOfRange { start, len, n } => write!(
                f,
                "slice [{start}, {start} + {len}) does not fit in [0, {n}); \
                 pass 0 <= start <= stop <= {n}"
            ),
            Error::InvalidRange { start, stop, limit } => write!(
                f,
                "invalid range [{start}, {stop}): expected 0 <= start <= stop <= {limit}"
            ),
            Error::InvalidReplicas { num_replicas } => write!(
                f,
                "Invalid num_replicas {num_replicas}, num_replicas should be at least 1"
            ),
            Error::InvalidRank { rank, num_replicas } => write!(
                f,
                "Invalid rank {rank}, rank should be in the interval [0, {}]",
                num_replicas.saturating_sub(1)
            ),
            Error::LocalOutOfRange {
                rank,
                start,
                len,
                num_samples,
            } => write!(
                f,
                "rank {rank} has {num_samples} samples; local slice [{start}, {start} + {len}) \
                 is past its end"
            ),
            Error::OutOfMemory { bytes, what } => write!(
                f,
                "cannot allocate {bytes} bytes for {what}; prove by the inverse instead \
                 (O(1) memory at any n, and split across the ranks)"
            ),
            Error::IndexOutOfRange { what, index, len } => write!(
                f,
                "{what} index {index} out of range for {len} {what}s: expected -{len} <= index < {len}"
            ),
            Error::Excluded { sample } => write!(f, "sample {sample} is excluded from the epoch"),
            Error::Invalid(msg) | Error::WrongType(msg) | Error::Violation(msg) => f.write_str(msg),
        }
    }
}

/// `Ok` when `value < n`, else [`Error::OutOfRange`] naming `what` (`"position"`, ...).
pub fn check_below(what: &'static str, value: u64, n: u64) -> Result<(), Error> {
    if value >= n {
        return Err(Error::OutOfRange { what, value, n });
    }
    Ok(())
}

/// The length of the range `[start, stop)`, which must lie in `[0, limit]`.
pub fn range_len(start: u64, stop: u64, limit: u64) -> Result<u64, Error> {
    if stop < start || stop > limit {
        return Err(Error::InvalidRange { start, stop, limit });
    }
    Ok(stop - start)
}

impl Error {
    /// Whether this error is a failed proof (not a refused argument).
    pub fn is_violation(&self) -> bool {
        matches!(self, Error::Violation(_))
    }
}

impl std::error::Error for Error {}
