use arrow::array::AsArray;
use arrow::datatypes::DataType;
use arrow::util::pretty::pretty_format_batches;
use kiln_storage::StorageConfig;

use super::*;
use crate::{Engine, Origin, Output};

const LOOKUP: &str = "SELECT v FROM kv WHERE id = $1 ORDER BY v";

async fn engine(dir: &std::path::Path) -> Engine {
    let engine = Engine::new(Db::open(StorageConfig::for_dir(dir)).await.unwrap()).unwrap();
    create(&engine, "(1, 'a'), (2, 'b'), (3, 'c')").await;
    engine
}

async fn create(engine: &Engine, rows: &str) {
    engine
        .execute("CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v VARCHAR)")
        .await
        .unwrap();
    insert(engine, rows).await;
}

/// Inserts `(id, 'v'), ...` rows, all at one time.
async fn insert(engine: &Engine, rows: &str) {
    let rows = rows.replace('(', "(TIMESTAMP '2026-11-01 00:00:00', ");
    engine
        .execute(&format!("INSERT INTO kv VALUES {rows}"))
        .await
        .unwrap();
}

/// Runs `sql` as a prepared statement with one BIGINT parameter; the
/// values of its single column, in order.
async fn lookup(engine: &Engine, sql: &str, id: i64) -> Vec<String> {
    lookup_with(engine, sql, id, &[]).await
}

/// [`lookup`] in a session that set `settings`.
async fn lookup_with(
    engine: &Engine,
    sql: &str,
    id: i64,
    settings: &[(String, String)],
) -> Vec<String> {
    let batches = prepared(engine, sql, ScalarValue::from(id), settings)
        .await
        .unwrap();
    cells(&batches)
}

/// Runs `sql` as a prepared statement with one parameter of `value`'s
/// type, in a session that set `settings`: its batches, or the error.
async fn prepared(
    engine: &Engine,
    sql: &str,
    value: ScalarValue,
    settings: &[(String, String)],
) -> crate::Result<Vec<arrow::array::RecordBatch>> {
    let logical = engine
        .session()
        .state()
        .create_logical_plan(sql)
        .await
        .unwrap();
    let query = engine.begin(Origin::EMBEDDED, sql).await.unwrap();
    for (name, value) in settings {
        query.set(name, Some(value.clone()));
    }
    let streamed = engine
        .run_prepared(&query, sql, &logical, &[value.data_type()], &[value])
        .await?;
    let Output::Rows { batches, .. } = streamed.collect().await? else {
        panic!("rows expected")
    };
    Ok(batches)
}

/// The values of a single-column result, in order, as text.
pub(super) fn cells(batches: &[arrow::array::RecordBatch]) -> Vec<String> {
    let text = pretty_format_batches(batches).unwrap().to_string();
    text.lines()
        .skip(3)
        .filter(|l| l.starts_with("| "))
        .map(|l| l.trim_matches(|c| c == '|' || c == ' ').to_string())
        .collect()
}

fn statement(engine: &Engine, sql: &str) -> Arc<Statement> {
    engine.plans().statements.get(sql).unwrap().clone()
}

fn idle(engine: &Engine, sql: &str) -> usize {
    statement(engine, sql).idle.lock().len()
}

