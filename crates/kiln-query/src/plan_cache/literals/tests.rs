use arrow::datatypes::TimeUnit;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::*;

fn lifted(sql: &str) -> (String, Vec<Literal>) {
    let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    let literals = lift(&mut stmt);
    (stmt.to_string(), literals)
}

fn n(s: &str) -> Literal {
    Literal::Number(s.into())
}

fn s(s: &str) -> Literal {
    Literal::String(s.into())
}

#[test]
fn filter_literals_become_placeholders_in_order() {
    let (text, literals) = lifted(
        "SELECT arm, date_trunc('day', ts) AS d, count(*) FROM t \
         WHERE e = 17 AND ts >= '2026-01-01' AND (u IN (1, -2) OR NOT x BETWEEN 1.5 AND +2) \
         GROUP BY 1, 2 HAVING count(*) > 10 ORDER BY 1 LIMIT 5",
    );
    assert_eq!(
        text,
        "SELECT arm, date_trunc('day', ts) AS d, count(*) FROM t \
         WHERE e = $1 AND ts >= $2 AND (u IN ($3, $4) OR NOT x BETWEEN $5 AND $6) \
         GROUP BY 1, 2 HAVING count(*) > $7 ORDER BY 1 LIMIT 5"
    );
    assert_eq!(
        literals,
        [
            n("17"),
            s("2026-01-01"),
            n("1"),
            n("-2"),
            n("1.5"),
            n("2"),
            n("10")
        ]
    );
}

#[test]
fn ctes_derived_tables_and_unions_are_lifted_too() {
    let (text, literals) = lifted(
        "WITH w AS (SELECT * FROM t WHERE a = 1) \
         SELECT * FROM (SELECT * FROM w WHERE b < 2) AS d WHERE 'x' = c \
         UNION ALL SELECT * FROM t WHERE a <> 3",
    );
    assert_eq!(
        text,
        "WITH w AS (SELECT * FROM t WHERE a = $1) \
         SELECT * FROM (SELECT * FROM w WHERE b < $2) AS d WHERE $3 = c \
         UNION ALL SELECT * FROM t WHERE a <> $4"
    );
    assert_eq!(literals, [n("1"), n("2"), s("x"), n("3")]);
}

#[test]
fn literals_that_decide_the_plan_stay() {
    for sql in [
        "SELECT 1, 'a' FROM t",
        "SELECT * FROM t WHERE url LIKE '%feed%'",
        "SELECT * FROM t WHERE date_trunc('day', ts) = date_trunc('day', now())",
        "SELECT * FROM t WHERE 1 = 1",
        "SELECT * FROM t WHERE a = (SELECT max(b) FROM u WHERE c = 1)",
        "SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = 1)",
        "SELECT * FROM t WHERE CASE WHEN a = 1 THEN true END",
        "SELECT * FROM t WHERE a = NULL OR b = true",
        // Typed strings whose meaning depends on a setting, or not strings.
        "SELECT * FROM t WHERE ts > TIMESTAMP WITH TIME ZONE '2026-01-01'",
        "SELECT * FROM t WHERE ts > TIMESTAMP(3) '2026-01-01'",
        "SELECT * FROM t WHERE ts > TRY_CAST('2026-01-01' AS TIMESTAMP)",
        "SELECT * FROM t WHERE a = CAST('7' AS BIGINT)",
        "SELECT * FROM t WHERE ts > CAST(5 AS TIMESTAMP)",
        // Strings parsed by a template: only a quoted string by quoted ones.
        "SELECT * FROM t WHERE ts > to_timestamp(c, 'YYYY')",
        "SELECT * FROM t WHERE ts > to_timestamp('2026', c)",
        "SELECT * FROM t WHERE ts > to_timestamp(1767225600)",
        "SELECT * FROM t WHERE ts > \"to_timestamp\"('2026-01-01')",
        "SELECT * FROM t WHERE ts > to_char('2026-01-01', 'YYYY')",
        "SELECT * FROM t ORDER BY a LIMIT 10 OFFSET 5",
        "INSERT INTO t VALUES (1)",
    ] {
        let (text, literals) = lifted(sql);
        assert!(literals.is_empty(), "{sql} lifted {literals:?}");
        assert!(!text.contains('$'), "{text}");
    }
}

fn typed(s: &str, t: DataType) -> Literal {
    Literal::Typed(s.into(), t)
}

