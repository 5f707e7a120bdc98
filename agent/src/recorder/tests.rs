//! The recorder's tests: threads coming and going, pairing past full
//! chunks, the row budget under threads pairing at once, stage ids and
//! sessions.

use super::events::{Event, EventLog};
use super::hot_path::{NOT_OPENED, REFUSED};
use super::CHUNK_EVENTS;
use super::*;
use crate::sync::lock;
use rankscope_common::table::StagesView;
use std::cell::RefCell;

#[test]
fn a_thread_that_exits_leaves_its_records_and_takes_its_buffer() {
    let recorder = Arc::new(Recorder::new(&Config::default()));
    recorder.begin_session();
    for _ in 0..200 {
        let recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let id = recorder.begin_stage("work", None);
            recorder.end_stage(id);
        })
        .join()
        .unwrap();
    }
    assert!(
        recorder.registry.threads().is_empty(),
        "every exited thread's buffer is freed"
    );
    let (builders, _) = recorder.drain();
    let tables = builders.finish().unwrap();
    assert_eq!(
        tables[&Table::Stages].num_rows(),
        200,
        "and its records kept"
    );
}

/// A stage that another thread-local's destructor records after the
/// recorder's thread-local is gone (on Linux destructors run last
/// registered first) is not recorded, and the thread exits without a
/// panic (a panic in a thread-local's destructor aborts the process).
#[test]
fn a_stage_recorded_while_the_thread_is_torn_down_is_left_out() {
    /// Records at its drop; what the calls returned goes to the slot.
    struct StageAtExit(Arc<Recorder>, Arc<Mutex<Option<(u64, bool)>>>);
    impl Drop for StageAtExit {
        fn drop(&mut self) {
            let recorder = &self.0;
            let late = recorder.begin_stage("late", None);
            recorder.end_stage(late);
            let stopped = recorder.stop_stage("work") != Ended::None;
            recorder.record_row(Table::Metrics, |t, ticks| {
                t.push_metric(ticks, Section::Custom, "late", 1.0);
            });
            *lock(&self.1) = Some((late, stopped));
        }
    }
    thread_local! {
        static AT_EXIT: RefCell<Option<StageAtExit>> = const { RefCell::new(None) };
    }
    let recorder = Arc::new(Recorder::new(&Config::default()));
    recorder.begin_session();
    let outcome = Arc::new(Mutex::new(None));
    let at_exit = StageAtExit(Arc::clone(&recorder), Arc::clone(&outcome));
    let thread_recorder = Arc::clone(&recorder);
    std::thread::spawn(move || {
        let recorder = thread_recorder;
        // Registered before the recorder's thread-local: destroyed
        // after it.
        AT_EXIT.with(|slot| *slot.borrow_mut() = Some(at_exit));
        let work = recorder.begin_stage("work", None);
        recorder.end_stage(work);
    })
    .join()
    .unwrap();
    assert_eq!(*lock(&outcome), Some((NOT_OPENED, false)));
    assert_eq!(
        recorder.registry.budget.kept[Table::Metrics as usize].load(Ordering::Relaxed),
        0,
        "the metric's row budget given back"
    );
    recorder.end_session();
    let tables = recorder.drain().0.finish().unwrap();
    let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
    assert_eq!((stages.len, stages.name.get(0)), (1, "work"));
    assert!(!tables.contains_key(&Table::Metrics));
}