#[tokio::test]
async fn a_generic_plan_sees_each_runs_values_and_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    assert_eq!(lookup(&engine, LOOKUP, 2).await, ["b"]);
    statement(&engine, LOOKUP)
        .choice
        .store(GENERIC, Ordering::Relaxed);
    assert_eq!(idle(&engine, LOOKUP), 0);
    assert_eq!(lookup(&engine, LOOKUP, 2).await, ["b"]);
    // The instance is back in the pool and serves the next value. Its scan
    // snapshots at execution and filters with the parameter function.
    assert_eq!(idle(&engine, LOOKUP), 1);
    let plan = {
        let s = statement(&engine, LOOKUP);
        let idle = s.idle.lock();
        datafusion::physical_plan::displayable(idle[0].plan.as_ref())
            .indent(true)
            .to_string()
    };
    assert!(
        plan.contains("LazyScan: table=kv, predicate=id@1 = $1()"),
        "{plan}"
    );
    assert_eq!(lookup(&engine, LOOKUP, 3).await, ["c"]);
    assert_eq!(lookup(&engine, LOOKUP, 9).await, Vec::<String>::new());
    assert_eq!(idle(&engine, LOOKUP), 1);

    // Rows written after the plan was made: memstore, then segments.
    insert(&engine, "(9, 'new'), (3, 'c2')").await;
    assert_eq!(lookup(&engine, LOOKUP, 9).await, ["new"]);
    engine.db().flush_all().await.unwrap();
    assert_eq!(lookup(&engine, LOOKUP, 3).await, ["c", "c2"]);
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["a"]);
    assert_eq!(idle(&engine, LOOKUP), 1);
}

#[tokio::test]
async fn a_generic_plan_is_made_again_for_a_new_table_or_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    lookup(&engine, LOOKUP, 1).await;
    statement(&engine, LOOKUP)
        .choice
        .store(GENERIC, Ordering::Relaxed);
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["a"]);

    engine.execute("DROP TABLE kv").await.unwrap();
    create(&engine, "(1, 'z')").await;
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["z"]);
    assert_eq!(idle(&engine, LOOKUP), 1);

    // A server-wide change (SET changes only its own query's options).
    engine
        .session()
        .state_ref()
        .write()
        .config_mut()
        .options_mut()
        .set("datafusion.execution.time_zone", "+02:00")
        .unwrap();
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["z"]);
    let settings = engine.session().state().config().options().clone();
    let s = statement(&engine, LOOKUP);
    let idle = s.idle.lock();
    assert_eq!(idle.len(), 1);
    assert!(Arc::ptr_eq(&idle[0].settings, &settings));
}

#[tokio::test]
async fn a_session_with_its_own_options_keeps_plans_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine
        .execute("CREATE CUBE by_id ON kv DIMENSIONS (id) MEASURES (count(*) AS n)")
        .await
        .unwrap();
    engine.db().flush_all().await.unwrap();
    engine.db().build_cube_parts().await.unwrap();
    const COUNT: &str = "SELECT count(*) FROM kv WHERE id = $1";
    let off = [("kiln.cubes".to_string(), "off".to_string())];
    let off_key = crate::session::settings_key(COUNT, &off).into_owned();
    for settings in [&[][..], &off[..]] {
        for _ in 0..3 {
            for key in [COUNT, off_key.as_str()] {
                if let Some(s) = engine.plans().statements.get(key) {
                    s.choice.store(GENERIC, Ordering::Relaxed);
                }
            }
            assert_eq!(lookup_with(&engine, COUNT, 2, settings).await, ["1"]);
        }
    }
    // Each kept its generic plan: with the cube, and without it.
    let plan = |key: &str| {
        let s = statement(&engine, key);
        let idle = s.idle.lock();
        assert_eq!(idle.len(), 1, "{key}");
        datafusion::physical_plan::displayable(idle[0].plan.as_ref())
            .indent(false)
            .to_string()
    };
    assert!(plan(COUNT).contains("CubeScan"), "{}", plan(COUNT));
    assert!(!plan(&off_key).contains("CubeScan"), "{}", plan(&off_key));
}

#[tokio::test]
async fn the_faster_kind_is_chosen_after_the_trials() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    for i in 0..2 * TRIALS as i64 {
        let id = i % 3 + 1;
        let want = ["a", "b", "c"][id as usize - 1];
        assert_eq!(lookup(&engine, LOOKUP, id).await, [want]);
    }
    let s = statement(&engine, LOOKUP);
    assert_eq!(s.custom.runs.load(Ordering::Relaxed), TRIALS);
    assert_eq!(s.generic.runs.load(Ordering::Relaxed), TRIALS);
    assert_ne!(s.choice.load(Ordering::Relaxed), UNDECIDED);
    // One at a time, each generic trial found the instance the one before gave back.
    let counts = engine.plans().counts();
    assert_eq!(counts.custom_runs, TRIALS);
    assert_eq!(counts.generic_runs, TRIALS);
    assert_eq!(counts.instances_planned, 1);
}

