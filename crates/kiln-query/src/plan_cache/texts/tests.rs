use arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use kiln_storage::{Db, StorageConfig};

use super::*;
use crate::engine::Learn;
use crate::{Engine, Origin, Streamed};

fn key(text: &str) -> Option<String> {
    Template::of(Door::Http, text).map(|t| t.key)
}

fn number(n: &str) -> Literal {
    Literal::Number(n.into())
}

fn string(s: &str) -> Literal {
    Literal::String(s.into())
}

#[test]
fn texts_differing_only_in_literals_share_a_template() {
    let a = "SELECT a, 'x' FROM t WHERE x = 5 AND s = 'it''s' AND y > -2.5";
    let b = "SELECT a, 'x' FROM t WHERE x = 17 AND s = 'zz' AND y > -30.25";
    assert_eq!(key(a), key(b));
    let t = Template::of(Door::Http, a).unwrap();
    let values: Vec<_> = t.tokens.iter().map(|t| t.value().into_owned()).collect();
    assert_eq!(values, ["x", "5", "it's", "2.5"]);
    assert!(t.tokens[3].negative && !t.tokens[1].negative);
    // Anything else that differs is another template.
    assert_ne!(key(a), key(&a.replace("x = 5", "x >= 5")));
    assert_ne!(key(a), key(&a.replace("'x'", "7")));
    assert_ne!(
        Template::of(Door::Pg, a).unwrap().key,
        Template::of(Door::Http, a).unwrap().key
    );
    // Quoted identifiers and line comments are text, not literals.
    let t = Template::of(
        Door::Http,
        "SELECT \"it's 1\" FROM t -- x = '2'\nWHERE v = 3",
    )
    .unwrap();
    assert_eq!(t.tokens.len(), 1);
    assert_eq!(t.tokens[0].raw, "3");
}

#[test]
fn text_the_scanner_cannot_be_sure_of_has_no_template() {
    for text in [
        "SELECT 1 WHERE x = 1e5",
        "SELECT 1 WHERE x = .5",
        "SELECT 1 WHERE x = 1.",
        "SELECT 1 WHERE x = 1.2.3",
        "SELECT 1 WHERE x = 0x1F",
        "SELECT 1 WHERE x = E'a'",
        "SELECT 1 WHERE x = X'1F'",
        "SELECT 1 WHERE x = U&'a'",
        "SELECT 1 WHERE x = 'a\\'",
        "SELECT 1 WHERE x = 'a' 'b'",
        "SELECT 1 WHERE x = 'unclosed",
        "SELECT 1 WHERE x = $1",
        "SELECT 1 WHERE x = $$a$$",
        "SELECT 1 WHERE x = ?",
        "SELECT 1 /* 2 */ WHERE x = 3",
        "SELECT `a` FROM t",
        "SELECT 1 # 2",
        "SELECT 1 WHERE x = \u{1}",
        // Non-breaking space: a space to one tokenizer, a letter to another.
        "SELECT v FROM t WHERE id =\u{a0}10 LIMIT 10",
        "SELECT v FROM t WHERE café = 1",
        // CR ends a line comment for PostgreSQL's tokenizer.
        "SELECT 'x' FROM t -- pick\rWHERE k = 'x'",
    ] {
        assert_eq!(key(text), None, "{text}");
    }
    assert_eq!(
        key(&format!("SELECT '{}'", "a".repeat(MAX_TEXT_BYTES))),
        None
    );
}