/// A row's clock ticks become session nanoseconds at the first pairing
/// pass after it is recorded, and only then: later passes leave it be.
#[test]
fn rows_are_stamped_in_ticks_and_converted_once_at_a_pass() {
    let recorder = Recorder::new(&Config::default());
    // The session starts well after the clock's epoch: a time left in
    // monotonic nanoseconds since the epoch would show.
    std::thread::sleep(std::time::Duration::from_millis(5));
    recorder.begin_session();
    let metric = |i: usize| {
        recorder
            .with_thread(|t| t.records.metrics[i].ts_ns)
            .unwrap()
    };
    let record = |value| {
        recorder.record_row(Table::Metrics, |t, ticks| {
            t.push_metric(ticks, Section::Custom, "m", value)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(2));
    let lo = recorder.now_ns();
    record(1.0);
    let hi = recorder.now_ns();
    recorder.pair_events();
    let first = metric(0);
    // The line's jitter: tens of nanoseconds; 100 µs of room.
    assert!(
        lo.saturating_sub(100_000) <= first && first <= hi + 100_000,
        "{lo} <= {first} <= {hi} ns"
    );
    record(2.0);
    recorder.pair_events();
    recorder.pair_events();
    assert_eq!(metric(0), first, "converted once");
    let second = metric(1);
    assert!(first < second && second <= recorder.now_ns());
    // A flush takes the rows and keeps the memory: the next rows, fewer
    // than before, are converted all the same.
    let flushed = recorder.flush().finish().unwrap();
    let metrics = rankscope_common::table::MetricsView::new(&flushed[&Table::Metrics]).unwrap();
    assert_eq!(metrics.ts_ns, [first, second]);
    let lo = recorder.now_ns();
    record(3.0);
    let third_hi = recorder.now_ns();
    recorder.end_session();
    let (builders, _) = recorder.drain();
    let tables = builders.finish().unwrap();
    let metrics = rankscope_common::table::MetricsView::new(&tables[&Table::Metrics]).unwrap();
    let third = metrics.ts_ns[0];
    assert!(lo.saturating_sub(100_000) <= third && third <= third_hi + 100_000);
    assert_eq!(metrics.len, 1);
}

/// Many times the log's size of nested stages, read while they are
/// recorded and after: every stage once, nested as it ran, in the
/// order of its ends, with its call index.
#[test]
fn stages_past_many_full_logs_pair_into_nested_rows() {
    let recorder = Recorder::new(&Config::default());
    recorder.begin_session();
    let outer_calls = CHUNK_EVENTS * 3 / 4 + 7;
    for i in 0..outer_calls {
        let outer = recorder.begin_stage("outer", Some(format!("{{\"i\":{i}}}")));
        let inner = recorder.begin_stage("inner", None);
        recorder.end_stage(inner);
        if i % 1000 == 0 {
            // A reader in the middle: the sampler's live view.
            assert_eq!(recorder.open_stage_names(), ["outer"]);
        }
        recorder.end_stage(outer);
    }
    recorder.end_session();
    let (builders, overflow) = recorder.drain();
    assert_eq!(overflow.stages_too_deep, 0);
    let tables = builders.finish().unwrap();
    let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
    assert_eq!(stages.len, 2 * outer_calls);
    for i in 0..outer_calls {
        let (inner, outer) = (2 * i, 2 * i + 1);
        assert_eq!(stages.name.get(inner), "inner");
        assert_eq!(stages.name.get(outer), "outer");
        assert_eq!(stages.parent_id.get(inner), Some(stages.stage_id[outer]));
        assert_eq!((stages.depth[inner], stages.depth[outer]), (1, 0));
        assert_eq!(stages.call_index[outer], i as u32);
        assert_eq!(
            stages.metadata.get(outer),
            Some(format!("{{\"i\":{i}}}").as_str())
        );
        assert!(stages.start_ns[outer] <= stages.start_ns[inner]);
        assert!(stages.end_ns[inner] <= stages.end_ns[outer]);
    }
}

/// A thread hands its full chunks over unpaired while the recorder's
/// budget of chunks lasts, and pairs its own past it; a reader pairs
/// what was handed over, in order; paired chunks serve any thread.
#[test]
fn full_chunks_wait_for_a_reader_within_the_budget_of_chunks() {
    // S stages fill a chunk; the row budget holds 4 S stages, and 4
    // chunks besides the one each thread writes.
    const S: usize = CHUNK_EVENTS / 2;
    let recorder = Arc::new(Recorder::new(&Config {
        max_data_points: 4 * S,
        ..Config::default()
    }));
    assert_eq!(recorder.registry.max_chunks, 4);
    let stages = |recorder: &Recorder, count: usize| {
        for _ in 0..count {
            let stage = recorder.begin_stage("s", None);
            recorder.end_stage(stage);
        }
    };
    // (chunks handed over, stage rows) of the one live thread, chunks
    // besides the threads' own, spare chunks.
    let state = |recorder: &Recorder| {
        let thread = recorder.registry.threads()[0].clone();
        let data = thread.lock();
        (
            data.full.len(),
            data.records.stages.len(),
            recorder.registry.chunks.load(Ordering::Relaxed),
            lock(&recorder.registry.spare_chunks).len(),
        )
    };
    recorder.begin_session();
    let thread = {
        let recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            // Three chunks' worth: two handed over, the third full and
            // still the thread's; nothing paired on the thread.
            stages(&recorder, 3 * S);
            assert_eq!(state(&recorder), (2, 0, 2, 0));
            // A reader (the sampler's pass) pairs them, oldest first.
            recorder.pair_events();
            assert_eq!(state(&recorder), (0, 3 * S, 2, 2));
            // Four more: the spares and two new chunks, the budget.
            stages(&recorder, 4 * S);
            assert_eq!(state(&recorder), (4, 3 * S, 4, 0));
            // At the next, the thread pairs its own: what the row
            // budget leaves room for is kept, the rest counted.
            stages(&recorder, 1);
            assert_eq!(state(&recorder), (0, 4 * S, 4, 4));
        })
    };
    thread.join().unwrap();
    // Another thread writes in the chunks the first one used.
    let thread = {
        let recorder = Arc::clone(&recorder);
        std::thread::spawn(move || {
            stages(&recorder, 3 * S);
            assert_eq!(state(&recorder), (2, 0, 4, 2));
        })
    };
    thread.join().unwrap();
    recorder.end_session();
    let tables = recorder.drain().0.finish().unwrap();
    let rows = StagesView::new(&tables[&Table::Stages]).unwrap();
    assert_eq!(rows.len, 4 * S);
    assert!(
        (1..rows.len).all(|i| rows.start_ns[i - 1] <= rows.start_ns[i]),
        "the first thread's first stages, in the order they ran"
    );
    assert_eq!(
        recorder.take_dropped(),
        vec![(Table::Stages, (6 * S + 1) as u64)]
    );
}