#[tokio::test]
async fn only_plans_over_kiln_tables_with_immutable_functions_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let keep = async |sql: &str| {
        let plan = engine
            .session()
            .state()
            .create_logical_plan(sql)
            .await
            .unwrap();
        keepable(&plan)
    };
    for sql in [
        "SELECT 1",
        LOOKUP,
        "SELECT count(*) FROM kv WHERE id > $1",
        "SELECT upper(v) FROM kv JOIN (SELECT max(id) AS m FROM kv) ON id = m",
    ] {
        assert!(keep(sql).await, "{sql}");
    }
    for sql in [
        "SELECT now()",
        "SELECT v FROM kv WHERE ts > now() - INTERVAL '1 hour'",
        "SELECT random()",
        "SELECT * FROM system.tables",
        "SELECT * FROM information_schema.tables",
        "EXPLAIN SELECT 1",
    ] {
        assert!(!keep(sql).await, "{sql}");
    }
}

#[test]
fn a_value_that_does_not_fit_names_its_parameter() {
    let (_, slots) = parameterize(
        LogicalPlan::EmptyRelation(datafusion::logical_expr::EmptyRelation {
            produce_one_row: true,
            schema: Arc::new(datafusion::common::DFSchema::empty()),
        }),
        &[DataType::Int64, DataType::Int64],
    )
    .unwrap();
    slots
        .bind(&[ScalarValue::from(1i64), ScalarValue::from("7")])
        .unwrap();
    let err = slots
        .bind(&[ScalarValue::from(1i64), ScalarValue::from("x")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("parameter $2"), "{err}");
    assert!(slots.bind(&[]).is_err());
}

#[tokio::test]
async fn a_plan_that_cannot_be_generic_is_planned_per_execution() {
    let tmp = tempfile::tempdir().unwrap();
    let config = crate::QueryConfig {
        plan_cache_mode: PlanCacheMode::ForceGeneric,
        ..Default::default()
    };
    let db = Db::open(StorageConfig::for_dir(tmp.path())).await.unwrap();
    let engine = Engine::with_config(db, &config).unwrap();
    create(&engine, "(1, 'a'), (2, 'b'), (3, 'c')").await;

    // Forced generic: the lookup runs one, and its instance is pooled.
    assert_eq!(lookup(&engine, LOOKUP, 3).await, ["c"]);
    assert_eq!(idle(&engine, LOOKUP), 1);

    // A LIMIT needs its value at planning: the generic plan fails to
    // build, and the statement falls back to custom plans, with the
    // right rows.
    let limit = "SELECT v FROM kv ORDER BY id LIMIT $1";
    for n in [2, 1, 3] {
        let want: Vec<_> = ["a", "b", "c"][..n as usize].to_vec();
        assert_eq!(lookup(&engine, limit, n).await, want);
    }
    assert_eq!(
        statement(&engine, limit).choice.load(Ordering::Relaxed),
        CUSTOM
    );

    // A plan reading the clock is never kept, even when forced.
    let clock = "SELECT v FROM kv WHERE ts < now() AND id = $1";
    assert_eq!(lookup(&engine, clock, 2).await, ["b"]);
    assert_eq!(
        statement(&engine, clock).choice.load(Ordering::Relaxed),
        CUSTOM
    );
    assert_eq!(idle(&engine, clock), 0);
}

#[tokio::test]
async fn a_short_statement_runs_its_generic_plan_in_one_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let partitions = async |best_custom_nanos: u64| {
        let sql = format!("{LOOKUP} -- {best_custom_nanos}");
        lookup(&engine, &sql, 1).await;
        let s = statement(&engine, &sql);
        s.custom
            .best_nanos
            .store(best_custom_nanos, Ordering::Relaxed);
        s.choice.store(GENERIC, Ordering::Relaxed);
        assert_eq!(lookup(&engine, &sql, 1).await, ["a"]);
        s.idle.lock()[0].partitions
    };
    let cores = engine.session().state().config().target_partitions();
    assert_eq!(partitions(SERIAL_BELOW_NANOS - 1).await, 1);
    assert_eq!(partitions(SERIAL_BELOW_NANOS).await, cores);
}

