//! A pass in time: one interface for every dealing's pass, the chunks a rank reads, the
//! token budget's batches, and the one work pool.

pub(crate) mod budget;
pub(crate) mod pass_plan;
pub(crate) mod plan;
pub(crate) mod pool;