#[test]
fn strings_given_a_type_are_lifted_with_it() {
    let ns = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let (text, literals) = lifted(
        "SELECT count(*) FROM t WHERE ts >= TIMESTAMP '2026-01-01' \
         AND (ts) < (CAST('2026-01-08 06:00:00' AS TIMESTAMP)) \
         AND d BETWEEN DATE '2026-01-01' AND '2026-01-05'::date AND e = (7)",
    );
    assert_eq!(
        text,
        "SELECT count(*) FROM t WHERE ts >= $1 AND (ts) < $2 AND d BETWEEN $3 AND $4 AND e = $5"
    );
    assert_eq!(
        literals,
        [
            typed("2026-01-01", ns.clone()),
            typed("2026-01-08 06:00:00", ns),
            typed("2026-01-01", DataType::Date32),
            typed("2026-01-05", DataType::Date32),
            n("7"),
        ]
    );
}

#[test]
fn a_typed_string_shifted_by_an_interval_is_lifted_inside_its_cast() {
    let (text, literals) = lifted(
        "SELECT count(*) FROM t WHERE ts >= CAST('2026-01-08' AS TIMESTAMP) - INTERVAL '1 day' \
         AND ts < (INTERVAL '7 days' + (DATE '2026-01-01')) \
         AND ts >= '2026-01-02'::timestamp + INTERVAL '6' HOUR \
         AND ts < ts + INTERVAL '1 day' AND ts > CAST(x AS TIMESTAMP) - INTERVAL '1 day' \
         AND ts > TIMESTAMPTZ '2026-01-01' - INTERVAL '1 day' \
         AND ts > TIMESTAMP '2026-01-01' - '1 day'",
    );
    assert_eq!(
        text,
        "SELECT count(*) FROM t WHERE ts >= CAST($1 AS TIMESTAMP) - INTERVAL '1 day' \
         AND ts < (INTERVAL '7 days' + CAST($2 AS DATE)) \
         AND ts >= CAST($3 AS TIMESTAMP) + INTERVAL '6' HOUR \
         AND ts < ts + INTERVAL '1 day' AND ts > CAST(x AS TIMESTAMP) - INTERVAL '1 day' \
         AND ts > TIMESTAMPTZ '2026-01-01' - INTERVAL '1 day' \
         AND ts > TIMESTAMP '2026-01-01' - '1 day'"
    );
    assert_eq!(
        literals,
        [s("2026-01-08"), s("2026-01-01"), s("2026-01-02")]
    );
}

#[test]
fn a_string_parsed_by_a_template_is_lifted_and_its_templates_stay() {
    let (text, literals) = lifted(
        "SELECT count(*) FROM t WHERE ts >= TO_TIMESTAMP('2026-01-01 00:00:00.000000', \
         'YYYY-MM-DD HH24:MI:SS.US') AND to_date('2026-01-08', 'YYYY-MM-DD', 'DD.MM.YYYY') > ts \
         AND ts < to_timestamp('2026-01-09')",
    );
    assert_eq!(
        text,
        "SELECT count(*) FROM t WHERE ts >= TO_TIMESTAMP($1, 'YYYY-MM-DD HH24:MI:SS.US') \
         AND to_date($2, 'YYYY-MM-DD', 'DD.MM.YYYY') > ts AND ts < to_timestamp($3)"
    );
    assert_eq!(
        literals,
        [
            s("2026-01-01 00:00:00.000000"),
            s("2026-01-08"),
            s("2026-01-09")
        ]
    );
}

