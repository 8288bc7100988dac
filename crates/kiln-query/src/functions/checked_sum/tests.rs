use arrow::array::{Array, Int64Array, UInt64Array};
use arrow::record_batch::RecordBatch;
use datafusion::prelude::SessionContext;

use super::*;

fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    ctx.register_udaf(CheckedSum::udaf());
    ctx
}

async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

fn overflowed(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::ArrowError(a, _) if matches!(**a, ArrowError::ArithmeticOverflow(_)))
}

/// Two rows whose total leaves BIGINT's range, in one table of many
/// batches (`target_partitions` 4 splits its aggregation in two phases).
async fn big_table(ctx: &SessionContext) {
    ctx.sql(
        "CREATE TABLE t AS SELECT * FROM (VALUES \
         (1, 9223372036854775000, 5), (1, 1000, 6), (2, 7, 8), (2, -3, 9)) v(g, x, u)",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn an_integer_total_out_of_range_is_an_error() {
    let ctx = ctx();
    big_table(&ctx).await;
    for sql in [
        "SELECT sum(x) FROM t",
        "SELECT g, sum(x) FROM t GROUP BY g",
        "SELECT sum(x) FROM t WHERE g = 1",
        "SELECT sum(x) FILTER (WHERE g = 1) FROM t",
        "SELECT g, sum(x) FILTER (WHERE u > 0) FROM t GROUP BY g",
        "SELECT sum(arrow_cast(18446744073709551000, 'UInt64')) FROM t",
        "SELECT sum(CAST(x AS INT)) FROM (VALUES (2147483647)) s(x)",
    ] {
        let r = run(&ctx, sql).await;
        // An INT total is BIGINT: it fits.
        if sql.contains("AS INT") {
            assert!(r.is_ok(), "{sql}: {r:?}");
            continue;
        }
        let e = r.unwrap_err();
        assert!(overflowed(&e), "{sql}: {e}");
        assert!(e.to_string().contains("integer sum out of range"), "{e}");
    }
}

#[tokio::test]
async fn totals_in_range_are_datafusions() {
    let ctx = ctx();
    big_table(&ctx).await;
    let b = run(
        &ctx,
        "SELECT g, sum(x), sum(u) FROM t WHERE g = 2 GROUP BY g",
    )
    .await
    .unwrap();
    let col = |i: usize| {
        b[0].column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0)
    };
    assert_eq!(col(1), 4);
    assert_eq!(col(2), 17);
    let b = run(
        &ctx,
        "SELECT sum(arrow_cast(u, 'UInt64')) FROM t WHERE g = 2",
    )
    .await
    .unwrap();
    let u = b[0]
        .column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    assert_eq!(u.value(0), 17);
    // No rows: NULL, as DataFusion's.
    let b = run(&ctx, "SELECT sum(x) FROM t WHERE g = 3").await.unwrap();
    assert!(b[0].column(0).is_null(0));
    // The same name: DataFusion's rewrites that look for `sum` still apply.
    let b = run(&ctx, "SELECT sum(DISTINCT u), count(DISTINCT u) FROM t")
        .await
        .unwrap();
    assert_eq!(
        b[0].column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0),
        28
    );
}

/// The first column of a result, as BIGINTs.
fn bigints(b: &[RecordBatch]) -> Vec<Option<i64>> {
    b.iter()
        .flat_map(|b| {
            let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            c.iter().collect::<Vec<_>>()
        })
        .collect()
}

/// `sum(DISTINCT x)` beside another distinct aggregate (which keeps
/// DataFusion from rewriting it into a grouped plain sum) and sums over
/// sliding frames fail when their total is out of range.
#[tokio::test]
async fn distinct_and_sliding_totals_out_of_range_are_errors() {
    let ctx = ctx();
    big_table(&ctx).await;
    for sql in [
        "SELECT sum(DISTINCT x), count(DISTINCT u) FROM t",
        "SELECT sum(DISTINCT arrow_cast(u, 'UInt64') + arrow_cast(18446744073709551000, 'UInt64')), \
         count(DISTINCT x) FROM t",
        "SELECT sum(x) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
        "SELECT sum(DISTINCT x) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
    ] {
        let e = run(&ctx, sql).await.unwrap_err();
        assert!(overflowed(&e), "{sql}: {e}");
        assert!(e.to_string().contains("integer sum out of range"), "{e}");
    }
}

/// A distinct or sliding total that fits is answered, even where adding in
/// some order would leave the range on the way: a frame adds its new row
/// before it takes the old one away, and distinct values have no order.
#[tokio::test]
async fn distinct_and_sliding_totals_that_fit_are_answered() {
    let ctx = ctx();
    let a = 9_223_372_036_854_775_000_i64;
    let sql = format!(
        "SELECT sum(x) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
         FROM (VALUES (1, {a}), (2, 0), (3, {a}), (4, -{a}), (5, NULL)) s(u, x) ORDER BY u"
    );
    let b = run(&ctx, &sql).await.unwrap();
    assert_eq!(bigints(&b), [Some(a), Some(a), Some(a), Some(0), Some(-a)]);
    let sql = sql.replace("sum(x)", "sum(DISTINCT x)");
    let b = run(&ctx, &sql).await.unwrap();
    assert_eq!(bigints(&b), [Some(a), Some(a), Some(a), Some(0), Some(-a)]);
    let b = run(
        &ctx,
        &format!(
            "SELECT sum(DISTINCT x), count(DISTINCT u) \
             FROM (VALUES ({a}, 1), (1000, 2), (-2000, 3), ({a}, 4), (NULL, 5)) s(x, u)"
        ),
    )
    .await
    .unwrap();
    assert_eq!(bigints(&b), [Some(a - 1000)]);
    // No rows in the frame: NULL.
    let b = run(
        &ctx,
        "SELECT sum(x) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
         FROM (VALUES (1, CAST(NULL AS BIGINT)), (2, NULL)) s(u, x) ORDER BY u",
    )
    .await
    .unwrap();
    assert_eq!(bigints(&b), [None, None]);
}

