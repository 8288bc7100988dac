//! The bounds against the results DataFusion's functions really give. SQL
//! behaviour (the errors, answers under the limits) is in
//! `tests/slt/fn_sized.slt`.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type, IntervalMonthDayNano, UInt64Type};
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;

use super::MAX_VALUE_BYTES;
use super::bounds::{Arg, Size};

/// An argument holding `v`.
fn scalar(v: ScalarValue) -> Arg<'static> {
    Arg::Scalar(std::borrow::Cow::Owned(v))
}

fn text(s: &str) -> Arg<'static> {
    scalar(ScalarValue::Utf8(Some(s.to_string())))
}

fn int(n: i64) -> Arg<'static> {
    scalar(ScalarValue::Int64(Some(n)))
}

/// One value of `sql` (an integer or unsigned count).
async fn one(ctx: &SessionContext, sql: &str) -> i64 {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let column = batches[0].column(0);
    assert!(column.is_valid(0), "{sql}");
    match column.data_type() {
        DataType::UInt64 => column.as_primitive::<UInt64Type>().value(0) as i64,
        DataType::Int32 => column.as_primitive::<Int32Type>().value(0) as i64,
        _ => column.as_primitive::<Int64Type>().value(0),
    }
}

fn ctx() -> SessionContext {
    let ctx = SessionContext::new();
    crate::functions::register(&ctx);
    ctx
}

#[tokio::test]
async fn text_bounds_are_the_results_lengths() {
    let ctx = ctx();
    for (s, n) in [("ab", 3), ("é", 5), ("", 9), ("x", 0), ("x", -2)] {
        let real = one(&ctx, &format!("SELECT octet_length(repeat('{s}', {n}))")).await;
        let bound = Size::RepeatString
            .bytes("repeat", &[text(s), int(n)], 0, false)
            .unwrap();
        assert_eq!(bound, real, "repeat('{s}', {n})");
    }
    for (s, from, to) in [
        ("a-b-c", "-", "--"),
        ("aaaa", "aa", "xyz"),
        ("abc", "", "XY"),
        ("héllo", "l", "LLL"),
        ("none", "z", "zzzz"),
        ("shrink", "shr", "s"),
    ] {
        let real = one(
            &ctx,
            &format!("SELECT octet_length(replace('{s}', '{from}', '{to}'))"),
        )
        .await;
        let args = [text(s), text(from), text(to)];
        let bound = Size::Replace.bytes("replace", &args, 0, true).unwrap();
        let quick = Size::Replace.bytes("replace", &args, 0, false).unwrap();
        assert!(quick >= bound, "replace('{s}', '{from}', '{to}')");
        match to.len() > from.len() && !from.is_empty() {
            true => assert_eq!(bound, real, "replace('{s}', '{from}', '{to}')"),
            false => assert!(bound >= real, "replace('{s}', '{from}', '{to}')"),
        }
    }
    // lpad and rpad: at most the string and the pad's widest character.
    for (s, n, fill) in [("7", 3, "0"), ("abcdef", 3, "x"), ("ab", 5, "é")] {
        let real = one(
            &ctx,
            &format!("SELECT octet_length(lpad('{s}', {n}, '{fill}'))"),
        )
        .await;
        let bound = Size::Pad
            .bytes("lpad", &[text(s), int(n), text(fill)], 0, false)
            .unwrap();
        match s.chars().count() < n as usize {
            true => assert_eq!(bound, real, "lpad('{s}', {n}, '{fill}')"),
            false => assert!(bound >= real, "lpad('{s}', {n}, '{fill}')"),
        }
    }
}

