//! Many permutations of one domain, a value through each. A mixture read at random
//! positions meets another pass of a source at almost every slot: one scalar walk per
//! value would leave the vector units idle, so the rounds run over all the values
//! together, each lane with its own permutation's keys.

use super::feistel::{encrypt_round, round_fn, round_v2, Feistel, ROUNDS};
use super::{simd, Permutation};
use crate::algorithm::Version;

/// Lanes walked together: their keys (8 rounds of them) and values stay on the stack.
const LANES: usize = 64;

impl Permutation {
    /// `values[i] = orders[i]`'s π(`values[i]`), for walked permutations (no table) of
    /// one domain (the same `n` and version) and values below `n`: identical to
    /// [`Permutation::forward`] of each, in one batched walk.
    pub(crate) fn map_each(orders: &[&Permutation], values: &mut [u64]) {
        assert_eq!(orders.len(), values.len(), "an order per value");
        for (orders, values) in orders.chunks(LANES).zip(values.chunks_mut(LANES)) {
            simd::map_each_block(orders, values);
        }
    }

    /// At most [`LANES`] lanes, lane `i` through `orders[i]`: encrypted together, then the
    /// lanes still `>= n` moved to the front (with their keys, in place) and encrypted
    /// again until none is left, as [`Permutation::map_block_generic`] walks one order.
    #[inline(always)]
    pub(super) fn map_each_block_generic(orders: &[&Permutation], lanes: &mut [u64]) {
        let (n, cipher, len) = (orders[0].n, &orders[0].cipher, lanes.len());
        debug_assert!(len <= LANES && orders.len() == len);
        let mut keys = [[0u64; LANES]; ROUNDS];
        for (lane, order) in orders.iter().enumerate() {
            debug_assert!(order.n == n && order.cipher.version == cipher.version);
            debug_assert!(order.table.is_none(), "a tabled order is read, not walked");
            for (round, &key) in keys.iter_mut().zip(&order.cipher.keys) {
                round[lane] = key;
            }
        }
        let mut walk = [0u64; LANES];
        let mut slot = [0u8; LANES]; // the lane each walking value belongs to
        walk[..len].copy_from_slice(lanes);
        for (j, s) in slot[..len].iter_mut().enumerate() {
            *s = j as u8;
        }
        let mut count = len;
        while count > 0 {
            encrypt_keyed(cipher, &mut walk[..count], &keys);
            let mut next = 0usize;
            for j in 0..count {
                let x = walk[j];
                lanes[slot[j] as usize] = x; // final once below n
                walk[next] = x;
                slot[next] = slot[j];
                for round in keys.iter_mut() {
                    round[next] = round[j];
                }
                next += (x >= n) as usize;
            }
            count = next;
        }
    }
}

/// The rounds of `cipher`'s widths and version over `lanes`, lane `i` with `keys[·][i]`.
#[inline(always)]
fn encrypt_keyed(cipher: &Feistel, lanes: &mut [u64], keys: &[[u64; LANES]; ROUNDS]) {
    match cipher.version {
        Version::V1 => rounds(cipher, lanes, keys, round_fn),
        Version::V2 => rounds(cipher, lanes, keys, round_v2),
    }
}

/// Round-major, as [`Permutation::encrypt_block_generic`]: each round runs over all
/// lanes with the same widths, which lets the compiler vectorise the lane loop.
#[inline(always)]
fn rounds(
    cipher: &Feistel,
    lanes: &mut [u64],
    keys: &[[u64; LANES]; ROUNDS],
    f: impl Fn(u64, u64) -> u64,
) {
    let (mut h, mut l) = (cipher.hi_bits, cipher.lo_bits);
    for round in keys {
        for (x, &k) in lanes.iter_mut().zip(round) {
            *x = encrypt_round(*x, k, h, l, &f);
        }
        std::mem::swap(&mut h, &mut l);
    }
}

#[cfg(test)]
mod tests {
    use super::super::simd::{available, map_each_block_at};
    use super::*;

    /// Every level's batched walk through many orders agrees with each order's own
    /// forward, for both versions, domains just above a power of two (long walks) and
    /// below one, one lane to more than three blocks of them.
    #[test]
    fn each_value_goes_through_its_own_order() {
        for version in [Version::V1, Version::V2] {
            for n in [(1u64 << 17) + 1, 200_000, 3_000_000_007] {
                let orders: Vec<Permutation> = (0..40u64)
                    .map(|pass| Permutation::of_version(version, n, 7, pass, 3).unwrap())
                    .collect();
                for len in [1usize, 3, 37, LANES, 3 * LANES + 5] {
                    let picks: Vec<&Permutation> =
                        (0..len).map(|i| &orders[(i * 7) % orders.len()]).collect();
                    let values: Vec<u64> = (0..len as u64).map(|i| (i * 7919 + 11) % n).collect();
                    let want: Vec<u64> = (picks.iter().zip(&values))
                        .map(|(order, &v)| order.forward(v).unwrap())
                        .collect();
                    let mut got = values.clone();
                    Permutation::map_each(&picks, &mut got);
                    assert_eq!(got, want, "{version:?} n={n} len={len}");
                    for level in available() {
                        for (lanes, (orders, want)) in
                            (values.chunks(LANES)).zip(picks.chunks(LANES).zip(want.chunks(LANES)))
                        {
                            let mut lanes = lanes.to_vec();
                            map_each_block_at(level, orders, &mut lanes);
                            assert_eq!(lanes, want, "{level:?} {version:?} n={n} len={len}");
                        }
                    }
                }
            }
        }
    }
}
