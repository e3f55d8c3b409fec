//! permshard-core: keyed pseudo-random permutations of `[0, N)` in O(1) memory and
//! the exact arithmetic of splitting them across data-parallel ranks.
//!
//! This crate knows nothing of Python; `rust/python` binds it.
//!
//! * [`Permutation`] — perm-v1 and perm-v2 ([`Version`]): `forward`, `inverse`, batched
//!   `fill`; [`simd_level`] names the SIMD level in use (`PERMSHARD_SIMD` forces one).
//! * [`SampleOrder`] — the order of an epoch (perm-v1, identity, explicit): position ↔ sample.
//! * [`BlockPermutation`] — block-v1: blocks permuted, samples shuffled within windows of
//!   blocks (locality for datasets bigger than RAM).
//! * [`EpochSpec`] — the fields every epoch has (samples, ranks, seed, epoch, shuffle,
//!   `drop_last`, the permutation), whichever sampler deals it; [`fields_of`] — the table
//!   of every family's fields (name, kind, default, help, flags), which the Python
//!   configurations and the command line are built from.
//! * [`Sharding`] — what an epoch is: the fields, the order they imply and its algorithm
//!   id, the dealing, the partition at a resume point, the resume limit.
//! * [`Value`], [`BudgetEpoch`] — what a state dict of an epoch holds ([`SHARD`],
//!   [`BUDGET`], and a weighted stream's [`DRAWS`]): written, read back checked, and
//!   migrated from earlier releases.
//! * [`Dealing`] — how a pass's positions go to (rank, local index): round-robin, step.
//! * [`Partition`] — which global positions (and samples) each rank takes, with padding,
//!   `drop_last` and resume from a consumed prefix.
//! * [`PassPlan`] — one interface for every dealing's pass (a [`Partition`], a
//!   [`BudgetPass`]): steps, batches, where a sample is, the pass after some steps, the
//!   proof's shares and their judgement.
//! * [`TokenBudget`] — budget-v1: batches under a padded token budget, planned and proven
//!   a window of the order at a time.
//! * [`Mixture`] — mix-v1: weighted sources, position → (source, index), no build step.
//! * [`verify_inverse`], [`prove_ranks`], [`judge`] — the exact proof by the inverse, in
//!   O(1) memory, split across ranks; [`verify`] — the same by a bitmap of `n` bits;
//!   [`judge_coverage`] — the distributed fingerprint proof; each gives a [`Verdict`];
//!   [`check_rank_layout`] — every data-parallel rank used equally often.
//! * [`Weights`] — weighted-v1: one stream of weighted draws per `(seed, epoch)`, with
//!   or without replacement, position → sample id ([`EpochDraws`]).
//! * [`Exclusions`] — sample ids never to read; [`Excluding`] an order without them.
//! * [`Consumer`], [`Layer`] — an iterable dealt to ranks × DataLoader workers, and what
//!   each run before a resume took of it.
//! * [`Run`] — a run's stream and its history, one [`Segment`] per change: where a sample
//!   was read, what a step read ([`Read`]), and the exactly-once [`Audit`]; [`BudgetRun`]
//!   the same for a token-budget run, over its lengths.
//! * [`Fingerprint`] — an O(1)-memory summary of a multiset of sample ids.
//! * [`gather_records`], [`gather_windows`] — a batch out of a memory map, windows cast to
//!   int64 in the same pass.
//! * [`check_sequence_layout`], [`check_document_indices`] — a Megatron `.idx`'s arrays.

// The crate's folders are its concepts; their modules are named at the root, where every
// path of the crate (`crate::partition::Partition`) and of its users finds them.
mod epoch;
mod error;
mod io;
mod orders;
mod pass;
mod proofs;
mod run;

use epoch::{algorithm, dealing, partition, rank_layout, sharding, state};
use io::{gather, gather_ahead, indexed, iterable};
use orders::{block, exclusion, mixture, order, permutation, splitmix, weighted};
use pass::{budget, pass_plan, plan, pool};
use proofs::{bitmap_proof, coverage, fingerprint, inverse_proof, verdict};

pub use bitmap_proof::verify;
pub use block::{BlockPermutation, BLOCK_ALGORITHM, BLOCK_ALGORITHMS};
pub use budget::{
    window_seed, BudgetBatches, BudgetRead, BudgetShare, BudgetStart, BudgetSummary, Lengths,
    TokenBudget, WindowPlan, WindowProof, BUDGET_ALGORITHM, BUDGET_ALGORITHMS,
};
pub use coverage::{judge_coverage, CoverageShare};
pub use dealing::{Dealing, Layout, Pass};
pub use epoch::{
    fields_of, EpochSpec, Field, FieldDefault, FieldKind, BUDGET_FIELDS, EPOCH_FIELDS, SHARD_FIELDS,
};
pub use error::{range_len, Error};
pub use exclusion::{Excluding, Exclusions};
pub use fingerprint::Fingerprint;
pub use gather::{gather_records, gather_windows, TokenType, WindowLayout};
pub use gather_ahead::{Batch, Gathered, RecordsAhead, Source};
pub use indexed::{check_document_indices, check_sequence_layout};
pub use inverse_proof::{
    judge, judge_alone, prove_against, prove_ranks, verify_inverse, Dealt, Failure, Share, OUTSIDE,
};
pub use iterable::{check_layers, Consumer, Layer, Left, Spread};
pub use mixture::{
    MixVersion, Mixture, MixtureProof, MIX_ALGORITHM, MIX_ALGORITHMS, MIX_ALGORITHM_V3,
    V3_TABLED_MAX,
};
pub use order::{Explicit, Identity, Order, SampleOrder};
pub use partition::{Outside, Partition};
pub use pass_plan::{BudgetPass, PassPlan};
pub use permutation::{
    simd_level, Permutation, Version, ALGORITHM, ALGORITHM_V1, ALGORITHM_V2, COMMITTED_ALGORITHM,
    COMMITTED_PERMUTATION,
};
pub use plan::{next_chunk, FIRST_CHUNK, MAX_CHUNK};
pub use pool::{worker_threads, CHUNK};
pub use rank_layout::check_rank_layout;
pub use run::{
    Audit, BudgetIndex, BudgetRun, BudgetSegment, Change, Read, Run, Segment, BUDGET_ROW, ROW,
};
pub use sharding::{Sharding, IDENTITY_ALGORITHM};
pub use splitmix::splitmix64;
pub use state::{BudgetEpoch, BudgetResume, Value, BUDGET, DRAWS, KINDS, LAYER, SHARD};
pub use verdict::Verdict;
pub use weighted::{AliasTable, EpochDraws, Weights, WEIGHTED_ALGORITHM};
