//! The Feistel network both versions walk on: keys, round functions, rounds.

use crate::algorithm::Version;
use crate::splitmix::{chain, splitmix64};

/// Version tag mixed first into every key, so perm-v2 shares no keys with v1.
pub(super) const VERSION_TAG: u64 = 0x7065_726d_2d76_3101; // "perm-v1" + 0x01
pub(super) const VERSION_TAG_V2: u64 = 0x7065_726d_2d76_3202; // "perm-v2" + 0x02
/// perm-v2 shuffles a table up to this n; above, the Feistel domain has >= 17 bits.
pub(super) const V2_TABLE_MAX_N: u64 = 1 << 16;
/// The two 32-bit multipliers of perm-v2's round function (odd; from the golden ratio and
/// murmur3's finalizer).
pub(super) const V2_MUL: [u64; 2] = [0x9E37_79B1, 0x85EB_CA77];
pub(super) const ROUNDS: usize = 8;
/// Below 16 bits a Feistel network reaches too few permutations (only even ones at
/// 1-bit halves); the walk pays for it at tiny n, which the lookup table absorbs.
pub(super) const MIN_BITS: u32 = 16;
/// At or below this n, a walk averages >= 2 steps: precompute both directions instead.
pub(super) const TABLE_MAX_N: u64 = 1 << 15;
/// Lanes evaluated together by the batched path.
pub(super) const BLOCK: usize = 256;

/// The Feistel cipher on `bits` bits; round `i` splits into (hi, lo) halves of widths
/// `(hi_bits, lo_bits)` for even `i` and `(lo_bits, hi_bits)` for odd `i`.
#[derive(Clone, Debug)]
pub(super) struct Feistel {
    pub(super) hi_bits: u32,
    pub(super) lo_bits: u32,
    pub(super) keys: [u64; ROUNDS],
    pub(super) version: Version,
}

#[inline(always)]
pub(super) fn mask(width: u32) -> u64 {
    (1u64 << width) - 1 // width <= 32
}

#[inline(always)]
pub(super) fn round_fn(half: u64, key: u64) -> u64 {
    splitmix64(half ^ key)
}

/// perm-v2's round function on a half of at most 32 bits: two 32×32→64 multiplies, each
/// folded (high word xor low word), the key's halves xored in before each. Only the low
/// bits are used (masked to the other half's width).
#[inline(always)]
pub(super) fn round_v2(half: u64, key: u64) -> u64 {
    let a = ((half ^ key) & 0xFFFF_FFFF) * V2_MUL[0];
    let b = ((a ^ (a >> 32) ^ (key >> 32)) & 0xFFFF_FFFF) * V2_MUL[1];
    b ^ (b >> 32)
}

/// One round forward on `x`, halves of widths `(h, l)`: `hi ^= F(lo)`, then `lo`
/// becomes the high part.
#[inline(always)]
pub(super) fn encrypt_round(x: u64, key: u64, h: u32, l: u32, f: impl Fn(u64, u64) -> u64) -> u64 {
    let lo = x & mask(l);
    let hi = (x >> l) ^ (f(lo, key) & mask(h));
    (lo << h) | hi
}

/// [`encrypt_round`] undone: `y` as that round left it, the widths as it took them.
#[inline(always)]
pub(super) fn decrypt_round(y: u64, key: u64, h: u32, l: u32, f: impl Fn(u64, u64) -> u64) -> u64 {
    let lo = y >> h;
    let hi = (y & mask(h)) ^ (f(lo, key) & mask(h));
    (hi << l) | lo
}

impl Feistel {
    pub(super) fn new(bits: u32, key: u64, version: Version) -> Self {
        let mut keys = [0u64; ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = chain(key, &[i as u64]);
        }
        Feistel {
            hi_bits: bits.div_ceil(2),
            lo_bits: bits / 2,
            keys,
            version,
        }
    }

    /// The round function of this version.
    #[inline(always)]
    pub(super) fn f(&self, half: u64, key: u64) -> u64 {
        match self.version {
            Version::V1 => round_fn(half, key),
            Version::V2 => round_v2(half, key),
        }
    }

    /// One round: `hi ^= F(lo)`, then rotate so `lo` becomes the high part.
    #[inline(always)]
    pub(super) fn encrypt(&self, mut x: u64) -> u64 {
        let (mut h, mut l) = (self.hi_bits, self.lo_bits);
        for &k in &self.keys {
            x = encrypt_round(x, k, h, l, |half, key| self.f(half, key));
            std::mem::swap(&mut h, &mut l);
        }
        x
    }

    #[inline(always)]
    pub(super) fn decrypt(&self, mut y: u64) -> u64 {
        for (i, &k) in self.keys.iter().enumerate().rev() {
            let (h, l) = if i % 2 == 0 {
                (self.hi_bits, self.lo_bits)
            } else {
                (self.lo_bits, self.hi_bits)
            };
            y = decrypt_round(y, k, h, l, |half, key| self.f(half, key));
        }
        y
    }
}