/// `concat` and `concat_ws`: exact, NULL arguments left out (a NULL
/// separator gives NULL).
#[tokio::test]
async fn concat_bounds_are_the_results_lengths() {
    let ctx = ctx();
    let null = || scalar(ScalarValue::Utf8(None));
    let calls: Vec<(&str, Vec<Arg>)> = vec![
        (
            "concat('ab', 'é', '')",
            vec![text("ab"), text("é"), text("")],
        ),
        (
            "concat('ab', NULL, 'cd')",
            vec![text("ab"), null(), text("cd")],
        ),
        (
            "concat_ws(', ', 'ab', 'é', 'x')",
            vec![text(", "), text("ab"), text("é"), text("x")],
        ),
        ("concat_ws('--', 'ab')", vec![text("--"), text("ab")]),
    ];
    for (sql, args) in calls {
        let real = one(&ctx, &format!("SELECT octet_length({sql})")).await;
        let size = match sql.starts_with("concat_ws") {
            true => Size::ConcatWs,
            false => Size::Concat,
        };
        assert_eq!(size.bytes("f", &args, 0, false).unwrap(), real, "{sql}");
    }
    // A NULL argument to concat_ws may drop its separator: never below.
    let args = [text("-"), text("ab"), null(), text("cd")];
    let bound = Size::ConcatWs.bytes("concat_ws", &args, 0, false).unwrap();
    assert!(
        bound
            >= one(
                &ctx,
                "SELECT octet_length(concat_ws('-', 'ab', NULL, 'cd'))"
            )
            .await
    );
    let args = [null(), text("ab")];
    assert_eq!(
        Size::ConcatWs.bytes("concat_ws", &args, 0, false).unwrap(),
        0
    );
}

/// DataFusion's simplification of `concat` (adjacent constants joined)
/// still happens, and what it builds is still guarded.
#[tokio::test]
async fn a_simplified_concat_stays_guarded() {
    use datafusion::common::tree_node::TreeNode;
    use datafusion::logical_expr::Expr;
    let ctx = ctx();
    for (sql, joined) in [
        (
            "SELECT concat(CAST(x AS VARCHAR), 'a', 'b') FROM generate_series(1, 2) t(x)",
            "concat",
        ),
        (
            "SELECT concat_ws('', CAST(x AS VARCHAR), 'c') FROM generate_series(1, 2) t(x)",
            "concat",
        ),
        (
            "SELECT concat_ws(',', CAST(x AS VARCHAR), 'a', 'b') FROM generate_series(1, 2) t(x)",
            "concat_ws",
        ),
    ] {
        let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        let mut calls = vec![];
        plan.apply(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Expr::ScalarFunction(f) = e {
                        calls.push((
                            f.name().to_string(),
                            f.args.len(),
                            f.func.inner().downcast_ref::<super::Sized>().is_some(),
                        ));
                    }
                    Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
                })
            })
        })
        .unwrap();
        assert_eq!(
            calls,
            vec![(
                joined.to_string(),
                2 + (joined == "concat_ws") as usize,
                true
            )],
            "{sql}"
        );
    }
}

#[tokio::test]
async fn a_regexp_replace_bound_counts_the_matches_when_it_is_large() {
    let ctx = ctx();
    // Small: the rough bound, never less than the result.
    for (s, pattern, with, flags) in [
        ("foobarbaz", "b(..)", "X\\1Y", "g"),
        ("foobarbaz", "b(..)", "X\\1Y", "i"),
        ("aaa", "", "-", "g"),
    ] {
        let real = one(
            &ctx,
            &format!(
                "SELECT octet_length(regexp_replace('{s}', '{pattern}', '{with}', '{flags}'))"
            ),
        )
        .await;
        let args = [text(s), text(pattern), text(with), text(flags)];
        let bound = Size::RegexpReplace
            .bytes("regexp_replace", &args, 0, false)
            .unwrap();
        assert!(
            bound >= real,
            "{s} {pattern} {with} {flags}: {bound} < {real}"
        );
    }
    // Large: a million characters and a long replacement, found matches.
    let s = "a".repeat(1_000_000);
    let with = "b".repeat(1000);
    let none = [text(&s), text("z"), text(&with), text("g")];
    let bound = Size::RegexpReplace
        .bytes("regexp_replace", &none, 0, false)
        .unwrap();
    assert_eq!(bound, 1_000_000, "no match leaves the string");
    let every = [text(&s), text("a"), text(&with), text("g")];
    let bound = Size::RegexpReplace
        .bytes("regexp_replace", &every, 0, false)
        .unwrap();
    assert!(bound > MAX_VALUE_BYTES, "counted until past the limit");
    let few = [text(&format!("{s}zz")), text("z"), text(&with), text("g")];
    let bound = Size::RegexpReplace
        .bytes("regexp_replace", &few, 0, true)
        .unwrap();
    assert_eq!(bound, 1_000_000 + 2 * 1000, "exact: two matches");
    let first = [text(&s), text("a"), text(&with), text("i")];
    let bound = Size::RegexpReplace
        .bytes("regexp_replace", &first, 0, false)
        .unwrap();
    assert_eq!(bound, 1_000_000 + 1000, "without g, one replacement");
}

