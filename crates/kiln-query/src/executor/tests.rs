use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{StreamExt, TryStreamExt};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

fn batch(v: i64) -> RecordBatch {
    RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(vec![v]))]).unwrap()
}

/// A stream whose every batch holds the nice value of the thread that
/// computed it, and whose thread name must be `kiln-exec`.
fn probe(n: usize) -> SendableRecordBatchStream {
    let rows = futures::stream::iter(0..n).map(|_| {
        let name = std::thread::current().name().unwrap_or("").to_string();
        assert_eq!(name, "kiln-exec", "polled on {name}");
        // SAFETY: reads the calling thread's priority.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        Ok(batch(i64::from(nice)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema(), rows))
}

#[tokio::test]
async fn heavy_streams_run_on_the_dedicated_low_priority_runtime() {
    let exec = Executor::dedicated(2, 7).unwrap();
    let batches: Vec<RecordBatch> = exec.run(probe(5)).try_collect().await.unwrap();
    assert_eq!(batches.len(), 5);
    for b in &batches {
        let nice = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(nice.value(0), 7);
    }
}

/// The idle runtime's workers and blocking threads (where the storage
/// engine's CPU work runs) are in the idle scheduling class.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_idle_runtime_runs_in_the_idle_scheduling_class() {
    // Held: the runtime shuts down with its last executor.
    let idle = Executor::idle().unwrap().cpu_runtime().unwrap();
    let handle = idle.handle();
    let policy = || {
        let name = std::thread::current().name().unwrap_or("").to_string();
        // SAFETY: reads the calling thread's scheduling policy.
        (name, unsafe { libc::sched_getscheduler(0) })
    };
    let want = ("kiln-idle".to_string(), libc::SCHED_IDLE);
    assert_eq!(handle.spawn_blocking(policy).await.unwrap(), want);
    assert_eq!(handle.spawn(async move { policy() }).await.unwrap(), want);
    // The background runtime's stay in the normal class, at their nice.
    let background = Executor::background(3).unwrap().cpu_runtime().unwrap();
    let handle = background.handle();
    let (name, policy) = handle.spawn_blocking(policy).await.unwrap();
    assert_eq!(
        (name.as_str(), policy),
        ("kiln-background", libc::SCHED_OTHER)
    );
}

#[tokio::test]
async fn inline_streams_run_where_they_are_polled() {
    let exec = Executor::inline();
    assert!(!exec.is_dedicated());
    let out = std::panic::AssertUnwindSafe(exec.run(probe(1)).try_collect::<Vec<_>>());
    let polled_here = futures::FutureExt::catch_unwind(out).await;
    assert!(
        polled_here.is_err(),
        "an inline stream is not polled on kiln-exec"
    );
}

#[tokio::test]
async fn a_panic_while_executing_is_an_error_not_a_short_result() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let rows = futures::stream::iter(0..3).map(|i| {
        assert!(i < 1, "boom at {i}");
        Ok(batch(i))
    });
    let stream = Box::pin(RecordBatchStreamAdapter::new(schema(), rows));
    let mut out = exec.run(stream);
    assert!(out.next().await.unwrap().is_ok());
    let e = out.next().await.unwrap().unwrap_err().to_string();
    assert!(e.contains("query execution failed: boom at 1"), "{e}");
    assert!(out.next().await.is_none());
}

struct SetOnDrop(Arc<AtomicBool>);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn dropping_the_reader_stops_the_work() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = SetOnDrop(dropped.clone());
    // Endless: only the reader going away can stop it.
    let rows = futures::stream::repeat_with(move || {
        let _ = &guard;
        Ok(batch(1))
    });
    let mut out = exec.run(Box::pin(RecordBatchStreamAdapter::new(schema(), rows)));
    assert!(out.next().await.unwrap().is_ok());
    drop(out);
    for _ in 0..200 {
        if dropped.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the executing stream was not dropped after its reader went away");
}

#[tokio::test]
async fn a_plan_executes_on_the_runtime_that_polls_it() {
    use datafusion::prelude::SessionContext;
    let ctx = SessionContext::new();
    let df = ctx.sql("SELECT 1 AS one").await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let exec = Executor::dedicated(1, 0).unwrap();
    let batches: Vec<RecordBatch> = exec
        .run(deferred(plan, ctx.task_ctx()))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

/// A stream of `n` batches, each burning `cpu` of its thread's CPU time
/// and holding 1 if it was computed on `kiln-exec`, else 0.
fn burner(n: usize, cpu: std::time::Duration) -> SendableRecordBatchStream {
    let rows = futures::stream::iter(0..n).map(move |_| {
        let from = thread_cpu();
        while thread_cpu() - from < cpu {
            std::hint::spin_loop();
        }
        let on_exec = std::thread::current().name() == Some("kiln-exec");
        Ok(batch(i64::from(on_exec)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema(), rows))
}

fn on_exec(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0)
        })
        .collect()
}