#[tokio::test]
async fn a_full_cache_forgets_statements_not_on_generic_plans() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let plan = engine
        .session()
        .state()
        .create_logical_plan(LOOKUP)
        .await
        .unwrap();
    let plans = engine.plans();
    for i in 0..MAX_STATEMENTS {
        plans.statement(&format!("{LOOKUP} -- {i}"), &plan).unwrap();
    }
    statement(&engine, &format!("{LOOKUP} -- 7"))
        .choice
        .store(GENERIC, Ordering::Relaxed);
    assert!(plans.statement("a new one", &plan).is_some());
    assert_eq!(plans.statements.len(), 2);
    assert!(plans.statements.contains_key(&format!("{LOOKUP} -- 7")));
}

#[tokio::test]
async fn a_generic_plan_computes_its_shared_cte_again_for_each_value() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let sql = "WITH per AS (SELECT id, v FROM kv WHERE id >= $1 GROUP BY id, v), \
               firsts AS (SELECT min(id) AS id FROM per) \
               SELECT p.v FROM per p JOIN firsts f ON p.id = f.id ORDER BY p.v";
    assert_eq!(lookup(&engine, sql, 2).await, ["b"]);
    statement(&engine, sql)
        .choice
        .store(GENERIC, Ordering::Relaxed);
    for (id, want) in [(2, "b"), (3, "c"), (1, "a"), (3, "c")] {
        assert_eq!(lookup(&engine, sql, id).await, [want], "id >= {id}");
    }
    assert_eq!(idle(&engine, sql), 1);
    let s = statement(&engine, sql);
    let idle = s.idle.lock();
    let plan = datafusion::physical_plan::displayable(idle[0].plan.as_ref())
        .indent(true)
        .to_string();
    assert_eq!(plan.matches("SharedExec").count(), 2, "{plan}");
}

/// A parameter inside an expression the plan above names by its text
/// (`sum(CASE WHEN id > $1 ...)`) still gets a generic plan.
#[tokio::test]
async fn a_parameter_inside_an_aggregate_keeps_a_generic_plan() {
    const SUM: &str = "SELECT CAST(sum(CASE WHEN id > $1 THEN 1 ELSE 0 END) AS VARCHAR) FROM kv";
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    assert_eq!(lookup(&engine, SUM, 1).await, ["2"]);
    let s = statement(&engine, SUM);
    s.choice.store(GENERIC, Ordering::Relaxed);
    assert_eq!(lookup(&engine, SUM, 2).await, ["1"]);
    assert_eq!(
        s.choice.load(Ordering::Relaxed),
        GENERIC,
        "generic plan made"
    );
    assert_eq!(idle(&engine, SUM), 1);
}

#[test]
fn custom_plans_are_chosen_only_by_a_clear_margin() {
    let decide = |custom: u64, generic: u64| {
        let s = Statement::default();
        for _ in 0..TRIALS {
            record(&s, false, custom);
        }
        assert_eq!(s.choice.load(Ordering::Relaxed), UNDECIDED);
        for _ in 0..TRIALS {
            record(&s, true, generic);
        }
        s.choice.load(Ordering::Relaxed)
    };
    assert_eq!(decide(100, 100), GENERIC);
    assert_eq!(decide(300, 100), GENERIC);
    // Faster, but by less than timing noise under load can make it.
    assert_eq!(decide(60, 100), GENERIC);
    assert_eq!(decide(50, 100), CUSTOM_FASTER);
    assert_eq!(decide(10, 100), CUSTOM_FASTER);
}

