//! Reading data: batches gathered out of memory maps (and ahead of the loop), Megatron
//! `.idx` checks, and iterables dealt to ranks and DataLoader workers.

pub(crate) mod gather;
pub(crate) mod gather_ahead;
pub(crate) mod indexed;
pub(crate) mod iterable;
