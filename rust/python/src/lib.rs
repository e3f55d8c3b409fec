//! `permshard._core`: the native module. Only conversions and error mapping live here;
//! everything else is in `permshard-core` (Rust) or `permshard` (Python).

use pyo3::prelude::*;

mod block;
mod budget;
mod budget_pass;
mod budget_run;
mod convert;
mod errors;
mod exclusion;
mod fields;
mod gather;
mod indexed;
mod iterable;
mod mixture;
mod partition;
mod permutation;
mod rank_pass;
mod run;
mod sharding;
mod state;
mod verify;
mod weighted;

#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use super::block::BlockPermutation;
    #[pymodule_export]
    use super::budget::{BudgetEpoch, PyBudgetStart, PyWindowPlan, TokenBudget};
    #[pymodule_export]
    use super::budget_pass::{PyBudgetBatches, PyBudgetPass, PyBudgetShare};
    #[pymodule_export]
    use super::budget_run::{BudgetIndex, BudgetRun};
    #[pymodule_export]
    use super::errors::ShardingError;
    #[pymodule_export]
    use super::exclusion::Exclusions;
    #[pymodule_export]
    use super::fields::fields;
    #[pymodule_export]
    use super::gather::{gather_records, gather_windows, PyRecordsAhead};
    #[pymodule_export]
    use super::indexed::{check_document_indices, check_sequence_layout};
    #[pymodule_export]
    use super::iterable::{check_layers, fresh_spread, Consumer, Layer};
    #[pymodule_export]
    use super::mixture::Mixture;
    #[pymodule_export]
    use super::partition::Partition;
    #[pymodule_export]
    use super::permutation::{simd_level, Permutation};
    #[pymodule_export]
    use super::rank_pass::RankPass;
    #[pymodule_export]
    use super::run::{Audit, Read, Run};
    #[pymodule_export]
    use super::sharding::Sharding;
    #[pymodule_export]
    use super::verify::{
        check_rank_layout, Progress, PyCoverageShare, PyFailure, PyShare, PyVerdict,
    };
    #[pymodule_export]
    use super::weighted::{EpochDraws, Weights};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("ALGORITHM", permshard_core::ALGORITHM)?;
        m.add("ALGORITHM_V1", permshard_core::ALGORITHM_V1)?;
        m.add("ALGORITHM_V2", permshard_core::ALGORITHM_V2)?;
        m.add("MIX_ALGORITHM", permshard_core::MIX_ALGORITHM)?;
        m.add("BLOCK_ALGORITHM", permshard_core::BLOCK_ALGORITHM)?;
        m.add("BUDGET_ALGORITHM", permshard_core::BUDGET_ALGORITHM)?;
        m.add("IDENTITY_ALGORITHM", permshard_core::IDENTITY_ALGORITHM)?;
        m.add("COMMITTED_ALGORITHM", permshard_core::COMMITTED_ALGORITHM)?;
        m.add(
            "COMMITTED_PERMUTATION",
            permshard_core::COMMITTED_PERMUTATION,
        )?;
        m.add("KINDS", permshard_core::KINDS.to_vec())?;
        m.add("MAX_CHUNK", permshard_core::MAX_CHUNK)?;
        m.add("WEIGHTED_ALGORITHM", permshard_core::WEIGHTED_ALGORITHM)?;
        Ok(())
    }
}
