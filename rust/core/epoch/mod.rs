//! The epoch: its fields and the order they imply (with the algorithm ids), how a pass's
//! positions are dealt to ranks, the partition at a resume point, the ranks' layout, and
//! what a state dict of an epoch holds.

pub(crate) mod algorithm;
pub(crate) mod dealing;
mod fields;
pub(crate) mod partition;
pub(crate) mod rank_layout;
pub(crate) mod sharding;
mod spec;
pub(crate) mod state;

pub use fields::{
    fields_of, Field, FieldDefault, FieldKind, BUDGET_FIELDS, EPOCH_FIELDS, SHARD_FIELDS,
};
pub use spec::EpochSpec;