fn date(d: &str) -> Arg<'static> {
    let d = chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").unwrap();
    scalar(ScalarValue::Date32(Some(
        (d - chrono::NaiveDate::default()).num_days() as i32,
    )))
}

fn timestamp(t: &str) -> Arg<'static> {
    let t = chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S").unwrap();
    scalar(ScalarValue::TimestampNanosecond(
        t.and_utc().timestamp_nanos_opt(),
        None,
    ))
}

fn step(months: i32, days: i32, ns: i64) -> Arg<'static> {
    scalar(ScalarValue::IntervalMonthDayNano(Some(
        IntervalMonthDayNano::new(months, days, ns),
    )))
}

#[tokio::test]
async fn range_bounds_count_the_elements() {
    let ctx = ctx();
    const HOUR: i64 = 3_600_000_000_000;
    // Each call, its arguments, and whether the bound is the count (a
    // month is taken as 28 days, a day with a time zone as 23 hours).
    let cases = [
        ("range(5)", vec![int(5)], true),
        ("range(1, 10, 3)", vec![int(1), int(10), int(3)], true),
        (
            "generate_series(1, 10, 3)",
            vec![int(1), int(10), int(3)],
            true,
        ),
        ("range(10, 1, -2)", vec![int(10), int(1), int(-2)], true),
        ("generate_series(10, 1)", vec![int(10), int(1)], true),
        (
            "range(DATE '2026-01-01', DATE '2027-01-01', INTERVAL '1 day')",
            vec![date("2026-01-01"), date("2027-01-01"), step(0, 1, 0)],
            true,
        ),
        (
            "generate_series(DATE '2026-01-31', DATE '2026-12-31', INTERVAL '1 month')",
            vec![date("2026-01-31"), date("2026-12-31"), step(1, 0, 0)],
            false,
        ),
        (
            "range(TIMESTAMP '2026-01-01 00:00:00', TIMESTAMP '2026-01-02 00:00:00', INTERVAL '1 hour')",
            vec![
                timestamp("2026-01-01 00:00:00"),
                timestamp("2026-01-02 00:00:00"),
                step(0, 0, HOUR),
            ],
            true,
        ),
        (
            "generate_series(TIMESTAMP '2026-01-02 00:00:00', TIMESTAMP '2026-01-01 00:00:00', INTERVAL '-90 minutes')",
            vec![
                timestamp("2026-01-02 00:00:00"),
                timestamp("2026-01-01 00:00:00"),
                step(0, 0, -HOUR * 3 / 2),
            ],
            true,
        ),
        (
            "generate_series(TIMESTAMP '2026-01-01 00:00:00', TIMESTAMP '2026-03-01 00:00:00', INTERVAL '1 day')",
            vec![
                timestamp("2026-01-01 00:00:00"),
                timestamp("2026-03-01 00:00:00"),
                step(0, 1, 0),
            ],
            false,
        ),
        // The wrong way: empty.
        ("range(5, 1)", vec![int(5), int(1)], true),
    ];
    for (call, args, exact) in cases {
        let real = one(&ctx, &format!("SELECT cardinality({call})")).await;
        let inclusive = call.starts_with("generate_series");
        let name = if inclusive {
            "generate_series"
        } else {
            "range"
        };
        let bound = Size::Range { inclusive }
            .bytes(name, &args, 0, false)
            .unwrap()
            / 8;
        match exact {
            true => assert_eq!(bound, real, "{call}"),
            false => assert!(
                bound >= real && bound <= real * 11 / 10,
                "{call}: {bound} for {real}"
            ),
        }
    }
}

