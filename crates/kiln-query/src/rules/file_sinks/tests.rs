use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::SessionContext;

use super::*;

/// Rows of table `w`, each value of `p` this many bytes.
const WIDE: usize = 2_000;

/// A session with [`FileSinkPieces`] and table `w` (x BIGINT, p VARCHAR)
/// of `rows` rows in one batch, `p` of row `x` being [`WIDE`] copies of
/// the digit `x % 10`.
fn context(rows: i64) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(FileSinkPieces))
        .build();
    let ctx = SessionContext::new_with_state(state);
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("p", DataType::Utf8, false),
    ]));
    let x = Int64Array::from_iter_values(0..rows);
    let p = StringArray::from_iter_values((0..rows).map(|x| (x % 10).to_string().repeat(WIDE)));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(x), Arc::new(p)]).unwrap();
    let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.register_table("w", Arc::new(table)).unwrap();
    ctx
}

async fn physical(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    let df = ctx.sql(sql).await.unwrap();
    df.create_physical_plan().await.unwrap()
}

#[tokio::test]
async fn a_query_written_to_a_text_file_reaches_its_writer_in_pieces_and_is_written_whole() {
    let rows = 3_000;
    let ctx = context(rows);
    let dir = tempfile::tempdir().unwrap();
    for ext in ["csv", "json"] {
        let path = dir.path().join(format!("out.{ext}"));
        let sql = format!("COPY (SELECT x, p FROM w) TO '{}'", path.display());
        let plan = physical(&ctx, &sql).await;
        let shown = displayable(plan.as_ref()).indent(false).to_string();
        let sink = plan.downcast_ref::<DataSinkExec>().expect(&shown);
        assert!(sink.input().is::<PiecesExec>(), "{ext}:\n{shown}");

        // The pieces: every row once, in order, each piece's values within
        // the target (the batch's 6 MB would be one).
        let pieces = collect(sink.input().clone(), ctx.task_ctx()).await.unwrap();
        assert!(pieces.len() >= 5, "{ext}: {} pieces", pieces.len());
        let mut next = 0;
        for piece in &pieces {
            let x = piece
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            assert!(x.values().iter().copied().eq(next..next + x.len() as i64));
            next += x.len() as i64;
            assert!(x.len() as u64 * WIDE as u64 <= TARGET_BYTES, "{}", x.len());
        }
        assert_eq!(next, rows);

        // The file: every row once, in order (one CSV header).
        collect(plan, ctx.task_ctx()).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let body = match ext {
            "csv" => {
                assert_eq!(lines[0], "x,p");
                &lines[1..]
            }
            _ => &lines[..],
        };
        assert_eq!(body.len(), rows as usize, "{ext}");
        for (x, line) in body.iter().enumerate() {
            let p = (x % 10).to_string().repeat(WIDE);
            let want = match ext {
                "csv" => format!("{x},{p}"),
                _ => format!(r#"{{"x":{x},"p":"{p}"}}"#),
            };
            assert!(
                *line == want,
                "{ext} line {x}: {}",
                &line[..40.min(line.len())]
            );
        }
    }
}

#[tokio::test]
async fn sinks_that_write_a_batch_at_a_time_and_plain_queries_are_left_alone() {
    let ctx = context(10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.parquet");
    let sql = format!("COPY (SELECT x, p FROM w) TO '{}'", path.display());
    let plan = physical(&ctx, &sql).await;
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    assert!(plan.is::<DataSinkExec>(), "{shown}");
    assert!(!shown.contains("PiecesExec"), "{shown}");
    let plan = physical(&ctx, "SELECT x, p FROM w").await;
    let shown = displayable(plan.as_ref()).indent(false).to_string();
    assert!(!shown.contains("PiecesExec"), "{shown}");
}
