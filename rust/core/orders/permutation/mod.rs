//! perm-v1 and perm-v2: keyed pseudo-random permutations of `[0, n)` with O(1) memory.
//!
//! perm-v1: an 8-round unbalanced Feistel cipher on the smallest bit domain covering `n`
//! (at least 16 bits), made a permutation of `[0, n)` by cycle walking: re-encrypt until
//! the value falls below `n`. Because the domain is `< 2n` (above 16 bits), a walk takes
//! fewer than two steps on average. The inverse runs the rounds backwards with the same
//! walk. Its round function is splitmix64, 64-bit multiplies.
//!
//! perm-v2 (`docs/perm-v2.md`): for `n <= 2^16` an exact Fisher–Yates shuffle driven by a
//! counter-based generator, built in O(n) (no walk over a larger domain: no cost floor);
//! above, the same Feistel network and walk on the smallest domain covering `n` (at least
//! 17 bits, so `< 2n`), with a round function of two 32×32→64 multiplies, which AVX2
//! (`vpmuludq`) and NEON (`umull`) vectorise as AVX-512 does.

mod feistel;
mod keyed;
mod simd;
mod table;

use std::sync::Arc;

pub use crate::algorithm::{
    Version, ALGORITHM, ALGORITHM_V1, ALGORITHM_V2, COMMITTED_ALGORITHM, COMMITTED_PERMUTATION,
};
use crate::error::{check_below, Error};
use crate::splitmix::chain;
use feistel::*;
use table::*;

/// Below this many values a batched map walks each value alone: a block's lanes cost
/// as much for one value as for several.
const WALKED_ALONE: usize = 4;

/// A keyed pseudo-random permutation π of `[0, n)`.
///
/// Deterministic in `(n, seed, epoch, stream)` on every platform: only wrapping `u64`
/// arithmetic, no floats, no `usize`-dependent results.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    seed: u64,
    epoch: u64,
    stream: u64,
    cipher: Feistel,
    table: Option<Arc<Table>>,
}

impl Permutation {
    /// The permutation of `[0, n)` for `(seed, epoch)` on stream 0, of `version`.
    pub fn new(version: Version, n: u64, seed: u64, epoch: u64) -> Result<Self, Error> {
        Self::of_version(version, n, seed, epoch, 0)
    }

    /// perm-v1 of `[0, n)` for `(seed, epoch)`, with an extra stream id mixed into the key
    /// (independent permutations for the same `(n, seed, epoch)`).
    pub fn with_stream(n: u64, seed: u64, epoch: u64, stream: u64) -> Result<Self, Error> {
        let mut perm = Self::untabled(n, seed, epoch, stream)?;
        if n <= TABLE_MAX_N {
            perm.table = Some(Arc::new(perm.build_table()));
        }
        Ok(perm)
    }

    /// The permutation of `[0, n)` for `(seed, epoch, stream)` of `version`.
    pub fn of_version(
        version: Version,
        n: u64,
        seed: u64,
        epoch: u64,
        stream: u64,
    ) -> Result<Self, Error> {
        if version == Version::V1 {
            return Self::with_stream(n, seed, epoch, stream);
        }
        simd::level()?; // a forced SIMD level this CPU lacks is refused at first use
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        let key = chain(VERSION_TAG_V2, &[seed, epoch, n, stream]);
        let bits = (u64::BITS - (n - 1).leading_zeros()).max(1);
        let mut perm = Permutation {
            n,
            seed,
            epoch,
            stream,
            cipher: Feistel::new(bits, key, version),
            table: None,
        };
        if n <= V2_TABLE_MAX_N {
            perm.table = Some(Arc::new(Table::shuffled(n, key)));
        }
        Ok(perm)
    }

    /// The construction: perm-v1 or perm-v2.
    pub fn version(&self) -> Version {
        self.cipher.version
    }