#[tokio::test]
async fn a_short_stream_runs_where_it_is_read() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let moved = Arc::new(AtomicBool::new(false));
    let m = moved.clone();
    let stream = exec.run_short(
        burner(3, std::time::Duration::ZERO),
        Box::new(move || m.store(true, Ordering::SeqCst)),
    );
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    assert_eq!(on_exec(&batches), [0, 0, 0]);
    assert!(!moved.load(Ordering::SeqCst));
}

// Elsewhere streams never move (no thread CPU clock), and the burner
// would never end.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_stream_expected_short_moves_to_the_executor_once_over_its_cpu() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let moved = Arc::new(AtomicBool::new(false));
    let m = moved.clone();
    // Each batch costs 40% of the budget: the third passes it.
    let cost = SHORT_CPU * 2 / 5;
    let stream = exec.run_short(
        burner(6, cost),
        Box::new(move || m.store(true, Ordering::SeqCst)),
    );
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
    assert_eq!(on_exec(&batches), [0, 0, 0, 1, 1, 1]);
    assert!(moved.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_panic_in_a_short_stream_is_an_error_not_a_short_result() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let rows = futures::stream::iter(0..3).map(|i| {
        assert!(i < 1, "boom at {i}");
        Ok(batch(i))
    });
    let stream = Box::pin(RecordBatchStreamAdapter::new(schema(), rows));
    let mut out = exec.run_short(stream, Box::new(|| {}));
    assert!(out.next().await.unwrap().is_ok());
    let e = out.next().await.unwrap().unwrap_err().to_string();
    assert!(e.contains("query execution failed: boom at 1"), "{e}");
    assert!(out.next().await.is_none());
}

#[tokio::test]
async fn what_a_short_stream_spawns_runs_on_the_executor() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let rows = futures::stream::once(async {
        let spawned = tokio::spawn(async { std::thread::current().name() == Some("kiln-exec") });
        Ok(batch(i64::from(spawned.await.unwrap())))
    });
    let stream = Box::pin(RecordBatchStreamAdapter::new(schema(), rows));
    let batches: Vec<RecordBatch> = exec
        .run_short(stream, Box::new(|| {}))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(on_exec(&batches), [1]);
}

/// Burns `cpu` of the thread's CPU time; whether that was on `kiln-exec`.
fn burn(cpu: std::time::Duration) -> bool {
    let from = thread_cpu();
    while thread_cpu() - from < cpu {
        std::hint::spin_loop();
    }
    std::thread::current().name() == Some("kiln-exec")
}

// As above: elsewhere nothing moves, and the burn would never end.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn work_a_short_stream_shares_runs_apart_and_does_not_move_it() {
    let exec = Executor::dedicated(1, 0).unwrap();
    let run = |apart: bool| {
        let moved = Arc::new(AtomicBool::new(false));
        let m = moved.clone();
        let rows = futures::stream::iter(0..2).then(move |_| async move {
            let on_exec = match apart {
                true => shared(async { Ok(burn(SHORT_CPU * 3)) }).await?,
                false => burn(SHORT_CPU * 3),
            };
            Ok(batch(i64::from(on_exec)))
        });
        let stream = Box::pin(RecordBatchStreamAdapter::new(schema(), rows));
        let stream = exec.run_short(stream, Box::new(move || m.store(true, Ordering::SeqCst)));
        async move {
            let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
            (on_exec(&batches), moved.load(Ordering::SeqCst))
        }
    };
    // Shared: made on the executor, and the stream stays where it is read.
    assert_eq!(run(true).await, (vec![1, 1], false));
    // Its own: the first batch passes the budget here, and the stream moves.
    assert_eq!(run(false).await, (vec![0, 1], true));
}

#[tokio::test]
async fn a_panic_in_shared_work_is_an_error() {
    let e = shared(async {
        assert!(std::hint::black_box(false), "boom");
        Ok(())
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("query execution failed: boom"), "{e}");
}
