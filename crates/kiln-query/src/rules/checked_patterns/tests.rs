use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, StringViewArray};
use arrow::datatypes::Field;
use datafusion::prelude::SessionContext;

use super::*;
use crate::error::{Error, ErrorKind};

async fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    ctx.add_analyzer_rule(Arc::new(CheckedPatterns));
    ctx.sql("CREATE TABLE t (s VARCHAR, p VARCHAR, f VARCHAR) AS VALUES ('abc', 'b', 'i'), ('aXc', 'x', 'i'), ('q', NULL, NULL)")
        .await
        .unwrap();
    ctx
}

/// The optimized plan of `sql`, as text.
async fn plan(ctx: &SessionContext, sql: &str) -> String {
    let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
    plan.display_indent().to_string()
}

/// The error of running `sql`, as Kiln's error.
async fn error(ctx: &SessionContext, sql: &str) -> Error {
    let run = async { ctx.sql(sql).await?.collect().await };
    Error::from(run.await.expect_err(sql))
}

#[tokio::test]
async fn patterns_not_written_out_are_checked_and_keep_their_names() {
    let ctx = ctx().await;
    for sql in [
        "SELECT s ~ p FROM t",
        "SELECT s !~* p FROM t",
        "SELECT s SIMILAR TO p FROM t",
        "SELECT regexp_like(s, p) FROM t",
        "SELECT regexp_replace(s, p, '-', 'g') FROM t",
        // A literal pattern with flags read from a column.
        "SELECT regexp_like(s, 'a', f) FROM t",
        "SELECT count(*) FROM t WHERE s ~ ('^' || p)",
    ] {
        let plan = plan(&ctx, sql).await;
        assert!(plan.contains("checked_pattern("), "{sql}:\n{plan}");
        // The rule is not applied twice over.
        assert!(
            !plan.contains("checked_pattern(checked_pattern"),
            "{sql}:\n{plan}"
        );
        let without = SessionContext::new();
        without
            .sql("CREATE TABLE t (s VARCHAR, p VARCHAR, f VARCHAR)")
            .await
            .unwrap();
        let names = |ctx: SessionContext| async move {
            let df = ctx.sql(sql).await.unwrap();
            let fields = df.schema().fields().iter();
            fields.map(|f| f.name().clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(ctx.clone()).await, names(without).await, "{sql}");
    }
    // Literals and parameters are checked before they run: left as they are.
    for sql in [
        "SELECT s ~ '^a' FROM t",
        "SELECT regexp_replace(s, 'b', '-', 'gi') FROM t",
        "SELECT s ~ $1 FROM t",
        "SELECT regexp_like(s, $1, $2) FROM t",
    ] {
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let analyzed = ctx
            .state()
            .analyzer()
            .execute_and_check(plan, ctx.state().config_options(), |_, _| {})
            .unwrap();
        let text = analyzed.display_indent().to_string();
        assert!(!text.contains("checked_pattern"), "{sql}:\n{text}");
    }
}

#[tokio::test]
async fn a_pattern_that_does_not_compile_is_bad_input_and_good_ones_answer() {
    let ctx = ctx().await;
    let cases = [
        (
            "SELECT count(*) FROM t WHERE s ~ (p || '(')",
            "'b(': unclosed group at byte 1",
        ),
        (
            "SELECT regexp_match(s, 'a', f || 'z') FROM t",
            "with flags 'iz'",
        ),
        (
            "SELECT 'x' ~ ('a' || '[')",
            "'a[': unclosed character class at byte 1",
        ),
    ];
    for (sql, why) in cases {
        let e = error(&ctx, sql).await;
        assert_eq!(e.kind(), ErrorKind::InvalidRegularExpression, "{sql}: {e}");
        assert!(e.to_string().contains(why), "{sql}: {e}");
    }
    let rows = ctx
        .sql("SELECT s, s ~* p, regexp_replace(s, p, '-', f) FROM t ORDER BY s")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = arrow::util::pretty::pretty_format_batches(&rows)
        .unwrap()
        .to_string();
    for row in ["| aXc | true ", "| abc | true ", "| q   |      "] {
        assert!(text.contains(row), "{text}");
    }
    assert_eq!(text.matches("| a-c ").count(), 2, "{text}");
}

#[test]
fn the_pattern_comes_back_unchanged_once_each_one_compiles() {
    let udf = CheckedPattern::new("regexp_replace", String::new());
    let call = |pattern: ArrayRef, flags: ColumnarValue| {
        let rows = pattern.len();
        udf.invoke_with_args(ScalarFunctionArgs {
            args: vec![ColumnarValue::Array(pattern.clone()), flags],
            arg_fields: ["p", "f"]
                .map(|name| Arc::new(Field::new(name, DataType::Utf8, true)))
                .to_vec(),
            number_rows: rows,
            return_field: Arc::new(Field::new("r", pattern.data_type().clone(), true)),
            config_options: Arc::new(ConfigOptions::default()),
        })
    };
    let g = || ColumnarValue::Scalar(ScalarValue::Utf8(Some("gi".into())));
    for pattern in [
        Arc::new(StringArray::from(vec![
            Some("a+"),
            None,
            Some("a+"),
            Some("[0-9]"),
        ])) as ArrayRef,
        Arc::new(StringViewArray::from(vec![Some("a+"), None, Some("b")])) as ArrayRef,
    ] {
        let ColumnarValue::Array(out) = call(pattern.clone(), g()).unwrap() else {
            panic!("an array")
        };
        assert!(Arc::ptr_eq(&out, &pattern));
    }
    let bad = Arc::new(StringArray::from(vec![Some("a+"), Some("b("), Some("b(")])) as ArrayRef;
    let e = Error::from(call(bad, g()).unwrap_err());
    assert_eq!(e.kind(), ErrorKind::InvalidRegularExpression);
    assert_eq!(
        e.to_string(),
        "invalid regular expression 'b(' with flags 'i': unclosed group at byte 1"
    );
    // Flags by row: `z` is not a flag.
    let flags = ColumnarValue::Array(Arc::new(StringArray::from(vec![Some("i"), Some("z")])));
    let e = Error::from(call(Arc::new(StringArray::from(vec!["a", "a"])), flags).unwrap_err());
    assert!(e.to_string().contains("with flags 'z'"), "{e}");
}

/// A computed pattern names the parameters it reads when the value bound
/// does not compile, in a plan kept with its parameters (a generic plan)
/// and in one made for the values (a custom plan, HTTP `params`), which
/// binds them with [`bind`].
#[tokio::test]
async fn a_computed_pattern_names_the_parameters_it_reads() {
    use datafusion::common::ParamValues;

    let ctx = ctx().await;
    let text = |s: &str| ScalarValue::Utf8(Some(s.into()));
    let cases = [
        (
            "SELECT count(*) FROM t WHERE s ~ ('^' || $1)",
            vec![text("a(")],
            "invalid regular expression '^a(' (parameter $1): unclosed group at byte 2",
        ),
        (
            "SELECT regexp_match(s, $2 || p, $1 || 'i') FROM t",
            vec![text("z"), text("[")],
            "(parameters $2, $1)",
        ),
        (
            "SELECT count(*) FROM t WHERE s ~ (p || '(')",
            vec![],
            "invalid regular expression 'b(': unclosed group at byte 1",
        ),
    ];
    for ((sql, values, why), generic) in cases
        .into_iter()
        .flat_map(|c| [(c.clone(), true), (c, false)])
    {
        let state = ctx.state();
        let plan = state.create_logical_plan(sql).await.unwrap();
        let values = ParamValues::List(values.into_iter().map(Into::into).collect());
        let bound = match generic {
            true => state
                .optimize(&plan)
                .unwrap()
                .replace_params_with_values(&values),
            false => bind(plan, &values),
        }
        .unwrap();
        let run = async {
            let physical = state.create_physical_plan(&bound).await?;
            datafusion::physical_plan::collect(physical, ctx.task_ctx()).await
        };
        let e = Error::from(run.await.expect_err(sql));
        assert_eq!(e.kind(), ErrorKind::InvalidRegularExpression, "{sql}: {e}");
        assert!(e.to_string().contains(why), "{sql}: {e}");
        assert_eq!(
            sql.contains('$'),
            e.to_string().contains("parameter"),
            "{sql}: {e}"
        );
    }
}