    /// As [`Permutation::with_stream`], without the lookup table of small `n`: O(1) to
    /// build, for callers that map a few positions of many permutations (a mixture's
    /// passes). The values are the same.
    pub(crate) fn untabled(n: u64, seed: u64, epoch: u64, stream: u64) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        // Integer bit width of the largest value, never a float log2: a float rounds
        // 2^k + 1 to 2^k for large k and yields a domain too small to hold n values.
        simd::level()?; // a forced SIMD level this CPU lacks is refused at first use
        let bits = (u64::BITS - (n - 1).leading_zeros()).max(MIN_BITS);
        let key = chain(VERSION_TAG, &[seed, epoch, n, stream]);
        Ok(Permutation {
            n,
            seed,
            epoch,
            stream,
            cipher: Feistel::new(bits, key, Version::V1),
            table: None,
        })
    }

    /// Encrypts the whole 16-bit domain once (batched), then follows every position's walk
    /// through that array, all walks a step at a time so their loads overlap: O(2^16) for
    /// the whole table, whatever n.
    fn build_table(&self) -> Table {
        let mut encrypted: Vec<u64> = (0..1u64 << MIN_BITS).collect();
        for chunk in encrypted.chunks_mut(BLOCK) {
            simd::encrypt_block(self, chunk);
        }
        // n <= TABLE_MAX_N, so the domain is exactly 16 bits: every value fits a u16.
        let next: Vec<u16> = encrypted.iter().map(|&x| x as u16).collect();
        let n = self.n as usize;
        let mut forward: Vec<u16> = next[..n].to_vec();
        let mut walking: Vec<u16> = (0..n as u16)
            .filter(|&p| forward[p as usize] as usize >= n)
            .collect();
        while !walking.is_empty() {
            walking.retain(|&p| {
                let x = next[forward[p as usize] as usize];
                forward[p as usize] = x;
                x as usize >= n
            });
        }
        Table::of(forward)
    }

    /// Number of positions `n`.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Never true: n >= 1 always. Present for the `len`/`is_empty` convention.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The seed the permutation is keyed with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch the permutation is keyed with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The stream the permutation is keyed with (independent orders for one seed/epoch).
    pub fn stream(&self) -> u64 {
        self.stream
    }

    /// Width in bits of the cipher's domain.
    pub fn domain_bits(&self) -> u32 {
        self.cipher.hi_bits + self.cipher.lo_bits
    }

    #[inline(always)]
    fn walk_forward(&self, p: u64) -> u64 {
        let mut x = self.cipher.encrypt(p);
        while x >= self.n {
            x = self.cipher.encrypt(x);
        }
        x
    }

    #[inline(always)]
    fn walk_inverse(&self, x: u64) -> u64 {
        let mut p = self.cipher.decrypt(x);
        while p >= self.n {
            p = self.cipher.decrypt(p);
        }
        p
    }

    /// π(position). Errors when `position >= n`.
    pub fn forward(&self, position: u64) -> Result<u64, Error> {
        check_below("position", position, self.n)?;
        Ok(self.forward_unchecked(position))
    }

    /// π⁻¹(sample): the position holding `sample`. Errors when `sample >= n`.
    pub fn inverse(&self, sample: u64) -> Result<u64, Error> {
        check_below("sample", sample, self.n)?;
        Ok(match &self.table {
            Some(t) => t.inverse()[sample as usize] as u64,
            None => self.walk_inverse(sample),
        })
    }

    /// The forward table of a small permutation (`None` when positions are walked): for
    /// callers that read many permutations' entries in one tight loop.
    pub(crate) fn forward_table(&self) -> Option<&[u16]> {
        self.table.as_deref().map(Table::forward)
    }

    /// π(position) for `position < n` (checked by the caller).
    #[inline]
    pub(crate) fn forward_unchecked(&self, position: u64) -> u64 {
        match &self.table {
            Some(t) => t.forward[position as usize] as u64,
            None => self.walk_forward(position),
        }
    }

    /// `out[i] = π(start + i)`, batched; identical to calling [`Permutation::forward`].
    pub fn fill(&self, start: u64, out: &mut [u64]) -> Result<(), Error> {
        let len = out.len() as u64;
        if start > self.n || len > self.n - start {
            return Err(Error::SliceOutOfRange {
                start,
                len,
                n: self.n,
            });
        }
        if let Some(t) = &self.table {
            let (s, len) = (start as usize, out.len());
            for (o, &v) in out.iter_mut().zip(&t.forward[s..s + len]) {
                *o = v as u64;
            }
            return Ok(());
        }
        for (b, chunk) in out.chunks_mut(BLOCK).enumerate() {
            let base = start + (b * BLOCK) as u64;
            for (i, slot) in chunk.iter_mut().enumerate() {
                *slot = base + i as u64;
            }
            self.map_in_place(chunk);
        }
        Ok(())
    }

    /// Replaces every position in `values` (all `< n`, checked by the caller) by π(position).
    pub(crate) fn map_in_place(&self, values: &mut [u64]) {
        self.apply_in_place(values, Table::forward, simd::map_block, Self::walk_forward)
    }

    /// `values` through one direction: the small table's `side` when there is one, else
    /// `block` (the batched cycle walk) a block at a time, or `walk` value by value for a
    /// few values (a block's lanes cost as much for one value as for several: a mixture
    /// read at random positions maps one or two values per pass order).
    #[inline(always)]
    fn apply_in_place(
        &self,
        values: &mut [u64],
        side: fn(&Table) -> &[u16],
        block: fn(&Permutation, &mut [u64]),
        walk: fn(&Permutation, u64) -> u64,
    ) {
        if let Some(t) = &self.table {
            let side = side(t);
            for v in values.iter_mut() {
                *v = side[*v as usize] as u64;
            }
            return;
        }
        if values.len() < WALKED_ALONE {
            for v in values.iter_mut() {
                *v = walk(self, *v);
            }
            return;
        }
        for chunk in values.chunks_mut(BLOCK) {
            block(self, chunk);
        }
    }

    /// Round-major: each round runs over all lanes with the same widths and key, which is
    /// what lets the compiler turn the lane loop into vector instructions.
    #[inline(always)]
    fn encrypt_block_generic(&self, lanes: &mut [u64]) {
        match self.cipher.version {
            Version::V1 => self.encrypt_rounds(lanes, round_fn),
            Version::V2 => self.encrypt_rounds(lanes, round_v2),
        }
    }

    /// The rounds of [`Self::encrypt_block_generic`] with round function `f` (a plain
    /// function, inlined: the lane loop has no branch).
    #[inline(always)]
    fn encrypt_rounds(&self, lanes: &mut [u64], f: impl Fn(u64, u64) -> u64) {
        let (mut h, mut l) = (self.cipher.hi_bits, self.cipher.lo_bits);
        for &k in &self.cipher.keys {
            for x in lanes.iter_mut() {
                *x = encrypt_round(*x, k, h, l, &f);
            }
            std::mem::swap(&mut h, &mut l);
        }
    }

    /// One block of at most `BLOCK` lanes: every lane encrypted together, then the lanes
    /// still `>= n` are compacted without branches into a dense buffer, encrypted together
    /// again, and written back, until none is left.
    #[inline(always)]
    fn map_block_generic(&self, lanes: &mut [u64]) {
        self.walk_block_generic::<true>(lanes)
    }

    /// The cycle walk of a block in either direction: `FORWARD` encrypts, else decrypts
    /// (a const parameter, so each direction compiles to its own branch-free loop).
    #[inline(always)]
    fn walk_block_generic<const FORWARD: bool>(&self, lanes: &mut [u64]) {
        // A function, not a closure: `inline(always)` keeps the rounds inside the caller's
        // target features (a closure left out of line compiles for the baseline only).
        #[inline(always)]
        fn step<const FORWARD: bool>(perm: &Permutation, block: &mut [u64]) {
            if FORWARD {
                perm.encrypt_block_generic(block)
            } else {
                perm.decrypt_block_generic(block)
            }
        }
        let step = |block: &mut [u64]| step::<FORWARD>(self, block);
        let n = self.n;
        step(lanes);
        let mut pending = [0u16; BLOCK];
        let mut count = 0usize;
        for (i, &x) in lanes.iter().enumerate() {
            pending[count] = i as u16;
            count += (x >= n) as usize;
        }
        let mut walk = [0u64; BLOCK];
        while count > 0 {
            for j in 0..count {
                walk[j] = lanes[pending[j] as usize];
            }
            step(&mut walk[..count]);
            let mut next = 0usize;
            for j in 0..count {
                let i = pending[j] as usize;
                lanes[i] = walk[j];
                pending[next] = i as u16;
                next += (walk[j] >= n) as usize;
            }
            count = next;
        }
    }

    /// Replaces every sample in `values` (all `< n`, checked by the caller) by π⁻¹(sample):
    /// the batched inverse, identical to [`Permutation::inverse`].
    pub(crate) fn invert_in_place(&self, values: &mut [u64]) {
        self.apply_in_place(
            values,
            Table::inverse,
            simd::invert_block,
            Self::walk_inverse,
        )
    }

    /// `out[i] = π⁻¹(start + i)`, batched; identical to calling [`Permutation::inverse`].
    pub fn fill_inverse(&self, start: u64, out: &mut [u64]) -> Result<(), Error> {
        let len = out.len() as u64;
        if start > self.n || len > self.n - start {
            return Err(Error::SliceOutOfRange {
                start,
                len,
                n: self.n,
            });
        }
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = start + i as u64;
        }
        self.invert_in_place(out);
        Ok(())
    }

    /// The rounds backwards over all lanes, round-major as [`Self::encrypt_block_generic`].
    #[inline(always)]
    fn decrypt_block_generic(&self, lanes: &mut [u64]) {
        match self.cipher.version {
            Version::V1 => self.decrypt_rounds(lanes, round_fn),
            Version::V2 => self.decrypt_rounds(lanes, round_v2),
        }
    }

    /// The rounds of [`Self::decrypt_block_generic`] with round function `f`.
    #[inline(always)]
    fn decrypt_rounds(&self, lanes: &mut [u64], f: impl Fn(u64, u64) -> u64) {
        for (i, &k) in self.cipher.keys.iter().enumerate().rev() {
            let (h, l) = if i % 2 == 0 {
                (self.cipher.hi_bits, self.cipher.lo_bits)
            } else {
                (self.cipher.lo_bits, self.cipher.hi_bits)
            };
            for y in lanes.iter_mut() {
                *y = decrypt_round(*y, k, h, l, &f);
            }
        }
    }

    /// As [`Self::map_block_generic`], decrypting: the cycle walk backwards.
    #[inline(always)]
    fn invert_block_generic(&self, lanes: &mut [u64]) {
        self.walk_block_generic::<false>(lanes)
    }
}