/// A stage refused as too deep, ended by name or by its guard, never
/// ends an open stage of the same name.
#[test]
fn ending_a_stage_refused_as_too_deep_leaves_the_open_ones_alone() {
    let recorder = Recorder::new(&Config {
        max_open_stages: 2,
        ..Config::default()
    });
    recorder.begin_session();
    let name = StageName::new("recurse");
    let outer = recorder.begin_named_stage(&name, None);
    let inner = recorder.begin_named_stage(&name, None);
    for _ in 0..3 {
        // Refused, then ended by name: the refused call ends.
        assert_ne!(recorder.begin_named_stage(&name, None) & REFUSED, 0);
        assert_eq!(recorder.stop_named_stage(&name), Ended::Stage);
    }
    let refused = recorder.begin_named_stage(&name, None);
    recorder.end_stage(refused);
    assert_eq!(recorder.open_stage_names(), ["recurse", "recurse"]);
    recorder.end_stage(inner);
    recorder.end_stage(outer);
    recorder.end_session();
    let (builders, overflow) = recorder.drain();
    assert_eq!(overflow.stages_too_deep, 4);
    let tables = builders.finish().unwrap();
    let stages = StagesView::new(&tables[&Table::Stages]).unwrap();
    assert_eq!(stages.len, 2);
    assert_eq!((stages.depth[0], stages.depth[1]), (1, 0));
}

/// An id ends a stage of the thread that began it alone: another
/// thread's id, a made-up number (`OpenStageId::from_raw(0)`) or a
/// stage's sequence number alone ends nothing here.
#[test]
fn a_stage_id_ends_nothing_on_another_thread() {
    let recorder = Arc::new(Recorder::new(&Config::default()));
    recorder.begin_session();
    let here = recorder.begin_stage("here", None);
    let (id_sender, id) = std::sync::mpsc::channel();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let other = Arc::clone(&recorder);
    let thread = std::thread::spawn(move || {
        let there = other.begin_stage("there", None);
        id_sender.send(there).unwrap();
        wait.recv().unwrap();
        other.end_stage(there);
    });
    let there = id.recv().unwrap();
    assert_eq!(there & u64::from(u32::MAX), here & u64::from(u32::MAX));
    for foreign in [there, 0, 3, here & u64::from(u32::MAX)] {
        recorder.end_stage(foreign);
    }
    let mut open = recorder.open_stage_names();
    open.sort();
    assert_eq!(open, ["here", "there"]);
    done.send(()).unwrap();
    thread.join().unwrap();
    recorder.end_stage(here);
    assert!(recorder.open_stage_names().is_empty());
}

/// Refused calls of more names than there is room for runs still end
/// before any open stage: the innermost run takes any name.
#[test]
fn refused_calls_past_the_room_for_runs_still_end_first() {
    let recorder = Recorder::new(&Config {
        max_open_stages: 1,
        ..Config::default()
    });
    recorder.begin_session();
    let (a, b) = (StageName::new("a"), StageName::new("b"));
    let outer = recorder.begin_named_stage(&a, None);
    assert_ne!(recorder.begin_named_stage(&b, None) & REFUSED, 0);
    assert_ne!(recorder.begin_named_stage(&a, None) & REFUSED, 0);
    assert_eq!(
        recorder.stop_named_stage(&a),
        Ended::Stage,
        "the refused `a`"
    );
    assert_eq!(
        recorder.stop_named_stage(&b),
        Ended::Stage,
        "the refused `b`"
    );
    assert_eq!(
        recorder.open_stage_names(),
        ["a"],
        "the open `a` is untouched"
    );
    recorder.end_stage(outer);
    assert!(recorder.open_stage_names().is_empty());
}

