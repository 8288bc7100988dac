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

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn work_runs_on_the_installed_runtime_once_there_is_one() {
    let pool = CpuPool::default();
    assert_ne!(pool.run(thread_name).await, "kiln-test-cpu");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kiln-test-cpu")
        .build()
        .unwrap();
    // Leaked: a runtime may not be dropped inside the test's own.
    pool.install(Arc::new(Named(Box::leak(Box::new(runtime)))));
    assert_eq!(pool.run(thread_name).await, "kiln-test-cpu");
}

#[tokio::test]
async fn a_panic_in_the_work_goes_on_in_the_caller() {
    let pool = CpuPool::default();
    let caught = tokio::spawn(async move { pool.run(|| -> u8 { panic!("boom") }).await }).await;
    let panic = caught.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
}
