//! The proofs: exact by the inverse and by a bitmap, the distributed fingerprint, and the
//! verdict each gives.

pub(crate) mod bitmap_proof;
pub(crate) mod coverage;
pub(crate) mod fingerprint;
pub(crate) mod inverse_proof;
pub(crate) mod verdict;
