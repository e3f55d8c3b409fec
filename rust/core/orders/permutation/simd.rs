//! Runtime CPU-feature dispatch for the batched path. Every variant compiles the same
//! integer code, so the output never depends on the path taken. The CPU is probed once.

use std::sync::OnceLock;

use super::Permutation;
use crate::error::Error;

/// The instruction sets the batched path is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Level {
    /// AVX-512 F + DQ + VL (64-bit multiplies in vector registers).
    Avx512,
    /// AVX2.
    Avx2,
    /// Whatever the target's baseline is.
    Portable,
}

impl Level {
    /// The name `PERMSHARD_SIMD` takes and `simd_level()` gives.
    pub(super) fn name(self) -> &'static str {
        match self {
            Level::Avx512 => "avx512",
            Level::Avx2 => "avx2",
            // The target's baseline: NEON is part of it on aarch64.
            Level::Portable if cfg!(target_arch = "aarch64") => "neon",
            Level::Portable => "scalar",
        }
    }
}

/// The levels this CPU can run, best first (`Portable` always last).
pub(super) fn available() -> Vec<Level> {
    let mut levels = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            levels.push(Level::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            levels.push(Level::Avx2);
        }
    }
    levels.push(Level::Portable);
    levels
}

/// The level `forced` names (`PERMSHARD_SIMD`'s value), or the best of this CPU; an
/// unknown level, or one this CPU lacks, is an error naming the levels it has.
pub(super) fn choose(forced: Option<&str>) -> Result<Level, Error> {
    let levels = available();
    let Some(name) = forced.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(levels[0]);
    };
    // "scalar" also names the baseline on aarch64, where it includes NEON.
    let found = levels
        .iter()
        .find(|l| l.name() == name || (name == "scalar" && **l == Level::Portable));
    found.copied().ok_or_else(|| {
        let names: Vec<&str> = levels.iter().map(|l| l.name()).collect();
        Error::Invalid(format!(
            "PERMSHARD_SIMD={name:?} is not a SIMD level of this CPU; it has {}: set one of \
             them, or unset PERMSHARD_SIMD for the best",
            names.join(", ")
        ))
    })
}

/// The level `PERMSHARD_SIMD` names, or the best of this CPU: read and checked once.
fn chosen() -> &'static Result<Level, Error> {
    static LEVEL: OnceLock<Result<Level, Error>> = OnceLock::new();
    LEVEL.get_or_init(|| choose(std::env::var("PERMSHARD_SIMD").ok().as_deref()))
}

/// The level in use, or the error naming this CPU's levels.
pub(crate) fn level() -> Result<Level, Error> {
    chosen().clone()
}

/// The level in use (constructors refuse a bad `PERMSHARD_SIMD` before this runs);
/// the batched paths ask for it a block at a time.
pub(super) fn best() -> Level {
    chosen().as_ref().map_or(Level::Portable, |l| *l)
}

/// Defines `$name(args)` (at the best level) and `$at(level, args)` (at a given level that
/// this CPU supports): `$body` compiled per level.
macro_rules! dispatch {
    ($name:ident, $at:ident, ($($arg:ident: $ty:ty),*) => $body:expr) => {
        #[inline]
        pub(super) fn $name($($arg: $ty),*) {
            $at(best(), $($arg),*)
        }

        #[inline]
        pub(super) fn $at(level: Level, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl")]
                fn avx512($($arg: $ty),*) {
                    $body
                }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) {
                    $body
                }
                match level {
                    // SAFETY: `level` comes from `available()`, which probed the CPU.
                    Level::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    Level::Avx2 => return unsafe { avx2($($arg),*) },
                    Level::Portable => {}
                }
            }
            let _ = level;
            $body
        }
    };
}

type Lanes<'a> = &'a mut [u64];

dispatch!(map_block, map_block_at, (perm: &Permutation, lanes: Lanes) => perm.map_block_generic(lanes));
dispatch!(encrypt_block, encrypt_block_at, (perm: &Permutation, lanes: Lanes) => perm.encrypt_block_generic(lanes));
dispatch!(invert_block, invert_block_at, (perm: &Permutation, lanes: Lanes) => perm.invert_block_generic(lanes));
dispatch!(
    map_each_block,
    map_each_block_at,
    (orders: &[&Permutation], lanes: Lanes) => Permutation::map_each_block_generic(orders, lanes)
);
