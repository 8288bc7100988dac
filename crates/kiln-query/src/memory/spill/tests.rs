use std::time::Duration;

use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;

const ROWS: i64 = 400_000;

/// A sort of [`ROWS`] rows under a 2 MiB pool, spilling to `dir`, read
/// back by `inline` reads or DataFusion's own: the spill count and the
/// rows in order.
async fn spilling_sort(dir: &Path, inline: bool) -> Result<(usize, Vec<i64>)> {
    let files = DiskManagerBuilder::default()
        .with_mode(DiskManagerMode::Directories(vec![dir.to_path_buf()]));
    let files = if inline {
        DiskManagerBuilder::default()
            .with_temp_file_factory(Arc::new(InlineSpillReads::new(files.build()?)))
    } else {
        files
    };
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(2 << 20)))
        .with_disk_manager_builder(files)
        .build_arc()?;
    let mut config = SessionConfig::new()
        .with_target_partitions(1)
        .with_batch_size(4096);
    config.options_mut().execution.sort_spill_reservation_bytes = 512 << 10;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    let df = ctx
        .sql(&format!(
            "SELECT value * 7 % {ROWS} AS v FROM range({ROWS}) ORDER BY v DESC"
        ))
        .await?;
    let plan = df.create_physical_plan().await?;
    let batches = collect(plan.clone(), ctx.task_ctx()).await?;
    let spills = plan
        .metrics()
        .and_then(|m| m.spill_count())
        .unwrap_or_default();
    let values = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .expect("int64")
                .values()
                .to_vec()
        })
        .collect();
    Ok((spills, values))
}

/// A runtime whose one blocking thread is held until the returned sender
/// is dropped.
fn runtime_without_blocking_threads() -> (tokio::runtime::Runtime, std::sync::mpsc::Sender<()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (release, held) = std::sync::mpsc::channel::<()>();
    runtime.spawn_blocking(move || {
        let _ = held.recv();
    });
    (runtime, release)
}

#[test]
fn spilled_rows_read_back_in_order_without_a_blocking_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, release) = runtime_without_blocking_threads();
    let (spills, values) = runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), spilling_sort(dir.path(), true)).await
        })
        .expect("spill reads waited for a blocking thread")
        .unwrap();
    assert!(spills > 0, "the sort did not spill");
    let expected: Vec<i64> = (0..ROWS).rev().collect();
    assert_eq!(values, expected);
    // DataFusion's own reads need the blocking thread this runtime lacks.
    let stalled = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(2), spilling_sort(dir.path(), false)).await
    });
    assert!(
        stalled.is_err(),
        "the control did not need a blocking thread"
    );
    drop(release);
    runtime.shutdown_background();
}
