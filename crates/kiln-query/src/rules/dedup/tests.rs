use arrow::array::{Int64Array, StringViewArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("arm", DataType::Utf8View, true),
        Field::new("user", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
    ]))
}

fn batch(rows: &[(Option<&str>, Option<i64>, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(rows.iter().map(|r| r.0).collect::<StringViewArray>()),
            Arc::new(rows.iter().map(|r| r.1).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| Some(r.2)).collect::<Int64Array>()),
        ],
    )
    .unwrap()
}

/// A fresh stream state over keys `arm, user`.
fn repeats() -> Repeats {
    let metrics = ExecutionPlanMetricsSet::new();
    Repeats {
        keys: vec![
            col("arm", &schema()).unwrap(),
            col("user", &schema()).unwrap(),
        ],
        last: None,
        seen: 0,
        dropped: 0,
        on: true,
        baseline: BaselineMetrics::new(&metrics, 0),
        dropped_metric: MetricBuilder::new(&metrics).counter("repeats_dropped", 0),
    }
}

fn users(b: &RecordBatch) -> Vec<Option<i64>> {
    b.column(1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .iter()
        .collect()
}

#[test]
fn a_row_equal_to_the_one_before_on_every_key_is_dropped_across_batches() {
    let mut r = repeats();
    let a = Some("a");
    let first = r
        .batch(batch(&[
            (a, Some(1), 10),
            (a, Some(1), 11),
            (Some("b"), Some(1), 12),
            (a, Some(1), 13),
            (a, None, 14),
            (a, None, 15),
            (None, None, 16),
        ]))
        .unwrap();
    // A repeat is only a row equal to the one just before it; nulls equal nulls.
    assert_eq!(users(&first), [Some(1), Some(1), Some(1), None, None]);
    // The next batch's first row is compared with this batch's last.
    let second = r
        .batch(batch(&[
            (None, None, 17),
            (a, Some(2), 18),
            (a, Some(2), 19),
        ]))
        .unwrap();
    assert_eq!(users(&second), [Some(2)]);
    assert_eq!(
        second
            .column(2)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0),
        18
    );
    assert_eq!((r.seen, r.dropped), (10, 4));
}

#[test]
fn a_stream_with_few_repeats_steps_aside_after_its_probe() {
    let mut r = repeats();
    let distinct_rows: Vec<_> = (0..PROBE_ROWS as i64)
        .map(|i| (Some("a"), Some(i), i))
        .collect();
    assert_eq!(
        r.batch(batch(&distinct_rows)).unwrap().num_rows(),
        PROBE_ROWS
    );
    // Past the probe with no repeats, it passes batches through untouched.
    let same = batch(&[(Some("a"), Some(1), 1), (Some("a"), Some(1), 2)]);
    assert_eq!(r.batch(same).unwrap().num_rows(), 2);
    assert!(!r.on);

    let mut r = repeats();
    let mostly_repeats: Vec<_> = (0..PROBE_ROWS as i64)
        .map(|i| (Some("a"), Some(i / 2), i))
        .collect();
    assert_eq!(
        r.batch(batch(&mostly_repeats)).unwrap().num_rows(),
        PROBE_ROWS / 2
    );
    let same = batch(&[(Some("a"), Some(1), 1), (Some("a"), Some(1), 2)]);
    assert_eq!(r.batch(same).unwrap().num_rows(), 1);
    assert!(r.on);
}