#[tokio::test]
async fn a_statement_settled_on_custom_plans_runs_its_trials_again() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["a"]);
    let s = statement(&engine, LOOKUP);
    s.choice.store(CUSTOM_FASTER, Ordering::Relaxed);
    let custom_before = engine.plans().counts().custom_runs;
    for i in 0..RETRY_AFTER - 1 {
        let id = i as i64 % 3 + 1;
        assert_eq!(lookup(&engine, LOOKUP, id).await.len(), 1);
    }
    assert_eq!(s.choice.load(Ordering::Relaxed), CUSTOM_FASTER);
    assert_eq!(
        engine.plans().counts().custom_runs - custom_before,
        RETRY_AFTER - 1
    );
    // The next run forgets the trials, which then run again and decide.
    assert_eq!(lookup(&engine, LOOKUP, 2).await, ["b"]);
    assert_eq!(s.choice.load(Ordering::Relaxed), UNDECIDED);
    assert_eq!(s.custom.runs.load(Ordering::Relaxed), 0);
    for i in 0..2 * TRIALS as i64 {
        let id = i % 3 + 1;
        let want = ["a", "b", "c"][id as usize - 1];
        assert_eq!(lookup(&engine, LOOKUP, id).await, [want]);
    }
    assert_eq!(s.custom.runs.load(Ordering::Relaxed), TRIALS);
    assert_eq!(s.generic.runs.load(Ordering::Relaxed), TRIALS);
    assert_ne!(s.choice.load(Ordering::Relaxed), UNDECIDED);
}

/// Runs LOOKUP's kept generic plan for `id` through the plan cache alone;
/// whether the run was expected short, and its rows.
async fn generic_run(engine: &Engine, id: i64) -> (bool, Vec<String>) {
    let logical = engine
        .session()
        .state()
        .create_logical_plan(LOOKUP)
        .await
        .unwrap();
    let query = engine.begin(Origin::EMBEDDED, LOOKUP).await.unwrap();
    let stream = engine
        .plans()
        .execute(
            engine.session(),
            &query,
            LOOKUP,
            &logical,
            &[DataType::Int64],
            &[ScalarValue::from(id)],
        )
        .await
        .unwrap();
    let short = query.take_short();
    let batches: Vec<_> = futures::TryStreamExt::try_collect(stream).await.unwrap();
    if let Some(moved) = short {
        // As if it had overrun its CPU time where it was read.
        if id == 3 {
            moved();
        }
        return (true, cells(&batches));
    }
    (false, cells(&batches))
}

#[tokio::test]
async fn a_generic_run_in_one_partition_starts_short_unless_one_moved_lately() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    assert_eq!(lookup(&engine, LOOKUP, 1).await, ["a"]);
    let s = statement(&engine, LOOKUP);
    s.choice.store(GENERIC, Ordering::Relaxed);
    // Spread over the cores: on the execution runtime.
    if engine.session().state().config().target_partitions() > 1 {
        s.custom
            .best_nanos
            .store(SERIAL_BELOW_NANOS, Ordering::Relaxed);
        assert_eq!(generic_run(&engine, 1).await, (false, vec!["a".into()]));
    }
    // In one partition: where it is read.
    s.idle.lock().clear();
    s.custom.best_nanos.store(1, Ordering::Relaxed);
    assert_eq!(generic_run(&engine, 2).await, (true, vec!["b".into()]));
    // One that had to move sends the next MOVED_RUNS to the executor.
    assert_eq!(generic_run(&engine, 3).await, (true, vec!["c".into()]));
    for _ in 0..MOVED_RUNS {
        assert_eq!(generic_run(&engine, 1).await, (false, vec!["a".into()]));
    }
    assert_eq!(generic_run(&engine, 2).await, (true, vec!["b".into()]));
}

