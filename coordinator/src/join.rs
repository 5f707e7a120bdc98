//! Two pieces of work at once: the analysis and the report writers split
//! what is independent between this thread and one more.

use std::sync::{Mutex, PoisonError};

/// Runs `task` on a thread of its own while `here` runs on this one, and
/// returns both results. Where no thread can be had (rank 0 under a limit
/// on processes), `task` runs here after `here`. A panic in `task` goes on
/// on this thread.
pub(crate) fn join<A: Send, B>(
    task: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B,
) -> (A, B) {
    join_spawning(
        std::thread::Builder::new().name("rankscope-join".into()),
        task,
        here,
    )
}

/// [`join`], the task's thread made by `builder`.
fn join_spawning<A: Send, B>(
    builder: std::thread::Builder,
    task: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B,
) -> (A, B) {
    // Whichever thread takes the task runs it: the spawned one, or this
    // one when the spawn failed (the closure it was given is dropped).
    let task = Mutex::new(Some(task));
    let run = || {
        let task = task.lock().unwrap_or_else(PoisonError::into_inner).take();
        task.map(|task| task())
    };
    std::thread::scope(|scope| {
        let spawned = builder.spawn_scoped(scope, run);
        let b = here();
        let a = match spawned {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => run(),
        };
        (
            a.expect("the task is taken once, by the thread that runs it"),
            b,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_results_come_back_and_the_task_runs_on_another_thread() {
        let here = std::thread::current().id();
        let (task_thread, sum) = join(|| std::thread::current().id(), || 2 + 2);
        assert_ne!(task_thread, here);
        assert_eq!(sum, 4);
    }

    #[test]
    fn without_a_thread_the_task_runs_here() {
        // No thread has a stack this large: the spawn fails.
        let impossible = std::thread::Builder::new().stack_size(usize::MAX);
        let here = std::thread::current().id();
        let (task_thread, sum) =
            join_spawning(impossible, || std::thread::current().id(), || 2 + 2);
        assert_eq!(task_thread, here);
        assert_eq!(sum, 4);
    }

    #[test]
    fn a_panic_in_the_task_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| join(|| panic!("task failed"), || ()));
        let message = caught.unwrap_err();
        assert_eq!(message.downcast_ref::<&str>(), Some(&"task failed"));
    }
}