#[test]
fn a_value_is_bound_only_where_it_compares_as_written() {
    let ns = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let cases: Vec<(Literal, DataType, Option<ScalarValue>)> = vec![
        (n("17"), DataType::Int64, Some(ScalarValue::Int64(Some(17)))),
        (n("-3"), DataType::Int32, Some(ScalarValue::Int32(Some(-3)))),
        (
            n("2"),
            DataType::Float64,
            Some(ScalarValue::Float64(Some(2.0))),
        ),
        (n("2.0"), DataType::Int64, Some(ScalarValue::Int64(Some(2)))),
        (
            n("1e3"),
            DataType::Float64,
            Some(ScalarValue::Float64(Some(1000.0))),
        ),
        // A fraction compared with an integer column compares as a fraction.
        (n("1.5"), DataType::Int64, None),
        (n("3000000000"), DataType::Int32, None),
        (n("-1"), DataType::UInt64, None),
        // Past i64: DataFusion reads it as an unsigned integer, not a float.
        (n("18446744073709551615"), DataType::UInt64, None),
        (n("1e400"), DataType::Float64, None),
        // A number compared with text or time is left to the planner.
        (n("5"), DataType::Utf8, None),
        (n("5"), ns.clone(), None),
        (
            s("eu"),
            DataType::Utf8View,
            Some(ScalarValue::Utf8View(Some("eu".into()))),
        ),
        (s("12"), DataType::Int64, Some(ScalarValue::Int64(Some(12)))),
        (s("1.5"), DataType::Int64, None),
        (s("abc"), DataType::Int64, None),
        (
            s("2026-01-02 03:00:00"),
            ns.clone(),
            Some(ScalarValue::TimestampNanosecond(
                Some(1_767_322_800_000_000_000),
                None,
            )),
        ),
        (s("2026-13-40"), ns.clone(), None),
        // A typed string: as its type, then as the placeholder's where the
        // comparison converts the value (a date against a timestamp column
        // is its midnight); where it would convert the column, or the
        // string is no value of its type, it is planned as written.
        (
            typed("2026-01-02 03:00:00", ns.clone()),
            ns.clone(),
            Some(ScalarValue::TimestampNanosecond(
                Some(1_767_322_800_000_000_000),
                None,
            )),
        ),
        (
            typed("2026-01-02", DataType::Date32),
            ns.clone(),
            Some(ScalarValue::TimestampNanosecond(
                Some(1_767_312_000_000_000_000),
                None,
            )),
        ),
        (
            typed("2026-01-02", DataType::Date32),
            DataType::Date32,
            Some(ScalarValue::Date32(Some(20_455))),
        ),
        (
            typed("2026-01-02 03:00:00", ns.clone()),
            DataType::Date32,
            None,
        ),
        (typed("2026-01-02", DataType::Date32), DataType::Utf8, None),
        (typed("2026-13-40", ns.clone()), ns, None),
    ];
    for (literal, to, expected) in cases {
        assert_eq!(value(&literal, &to), expected, "{literal:?} as {to}");
    }
}

mod engine {
    use std::sync::atomic::Ordering;

    use arrow::datatypes::DataType;
    use datafusion::common::ScalarValue;
    use kiln_storage::{Db, StorageConfig};

    use super::super::super::tests::cells;
    use super::super::super::{Kept, TRIALS, UNDECIDED};
    use crate::{Engine, Output};

    async fn rows(engine: &Engine, sql: &str) -> Vec<String> {
        let mut out = engine.execute(sql).await.unwrap();
        let Some(Output::Rows { batches, .. }) = out.pop() else {
            panic!("rows expected from {sql}")
        };
        cells(&batches)
    }

    async fn engine(dir: &std::path::Path, v: &str) -> Engine {
        let engine = Engine::new(Db::open(StorageConfig::for_dir(dir)).await.unwrap()).unwrap();
        create(&engine, v).await;
        engine
    }

    async fn create(engine: &Engine, v: &str) {
        engine
            .execute(&format!(
                "CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v {v})"
            ))
            .await
            .unwrap();
    }

    /// `kv` with a row at 10:00 on each of 2026-11-01, -02 and -03.
    async fn three_days(dir: &std::path::Path) -> Engine {
        let engine = engine(dir, "VARCHAR").await;
        engine
            .execute(
                "INSERT INTO kv VALUES ('2026-11-01 10:00:00', 1, 'a'), ('2026-11-02 10:00:00', 2, 'b'), \
                 ('2026-11-03 10:00:00', 3, 'c')",
            )
            .await
            .unwrap();
        engine
    }

