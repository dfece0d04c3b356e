//! Two independent durable writes at once: a commit's snapshot object and its event segment must
//! both be durable before the manifest attests them, but neither waits for the other (decision
//! D65). Each write's fsyncs wait on the disk; overlapping them lets the filesystem's journal
//! serve both in fewer flushes.
//!
//! The job runs on a parked worker thread, kept for the next commit (spawning a thread per commit
//! costs more than the overlap saves on a fast disk). A worker serves one job at a time; a second
//! concurrent commit takes another idle worker or starts one. When no thread can be started the
//! job runs first on the caller's thread: the old sequential order.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;
use std::sync::mpsc::{self, Sender};

type Job = Box<dyn FnOnce() + Send>;

/// Idle workers, each the sending end of its thread's job queue.
static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

/// The most workers kept parked; more concurrent commits start short-lived ones.
const MAX_IDLE: usize = 4;

fn worker() -> Option<Sender<Job>> {
    if let Some(idle) = IDLE.lock().unwrap_or_else(|p| p.into_inner()).pop() {
        return Some(idle);
    }
    let (sender, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("workrail-io".into())
        .spawn(move || {
            // Ends when its sender is dropped (a worker not returned to the idle list).
            for job in jobs {
                job();
            }
        })
        .ok()?;
    Some(sender)
}

fn park(sender: Sender<Job>) {
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    if idle.len() < MAX_IDLE {
        idle.push(sender);
    }
}

/// Runs `job` on a worker thread while `here` runs on this one; returns both results once both
/// are done. A panic in `job` resumes on this thread after `here` finished.
pub(crate) fn both<A, B>(
    job: impl FnOnce() -> A + Send + 'static,
    here: impl FnOnce() -> B,
) -> (A, B)
where
    A: Send + 'static,
{
    let Some(sender) = worker() else {
        let a = job();
        return (a, here());
    };
    let (done, result) = mpsc::sync_channel(1);
    let boxed: Job = Box::new(move || {
        let _ = done.send(catch_unwind(AssertUnwindSafe(job)));
    });
    if let Err(mpsc::SendError(boxed)) = sender.send(boxed) {
        // The worker is gone (it cannot be, short of a bug): run the job here, in order.
        boxed();
        let a = match result.recv() {
            Ok(Ok(a)) => a,
            Ok(Err(panic)) => resume_unwind(panic),
            Err(_) => unreachable!("the job ran on this thread and sent its result"),
        };
        return (a, here());
    }
    let b = here();
    match result.recv() {
        Ok(Ok(a)) => {
            park(sender);
            (a, b)
        }
        Ok(Err(panic)) => {
            park(sender);
            resume_unwind(panic)
        }
        // The worker died without answering: only a bug in this module does that.
        Err(_) => panic!("a workrail-io worker ended without finishing its job"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::Barrier;

    #[test]
    fn both_sides_run_at_the_same_time_and_return_their_results() {
        // Each side waits for the other at the barrier: sequential execution would deadlock.
        let barrier = Arc::new(Barrier::new(2));
        let other = Arc::clone(&barrier);
        let (a, b) = both(
            move || {
                other.wait();
                "job"
            },
            || {
                barrier.wait();
                7
            },
        );
        assert_eq!((a, b), ("job", 7));
    }

    #[test]
    fn a_panicking_job_panics_the_caller_after_its_own_side_ran() {
        let ran = std::cell::Cell::new(false);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            both(|| -> u8 { panic!("job failed") }, || ran.set(true))
        }));
        assert!(outcome.is_err());
        assert!(ran.get());
        // The worker survives for the next job.
        assert_eq!(both(|| 1, || 2), (1, 2));
    }

    #[test]
    fn concurrent_callers_each_get_their_own_worker() {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                std::thread::spawn(move || {
                    let barrier = Arc::new(Barrier::new(2));
                    let other = Arc::clone(&barrier);
                    both(
                        move || {
                            other.wait();
                            i
                        },
                        || {
                            barrier.wait();
                            i * 10
                        },
                    )
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), (i, i * 10));
        }
    }
}
