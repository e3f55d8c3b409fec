//! Batches of records gathered ahead, on a thread of their own.
//!
//! A loader without worker processes fetches each batch only when the training loop asks
//! for it, and the gather then waits on memory while nothing else runs. A batch sampler
//! knows the next batch before it hands out this one: told it ([`RecordsAhead::start`]),
//! the gather runs on a second core while the loop handles the current batch, and the
//! fetch ([`RecordsAhead::take`]) finds it done.
//!
//! What a batch holds never depends on it: a fetch that matches no batch gathered ahead
//! is gathered where it is asked for, and a batch gathered ahead that nobody fetches is
//! dropped (its thread keeps nothing it was given).

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::gather::gather_records;

/// Batches gathered ahead and not yet fetched: the next one, and the one after it (a sampler
/// announces batch `k + 1` as it hands out batch `k`, before batch `k` is fetched).
const QUEUED: usize = 2;

/// Fetches in a row that found none of the queued batches, after which nothing more is
/// gathered ahead: whatever fetches the batches does not fetch what the sampler announced
/// (a wrapper that cuts batches anew), and every gather ahead would be wasted.
const MISSES_TO_STOP: u32 = 4;

/// Bytes that batches are gathered ahead from (a memory map kept alive by its owner).
pub trait Source: Send + Sync {
    /// The bytes, unchanged as long as the source lives.
    fn bytes(&self) -> &[u8];
}

/// The memory a batch is gathered into, handed to the gathering thread and back.
pub trait Batch: Send + 'static {
    /// The batch's bytes, written whole by the gather.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Batch for Vec<u8> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// How long a thread that waits spins before it sleeps. Waking a sleeping thread costs
/// a system call on one side and a scheduler's wake-up on the other (tens of
/// microseconds on a virtual machine), as long as a whole gather: the gathering thread
/// keeps watching for the next batch for a while, and a fetch watches for its batch.
const SPIN: Duration = Duration::from_micros(200);

type Job = Box<dyn FnOnce() + Send>;

/// The next message of `inbox`, watched for `wait` before sleeping on it (on one core,
/// sleeping at once: spinning would only hold up the thread that sends). `None` once
/// every sender is gone.
fn spin_for<T>(inbox: &Receiver<T>, wait: Duration) -> Option<T> {
    // Asked once: the answer reads the cgroup's files, as long as a gather.
    static CORES: OnceLock<usize> = OnceLock::new();
    if *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |c| c.get())) > 1 {
        let began = Instant::now();
        loop {
            match inbox.try_recv() {
                Ok(message) => return Some(message),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if began.elapsed() < wait => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => break,
            }
        }
    }
    inbox.recv().ok()
}

/// A batch gathered: its memory, or the gather's error.
pub type Gathered<B> = Result<B, Error>;

/// A batch being gathered: its indices, and where it arrives.
struct Queued<B> {
    indices: Arc<[i64]>,
    done: Receiver<Gathered<B>>,
}

/// The records of `record_bytes` bytes of one source, gathered a batch ahead.
///
/// Its thread starts with the first batch gathered ahead. A process forked from the one that
/// started it (a DataLoader worker) inherits no thread: there the inherited queue and
/// thread are left untouched and a new thread starts when one is needed.
pub struct RecordsAhead<B: Batch> {
    source: Arc<dyn Source>,
    record_bytes: usize,
    /// The thread's job queue and handle, and the process that started it.
    worker: Option<(Sender<Job>, JoinHandle<()>, u32)>,
    queued: VecDeque<Queued<B>>,
    /// Whether a batch was fetched since the last batch was gathered ahead: a sampler
    /// that announces batches nobody fetches in this process has one gathered at most.
    fetched: bool,
    misses: u32,
}

impl<B: Batch> RecordsAhead<B> {
    /// Gathers ahead from `source`, whole records of `record_bytes` bytes.
    pub fn new(source: Arc<dyn Source>, record_bytes: usize) -> Result<Self, Error> {
        if record_bytes == 0 || source.bytes().len() % record_bytes != 0 {
            return Err(Error::Invalid(format!(
                "a source of {} bytes is not a whole number of {record_bytes}-byte records",
                source.bytes().len()
            )));
        }
        Ok(RecordsAhead {
            source,
            record_bytes,
            worker: None,
            queued: VecDeque::new(),
            fetched: false,
            misses: 0,
        })
    }