#[tokio::test]
async fn a_decimal_total_past_its_digits_is_an_error() {
    let ctx = ctx();
    let nines = "99999999999999999999999999999999999999";
    ctx.sql(&format!(
        "CREATE TABLE d AS SELECT g, CAST(x AS DECIMAL(38, 0)) AS x, CAST(y AS DECIMAL(10, 2)) AS y \
         FROM (VALUES (1, '{nines}', '1.5'), (1, '{nines}', '2.25'), (2, '5', '-1.0'), (2, '-{nines}', '0.5')) v(g, x, y)"
    ))
    .await
    .unwrap();
    for sql in [
        "SELECT sum(x) FROM d",
        "SELECT g, sum(x) FROM d GROUP BY g",
        "SELECT sum(x) FROM d WHERE g = 1",
        // Two distinct aggregates: not rewritten into a plain sum.
        "SELECT sum(DISTINCT x), count(DISTINCT y) FROM d WHERE x > 0",
        "SELECT g > 0, sum(DISTINCT x), count(DISTINCT y) FROM d WHERE x > 0 GROUP BY 1",
    ]
    .map(String::from)
    .into_iter()
    // 38 nines and one more: past 38 digits, within 128 bits.
    .chain([format!(
        "SELECT sum(CAST(x AS DECIMAL(38, 0))) FROM (VALUES ('{nines}'), ('1')) v(x)"
    )]) {
        let sql = sql.as_str();
        let e = run(&ctx, sql).await.unwrap_err();
        assert!(overflowed(&e), "{sql}: {e}");
        assert!(
            e.to_string()
                .contains("numeric sum out of range of Decimal128(38, 0)"),
            "{sql}: {e}"
        );
    }
    // Totals that fit, in one group and per group, are DataFusion's.
    let b = run(&ctx, "SELECT sum(x), sum(y) FROM d WHERE g = 2")
        .await
        .unwrap();
    let x = b[0].column(0).as_primitive::<Decimal128Type>().value(0);
    assert_eq!(x, 5 - 99999999999999999999999999999999999999_i128);
    let y = b[0].column(1).as_primitive::<Decimal128Type>().value(0);
    assert_eq!(y, -50, "-1.00 + 0.50 in hundredths");
    let b = run(&ctx, "SELECT g, sum(y) FROM d GROUP BY g ORDER BY g")
        .await
        .unwrap();
    let y = b[0].column(1).as_primitive::<Decimal128Type>();
    assert_eq!((y.value(0), y.value(1)), (375, -50));
    // DISTINCT: each value once, in its type.
    let b = run(
        &ctx,
        "SELECT sum(DISTINCT x), sum(DISTINCT y), sum(DISTINCT y) FILTER (WHERE g = 3) FROM d WHERE g = 2 OR y > 2",
    )
    .await
    .unwrap();
    let x = b[0].column(0).as_primitive::<Decimal128Type>().value(0);
    assert_eq!(x, 5, "past 38 digits on the way, whatever the order");
    let y = b[0].column(1).as_primitive::<Decimal128Type>();
    assert_eq!(
        (y.value(0), y.data_type()),
        (175, &DataType::Decimal128(20, 2))
    );
    assert!(b[0].column(2).is_null(0));
}

/// A sum of decimals over a sliding frame fails when a frame's total has
/// more digits than its type; totals that fit are answered, NULL for a
/// frame of no values.
#[tokio::test]
async fn a_sliding_decimal_total_past_its_digits_is_an_error() {
    let ctx = ctx();
    let nines = "99999999999999999999999999999999999999";
    let frame = |values: &str| {
        format!(
            "SELECT sum(CAST(x AS DECIMAL(38, 0))) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
             FROM (VALUES {values}) v(u, x) ORDER BY u"
        )
    };
    // Two rows of 38 nines: past 38 digits and past 128 bits.
    let sql = frame(&format!("(1, '{nines}'), (2, '{nines}')"));
    let e = run(&ctx, &sql).await.unwrap_err();
    assert!(overflowed(&e), "{e}");
    assert!(
        e.to_string()
            .contains("numeric sum out of range of Decimal128(38, 0)"),
        "{e}"
    );
    // Frames that fit, though the frame adds its third row before it takes
    // the first away (past 128 bits on the way); a NULL-only frame.
    let sql = frame(&format!(
        "(1, '{nines}'), (2, '0'), (3, '{nines}'), (4, '-{nines}'), (5, NULL), (6, NULL)"
    ));
    let b = run(&ctx, &sql).await.unwrap();
    let n: i128 = nines.parse().unwrap();
    let totals: Vec<Option<i128>> = b
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<Decimal128Type>()
                .iter()
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(totals, [Some(n), Some(n), Some(n), Some(0), Some(-n), None]);
    // A narrower type summed into a wider one: relabelled, not rescaled.
    let sql = "SELECT sum(CAST(x AS DECIMAL(10, 2))) OVER (ORDER BY u ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
               FROM (VALUES (1, '1.50'), (2, '2.25')) v(u, x) ORDER BY u";
    let b = run(&ctx, sql).await.unwrap();
    let y = b[0].column(0).as_primitive::<Decimal128Type>();
    assert_eq!(
        (y.value(0), y.value(1), y.data_type()),
        (150, 375, &DataType::Decimal128(20, 2))
    );
}