#[test]
fn a_typed_string_keeps_its_type_and_its_template_its_type_word() {
    use arrow::datatypes::{DataType, TimeUnit};
    let ns = DataType::Timestamp(TimeUnit::Nanosecond, None);
    let typed = |s: &str| Literal::Typed(s.into(), ns.clone());
    let shapes = TextShapes::default();
    let first = "SELECT count(*) FROM t WHERE ts >= TIMESTAMP '2026-01-01' AND s = '2026-01-02'";
    let t = Template::of(Door::Pg, first).unwrap();
    shapes.learn(
        &t,
        "shape",
        &[typed("2026-01-01"), string("2026-01-02")],
        None,
    );
    let other = first.replace("01-01", "03-04").replace("01-02", "03-05");
    let hit = shapes
        .get(&Template::of(Door::Pg, &other).unwrap())
        .unwrap();
    assert_eq!(hit.literals, [typed("2026-03-04"), string("2026-03-05")]);
    // Without its type word, or with another, it is another template.
    for other in [
        other.replace("TIMESTAMP ", ""),
        other.replace("TIMESTAMP", "DATE"),
    ] {
        assert!(
            shapes
                .get(&Template::of(Door::Pg, &other).unwrap())
                .is_none()
        );
    }
}

#[test]
fn a_learned_template_gives_each_text_its_own_values() {
    let shapes = TextShapes::default();
    let first = "SELECT date_trunc('day', ts), count(*) FROM t WHERE id = 5 AND s = 'a' AND v > -2 GROUP BY 1";
    let t = Template::of(Door::Http, first).unwrap();
    shapes.learn(&t, "shape", &[number("5"), string("a"), number("-2")], None);
    assert_eq!(shapes.len(), 1);
    let other = first
        .replace("id = 5", "id = 70")
        .replace("'a'", "'b''c'")
        .replace("-2", "-9");
    let hit = shapes
        .get(&Template::of(Door::Http, &other).unwrap())
        .unwrap();
    assert_eq!(hit.learned.shape, "shape");
    assert_eq!(hit.literals, [number("70"), string("b'c"), number("-9")]);
    // A literal that is not a placeholder's must be the one learned.
    let hour = other.replace("'day'", "'hour'");
    assert!(
        shapes
            .get(&Template::of(Door::Http, &hour).unwrap())
            .is_none()
    );
    // Another door reads the same text with another parser.
    assert!(
        shapes
            .get(&Template::of(Door::Pg, first).unwrap())
            .is_none()
    );
    // Texts differing in a literal that is no placeholder's are variants
    // of the template, each with its own shape.
    let t = Template::of(Door::Http, &hour).unwrap();
    shapes.learn(
        &t,
        "hourly",
        &[number("70"), string("b'c"), number("-9")],
        None,
    );
    let day = shapes
        .get(&Template::of(Door::Http, &other).unwrap())
        .unwrap();
    let hour = shapes
        .get(&Template::of(Door::Http, &hour).unwrap())
        .unwrap();
    assert_eq!(
        (&*day.learned.shape, &*hour.learned.shape),
        ("shape", "hourly")
    );
    assert_eq!(shapes.len(), 1);
}

#[test]
fn a_value_not_as_many_placeholders_as_literals_is_not_learned() {
    let shapes = TextShapes::default();
    let learn = |text: &str, lifted: &[Literal]| {
        shapes.learn(&Template::of(Door::Http, text).unwrap(), "s", lifted, None);
        shapes.len()
    };
    // The value 5 occurs twice, once lifted: which one is unknown.
    assert_eq!(learn("SELECT v + 5 FROM t WHERE id = 5", &[number("5")]), 0);
    // Lifted more often than written.
    assert_eq!(
        learn("SELECT v FROM t WHERE id = 5", &[number("5"), number("5")]),
        0
    );
    // Not a literal of the text, or not of its kind or sign.
    assert_eq!(learn("SELECT v FROM t WHERE id = 5", &[number("6")]), 0);
    assert_eq!(learn("SELECT v FROM t WHERE id = '5'", &[number("5")]), 0);
    assert_eq!(learn("SELECT v FROM t WHERE id = 5", &[number("-5")]), 0);
    assert_eq!(learn("SELECT v FROM t WHERE id = -5", &[number("5")]), 0);
    assert_eq!(learn("SELECT v FROM t WHERE id = 5", &[number("5")]), 1);
}