    /// Starts gathering the records `indices` into the batch `make_batch()` holds (on
    /// `threads` threads for a large batch, as [`gather_records`]), unless nothing was
    /// fetched since the last batch gathered ahead, or the last fetches found nothing
    /// gathered ahead (then `make_batch` is not called). Returns whether it started.
    pub fn start(
        &mut self,
        indices: &[i64],
        threads: usize,
        make_batch: impl FnOnce() -> B,
    ) -> bool {
        self.leave_a_parents_thread();
        if !self.fetched || self.misses >= MISSES_TO_STOP {
            return false;
        }
        if self.worker_or_start().is_none() {
            return false; // no thread to be had: batches are gathered where fetched
        }
        let indices: Arc<[i64]> = indices.into();
        let (tell, done) = channel();
        let (source, record_bytes, ours) =
            (self.source.clone(), self.record_bytes, indices.clone());
        let mut batch = make_batch();
        let job: Job = Box::new(move || {
            let gathered = gather_records(
                source.bytes(),
                record_bytes,
                &ours,
                batch.bytes_mut(),
                threads,
            );
            // Nobody waits for a batch that was dropped: it goes with the job.
            let _ = tell.send(gathered.map(|()| batch));
        });
        let sent = self.worker.as_ref().map(|(jobs, _, _)| jobs.send(job));
        if !matches!(sent, Some(Ok(()))) {
            return false; // the thread is gone: batches are gathered where fetched
        }
        if self.queued.len() == QUEUED {
            self.queued.pop_front();
        }
        self.queued.push_back(Queued { indices, done });
        self.fetched = false;
        true
    }

    /// The records `indices` if they were gathered ahead (waiting for the gather to end):
    /// their bytes, or the gather's error (an index out of range, as a gather where
    /// fetched would say). `None` when no batch gathered ahead holds exactly these indices;
    /// the batches queued before the one returned are dropped.
    pub fn take(&mut self, indices: &[i64]) -> Option<Gathered<B>> {
        self.leave_a_parents_thread();
        self.fetched = true;
        let Some(at) = self.queued.iter().position(|q| *q.indices == *indices) else {
            if !self.queued.is_empty() {
                self.misses += 1;
            }
            return None;
        };
        self.misses = 0;
        self.queued.drain(..at); // announced before it and never fetched
        let found = self.queued.pop_front()?;
        // A thread that ended without an answer (it cannot, but if it did) is a fetch
        // of a batch not gathered ahead.
        spin_for(&found.done, SPIN)
    }

    /// The thread, started on first use; `None` where the platform cannot start one.
    fn worker_or_start(&mut self) -> Option<&(Sender<Job>, JoinHandle<()>, u32)> {
        if self.worker.is_none() {
            let (jobs, inbox) = channel::<Job>();
            let thread = std::thread::Builder::new()
                .name("permshard-gather-ahead".into())
                .spawn(move || {
                    while let Some(job) = spin_for(&inbox, SPIN) {
                        job();
                    }
                })
                .ok()?;
            self.worker = Some((jobs, thread, std::process::id()));
        }
        self.worker.as_ref()
    }

    /// In a process forked from the one that started the thread: the thread does not
    /// exist here, and its channels may have been in use at the fork. They are leaked,
    /// not touched; a new thread starts when a batch is next gathered ahead.
    fn leave_a_parents_thread(&mut self) {
        if matches!(&self.worker, Some((_, _, process)) if *process != std::process::id()) {
            std::mem::forget(self.worker.take());
            std::mem::forget(std::mem::take(&mut self.queued));
        }
    }
}

