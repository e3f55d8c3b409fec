//! The one work pool of the proofs and planners: tasks `0..tasks` pulled in order by
//! scoped threads, each with its own buffers; the first error stops the pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Error;

/// Items per unit of work: one batched fill, one batched inverse, one progress tick.
pub const CHUNK: u64 = 1 << 16;

/// Threads for `tasks` tasks: `threads`, or all cores for `0`; never more than the tasks.
pub fn worker_threads(threads: usize, tasks: u64) -> usize {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
        t => t,
    };
    threads.min(tasks.clamp(1, usize::MAX as u64) as usize)
}

/// Runs `work(&mut state, task)` for every task of `0..tasks` on `threads` threads (`0`:
/// all cores), each thread with its own `state` from `init` (its buffers).
///
/// Tasks are pulled in increasing order, so when a task fails every smaller one has
/// already started: the pool stops pulling and returns the error of the smallest task
/// that failed, whatever the threads — the same counter-example on every machine.
pub fn run<S, I, F>(threads: usize, tasks: u64, init: I, work: F) -> Result<(), Error>
where
    I: Fn() -> S + Sync,
    F: Fn(&mut S, u64) -> Result<(), Error> + Sync,
{
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<(u64, Error)>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..worker_threads(threads, tasks) {
            scope.spawn(|| {
                let mut state = init();
                while !stop.load(Ordering::Relaxed) {
                    let task = next.fetch_add(1, Ordering::Relaxed);
                    if task >= tasks {
                        break;
                    }
                    if let Err(e) = work(&mut state, task) {
                        stop.store(true, Ordering::Relaxed);
                        let mut slot = failed.lock().unwrap_or_else(|e| e.into_inner());
                        if slot.as_ref().is_none_or(|(t, _)| task < *t) {
                            *slot = Some((task, e));
                        }
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// `CHUNK`-sized buffers, one set per thread.
pub fn buffers<const K: usize>() -> [Vec<u64>; K] {
    std::array::from_fn(|_| vec![0u64; CHUNK as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        for threads in [1, 3, 8] {
            let done: Vec<AtomicU64> = (0..100).map(|_| AtomicU64::new(0)).collect();
            run(
                threads,
                100,
                || (),
                |_, t| {
                    done[t as usize].fetch_add(1, Ordering::Relaxed);
                    Ok(())
                },
            )
            .unwrap();
            assert!(done.iter().all(|d| d.load(Ordering::Relaxed) == 1));
        }
        run(4, 0, || (), |_, _| Err(Error::Invalid("never".into()))).unwrap();
    }

    #[test]
    fn the_smallest_failing_task_is_reported() {
        for threads in [1, 2, 7] {
            let e = run(
                threads,
                1000,
                || (),
                |_, t| match t {
                    42 | 43 | 900 => Err(Error::Invalid(format!("task {t}"))),
                    _ => Ok(()),
                },
            )
            .unwrap_err();
            assert_eq!(e.to_string(), Error::Invalid("task 42".into()).to_string());
        }
    }
}