#[test]
fn a_step_of_mixed_signs_is_refused() {
    let days = |d: i32| scalar(ScalarValue::Date32(Some(d)));
    let size = Size::Range { inclusive: true };
    let err = size
        .bytes(
            "generate_series",
            &[days(0), days(400), step(1, -31, 0)],
            0,
            false,
        )
        .unwrap_err();
    assert!(err.to_string().contains("different signs"), "{err}");
    let one_sign = size.bytes(
        "generate_series",
        &[days(0), days(400), step(1, 1, 0)],
        0,
        false,
    );
    assert!(one_sign.unwrap() > 0);
    // A NULL bound gives a NULL result: nothing to refuse.
    let null = scalar(ScalarValue::Date32(None));
    assert_eq!(
        size.bytes(
            "generate_series",
            &[null, days(400), step(1, -31, 0)],
            0,
            false
        )
        .unwrap(),
        0
    );
}

/// The bound on all rows at once is never below the rows' own bounds
/// summed, for each kind of text array (sliced too, as a batch may be).
#[test]
fn a_bound_on_all_rows_covers_every_row() {
    use arrow::array::{ArrayRef, LargeStringArray, StringArray, StringViewArray};
    use std::sync::Arc;
    let values = [
        "a-b-c",
        "",
        "héllo wörld",
        "x",
        "---",
        "long text with - and -",
    ];
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(values.to_vec())),
        Arc::new(LargeStringArray::from(values.to_vec())),
        Arc::new(StringViewArray::from(values.to_vec())),
        Arc::new(StringArray::from(values.to_vec()).slice(2, 3)),
        Arc::new(StringViewArray::from(values.to_vec()).slice(1, 4)),
    ];
    for array in &arrays {
        let rows = array.len();
        let calls: Vec<(Size, Vec<Arg>)> = vec![
            (Size::RepeatString, vec![Arg::Array(array), int(3)]),
            (Size::Pad, vec![Arg::Array(array), int(12), text("é")]),
            (Size::Pad, vec![Arg::Array(array), int(4)]),
            (
                Size::Replace,
                vec![Arg::Array(array), text("-"), text("<->")],
            ),
            (
                Size::Replace,
                vec![Arg::Array(array), text("--"), text("+")],
            ),
            (
                Size::RegexpReplace,
                vec![
                    Arg::Array(array),
                    text("[a-z]+"),
                    text("<\\1$0>"),
                    text("g"),
                ],
            ),
            (Size::RepeatElement, vec![Arg::Array(array), int(5)]),
            (
                Size::Concat,
                vec![Arg::Array(array), text("--"), Arg::Array(array)],
            ),
            (
                Size::ConcatWs,
                vec![text(", "), Arg::Array(array), text("x"), Arg::Array(array)],
            ),
            (
                Size::ConcatWs,
                vec![Arg::Array(array), text("x"), text("y")],
            ),
        ];
        for (size, args) in calls {
            let all = size.all_rows(&args, rows).unwrap();
            let each: i64 = (0..rows)
                .map(|row| size.bytes("f", &args, row, true).unwrap())
                .sum();
            assert!(
                all >= each as i128,
                "{size:?} over {array:?}: {all} < {each}"
            );
        }
    }
}

/// One pass keeps its last compiled pattern: rows with another pattern, or
/// one that does not compile, get their own, as with a fresh pass.
#[test]
fn a_pass_compiles_a_pattern_once_and_follows_changes() {
    use super::bounds::Patterns;
    let s = "ab".repeat(1000);
    let mut patterns = Patterns::default();
    for pattern in ["a", "a", "b+", "(", "a"] {
        let args = [text(&s), text(pattern), text("xyz"), text("g")];
        let kept = Size::RegexpReplace.bytes_with("regexp_replace", &args, 0, true, &mut patterns);
        let fresh = Size::RegexpReplace.bytes("regexp_replace", &args, 0, true);
        assert_eq!(kept.unwrap(), fresh.unwrap(), "{pattern}");
    }
}
