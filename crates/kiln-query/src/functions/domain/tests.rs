use arrow::array::{Array, AsArray};
use arrow::datatypes::Float64Type;
use datafusion::prelude::SessionContext;

use crate::error::{Error, ErrorKind};

fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    crate::functions::register(&ctx);
    ctx
}

/// The first column of `sql`'s answer, as floats (NULL as `None`).
async fn floats(ctx: &SessionContext, sql: &str) -> Result<Vec<Option<f64>>, Error> {
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(batches
        .iter()
        .flat_map(|b| {
            let c =
                arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::Float64).unwrap();
            let c = c.as_primitive::<Float64Type>().clone();
            (0..c.len())
                .map(|i| c.is_valid(i).then(|| c.value(i)))
                .collect::<Vec<_>>()
        })
        .collect())
}

async fn refused(ctx: &SessionContext, sql: &str) -> (ErrorKind, String) {
    let e = floats(ctx, sql).await.expect_err(sql);
    (e.kind(), e.to_string())
}

#[tokio::test]
async fn arguments_outside_a_functions_domain_are_refused_with_postgresql_s_codes() {
    let ctx = ctx();
    let column = |f: &str, values: &str| format!("SELECT {f} FROM (VALUES {values}) t(x)");
    for (sql, kind, msg) in [
        (
            column("sqrt(x)", "(4.0), (NULL), (-1.0)"),
            ErrorKind::InvalidPowerArgument,
            "sqrt(-1): cannot take square root of a negative number",
        ),
        (
            "SELECT sqrt(-4)".to_string(),
            ErrorKind::InvalidPowerArgument,
            "sqrt(-4): cannot take square root of a negative number",
        ),
        (
            column("ln(x)", "(1.0), (0.0)"),
            ErrorKind::InvalidLogarithmArgument,
            "ln(0): cannot take logarithm of zero",
        ),
        (
            column("log10(x)", "(-2.5)"),
            ErrorKind::InvalidLogarithmArgument,
            "log10(-2.5): cannot take logarithm of a negative number",
        ),
        (
            column("log2(x)", "(0)"),
            ErrorKind::InvalidLogarithmArgument,
            "log2(0): cannot take logarithm of zero",
        ),
        (
            column("log(x)", "(0.0)"),
            ErrorKind::InvalidLogarithmArgument,
            "log(0): cannot take logarithm of zero",
        ),
        (
            column("log(x, 8.0)", "(0.0)"),
            ErrorKind::InvalidLogarithmArgument,
            "log(0, 8): cannot take logarithm of zero",
        ),
        (
            column("log(x, 8.0)", "(1.0)"),
            ErrorKind::DivisionByZero,
            "log(1, 8): division by zero (a base of 1)",
        ),
        (
            column("power(x, -1.0)", "(2.0), (0.0)"),
            ErrorKind::InvalidPowerArgument,
            "power(0, -1): zero raised to a negative power is undefined",
        ),
        (
            column("pow(x, 0.5)", "(-8.0)"),
            ErrorKind::InvalidPowerArgument,
            "power(-8, 0.5): a negative number raised to a non-integer power yields a complex result",
        ),
        (
            column("acos(x)", "(1.0), (1.5)"),
            ErrorKind::NumericOutOfRange,
            "acos(1.5): input is out of range",
        ),
        (
            column("asin(x)", "(-2.0)"),
            ErrorKind::NumericOutOfRange,
            "asin(-2): input is out of range",
        ),
        (
            column("abs(x)", "(1), (-9223372036854775807 - 1)"),
            ErrorKind::NumericOutOfRange,
            "abs(-9223372036854775808): integer out of range",
        ),
        (
            column("abs(CAST(x AS INT))", "(-2147483648)"),
            ErrorKind::NumericOutOfRange,
            "abs(-2147483648): integer out of range",
        ),
        (
            column("regexp_count('abcb', 'b', x)", "(1), (0)"),
            ErrorKind::InvalidParameterValue,
            "regexp_count(): invalid value for parameter \"start\": 0",
        ),
        (
            "SELECT regexp_instr('abcb', 'b', -1)".to_string(),
            ErrorKind::InvalidParameterValue,
            "regexp_instr(): invalid value for parameter \"start\": -1",
        ),
    ] {
        assert_eq!(refused(&ctx, &sql).await, (kind, msg.to_string()), "{sql}");
    }
}

#[tokio::test]
async fn arguments_inside_the_domain_are_answered_as_before() {
    let ctx = ctx();
    let sql = "SELECT sqrt(x) FROM (VALUES (4.0), (NULL), (0.0), (CAST('NaN' AS DOUBLE))) t(x)";
    let got = floats(&ctx, sql).await.unwrap();
    assert_eq!(&got[..3], &[Some(2.0), None, Some(0.0)]);
    assert!(got[3].unwrap().is_nan(), "{got:?}");
    for (sql, want) in [
        ("SELECT log(2.0, 8.0)", 3.0),
        ("SELECT ln(1)", 0.0),
        ("SELECT power(-2.0, 3.0)", -8.0),
        ("SELECT power(2.0, -1.0)", 0.5),
        ("SELECT power(0.0, 0.0)", 1.0),
        ("SELECT acos(1.0)", 0.0),
        ("SELECT log10(x) FROM (VALUES (100.0)) t(x)", 2.0),
        (
            "SELECT abs(x) FROM (VALUES (-9223372036854775807)) t(x)",
            9223372036854775807.0,
        ),
        ("SELECT regexp_count('abcb', 'b', 2)", 2.0),
    ] {
        assert_eq!(floats(&ctx, sql).await.unwrap(), vec![Some(want)], "{sql}");
    }
}

#[tokio::test]
async fn nth_value_of_a_row_below_one_is_refused_in_either_direction() {
    let ctx = ctx();
    let rows = "(VALUES (1.0), (2.0), (3.0)) t(x)";
    for n in ["0", "-1"] {
        for order in ["x", "x DESC"] {
            let sql = format!(
                "SELECT nth_value(x, {n}) OVER (ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM {rows} ORDER BY x"
            );
            assert_eq!(
                refused(&ctx, &sql).await,
                (
                    ErrorKind::InvalidNthValueArgument,
                    format!("argument of nth_value must be greater than zero (it is {n})")
                ),
                "{sql}"
            );
        }
    }
    let sql = format!(
        "SELECT nth_value(x, 2) OVER (ORDER BY x DESC ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM {rows} ORDER BY x"
    );
    assert_eq!(
        floats(&ctx, &sql).await.unwrap(),
        vec![Some(2.0), Some(2.0), Some(2.0)]
    );
}