#[test]
fn a_value_written_twice_binds_both_placeholders_while_its_literals_stay_equal() {
    let shapes = TextShapes::default();
    let text = |id: &str, end: &str, other: &str| {
        format!(
            "SELECT count(*) FROM t WHERE id = {id} AND ts >= CAST('{end}' AS TIMESTAMP) \
             - INTERVAL '1 day' AND ts < '{end}' AND n = -{id} AND k = '{other}'"
        )
    };
    let first = text("5", "2026-11-14", "5");
    let lifted = [
        number("5"),
        string("2026-11-14"),
        string("2026-11-14"),
        number("-5"),
        string("5"),
    ];
    shapes.learn(
        &Template::of(Door::Http, &first).unwrap(),
        "s",
        &lifted,
        None,
    );
    assert_eq!(shapes.len(), 1);
    // The same value of another kind or sign is another value: 5, -5 and
    // '5' are each written once.
    let get = |t: &str| shapes.get(&Template::of(Door::Http, t).unwrap());
    let hit = get(&text("7", "2026-11-02 10:00:00.5", "x")).unwrap();
    assert_eq!(
        hit.literals,
        [
            number("7"),
            string("2026-11-02 10:00:00.5"),
            string("2026-11-02 10:00:00.5"),
            number("-7"),
            string("x"),
        ]
    );
    // Where the end's two literals differ, which placeholder is which is
    // unknown: no hit.
    let apart = first.replacen("2026-11-14", "2026-11-13", 1);
    assert!(get(&apart).is_none());
    // Learned from values written once each, the variant replaces the
    // one with equal literals, and binds both kinds of text.
    let lifted = [
        number("5"),
        string("2026-11-13"),
        string("2026-11-14"),
        number("-5"),
        string("5"),
    ];
    shapes.learn(
        &Template::of(Door::Http, &apart).unwrap(),
        "s",
        &lifted,
        None,
    );
    let hit = get(&first.replacen("2026-11-14", "2026-11-01", 1)).unwrap();
    assert_eq!(
        hit.literals[1..3],
        [string("2026-11-01"), string("2026-11-14")]
    );
    let hit = get(&text("8", "2026-11-03", "y")).unwrap();
    assert_eq!(
        hit.literals[1..3],
        [string("2026-11-03"), string("2026-11-03")]
    );
    assert_eq!(shapes.learned.iter().map(|v| v.len()).sum::<usize>(), 1);
}

async fn engine(dir: &std::path::Path) -> Engine {
    let engine = Engine::new(Db::open(StorageConfig::for_dir(dir)).await.unwrap()).unwrap();
    engine
        .execute(
            "CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v VARCHAR);
             INSERT INTO kv VALUES (TIMESTAMP '2026-11-01 00:00:00', 1, 'a'),
               (TIMESTAMP '2026-11-01 00:00:00', 2, 'b'), (TIMESTAMP '2026-11-02 00:00:00', 3, 'c')",
        )
        .await
        .unwrap();
    engine
}