/// `thread_of(id)`: the name of the thread that computed each row.
fn thread_of() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::logical_expr::{ColumnarValue, create_udf};
    create_udf(
        "thread_of",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            let rows = match &args[0] {
                ColumnarValue::Array(a) => a.len(),
                ColumnarValue::Scalar(_) => 1,
            };
            let names = arrow::array::StringArray::from(vec![name; rows]);
            Ok(ColumnarValue::Array(Arc::new(names)))
        }),
    )
}

#[tokio::test]
async fn a_short_generic_run_computes_where_it_is_read_until_one_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine.session().register_udf(thread_of());
    let sql = "SELECT thread_of(id) FROM kv WHERE id = $1";
    // A trial, planned with its value: on the execution runtime.
    assert_eq!(lookup(&engine, sql, 1).await, ["kiln-exec"]);
    let s = statement(&engine, sql);
    s.choice.store(GENERIC, Ordering::Relaxed);
    // Short: its generic plan runs in one partition, where it is read.
    s.custom.best_nanos.store(1, Ordering::Relaxed);
    let here = lookup(&engine, sql, 2).await;
    assert_eq!(here.len(), 1);
    assert_ne!(here[0], "kiln-exec");
    assert_eq!(engine.plans().counts().short_runs, 1);
    // After one moved, the next runs go to the execution runtime.
    s.moved_runs.store(MOVED_RUNS, Ordering::Relaxed);
    assert_eq!(lookup(&engine, sql, 3).await, ["kiln-exec"]);
    assert_eq!(engine.plans().counts().short_runs, 1);
}

#[tokio::test]
async fn a_large_parameter_a_generic_plan_returns_is_given_to_rows_a_slice_at_a_time() {
    const TAGGED: &str = "SELECT $1 AS tag, id FROM kv WHERE id > 0 LIMIT 300";
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    engine
        .execute("INSERT INTO kv SELECT TIMESTAMP '2026-11-01 00:00:00', x, 'v' FROM generate_series(4, 20000) t(x)")
        .await
        .unwrap();
    // The rows of each batch TAGGED returns with `tag` as its text
    // parameter, after checking every row has the tag.
    let tagged = async |tag: &str| -> Vec<usize> {
        let batches = prepared(&engine, TAGGED, ScalarValue::from(tag), &[])
            .await
            .unwrap();
        for b in &batches {
            let tags = arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
            let tags = tags.as_string::<i32>();
            assert!((0..b.num_rows()).all(|i| tags.value(i) == tag));
        }
        batches
            .iter()
            .map(|b| b.num_rows())
            .filter(|n| *n > 0)
            .collect()
    };
    let large = "x".repeat(300_000);
    let most = crate::rules::sized_literals::slice_rows(large.len());
    let sliced =
        |rows: &[usize]| rows.iter().sum::<usize>() == 300 && rows.iter().all(|n| *n <= most);
    assert_eq!(tagged("small").await.iter().sum::<usize>(), 300);
    assert!(sliced(&tagged(&large).await));
    statement(&engine, TAGGED)
        .choice
        .store(GENERIC, Ordering::Relaxed);
    assert_eq!(tagged("small").await.iter().sum::<usize>(), 300);
    // The kept plan's parameter is a function whose value is known only as
    // it runs: measured then, its 300,000 bytes are given to the rows a
    // slice at a time rather than to all of a batch's rows at once.
    assert!(sliced(&tagged(&large).await));
    assert_eq!(engine.plans().counts().generic_runs, 2);
    // Over Parquet segments too: the projection is not merged into their
    // scan, which would give the value to whole batches.
    engine.db().flush_all().await.unwrap();
    assert!(sliced(&tagged(&large).await));
    statement(&engine, TAGGED)
        .choice
        .store(CUSTOM, Ordering::Relaxed);
    assert!(sliced(&tagged(&large).await));
}