/// The SIMD level the batched paths use: `PERMSHARD_SIMD`'s (`scalar`, `avx2`,
/// `avx512`, `neon`), or the best of this CPU; an error naming the levels this CPU has
/// when the variable names another.
pub fn simd_level() -> Result<&'static str, Error> {
    simd::level().map(|l| l.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_bijection(n: u64) {
        let p = Permutation::new(Version::V1, n, 7, 3).unwrap();
        let mut seen = vec![false; n as usize];
        let mut all = vec![0u64; n as usize];
        p.fill(0, &mut all).unwrap();
        for (i, &x) in all.iter().enumerate() {
            assert!(x < n, "n={n}: π({i}) = {x} out of range");
            assert!(!seen[x as usize], "n={n}: value {x} appears twice");
            seen[x as usize] = true;
            assert_eq!(
                p.inverse(x).unwrap(),
                i as u64,
                "n={n}: inverse mismatch at {i}"
            );
        }
    }

    #[test]
    fn bijective_for_every_n_up_to_5000() {
        for n in 1..=5000 {
            assert_bijection(n);
        }
    }

    #[test]
    fn bijective_around_powers_of_two_up_to_2_pow_22() {
        for k in 1..=22u32 {
            let m = 1u64 << k;
            for n in [m - 1, m, m + 1] {
                assert_bijection(n);
            }
        }
    }

    #[test]
    fn bijective_where_float_log2_domains_fail() {
        // Sizes where a ceil(log2(n - 1)) domain is one bit short.
        for n in [65_537, 262_145, 1_048_577, 4_194_305] {
            assert_bijection(n);
        }
    }

    #[test]
    fn table_and_walk_agree() {
        for n in [1u64, 2, 3, 100, 4096, TABLE_MAX_N] {
            let p = Permutation::new(Version::V1, n, 11, 2).unwrap();
            for i in 0..n {
                assert_eq!(p.forward(i).unwrap(), p.walk_forward(i));
                assert_eq!(p.inverse(i).unwrap(), p.walk_inverse(i));
            }
        }
    }

    #[test]
    fn batched_equals_scalar_on_every_path() {
        for n in [TABLE_MAX_N + 1, 1_000_003, 1 << 40, u64::MAX] {
            let p = Permutation::new(Version::V1, n, 5, 9).unwrap();
            let start = n - 1000;
            let mut batched = vec![0u64; 1000];
            p.fill(start, &mut batched).unwrap();
            for (i, &b) in batched.iter().enumerate() {
                assert_eq!(b, p.forward(start + i as u64).unwrap());
            }
        }
    }

    #[test]
    fn every_simd_level_of_this_cpu_equals_the_scalar_path() {
        let levels = simd::available();
        assert_eq!(levels.last(), Some(&simd::Level::Portable));
        assert_eq!(simd::best(), levels[0]);
        eprintln!("SIMD levels tested on this CPU: {levels:?}");
        for n in [TABLE_MAX_N + 1, 1_000_003, 1 << 40, u64::MAX] {
            let p = Permutation::new(Version::V1, n, 5, 9).unwrap();
            let start = n - 1000;
            let scalar: Vec<u64> = (start..n).map(|i| p.forward(i).unwrap()).collect();
            for &level in &levels {
                let mut mapped: Vec<u64> = (start..n).collect();
                for chunk in mapped.chunks_mut(BLOCK) {
                    simd::map_block_at(level, &p, chunk);
                }
                assert_eq!(mapped, scalar, "n={n} level={level:?}");
                let mut encrypted: Vec<u64> = (start..n)
                    .map(|x| x & (u64::MAX >> (64 - p.domain_bits())))
                    .collect();
                let mut want = encrypted.clone();
                for chunk in want.chunks_mut(BLOCK) {
                    simd::encrypt_block_at(simd::Level::Portable, &p, chunk);
                }
                for chunk in encrypted.chunks_mut(BLOCK) {
                    simd::encrypt_block_at(level, &p, chunk);
                }
                assert_eq!(encrypted, want, "n={n} level={level:?}");
            }
        }
    }

    #[test]
    fn batched_inverse_equals_the_scalar_inverse_at_every_simd_level() {
        let levels = simd::available();
        let mut sizes = vec![1, 2, 3, 1000, TABLE_MAX_N, TABLE_MAX_N + 1, u64::MAX];
        for k in [16u32, 17, 20, 31, 32, 33, 40, 63] {
            sizes.extend([(1u64 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        for n in sizes {
            let p = Permutation::new(Version::V1, n, 11, 2).unwrap();
            let len = n.min(700);
            let start = n - len;
            let scalar: Vec<u64> = (start..n).map(|x| p.inverse(x).unwrap()).collect();
            let mut batched = vec![0u64; len as usize];
            p.fill_inverse(start, &mut batched).unwrap();
            assert_eq!(batched, scalar, "n={n}");
            if p.table.is_some() {
                continue; // the table path has no lanes
            }
            for &level in &levels {
                let mut lanes: Vec<u64> = (start..n).collect();
                for chunk in lanes.chunks_mut(BLOCK) {
                    simd::invert_block_at(level, &p, chunk);
                }
                assert_eq!(lanes, scalar, "n={n} level={level:?}");
            }
            // And it undoes the batched forward.
            let mut forward = vec![0u64; len as usize];
            p.fill(start, &mut forward).unwrap();
            p.invert_in_place(&mut forward);
            assert!(forward.iter().copied().eq(start..n), "n={n}");
        }
        let p = Permutation::new(Version::V1, 10, 0, 0).unwrap();
        assert!(p.fill_inverse(5, &mut [0; 6]).is_err());
    }

    #[test]
    fn a_few_values_map_alone_as_a_block_maps_them() {
        // Below WALKED_ALONE values the maps walk each one alone: the same answers.
        for version in [Version::V1, Version::V2] {
            let p = Permutation::new(version, (1 << 20) + 3, 5, 1).unwrap();
            for len in 0..=2 * WALKED_ALONE {
                let positions: Vec<u64> = (0..len as u64).map(|i| i * 99_991 % p.len()).collect();
                let mut mapped = positions.clone();
                p.map_in_place(&mut mapped);
                let want: Vec<u64> = positions.iter().map(|&x| p.forward(x).unwrap()).collect();
                assert_eq!(mapped, want, "{version:?} len={len}");
                p.invert_in_place(&mut mapped);
                assert_eq!(mapped, positions, "{version:?} len={len}");
            }
        }
    }

    fn v2(n: u64, seed: u64, epoch: u64) -> Permutation {
        Permutation::of_version(Version::V2, n, seed, epoch, 0).unwrap()
    }

    /// Every value once, the inverse undoing the forward map, the batched paths equal to
    /// the scalar ones: a bijection of `[0, n)` (all of it, `n` <= 2^22).
    fn assert_v2_bijection(n: u64) {
        let p = v2(n, 7, 3);
        let mut all = vec![0u64; n as usize];
        p.fill(0, &mut all).unwrap();
        let mut seen = vec![false; n as usize];
        for (i, &x) in all.iter().enumerate() {
            assert!(
                x < n && !seen[x as usize],
                "n={n}: value {x} out of range or twice"
            );
            seen[x as usize] = true;
            assert_eq!(
                x,
                p.forward(i as u64).unwrap(),
                "n={n}: batched != scalar at {i}"
            );
        }
        let mut back = all.clone();
        p.invert_in_place(&mut back);
        assert!(
            back.iter().enumerate().all(|(i, &b)| b == i as u64),
            "n={n}: inverse"
        );
        assert_eq!(p.inverse(all[0]).unwrap(), 0);
    }

    #[test]
    fn v2_is_a_bijection_at_every_n_to_2048_and_around_powers_of_two() {
        for n in 1..=2048 {
            assert_v2_bijection(n);
        }
        for k in 11..=22u32 {
            let m = 1u64 << k;
            for n in [m - 1, m, m + 1] {
                assert_v2_bijection(n);
            }
        }
        for n in [65_537, 262_145, 1_048_577, 4_194_305] {
            assert_v2_bijection(n);
        }
    }

    #[test]
    fn v2_inverts_and_batches_exactly_up_to_2_pow_64() {
        for n in [(1 << 16) + 1, 1_000_003, 1 << 40, (1 << 63) + 5, u64::MAX] {
            let p = v2(n, 5, 9);
            assert!(p.table.is_none() && p.domain_bits() < 65);
            assert!(
                n > (1u64 << (p.domain_bits() - 1)),
                "n={n}: domain below 2n"
            );
            for start in [0, n / 3, n - 1000] {
                let mut batched = vec![0u64; 1000];
                p.fill(start, &mut batched).unwrap();
                for (i, &b) in batched.iter().enumerate() {
                    assert_eq!(b, p.forward(start + i as u64).unwrap(), "n={n}");
                    assert_eq!(p.inverse(b).unwrap(), start + i as u64, "n={n}");
                }
            }
        }
    }

    #[test]
    fn v2_equals_the_scalar_path_at_every_simd_level() {
        let levels = simd::available();
        for n in [(1 << 16) + 1, 1_000_003, 1 << 40, u64::MAX] {
            let p = v2(n, 5, 9);
            let start = n - 1000;
            let scalar: Vec<u64> = (start..n).map(|i| p.forward(i).unwrap()).collect();
            for &level in &levels {
                let mut mapped: Vec<u64> = (start..n).collect();
                let mut inverted = scalar.clone();
                for (m, i) in mapped.chunks_mut(BLOCK).zip(inverted.chunks_mut(BLOCK)) {
                    simd::map_block_at(level, &p, m);
                    simd::invert_block_at(level, &p, i);
                }
                assert_eq!(mapped, scalar, "n={n} level={level:?}");
                assert!(
                    inverted.iter().zip(start..n).all(|(&a, b)| a == b),
                    "{level:?}"
                );
            }
        }
    }

    #[test]
    fn v2_tables_reach_odd_permutations_and_differ_by_key() {
        // A Feistel network on a few bits reaches only even permutations; the table
        // shuffles exactly, so over keys both parities come about equally.
        let parity = |t: &[u64]| {
            let mut seen = vec![false; t.len()];
            let mut cycles = 0;
            for i in 0..t.len() {
                let mut j = i;
                if !seen[i] {
                    cycles += 1;
                }
                while !seen[j] {
                    seen[j] = true;
                    j = t[j] as usize;
                }
            }
            (t.len() - cycles) % 2
        };
        let odd: usize = (0..400)
            .map(|epoch| {
                let mut t = vec![0u64; 1000];
                v2(1000, 1, epoch).fill(0, &mut t).unwrap();
                parity(&t)
            })
            .sum();
        assert!((150..=250).contains(&odd), "{odd} of 400 odd");
        assert_ne!(
            v2(10, 0, 0).forward(0).unwrap(),
            v2(10, 0, 1).forward(0).unwrap()
        );
        assert_eq!(Version::named("perm-v2").unwrap(), Version::V2);
        // Every family's ids read back into the permutation they are built on.
        assert_eq!(
            Version::family("block"),
            Some(crate::block::BLOCK_ALGORITHMS)
        );
        assert_eq!(Version::family("perm-v2"), None);
        for name in ["perm", "block", "mix", "budget"] {
            let ids = Version::family(name).unwrap();
            assert_eq!(Version::of_order(ids[0]), Some(Version::V1));
            assert_eq!(Version::of_order(ids[1]), Some(Version::V2));
        }
        assert_eq!(Version::of_order("identity"), None);
        assert!(Version::named("perm-v3")
            .unwrap_err()
            .to_string()
            .contains("perm-v2"));
    }

    #[test]
    fn a_forced_simd_level_this_cpu_lacks_is_an_error_naming_its_levels() {
        assert_eq!(simd::choose(None).unwrap(), simd::available()[0]);
        assert_eq!(simd::choose(Some("scalar")).unwrap(), simd::Level::Portable);
        assert_eq!(simd::choose(Some("")).unwrap(), simd::available()[0]);
        for level in simd::available() {
            assert_eq!(simd::choose(Some(level.name())).unwrap(), level);
        }
        let e = simd::choose(Some("sse9")).unwrap_err().to_string();
        assert!(
            e.contains("\"sse9\" is not a SIMD level of this CPU; it has") && e.contains("scalar"),
            "{e}"
        );
        if !simd::available().contains(&simd::Level::Avx512) {
            assert!(simd::choose(Some("avx512")).is_err());
        }
    }

    #[test]
    fn rejects_bad_arguments() {
        assert_eq!(
            Permutation::new(Version::V1, 0, 0, 0).unwrap_err(),
            Error::EmptyDomain
        );
        let p = Permutation::new(Version::V1, 10, 0, 0).unwrap();
        assert!(p.forward(10).is_err());
        assert!(p.inverse(10).is_err());
        assert!(p.fill(5, &mut [0; 6]).is_err());
        assert!(p.fill(11, &mut []).is_err());
        assert!(p.fill(10, &mut []).is_ok());
    }

    #[test]
    fn domain_is_at_least_16_bits_and_below_2n() {
        assert_eq!(
            Permutation::new(Version::V1, 1, 0, 0)
                .unwrap()
                .domain_bits(),
            16
        );
        assert_eq!(
            Permutation::new(Version::V1, 65_537, 0, 0)
                .unwrap()
                .domain_bits(),
            17
        );
        assert_eq!(
            Permutation::new(Version::V1, u64::MAX, 0, 0)
                .unwrap()
                .domain_bits(),
            64
        );
        for n in [65_537u64, 1 << 20, (1 << 20) + 1, 1_000_000_007] {
            let bits = Permutation::new(Version::V1, n, 0, 0)
                .unwrap()
                .domain_bits();
            assert!(1u128 << bits < 2 * n as u128 && (1u128 << bits) >= n as u128);
        }
    }

    #[test]
    fn keys_separate_seed_epoch_and_n() {
        let first = |n, s, e| {
            let p = Permutation::new(Version::V1, n, s, e).unwrap();
            let mut v = vec![0u64; 64];
            p.fill(0, &mut v).unwrap();
            v
        };
        assert_ne!(first(1 << 20, 1, 2), first(1 << 20, 2, 1));
        assert_ne!(first(1 << 20, 0, 1), first(1 << 20, 1, 0));
        assert_ne!(first(1 << 20, 0, 0), first((1 << 20) + 1, 0, 0));
        // Rebuilt from its key alone, a permutation gives the same values (determinism).
        let again = Permutation::new(Version::V1, 1 << 20, 3, 4).unwrap();
        let values: Vec<u64> = (0..64).map(|p| again.forward(p).unwrap()).collect();
        assert_eq!(first(1 << 20, 3, 4), values);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn large_n() -> impl Strategy<Value = u64> {
        prop_oneof![(1u64 << 16)..(1u64 << 40), (1u64 << 40)..=u64::MAX]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn inverse_undoes_forward(n in large_n(), seed: u64, epoch: u64, frac in 0.0f64..1.0) {
            let p = Permutation::new(Version::V1, n, seed, epoch).unwrap();
            let pos = ((n as f64) * frac) as u64 % n;
            let x = p.forward(pos).unwrap();
            prop_assert!(x < n);
            prop_assert_eq!(p.inverse(x).unwrap(), pos);
        }

        #[test]
        fn fill_matches_forward(n in large_n(), seed: u64, len in 0usize..300) {
            let p = Permutation::new(Version::V1, n, seed, 0).unwrap();
            let len = len.min(n as usize);
            let start = n - len as u64;
            let mut out = vec![0u64; len];
            p.fill(start, &mut out).unwrap();
            for (i, &x) in out.iter().enumerate() {
                prop_assert_eq!(x, p.forward(start + i as u64).unwrap());
            }
        }
    }
}
