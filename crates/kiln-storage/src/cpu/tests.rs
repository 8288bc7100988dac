use super::*;

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

struct Named(&'static tokio::runtime::Runtime);

impl CpuRuntime for Named {
    fn handle(&self) -> Handle {
        self.0.handle().clone()
    }
}

fn runtime(name: &'static str) -> Arc<dyn CpuRuntime> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .build()
        .unwrap();
    // Leaked: a runtime may not be dropped inside the test's own.
    Arc::new(Named(Box::leak(Box::new(runtime))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn work_runs_on_the_idle_runtime_unless_it_is_urgent() {
    let pool = CpuPool::default();
    let first = pool.run(thread_name).await;
    assert!(!first.starts_with("kiln-test-"), "ran on {first}");
    pool.install(runtime("kiln-test-idle"), runtime("kiln-test-urgent"));
    assert_eq!(pool.run(thread_name).await, "kiln-test-idle");
    // A clone of the flag, as the query layer's cube builder holds it.
    let urgency = pool.urgency().clone();
    urgency.set(true);
    assert!(pool.urgency().is_urgent());
    assert_eq!(pool.run(thread_name).await, "kiln-test-urgent");
    urgency.set(false);
    assert_eq!(pool.run(thread_name).await, "kiln-test-idle");
}

#[tokio::test]
async fn a_panic_in_the_work_goes_on_in_the_caller() {
    let pool = CpuPool::default();
    let caught = tokio::spawn(async move { pool.run(|| -> u8 { panic!("boom") }).await }).await;
    let panic = caught.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
}
