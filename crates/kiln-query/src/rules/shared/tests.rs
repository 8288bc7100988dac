use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::pretty::pretty_format_batches;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlanBuilder;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;

use super::*;

/// `rows(v)`: `v`, counting the rows it was called on.
#[derive(Debug)]
struct CountRows {
    signature: Signature,
    rows: Arc<AtomicUsize>,
}

impl PartialEq for CountRows {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.rows, &other.rows)
    }
}

impl Eq for CountRows {}

impl std::hash::Hash for CountRows {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
    }
}

impl ScalarUDFImpl for CountRows {
    fn name(&self) -> &str {
        "rows"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.rows.fetch_add(args.number_rows, Ordering::Relaxed);
        Ok(args.args[0].clone())
    }
}

/// A session over `t(k, v)`, 3 partitions of 100 rows, with or without
/// shared subplans; and the counter of `rows(v)`.
fn context(shared: bool) -> (SessionContext, Arc<AtomicUsize>) {
    let mut builder = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(2))
        .with_default_features();
    if shared {
        builder = builder
            .with_analyzer_rule(Arc::new(SharedSubplans))
            .with_query_planner(Arc::new(QueryPlanner::default()));
    }
    let ctx = SessionContext::new_with_state(builder.build());
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let part = |p: i64| {
        vec![
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        (0..100).map(|i| (i * 7 + p) % 13),
                    )),
                    Arc::new(Int64Array::from_iter_values((0..100).map(|i| i + 100 * p))),
                ],
            )
            .unwrap(),
        ]
    };
    let table = MemTable::try_new(schema.clone(), vec![part(0), part(1), part(2)]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    let rows = Arc::new(AtomicUsize::new(0));
    ctx.register_udf(ScalarUDF::from(CountRows {
        signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
        rows: rows.clone(),
    }));
    (ctx, rows)
}

/// Retention's shape: a CTE, an aggregate of it, and a join of the two.
const TWICE: &str = "WITH per AS (SELECT k, rows(v) % 3 AS m FROM t GROUP BY k, rows(v) % 3), \
     firsts AS (SELECT k, min(m) AS m0 FROM per WHERE m < 2 GROUP BY k) \
     SELECT f.k, f.m0, count(*) AS n, sum(p.m) AS s \
     FROM firsts f JOIN per p ON f.k = p.k GROUP BY f.k, f.m0 ORDER BY f.k";

async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let text = displayable(plan.as_ref()).indent(false).to_string();
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    (pretty_format_batches(&batches).unwrap().to_string(), text)
}

#[tokio::test]
async fn a_cte_used_twice_is_computed_once_with_the_same_result() {
    let (plain, plain_rows) = context(false);
    let (shared, shared_rows) = context(true);
    let (want, _) = run(&plain, TWICE).await;
    let (got, plan) = run(&shared, TWICE).await;
    assert_eq!(got, want);
    assert_eq!(plan.matches("SharedExec: id=0").count(), 2, "{plan}");
    // rows(v) ran once per table row (as the CTE's grouping key), not once
    // per reference.
    assert_eq!(shared_rows.load(Ordering::Relaxed), 300);
    assert!(plain_rows.load(Ordering::Relaxed) >= 600);
}

#[tokio::test]
async fn each_execution_of_a_plan_computes_its_own_rows() {
    let (ctx, rows) = context(true);
    let df = ctx.sql(TWICE).await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let task = ctx.task_ctx();
    // As a kept plan runs: the same task context, states reset.
    let first = collect(reset_plan_states(plan.clone()).unwrap(), task.clone())
        .await
        .unwrap();
    assert_eq!(rows.load(Ordering::Relaxed), 300);
    let second = collect(reset_plan_states(plan).unwrap(), task)
        .await
        .unwrap();
    assert_eq!(rows.load(Ordering::Relaxed), 600);
    assert_eq!(
        pretty_format_batches(&first).unwrap().to_string(),
        pretty_format_batches(&second).unwrap().to_string()
    );
}

#[tokio::test]
async fn ctes_used_once_or_cheap_are_inlined_as_before() {
    let (ctx, _) = context(true);
    for sql in [
        // Used once.
        "WITH per AS (SELECT k, count(*) AS n FROM t GROUP BY k) SELECT * FROM per ORDER BY k",
        // Used twice, but only a filter over the table: inlined, so each
        // reference keeps its own pushed-down filters.
        "WITH big AS (SELECT k, v FROM t WHERE v > 10) \
         SELECT a.k, count(*) FROM big a JOIN big b ON a.v = b.v GROUP BY a.k ORDER BY a.k",
        // Volatile: each reference draws its own values.
        "WITH r AS (SELECT k, max(v) + 0 * random() AS m FROM t GROUP BY k) \
         SELECT a.k, a.m = b.m AS same FROM r a JOIN r b ON a.k = b.k ORDER BY a.k",
    ] {
        let (got, plan) = run(&ctx, sql).await;
        let (want, _) = run(&context(false).0, sql).await;
        assert_eq!(got, want, "{sql}");
        assert!(!plan.contains("SharedExec"), "{sql}:\n{plan}");
    }
}

#[tokio::test]
async fn a_reset_plan_does_not_read_the_run_of_an_execution_still_alive() {
    let (ctx, rows) = context(true);
    let plan = ctx
        .sql(TWICE)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let task = ctx.task_ctx();
    // A copy's stream from an earlier execution, still held (as a dropped
    // query's tasks may be, while they are being aborted), its run done.
    fn first_copy(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        match plan.is::<SharedExec>() {
            true => Some(plan.clone()),
            false => plan.children().into_iter().find_map(first_copy),
        }
    }
    let plan = reset_plan_states(plan).unwrap();
    let copy = first_copy(&plan).expect("a SharedExec");
    let mut alive = copy.execute(0, task.clone()).unwrap();
    assert!(alive.next().await.is_some());
    assert_eq!(rows.load(Ordering::Relaxed), 300);
    // The next execution computes its own rows.
    collect(reset_plan_states(plan).unwrap(), task)
        .await
        .unwrap();
    assert_eq!(rows.load(Ordering::Relaxed), 600);
    drop(alive);
}

#[tokio::test]
async fn copies_that_came_to_differ_do_not_share_rows() {
    let (ctx, _) = context(true);
    let per_k = ctx
        .sql("SELECT k, count(*) AS n FROM t GROUP BY k")
        .await
        .unwrap()
        .into_unoptimized_plan();
    // What a filter naming no column, pushed into one copy, makes.
    let emptied = LogicalPlanBuilder::from(per_k.clone())
        .filter(datafusion::prelude::lit(false))
        .unwrap()
        .build()
        .unwrap();
    let copy = |input: LogicalPlan| {
        LogicalPlan::Extension(Extension {
            node: Arc::new(Shared { id: 0, input }),
        })
    };
    for (first, second) in [(per_k.clone(), emptied.clone()), (emptied, per_k)] {
        let union = LogicalPlanBuilder::from(copy(first))
            .union(copy(second))
            .unwrap()
            .build()
            .unwrap();
        let batches = DataFrame::new(ctx.state(), union).collect().await.unwrap();
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(n, 13);
    }
}