/// Once a session is drained, stages that end belong to no session:
/// nothing is held for it, and nothing reaches the next.
#[test]
fn stages_ending_after_the_drain_are_in_no_session() {
    let recorder = Recorder::new(&Config::default());
    recorder.begin_session();
    let late = recorder.begin_stage("late", None);
    recorder.end_session();
    let _ = recorder.drain();
    recorder.end_stage(late);
    let held = |r: &Recorder| r.row_counts()[Table::Stages as usize].1;
    assert_eq!(held(&recorder), 0);
    recorder.begin_session();
    recorder.end_session();
    assert!(recorder.drain().0.finish().unwrap().is_empty());
}

/// Threads pairing at once take the row budget a chunk at a time, and
/// it still comes out exact: what fits is kept, the rest counted.
#[test]
fn the_row_budget_is_exact_with_threads_pairing_at_once() {
    let recorder = Arc::new(Recorder::new(&Config {
        max_data_points: 2_500,
        ..Config::default()
    }));
    recorder.begin_session();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let recorder = Arc::clone(&recorder);
            std::thread::spawn(move || {
                let name = StageName::new("work");
                for _ in 0..CHUNK_EVENTS {
                    let stage = recorder.begin_named_stage(&name, None);
                    recorder.end_stage(stage);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    recorder.end_session();
    let (builders, _) = recorder.drain();
    let tables = builders.finish().unwrap();
    assert_eq!(tables[&Table::Stages].num_rows(), 2_500);
    let dropped = recorder.take_dropped();
    assert_eq!(
        dropped,
        vec![(Table::Stages, (4 * CHUNK_EVENTS - 2_500) as u64)]
    );
}

/// A stage begun in one session and ended in the next is in neither.
#[test]
fn a_stage_belongs_to_the_session_it_began_and_ended_in() {
    let recorder = Recorder::new(&Config::default());
    recorder.begin_session();
    let spanning = recorder.begin_stage("spanning", None);
    let kept = recorder.begin_stage("kept", None);
    recorder.end_stage(kept);
    recorder.end_session();
    let names = |builders: Builders| -> Vec<String> {
        let tables = builders.finish().unwrap();
        match tables.get(&Table::Stages) {
            Some(batch) => {
                let stages = StagesView::new(batch).unwrap();
                (0..stages.len)
                    .map(|i| stages.name.get(i).to_string())
                    .collect()
            }
            None => Vec::new(),
        }
    };
    assert_eq!(names(recorder.drain().0), ["kept"]);
    recorder.begin_session();
    recorder.end_stage(spanning);
    recorder.end_session();
    assert!(names(recorder.drain().0).is_empty());
}

/// The event log on its own (also run under Miri: scripts/miri.sh).
#[test]
fn event_log_round_trips_events_until_it_is_full() {
    let log = EventLog::new();
    let events = [
        Event::Begin {
            seq: u32::MAX,
            name: 1_000_000,
            ticks: u64::MAX,
        },
        Event::End { seq: 0, ticks: 1 },
        Event::Begin {
            seq: 7,
            name: 0,
            ticks: 0,
        },
    ];
    for event in events {
        assert!(log.push(event));
    }
    // SAFETY: nobody else has the log.
    let (read, end) = unsafe { log.read(1) };
    assert_eq!(read.collect::<Vec<_>>(), events[1..]);
    assert_eq!(end, 3);
    for i in 3..CHUNK_EVENTS {
        assert!(log.push(Event::End {
            seq: i as u32,
            ticks: 0
        }));
    }
    assert!(!log.push(Event::End { seq: 0, ticks: 0 }), "full");
    log.clear();
    assert_eq!(unsafe { log.read(0) }.1, 0);
}

/// The end of a stage named `step_stage` is a step, on any thread and by
/// id or by name; no other stage's end is, nor an end that ends nothing.
#[test]
fn the_end_of_the_step_stage_is_a_step() {
    let recorder = Recorder::new(&Config {
        step_stage: Some("denoise".into()),
        ..Config::default()
    });
    recorder.begin_session();
    let outer = recorder.begin_stage("generate", None);
    let step = recorder.begin_stage("denoise", None);
    assert!(recorder.end_stage(step));
    assert!(!recorder.end_stage(step), "ended already");
    recorder.begin_stage("denoise", None);
    assert_eq!(recorder.stop_stage("denoise"), Ended::Step);
    assert_eq!(recorder.stop_stage("denoise"), Ended::None);
    assert!(!recorder.end_stage(outer));
    std::thread::scope(|s| {
        s.spawn(|| {
            let name = crate::StageName::new("denoise");
            recorder.begin_named_stage(&name, None);
            assert_eq!(recorder.stop_named_stage(&name), Ended::Step);
        });
    });
    // Without a step stage, no end is a step.
    let plain = Recorder::new(&Config::default());
    plain.begin_session();
    let stage = plain.begin_stage("denoise", None);
    assert!(!plain.end_stage(stage));
}