/// A session over `t(arm, user, v)` in 2 partitions of sorted runs with
/// repeats, with or without [`DropRepeats`], planning for `partitions`
/// (1 gives single-mode group-bys, 2 partial ones).
fn context(rule: bool, partitions: usize) -> SessionContext {
    let mut builder = SessionStateBuilder::new()
        .with_config(
            SessionConfig::new()
                .with_target_partitions(partitions)
                .with_batch_size(7),
        )
        .with_default_features();
    if rule {
        builder = builder.with_physical_optimizer_rule(Arc::new(DropRepeats));
    }
    let ctx = SessionContext::new_with_state(builder.build());
    let part = |seed: i64| -> Vec<RecordBatch> {
        let rows: Vec<_> = (0..300i64)
            .map(|i| {
                let arm = if (i / 50 + seed) % 2 == 0 {
                    "control"
                } else {
                    "treatment"
                };
                let user = (i / 3 + seed * 7) % 70;
                (Some(arm), (i % 17 != 0).then_some(user), i)
            })
            .collect();
        rows.chunks(40).map(batch).collect()
    };
    let table = MemTable::try_new(schema(), vec![part(0), part(1)]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    let rows = collect(plan, ctx.task_ctx()).await.unwrap();
    (shown, pretty_format_batches(&rows).unwrap().to_string())
}

#[tokio::test]
async fn pure_group_bys_drop_repeats_and_answer_as_before() {
    for partitions in [1, 2] {
        let with = context(true, partitions);
        let without = context(false, partitions);
        same_answers(&with, &without).await;
    }
}

async fn same_answers(with: &SessionContext, without: &SessionContext) {
    for sql in [
        "SELECT arm, count(DISTINCT user) AS n FROM t GROUP BY arm ORDER BY arm",
        "SELECT DISTINCT arm, user FROM t ORDER BY arm, user",
        "SELECT arm, user FROM t WHERE v > 20 GROUP BY arm, user ORDER BY arm, user",
        "SELECT user % 5 AS k, count(DISTINCT arm) AS n FROM t GROUP BY user % 5 ORDER BY k",
        "SELECT arm, count(DISTINCT user), count(DISTINCT CASE WHEN v % 2 = 0 THEN user END), \
         max(user) FILTER (WHERE user % 3 = 0), min(user) FROM t GROUP BY arm ORDER BY arm",
        "SELECT arm, count(DISTINCT user), count(DISTINCT CASE WHEN user % 2 = 0 THEN user END), \
         min(user) FROM t GROUP BY arm ORDER BY arm",
        "SELECT DISTINCT x FROM (VALUES (CAST(0.0 AS DOUBLE)), (CAST(-0.0 AS DOUBLE)), \
         (CAST(-0.0 AS DOUBLE)), (CAST('NaN' AS DOUBLE)), (CAST('NaN' AS DOUBLE)), \
         (NULL), (NULL)) AS v(x) ORDER BY x",
    ] {
        let (plan, rows) = run(with, sql).await;
        assert!(plan.contains("DedupExec"), "{sql}\n{plan}");
        let (plain, expected) = run(without, sql).await;
        assert!(!plain.contains("DedupExec"));
        assert_eq!(rows, expected, "{sql}");
    }
}

#[tokio::test]
async fn aggregations_that_count_rows_or_have_volatile_keys_keep_every_row() {
    let ctx = context(true, 2);
    for sql in [
        "SELECT arm, count(*) FROM t GROUP BY arm",
        "SELECT arm, user, sum(v) FROM t GROUP BY arm, user",
        "SELECT count(DISTINCT user), count(*) FROM t",
        "SELECT arm, count(DISTINCT user) FROM t GROUP BY arm, random() < 0.5",
        "SELECT arm, count(DISTINCT user), sum(v) FROM t GROUP BY arm",
        "SELECT arm, array_agg(user ORDER BY v) FROM t GROUP BY arm",
    ] {
        let (plan, _) = run(&ctx, sql).await;
        assert!(!plan.contains("DedupExec"), "{sql}\n{plan}");
    }
}

#[tokio::test]
async fn nested_keys_are_left_to_the_group_by() {
    let sql = "SELECT l, count(DISTINCT user) AS n \
               FROM (SELECT make_array(user % 3) AS l, user FROM t) GROUP BY l ORDER BY l";
    let (plan, rows) = run(&context(true, 2), sql).await;
    assert!(!plan.contains("DedupExec"), "{plan}");
    assert_eq!(rows, run(&context(false, 2), sql).await.1);
}

#[tokio::test]
async fn explain_analyze_counts_the_repeats_dropped() {
    let ctx = context(true, 2);
    let df = ctx.sql("SELECT DISTINCT arm, user FROM t").await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let rows: usize = collect(plan.clone(), ctx.task_ctx())
        .await
        .unwrap()
        .iter()
        .map(RecordBatch::num_rows)
        .sum();
    let mut dropped = 0;
    plan.apply(|node| {
        if let Some(d) = node.downcast_ref::<DedupExec>() {
            dropped += d
                .metrics()
                .unwrap()
                .sum_by_name("repeats_dropped")
                .unwrap()
                .as_usize();
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    // 600 rows in runs of three per user: about two thirds are repeats.
    assert!(dropped > 300, "dropped {dropped}");
    assert!(rows <= 600 - dropped);
}

/// [`changes::changes`] against arrow's `distinct` on columns of every
/// path: fixed widths, floats, string views short and long (equal
/// prefixes), nulls, a sliced column, and a type it leaves to `distinct`.
#[test]
fn changes_agree_with_arrows_distinct() {
    use arrow::array::{BooleanArray, Float64Array, Int32Array, StringArray};
    let long = |s: &str| Some(format!("a-long-common-prefix-{s}"));
    let strings: Vec<Option<String>> = vec![
        Some("x".into()),
        Some("x".into()),
        None,
        None,
        long("1"),
        long("1"),
        long("2"),
        Some("a-long-common-prefix".into()),
        None,
        Some("".into()),
        Some("".into()),
        long("2"),
    ];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringViewArray::from_iter(strings.clone())),
        Arc::new(StringViewArray::from_iter(strings.clone()).slice(3, 8)),
        Arc::new(StringArray::from_iter(strings)),
        Arc::new(Int64Array::from(vec![
            Some(1),
            Some(1),
            None,
            Some(0),
            None,
            None,
            Some(2),
        ])),
        Arc::new(Int32Array::from(vec![5, 5, 6, 6, 6, 5]).slice(1, 4)),
        Arc::new(Float64Array::from(vec![
            0.0,
            -0.0,
            -0.0,
            f64::NAN,
            f64::NAN,
            1.0,
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(true),
            None,
            Some(false),
        ])),
    ];
    for c in columns {
        let n = c.len() - 1;
        let expected = distinct(&c.slice(1, n), &c.slice(0, n)).unwrap();
        let got = changes::changes(&c).unwrap();
        assert_eq!(got, *expected.values(), "{c:?}");
    }
}
