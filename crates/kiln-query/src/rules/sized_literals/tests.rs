use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;

/// A session with [`SizedLiterals`] and table `t` (x BIGINT) of `rows`
/// rows in batches of 8,192.
fn context(rows: i64) -> SessionContext {
    context_in(rows, 1)
}

/// [`context`], planning for `partitions` partitions.
fn context_in(rows: i64, partitions: usize) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(partitions))
        .with_default_features()
        .with_physical_optimizer_rules(with_sized_literals(PhysicalOptimizer::new().rules))
        .build();
    let ctx = SessionContext::new_with_state(state);
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batches = (0..rows)
        .step_by(8192)
        .map(|from| {
            let x = Int64Array::from_iter_values(from..(from + 8192).min(rows));
            RecordBatch::try_new(schema.clone(), vec![Arc::new(x)]).unwrap()
        })
        .collect();
    let table = MemTable::try_new(schema, vec![batches]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// `sql`'s physical plan and the batches it returns (or its error).
async fn run(ctx: &SessionContext, sql: &str) -> (String, Result<Vec<RecordBatch>>) {
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string();
    (shown, collect(plan, ctx.task_ctx()).await)
}

/// The rows of each non-empty batch of `batches`.
fn rows(batches: &[RecordBatch]) -> Vec<usize> {
    batches
        .iter()
        .map(RecordBatch::num_rows)
        .filter(|n| *n > 0)
        .collect()
}

/// Whether `plan` shows a slicing [`CopiesExec`] right below its first
/// `node`.
fn sliced_below(plan: &str, node: &str) -> bool {
    right_below(plan, node, "SlicedExec")
}

/// Whether `plan` shows a counting [`CopiesExec`] right below its first
/// `node`.
fn capped_below(plan: &str, node: &str) -> bool {
    right_below(plan, node, "CappedExec")
}

/// Whether `plan` shows `below` on the line after its first `node`.
fn right_below(plan: &str, node: &str, below: &str) -> bool {
    let lines: Vec<&str> = plan.lines().collect();
    lines
        .iter()
        .position(|l| l.contains(node))
        .is_some_and(|i| lines.get(i + 1).is_some_and(|l| l.contains(below)))
}

#[tokio::test]
async fn a_large_constant_is_given_to_rows_a_slice_at_a_time() {
    let ctx = context(200);
    let big = "x".repeat(1_000_000);
    let most = slice_rows(big.len());
    assert_eq!(most, 67);
    // One batch of 200 rows would take 200 MB for one column: cut into
    // slices of 67 rows, 67 MB, each.
    let (plan, out) = run(&ctx, &format!("SELECT '{big}' AS c, x FROM t")).await;
    assert!(sliced_below(&plan, "ProjectionExec"), "{plan}");
    let out = out.unwrap();
    assert_eq!(rows(&out), [67, 67, 66]);
    assert_eq!(xs(&out, 1), (0..200).collect::<Vec<_>>());
    assert!(out.iter().all(|b| {
        let c = b.column(0).as_string::<i32>();
        (0..c.len()).all(|i| c.value(i) == big)
    }));

    // A constant whose copies fill no batch past the limit leaves the
    // batches whole; the plan shows it as itself.
    let ctx = context(20_000);
    let small = "y".repeat(2_000);
    let (plan, out) = run(&ctx, &format!("SELECT '{small}' AS c, x FROM t")).await;
    let out = out.unwrap();
    assert_eq!(rows(&out), [8192, 8192, 3616]);
    let c = out[2].column(0).as_string::<i32>();
    assert!((0..c.len()).all(|i| c.value(i) == small));
    assert!(
        plan.contains(&small) && sliced_below(&plan, "ProjectionExec"),
        "{plan}"
    );
}

#[tokio::test]
async fn an_expression_giving_a_large_constant_to_many_rows_is_sliced_too() {
    let ctx = context(200);
    let big = "x".repeat(1_000_000);
    let text =
        |b: &RecordBatch, i: usize| arrow::compute::cast(b.column(i), &DataType::Utf8).unwrap();
    for (sql, every) in [
        (
            format!("SELECT CASE WHEN x >= 0 THEN '{big}' END AS c, x FROM t"),
            1,
        ),
        (
            format!("SELECT coalesce(CASE WHEN x < 0 THEN 'a' END, '{big}') AS c, x FROM t"),
            1,
        ),
        // To some rows only, or joined to each row's value: a column.
        (
            format!("SELECT CASE WHEN x % 2 = 0 THEN '{big}' ELSE 'a' END AS c, x FROM t"),
            2,
        ),
        (
            format!("SELECT CAST(x AS VARCHAR) || '{big}' AS c, x FROM t"),
            1,
        ),
    ] {
        let (plan, out) = run(&ctx, &sql).await;
        assert!(sliced_below(&plan, "ProjectionExec"), "{plan}");
        let out = out.unwrap();
        assert_eq!(rows(&out), [67, 67, 66], "{sql}");
        let b = &out[1];
        let (c, x) = (text(b, 0), xs(std::slice::from_ref(b), 1));
        for (i, x) in x.iter().enumerate() {
            let v = c.as_string::<i32>().value(i);
            assert!(v.len() >= big.len() || x % every != 0, "{sql}: row {x}");
        }
    }
    // An aggregate evaluates its arguments and group keys over the batch.
    for sql in [
        format!("SELECT octet_length(max(CASE WHEN x >= 0 THEN '{big}' END)) AS n FROM t"),
        format!(
            "SELECT octet_length(CASE WHEN x >= 0 THEN '{big}' END) AS n FROM t GROUP BY CASE WHEN x >= 0 THEN '{big}' END"
        ),
    ] {
        let (plan, out) = run(&ctx, &sql).await;
        assert!(sliced_below(&plan, "AggregateExec"), "{plan}");
        let out = out.unwrap();
        let b = out.iter().find(|b| b.num_rows() > 0).unwrap();
        assert_eq!(
            b.column(0)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(0),
            1_000_000,
            "{sql}"
        );
    }
    // A filter builds the column it tests; a constant it only compares to
    // is not copied.
    let (plan, out) = run(
        &ctx,
        &format!("SELECT x FROM t WHERE octet_length(CAST(x AS VARCHAR) || '{big}') = 1000001"),
    )
    .await;
    assert!(sliced_below(&plan, "FilterExec"), "{plan}");
    assert_eq!(xs(&out.unwrap(), 0), (0..10).collect::<Vec<_>>());
    let (plan, out) = run(
        &ctx,
        &format!("SELECT x FROM t WHERE CAST(x AS VARCHAR) = '{big}'"),
    )
    .await;
    assert!(!plan.contains("SlicedExec"), "{plan}");
    assert_eq!(rows(&out.unwrap()), [0usize; 0]);
    // A sort computes its key over each batch.
    let (plan, out) = run(
        &ctx,
        &format!("SELECT x FROM t ORDER BY CAST(x AS VARCHAR) || '{big}' DESC LIMIT 2"),
    )
    .await;
    assert!(sliced_below(&plan, "SortExec"), "{plan}");
    assert_eq!(xs(&out.unwrap(), 0), [9, 99]);
    // A view is kept once for all rows.
    let (plan, out) = run(
        &ctx,
        &format!("SELECT arrow_cast('{big}', 'Utf8View') AS c, x FROM t"),
    )
    .await;
    assert!(!plan.contains("SlicedExec"), "{plan}");
    let out = out.unwrap();
    assert_eq!(rows(&out), [200]);
    assert_eq!(out[0].column(0).as_string_view().value(7), big);
}

/// The `x` values of `batches`' column `i`, in order.
fn xs(batches: &[RecordBatch], i: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            b.column(i)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

#[tokio::test]
async fn rows_are_sorted_and_cut_before_they_get_a_large_constant() {
    let ctx = context(20_000);
    let big = "x".repeat(300_000);
    // Two rows kept of 20,000: the constant is copied twice, not into each
    // batch read.
    let (plan, out) = run(
        &ctx,
        &format!("SELECT x, '{big}' AS c FROM t ORDER BY x DESC LIMIT 2"),
    )
    .await;
    let out = out.unwrap();
    assert_eq!(xs(&out, 0), [19_999, 19_998]);
    let b = out.iter().find(|b| b.num_rows() > 0).unwrap();
    assert_eq!(b.column(1).as_string::<i32>().value(1), big);
    let (projection, sort) = (plan.find("ProjectionExec"), plan.find("SortExec"));
    assert!(projection < sort, "{plan}");
    // Sliced above the sort only, for the two rows kept.
    assert!(
        sliced_below(&plan, "ProjectionExec") && !sliced_below(&plan, "SortExec"),
        "{plan}"
    );

    // Without a limit, over every row; a constant of 2,000 bytes is not
    // kept in the sort.
    let mid = "z".repeat(2_000);
    let (plan, out) = run(
        &ctx,
        &format!("SELECT '{mid}' AS c, x FROM t ORDER BY x DESC"),
    )
    .await;
    let out = out.unwrap();
    let x = xs(&out, 1);
    assert_eq!(x.len(), 20_000);
    assert!(x.windows(2).all(|w| w[0] > w[1]) && x[0] == 19_999);
    assert!(
        plan.find("ProjectionExec") < plan.find("SortExec"),
        "{plan}"
    );

    // A sort key computed in the projection stays below it: computed again
    // above the sort, it could differ. The answer is the same.
    let (plan, out) = run(
        &ctx,
        &format!("SELECT x % 7 AS y, '{mid}' AS c, x FROM t ORDER BY y DESC, x LIMIT 3"),
    )
    .await;
    assert!(
        plan.find("SortExec") < plan.find("ProjectionExec"),
        "{plan}"
    );
    let out = out.unwrap();
    assert_eq!((xs(&out, 0), xs(&out, 2)), (vec![6, 6, 6], vec![6, 13, 20]));
}

#[test]
fn large_string_and_binary_constants_cut_the_batches_they_would_fill() {
    let lit = |v: ScalarValue| Arc::new(Literal::new(v)) as Arc<dyn PhysicalExpr>;
    let text = |n: usize| lit(ScalarValue::Utf8(Some("a".repeat(n))));
    assert!(constant(&text(LARGE_FROM)));
    assert!(!constant(&text(LARGE_FROM - 1)));
    assert!(!constant(&lit(ScalarValue::Utf8(None))));
    assert!(!constant(&lit(ScalarValue::Int64(Some(7)))));
    // A view is counted where a cast copies it; a view column is not.
    assert!(constant(&lit(ScalarValue::Utf8View(Some(
        "é".repeat(LARGE_FROM)
    )))));
    assert!(copies(&DataType::LargeBinary) && !copies(&DataType::Utf8View));
    assert_eq!(slice_rows(0), usize::MAX);
    assert_eq!(slice_rows(usize::MAX), 1);
}

#[tokio::test]
async fn a_window_copying_a_large_constant_into_too_many_rows_is_stopped_with_a_clear_error() {
    // 500 rows of 1 MB copies: within the cap, answered whole.
    let ctx = context(500);
    let big = "x".repeat(1_000_000);
    for window in [
        format!("first_value('{big}') OVER (ORDER BY x ROWS 1 PRECEDING)"),
        format!("lag('{big}', 1) OVER (ORDER BY x)"),
        format!("max(CAST(x AS VARCHAR) || '{big}') OVER (PARTITION BY x % 2)"),
    ] {
        let sql = format!("SELECT x, octet_length({window}) AS n FROM t ORDER BY x");
        let (plan, out) = run(&ctx, &sql).await;
        assert!(capped_below(&plan, "WindowAggExec"), "{plan}");
        assert!(!plan.contains("SlicedExec"), "{plan}");
        let out = out.unwrap();
        let n: Vec<Option<i32>> = out
            .iter()
            .flat_map(|b| {
                b.column(1)
                    .as_primitive::<arrow::datatypes::Int32Type>()
                    .iter()
            })
            .collect();
        assert_eq!(n.len(), 500, "{window}");
        assert!(n[1..].iter().all(|n| n.unwrap() >= 1_000_000), "{window}");
    }
    // 2,000 rows would be 2 GB: stopped before the window holds them,
    // with an error naming the function.
    let ctx = context(2_000);
    let sql = format!("SELECT lag('{big}', 1) OVER (ORDER BY x) FROM t");
    let (plan, out) = run(&ctx, &sql).await;
    assert!(capped_below(&plan, "WindowAggExec"), "{plan}");
    let e = crate::Error::from(out.unwrap_err());
    assert_eq!(e.kind(), crate::ErrorKind::LimitExceeded, "{e}");
    let message = e.to_string();
    assert!(
        message.starts_with("window function lag(Utf8(\"xxx"),
        "{message}"
    );
    // Counted as the rows pass, in batches the plan's batch size keeps
    // small: stopped at the first past the limit.
    let held: usize = message
        .split(" rows that")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(message.contains("1000000 bytes"), "{message}");
    assert!(held * 1_000_000 > WINDOW_BYTES && held < 1_200, "{message}");
    assert!(message.len() < 500, "{message}");
    // A small constant gets no node.
    let (plan, out) = run(&ctx, "SELECT lag('abc', 1) OVER (ORDER BY x) FROM t").await;
    assert!(!plan.contains("CappedExec"), "{plan}");
    assert_eq!(rows(&out.unwrap()).iter().sum::<usize>(), 2_000);
}

#[tokio::test]
async fn a_plan_copying_a_large_constant_runs_in_batches_its_copies_fit() {
    // A hash repartition gathers the rows it sends to each partition into
    // batches of the session's size: the 1 MB keys the slices below it
    // were cut for, 8 GB a batch. The join's build side shows the batches
    // it got.
    let ctx = context_in(300, 2);
    let big = "x".repeat(1_000_000);
    let sql = format!(
        "SELECT count(*) FROM t a \
         JOIN t b ON CAST(a.x AS VARCHAR) || '{big}' = CAST(b.x AS VARCHAR) || '{big}'"
    );
    let plan = ctx
        .sql(&sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let out = collect(plan.clone(), ctx.task_ctx()).await.unwrap();
    let count = out[0]
        .column(0)
        .as_primitive::<arrow::datatypes::Int64Type>();
    assert_eq!(count.value(0), 300);
    let shown = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(false)
        .to_string()
        .replace(&big, "<big>");
    assert!(shown.starts_with("SmallBatchesExec"), "{shown}");
    assert!(
        shown.contains("RepartitionExec: partitioning=Hash"),
        "{shown}"
    );
    let mut build = None;
    plan.apply(|node| {
        if node.name() == "HashJoinExec" {
            let m = node.metrics().unwrap();
            let total = |name| m.sum_by_name(name).unwrap().as_usize();
            build = Some((total("build_input_rows"), total("build_input_batches")));
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    let (rows, batches) = build.unwrap();
    assert_eq!(rows, 300);
    assert!(
        rows.div_ceil(batches) <= slice_rows(1_000_000),
        "{rows} rows in {batches} batches"
    );
    // Without such a constant the plan runs as it was.
    let (plan, _) = run(&ctx, "SELECT a.x FROM t a JOIN t b ON a.x = b.x").await;
    assert!(!plan.contains("SmallBatchesExec"), "{plan}");
}