    #[tokio::test]
    async fn queries_differing_in_literals_share_a_kept_plan_and_answer_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = three_days(tmp.path()).await;
        let shape = "\0SELECT v FROM kv WHERE id = $1 ORDER BY v";
        let range = "\0SELECT count(*) FROM kv WHERE ts >= $1 AND ts < $2";
        // Enough runs for the custom and the generic trials, then more.
        for round in 0..3 * TRIALS as i64 {
            let id = round % 4;
            let expected: Vec<String> = match id {
                1 => vec!["a".into()],
                2 => vec!["b".into()],
                3 => vec!["c".into()],
                _ => vec![],
            };
            let sql = format!("SELECT v FROM kv WHERE id = {id} ORDER BY v");
            assert_eq!(rows(&engine, &sql).await, expected, "{sql}");
            // A fraction against the integer column compares as a fraction.
            let sql = format!("SELECT v FROM kv WHERE id = {id}.5 ORDER BY v");
            assert!(rows(&engine, &sql).await.is_empty(), "{sql}");
            let sql = format!(
                "SELECT count(*) FROM kv WHERE ts >= '2026-11-0{}' AND ts < '2026-11-04'",
                1 + round % 3
            );
            assert_eq!(
                rows(&engine, &sql).await,
                [(3 - round % 3).to_string()],
                "{sql}"
            );
        }
        for key in [shape, range] {
            let s = engine.plans().statements.get(key).map(|s| s.clone());
            let s = s.unwrap_or_else(|| panic!("{key} not kept"));
            assert_ne!(s.choice.load(Ordering::Relaxed), UNDECIDED, "{key}");
            assert!(matches!(engine.plans().shape(key), Kept::Shape(_)), "{key}");
        }
        // A table made again with another type: the shape is planned again.
        engine.execute("DROP TABLE kv").await.unwrap();
        create(&engine, "BIGINT").await;
        engine
            .execute("INSERT INTO kv VALUES ('2026-11-01 10:00:00', 1, 41)")
            .await
            .unwrap();
        assert_eq!(
            rows(&engine, "SELECT v FROM kv WHERE id = 1 ORDER BY v").await,
            ["41"]
        );
    }

    #[tokio::test]
    async fn typed_time_bounds_share_a_kept_plan_and_answer_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = three_days(tmp.path()).await;
        for round in 0..3 * TRIALS as i64 {
            let day = 1 + round % 3;
            // From 10:00 of `day` (a TIMESTAMP) to a DATE's midnight.
            let sql = format!(
                "SELECT count(*) FROM kv WHERE ts >= TIMESTAMP '2026-11-0{day} 10:00:00' \
                 AND ts < DATE '2026-11-0{}'",
                day + 1
            );
            assert_eq!(rows(&engine, &sql).await, ["1"], "{sql}");
            // From a DATE's midnight to just past the last row, PostgreSQL's
            // cast; then a second later, which misses it.
            for (end, n) in [("10:00:00.5", 4 - day), ("09:59:59", 3 - day)] {
                let sql = format!(
                    "SELECT count(*) FROM kv WHERE ts >= CAST('2026-11-0{day}' AS DATE) \
                     AND ts < '2026-11-03 {end}'::timestamp"
                );
                assert_eq!(rows(&engine, &sql).await, [n.to_string()], "{sql}");
            }
        }
        let key = "\0SELECT count(*) FROM kv WHERE ts >= $1 AND ts < $2";
        assert!(matches!(engine.plans().shape(key), Kept::Shape(_)), "{key}");
        let s = engine.plans().statements.get(key).map(|s| s.clone());
        assert!(s.is_some_and(|s| s.choice.load(Ordering::Relaxed) != UNDECIDED));
    }

    /// A range written relative to its end, `CAST('...' AS TIMESTAMP) -
    /// INTERVAL`: the string is a placeholder of type text inside the cast.
    #[tokio::test]
    async fn time_bounds_shifted_by_an_interval_share_a_kept_plan_and_answer_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = three_days(tmp.path()).await;
        for round in 0..3 * TRIALS as i64 {
            let day = 2 + round % 3;
            // The day before `day`, to just past its row or just before.
            for (end, n) in [("10:00:00.5", 1), ("09:59:59", 0)] {
                let sql = format!(
                    "SELECT count(*) FROM kv WHERE ts >= CAST('2026-11-0{day}' AS TIMESTAMP) \
                     - INTERVAL '1 day' AND ts < TIMESTAMP '2026-11-0{day} {end}' - INTERVAL '1 day'"
                );
                assert_eq!(rows(&engine, &sql).await, [n.to_string()], "{sql}");
            }
        }
        let key = "\0SELECT count(*) FROM kv WHERE ts >= CAST($1 AS TIMESTAMP) - INTERVAL '1 day' \
                   AND ts < CAST($2 AS TIMESTAMP) - INTERVAL '1 day'";
        let Kept::Shape(shape) = engine.plans().shape(key) else {
            panic!("{key} not kept")
        };
        assert_eq!(shape.types, [DataType::Utf8, DataType::Utf8]);
        let bad = "SELECT count(*) FROM kv WHERE ts >= CAST('2026-11-31' AS TIMESTAMP) \
                   - INTERVAL '1 day' AND ts < TIMESTAMP '2026-11-03' - INTERVAL '1 day'";
        let Err(e) = engine.execute(bad).await else {
            panic!("refused")
        };
        assert!(e.to_string().contains("2026-11-31"), "{e}");
    }

    /// Superset's time filter: the strings `TO_TIMESTAMP` and `TO_DATE`
    /// parse are placeholders of type text, parsed when the plan runs.
    #[tokio::test]
    async fn superset_time_filters_share_a_kept_plan_and_answer_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = three_days(tmp.path()).await;
        for round in 0..3 * TRIALS as i64 {
            let day = 1 + round % 3;
            for (end, n) in [("10:00:00.500000", 4 - day), ("09:59:59.000000", 3 - day)] {
                let sql = format!(
                    "SELECT count(*) FROM kv WHERE ts >= TO_DATE('0{day}.11.2026', 'DD.MM.YYYY') \
                     AND ts < TO_TIMESTAMP('2026-11-03 {end}', 'YYYY-MM-DD HH24:MI:SS.US')"
                );
                assert_eq!(rows(&engine, &sql).await, [n.to_string()], "{sql}");
            }
        }
        let key = "\0SELECT count(*) FROM kv WHERE ts >= TO_DATE($1, 'DD.MM.YYYY') \
                   AND ts < TO_TIMESTAMP($2, 'YYYY-MM-DD HH24:MI:SS.US')";
        let Kept::Shape(shape) = engine.plans().shape(key) else {
            panic!("{key} not kept")
        };
        assert_eq!(shape.types, [DataType::Utf8, DataType::Utf8]);
        // A string that does not parse fails as it does planned as written.
        let bad = "SELECT count(*) FROM kv WHERE ts >= TO_DATE('31.02.2026', 'DD.MM.YYYY') \
                   AND ts < TO_TIMESTAMP('2026-11-03 10:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')";
        let Err(e) = engine.execute(bad).await else {
            panic!("refused")
        };
        assert!(e.to_string().contains("31.02.2026"), "{e}");
    }

    #[tokio::test]
    async fn queries_over_catalogs_or_with_volatile_functions_are_planned_as_written() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = engine(tmp.path(), "VARCHAR").await;
        for _ in 0..2 {
            rows(
                &engine,
                "SELECT table_name FROM information_schema.tables WHERE table_name = 'kv'",
            )
            .await;
            rows(&engine, "SELECT v FROM kv WHERE id = 1 AND ts < now()").await;
        }
        let keys = [
            "\0SELECT table_name FROM information_schema.tables WHERE table_name = $1",
            "\0SELECT v FROM kv WHERE id = $1 AND ts < now()",
        ];
        for key in keys {
            assert!(
                matches!(engine.plans().shape(key), Kept::AsWritten),
                "{key}"
            );
            assert!(engine.plans().statements.get(key).is_none(), "{key}");
        }
    }

    #[tokio::test]
    async fn a_query_with_bound_values_runs_its_kept_plan() {
        use crate::{Engine as E, Origin};
        let tmp = tempfile::tempdir().unwrap();
        let engine = engine(tmp.path(), "VARCHAR").await;
        engine
            .execute("INSERT INTO kv VALUES ('2026-11-01 10:00:00', 1, 'a'), ('2026-11-02 10:00:00', 2, 'b')")
            .await
            .unwrap();
        let sql = "SELECT v FROM kv WHERE id = $1 AND ts >= $2";
        for round in 0..3 * TRIALS as i64 {
            let id = 1 + round % 2;
            let stmt = E::split(sql).unwrap().remove(0);
            let query = engine.begin(Origin::EMBEDDED, sql).await.unwrap();
            let params = [
                ScalarValue::Int64(Some(id)),
                ScalarValue::from("2026-11-01 00:00:00"),
            ];
            let out = engine
                .run(&query, stmt, &params)
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let Output::Rows { batches, .. } = out else {
                panic!("rows expected")
            };
            assert_eq!(cells(&batches), [if id == 1 { "a" } else { "b" }]);
        }
        let key = format!("\0{sql}");
        let s = engine
            .plans()
            .statements
            .get(&key)
            .map(|s| s.clone())
            .expect("kept");
        assert_ne!(s.choice.load(Ordering::Relaxed), UNDECIDED);
        // A value that does not fit names its parameter.
        let stmt = E::split(sql).unwrap().remove(0);
        let query = engine.begin(Origin::EMBEDDED, sql).await.unwrap();
        let params = [
            ScalarValue::from("x"),
            ScalarValue::from("2026-11-01 00:00:00"),
        ];
        let e = engine
            .run(&query, stmt, &params)
            .await
            .err()
            .expect("refused");
        assert!(e.to_string().contains("parameter $1"), "{e}");
    }
}