async fn rows(streamed: Streamed) -> String {
    let Streamed::Rows { stream, .. } = streamed else {
        panic!("no rows")
    };
    let batches: Vec<_> = futures::TryStreamExt::try_collect(stream).await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

/// Runs `text` as a door does: through its template's shape if learned
/// (then true), otherwise parsed, learning its template.
async fn through_door(engine: &Engine, text: &str) -> (String, bool) {
    with_params(engine, text, &[]).await.unwrap()
}

/// [`through_door`] for a text sent with `params` (none: its values
/// written in).
async fn with_params(
    engine: &Engine,
    text: &str,
    params: &[ScalarValue],
) -> crate::Result<(String, bool)> {
    let template = engine
        .template(Door::Http, text, !params.is_empty())
        .unwrap();
    let query = engine.begin(Origin::HTTP, text).await.unwrap();
    if let Some(hit) = engine.text_hit(&template)
        && let Some(streamed) = engine.run_text(&query, &hit, params).await?
    {
        return Ok((rows(streamed).await, true));
    }
    let stmt = engine.parse(text).unwrap().pop().unwrap();
    let learn = Learn {
        template: &template,
        labels: None,
    };
    let streamed = engine.run_learning(&query, stmt, params, learn).await?;
    Ok((rows(streamed).await, false))
}

async fn parsed(engine: &Engine, text: &str) -> String {
    let Some(crate::Output::Rows { batches, .. }) = engine.execute(text).await.unwrap().pop()
    else {
        panic!("no rows")
    };
    pretty_format_batches(&batches).unwrap().to_string()
}

#[tokio::test]
async fn texts_of_a_learned_template_run_unparsed_with_their_own_values() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let text = |id: &str, v: &str| {
        format!("SELECT id, v, 'k' AS k FROM kv WHERE id >= {id} AND v <> '{v}' ORDER BY id")
    };
    // The shape is planned at its second text, and learned then.
    assert!(!through_door(&e, &text("1", "a")).await.1);
    assert!(!through_door(&e, &text("2", "a")).await.1);
    assert_eq!(e.plans().texts().len(), 1);
    for (id, v) in [("1", "b"), ("3", "x"), ("0", "it''s"), ("2", "c")] {
        let sql = text(id, v);
        let (answer, hit) = through_door(&e, &sql).await;
        assert!(hit, "{sql}");
        assert_eq!(answer, parsed(&e, &sql).await, "{sql}");
    }
    // Rows written since are read: the shape plans no rows in.
    e.execute("INSERT INTO kv VALUES (TIMESTAMP '2026-11-03 00:00:00', 4, 'd')")
        .await
        .unwrap();
    let (answer, hit) = through_door(&e, &text("3", "z")).await;
    assert!(hit && answer.contains("| 4  | d |"), "{answer}");
    // A value that would not compare as written is parsed and planned as
    // written: 1.5 is no BIGINT.
    let (answer, hit) = through_door(&e, &text("1.5", "z")).await;
    assert!(!hit);
    assert_eq!(answer, parsed(&e, &text("1.5", "z")).await);
    assert!(!answer.contains("| 1  |"), "{answer}");
    // A table made again is planned again.
    e.execute(
        "DROP TABLE kv; CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v VARCHAR)",
    )
    .await
    .unwrap();
    let (answer, hit) = through_door(&e, &text("1", "b")).await;
    assert!(!hit);
    assert_eq!(answer, parsed(&e, &text("1", "b")).await);
}

/// A range written relative to its end, which it names twice, runs
/// unparsed from the shape's second text on, each text with its own end;
/// one whose two ends differ is parsed, and then learned apart.
#[tokio::test]
async fn texts_writing_a_value_twice_run_unparsed_with_their_own_values() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let text = |id: &str, start: &str, end: &str| {
        format!(
            "SELECT id, v FROM kv WHERE id <> {id} \
             AND ts >= CAST('{start}' AS TIMESTAMP) - INTERVAL '1 day' AND ts < '{end}' ORDER BY id"
        )
    };
    assert!(
        !through_door(&e, &text("9", "2026-11-02", "2026-11-02"))
            .await
            .1
    );
    assert!(
        !through_door(&e, &text("9", "2026-11-03", "2026-11-03"))
            .await
            .1
    );
    for (id, end) in [
        ("1", "2026-11-02"),
        ("9", "2026-11-02 00:00:00.000001"),
        ("2", "2026-11-01 23:59:59"),
        ("9", "2026-11-01"),
    ] {
        let sql = text(id, end, end);
        let (answer, hit) = through_door(&e, &sql).await;
        assert!(hit, "{sql}");
        assert_eq!(answer, parsed(&e, &sql).await, "{sql}");
    }
    // The day before the end reads rows at its end too.
    let (answer, _) = through_door(
        &e,
        &text(
            "9",
            "2026-11-02 00:00:00.000001",
            "2026-11-02 00:00:00.000001",
        ),
    )
    .await;
    assert!(answer.contains("| 3  | c |"), "{answer}");
    let apart = text("9", "2026-11-02", "2026-11-01 12:00:00");
    let (answer, hit) = through_door(&e, &apart).await;
    assert!(!hit);
    assert_eq!(answer, parsed(&e, &apart).await);
    assert!(
        answer.contains("| 1  | a |") && !answer.contains("| 3  |"),
        "{answer}"
    );
    for sql in [
        text("9", "2026-11-04", "2026-11-02"),
        text("1", "2026-11-02", "2026-11-02"),
    ] {
        let (answer, hit) = through_door(&e, &sql).await;
        assert!(hit, "{sql}");
        assert_eq!(answer, parsed(&e, &sql).await, "{sql}");
    }
}

