//! ns/index of perm-v1 (forward, inverse, batched fill) beside an in-memory Fisher–Yates
//! shuffle of the same N, and perm-v2 beside perm-v1 (batched fill and inverse, at the
//! SIMD level in use: `PERMSHARD_SIMD` forces one), in the same run.
//! `cargo bench --bench permutation`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use permshard_core::{simd_level, splitmix64, Permutation, Version};

const SIZES: [u64; 3] = [100_000_000, 1_000_000_007, (1 << 30) + 1];
/// Indices per measured call for the O(1) paths.
const BATCH: usize = 1 << 16;

/// Fisher–Yates over a materialised `Vec<u32>` of all N, with splitmix64 as the generator
/// (Lemire's multiply-shift for the bounded draw): what an in-memory shuffle costs.
fn fisher_yates(n: u64, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let j = ((splitmix64(state) as u128 * (i as u128 + 1)) >> 64) as usize;
        v.swap(i, j);
    }
    v
}

fn bench(c: &mut Criterion) {
    for &n in &SIZES {
        let mut group = c.benchmark_group(format!("n={n}"));
        group.sample_size(10);
        let perm = Permutation::new(Version::V1, n, 1, 2).unwrap();
        let mut out = vec![0u64; BATCH];
        group.throughput(Throughput::Elements(BATCH as u64));
        group.bench_function(BenchmarkId::new("fill", BATCH), |b| {
            b.iter(|| perm.fill(black_box(n / 3), &mut out).unwrap())
        });
        group.bench_function(BenchmarkId::new("forward", BATCH), |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for i in 0..BATCH as u64 {
                    acc ^= perm.forward(black_box(n / 3 + i)).unwrap();
                }
                acc
            })
        });
        group.bench_function(BenchmarkId::new("inverse", BATCH), |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for i in 0..BATCH as u64 {
                    acc ^= perm.inverse(black_box(n / 3 + i)).unwrap();
                }
                acc
            })
        });
        group.throughput(Throughput::Elements(n));
        group.bench_function(BenchmarkId::new("fisher_yates_in_memory", n), |b| {
            b.iter(|| black_box(fisher_yates(n, 7)).len())
        });
        group.finish();
    }
}

/// perm-v1 against perm-v2, batched both ways, at sizes of each of v2's paths.
fn versions(c: &mut Criterion) {
    let level = simd_level().expect("PERMSHARD_SIMD names a level of this CPU");
    for n in [10_000u64, 10_000_000, (1 << 40) + 1] {
        let mut group = c.benchmark_group(format!("versions n={n} simd={level}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(BATCH.min(n as usize) as u64));
        for version in [Version::V1, Version::V2] {
            let perm = Permutation::of_version(version, n, 1, 2, 0).unwrap();
            let mut out = vec![0u64; BATCH.min(n as usize)];
            group.bench_function(BenchmarkId::new("fill", version.algorithm()), |b| {
                b.iter(|| perm.fill(black_box(0), &mut out).unwrap())
            });
            group.bench_function(BenchmarkId::new("fill_inverse", version.algorithm()), |b| {
                b.iter(|| perm.fill_inverse(black_box(0), &mut out).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench, versions);
criterion_main!(benches);
