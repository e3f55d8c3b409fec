//! The orders: keyed permutations (perm-v1, perm-v2), the block order, an epoch's order of
//! samples with or without exclusions, weighted draws and mixtures of sources.

pub(crate) mod block;
pub(crate) mod exclusion;
pub(crate) mod mixture;
pub(crate) mod order;
pub(crate) mod permutation;
pub(crate) mod splitmix;
pub(crate) mod weighted;