/// A text sent with its values apart runs unparsed from its second run
/// on, with each run's own values; its template is the whole text, so
/// any other text, even one written as its values, is not a hit.
#[tokio::test]
async fn texts_sent_with_params_run_unparsed_with_their_own_values() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path()).await;
    let text = "SELECT id, v FROM kv WHERE id >= $1 AND v <> $2 ORDER BY id";
    let params = |id: i64, v: &str| [ScalarValue::Int64(Some(id)), ScalarValue::from(v)];
    let written = |id: i64, v: &str| {
        format!("SELECT id, v FROM kv WHERE id >= {id} AND v <> '{v}' ORDER BY id")
    };
    // Kept at its second run, learned then.
    for (id, v) in [(1, "a"), (2, "a")] {
        let (answer, hit) = with_params(&e, text, &params(id, v)).await.unwrap();
        assert!(!hit);
        assert_eq!(answer, parsed(&e, &written(id, v)).await);
    }
    for (id, v) in [(1, "b"), (3, "x"), (0, "it's"), (2, "c")] {
        let (answer, hit) = with_params(&e, text, &params(id, v)).await.unwrap();
        assert!(hit, "{id} {v}");
        let v = v.replace('\'', "''");
        assert_eq!(answer, parsed(&e, &written(id, &v)).await, "{id} {v}");
    }
    assert_ne!(
        Template::with_params(Door::Http, text).unwrap().key,
        Template::of(Door::Http, &written(1, "a")).unwrap().key
    );
    assert!(Template::of(Door::Http, text).is_none());
    // As many values as placeholders, or the text is parsed, which names
    // what is missing or left over.
    let err = with_params(&e, text, &params(1, "a")[..1])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("$2"), "{err}");
    let three = [params(1, "a").to_vec(), vec![ScalarValue::Int64(Some(7))]].concat();
    let counted = e.plans().counts().unparsed_runs;
    let _ = with_params(&e, text, &three).await;
    assert_eq!(e.plans().counts().unparsed_runs, counted);
    // A value that does not cast to its placeholder's type is refused,
    // naming it.
    let err = with_params(&e, text, &[ScalarValue::from("x"), ScalarValue::from("a")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("$1"), "{err}");
}

#[test]
fn learned_texts_are_bounded_variants_included() {
    let shapes = TextShapes::default();
    for i in 0..MAX_TEXTS / 4 {
        for v in 0..MAX_VARIANTS + 2 {
            let text = format!("SELECT c{i}, 'v{v}' FROM t WHERE id = 5");
            let t = Template::of(Door::Http, &text).unwrap();
            shapes.learn(&t, "s", &[number("5")], None);
        }
    }
    let kept: usize = shapes.learned.iter().map(|v| v.len()).sum();
    assert!(kept > 0 && kept <= MAX_TEXTS, "{kept}");
    assert!(shapes.learned.iter().all(|v| v.len() <= MAX_VARIANTS));
}