impl<B: Batch> Drop for RecordsAhead<B> {
    fn drop(&mut self) {
        self.leave_a_parents_thread();
        self.queued.clear();
        if let Some((jobs, thread, _)) = self.worker.take() {
            drop(jobs); // the thread ends after the job it runs
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>);

    impl Source for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    fn rows(records: usize, record: usize) -> Arc<dyn Source> {
        Arc::new(Bytes(
            (0..records * record).map(|b| (b * 7 % 251) as u8).collect(),
        ))
    }

    fn gathered_here(source: &Arc<dyn Source>, record: usize, indices: &[i64]) -> Vec<u8> {
        let mut out = vec![0u8; indices.len() * record];
        gather_records(source.bytes(), record, indices, &mut out, 1).unwrap();
        out
    }

    /// The pattern of a loader over an announcing sampler: batch `k + 1` gathered ahead as
    /// batch `k` is handed out, batch `k` fetched after.
    #[test]
    fn batches_gathered_ahead_are_the_batches_gathered_where_fetched() {
        let source = rows(1000, 12);
        let mut ahead = RecordsAhead::<Vec<u8>>::new(source.clone(), 12).unwrap();
        let start = |ahead: &mut RecordsAhead<Vec<u8>>, batch: &[i64]| {
            ahead.start(batch, 1, || vec![0; batch.len() * 12])
        };
        let batches: Vec<Vec<i64>> = (0..20)
            .map(|k| (0..37).map(|i| (k * 131 + i * 17) % 1000).collect())
            .collect();
        assert!(!start(&mut ahead, &batches[1]), "nothing was fetched yet");
        let mut hits = 0;
        for k in 0..batches.len() {
            if k + 1 < batches.len() {
                start(&mut ahead, &batches[k + 1]);
            }
            let bytes = match ahead.take(&batches[k]) {
                Some(got) => {
                    hits += 1;
                    got.unwrap()
                }
                None => gathered_here(&source, 12, &batches[k]),
            };
            assert_eq!(bytes, gathered_here(&source, 12, &batches[k]), "batch {k}");
        }
        // Batch 0 is fetched before anything is gathered ahead, batch 1's announcement
        // came before any fetch: every later batch was gathered ahead.
        assert_eq!(hits, batches.len() - 2);
    }

    #[test]
    fn a_batch_gathered_ahead_that_fails_fails_when_fetched() {
        let source = rows(10, 4);
        let mut ahead = RecordsAhead::<Vec<u8>>::new(source, 4).unwrap();
        assert!(ahead.take(&[0]).is_none());
        assert!(ahead.start(&[1, 10], 1, || vec![0; 8]));
        assert!(
            ahead.take(&[1, 9]).is_none(),
            "other indices are not the batch gathered ahead"
        );
        let err = ahead.take(&[1, 10]).unwrap().unwrap_err();
        assert!(err.to_string().contains("10"), "{err}");
    }

    #[test]
    fn nothing_is_gathered_ahead_for_a_fetcher_that_never_takes_it() {
        let source = rows(100, 8);
        let mut ahead = RecordsAhead::<Vec<u8>>::new(source, 8).unwrap();
        let made = std::cell::Cell::new(0);
        let start = |ahead: &mut RecordsAhead<Vec<u8>>, index: i64| {
            ahead.start(&[index], 1, || {
                made.set(made.get() + 1);
                vec![0; 8]
            })
        };
        ahead.take(&[0]);
        assert!(start(&mut ahead, 1));
        assert!(
            !start(&mut ahead, 2),
            "no fetch since the last batch gathered ahead"
        );
        // Fetches of batches that were not announced: gathering ahead stops after a few.
        let mut started = 0;
        for k in 0..20 {
            ahead.take(&[50 + k]);
            started += usize::from(start(&mut ahead, k));
        }
        assert_eq!(started as u32, MISSES_TO_STOP - 1);
        assert_eq!(
            made.get(),
            started + 1,
            "a batch is made only for a gather that starts"
        );
        assert!(ahead.queued.len() <= QUEUED);
    }

    #[test]
    fn bad_sources_are_refused() {
        assert!(RecordsAhead::<Vec<u8>>::new(rows(10, 4), 0).is_err());
        assert!(RecordsAhead::<Vec<u8>>::new(rows(10, 4), 3).is_err());
    }
}
