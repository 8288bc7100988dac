use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{PG_COLUMNS, UDT_NAME, may_rewrite, rewrite};

/// `sql` rewritten, with `generate_series` and `range` as the only table
/// functions; `None` if nothing was rewritten.
fn rewritten(sql: &str) -> Option<String> {
    let mut stmt = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .unwrap()
        .remove(0);
    let is_table_function = |name: &str| matches!(name, "generate_series" | "range");
    rewrite(&mut stmt, &is_table_function).then(|| stmt.to_string())
}

#[test]
fn a_scalar_function_in_from_is_a_relation_of_one_row() {
    assert_eq!(
        rewritten("SELECT s[1] FROM string_to_array('a,b', ',') s").as_deref(),
        Some("SELECT s[1] FROM (SELECT string_to_array('a,b', ',') AS s) AS s")
    );
    assert_eq!(
        rewritten("SELECT * FROM t JOIN upper('x') ON true").as_deref(),
        Some("SELECT * FROM t JOIN (SELECT upper('x') AS \"upper\") AS \"upper\" ON true")
    );
}

#[test]
fn a_series_names_its_column_by_its_alias() {
    assert_eq!(
        rewritten("SELECT i FROM generate_series(1, 3) AS i").as_deref(),
        Some("SELECT i FROM generate_series(1, 3) AS i (i)")
    );
    assert_eq!(
        rewritten("SELECT x FROM generate_series(1, 3) AS t(x)"),
        None
    );
    assert_eq!(rewritten("SELECT value FROM range(3)"), None);
}

#[test]
fn user_is_session_user_only_where_no_table_is_read() {
    assert_eq!(
        rewritten("SELECT user").as_deref(),
        Some("SELECT session_user")
    );
    assert_eq!(
        rewritten(
            "SELECT table_name FROM information_schema.tables WHERE table_schema IN \
             (SELECT CASE WHEN s[i] = 'x' THEN user END FROM generate_series(1, 2) AS i, \
             string_to_array('a', ',') s)"
        )
        .as_deref(),
        Some(
            "SELECT table_name FROM information_schema.tables WHERE table_schema IN \
             (SELECT CASE WHEN s[i] = 'x' THEN session_user END FROM generate_series(1, 2) AS i (i), \
             (SELECT string_to_array('a', ',') AS s) AS s)"
        )
    );
    // An event table's `user` column stays a column; so does a quoted one.
    assert_eq!(
        rewritten("SELECT user, count(*) FROM events GROUP BY user"),
        None
    );
    assert_eq!(rewritten("SELECT \"user\""), None);
}

#[test]
fn the_text_check_finds_what_may_be_rewritten() {
    for sql in [
        "select user",
        "select * from generate_series(1, 2)",
        "select * from string_to_array('a', ',') s",
        "select * from t join f (1) on true",
    ] {
        assert!(may_rewrite(sql), "{sql}");
    }
    for sql in [
        "select a from t where b = 1",
        "select count(*) from t",
        "select user_id, count(*) from events where username = $1 group by user_id",
    ] {
        assert!(!may_rewrite(sql), "{sql}");
    }
}

#[test]
fn information_schema_columns_is_postgresqls() {
    let got = rewritten(
        "SELECT c.column_name, c.udt_name FROM information_schema.columns c \
         WHERE c.table_name = 't'",
    )
    .unwrap();
    assert!(
        got.starts_with(
            "SELECT c.column_name, c.udt_name FROM (SELECT table_catalog, table_schema, \
             table_name, column_name, ordinal_position + 1 AS ordinal_position, column_default"
        ),
        "{got}"
    );
    assert!(
        got.ends_with(
            "table_catalog AS udt_catalog, 'pg_catalog' AS udt_schema, \
             kiln_pg_udt_name(data_type) AS udt_name, 'NO' AS is_identity, 'NEVER' AS \
             is_generated FROM information_schema.\"columns\") AS c WHERE c.table_name = 't'"
        ),
        "{got}"
    );
    // Positions from 1 wherever the table is read.
    assert!(
        rewritten("SELECT column_name FROM information_schema.columns")
            .unwrap()
            .contains("ordinal_position + 1")
    );
    // Every reference, in subqueries too, and each only once.
    let two = rewritten(
        "SELECT udt_name FROM information_schema.columns WHERE EXISTS \
         (SELECT 1 FROM information_schema.columns c2)",
    )
    .unwrap();
    assert_eq!(two.matches("kiln_pg_udt_name").count(), 2, "{two}");
    // Quoted as Metabase quotes it.
    let quoted =
        rewritten("SELECT \"c\".\"udt_schema\" FROM \"information_schema\".\"columns\" AS \"c\"")
            .unwrap();
    assert!(quoted.contains("'pg_catalog' AS udt_schema"), "{quoted}");
    assert!(PG_COLUMNS.iter().any(|(_, v)| v.starts_with(UDT_NAME)));
}

#[test]
fn constraint_views_are_empty_relations_with_postgresql_columns() {
    let sql = rewritten(
        "SELECT kc.column_name FROM information_schema.table_constraints AS tc \
         JOIN \"information_schema\".\"key_column_usage\" kc \
         ON tc.constraint_name = kc.constraint_name WHERE tc.constraint_type = 'PRIMARY KEY'",
    )
    .unwrap();
    assert!(
        sql.contains(
            "FROM (SELECT CAST(NULL AS TEXT) AS constraint_catalog, \
             CAST(NULL AS TEXT) AS constraint_schema"
        ),
        "{sql}"
    );
    assert!(
        sql.contains("CAST(NULL AS INT) AS ordinal_position"),
        "{sql}"
    );
    assert!(sql.contains("WHERE false) AS tc"), "{sql}");
    assert!(sql.contains("WHERE false) AS kc"), "{sql}");
    // Other information_schema tables are DataFusion's own.
    assert_eq!(rewritten("SELECT * FROM information_schema.tables"), None);
}

#[test]
fn a_regclass_of_two_names_is_a_lookup_in_pg_class() {
    let got = rewritten(
        "SELECT col_description(CAST(CAST(FORMAT('%I.%I', CAST(c.table_schema AS TEXT), \
         c.table_name) AS REGCLASS) AS OID), c.ordinal_position) FROM information_schema.columns AS c",
    )
    .unwrap();
    assert!(
        got.starts_with(
            "SELECT col_description(CAST((SELECT max(kiln_regclass_c.oid) FROM \
             pg_catalog.pg_class AS kiln_regclass_c JOIN pg_catalog.pg_namespace AS \
             kiln_regclass_n ON kiln_regclass_c.relnamespace = kiln_regclass_n.oid WHERE \
             kiln_regclass_n.nspname = CAST(c.table_schema AS TEXT) AND \
             kiln_regclass_c.relname = c.table_name) AS OID), c.ordinal_position)"
        ),
        "{got}"
    );
    // The schema-qualified spelling of the type too.
    assert!(
        rewritten("SELECT format('%I.%I', s, t)::pg_catalog.regclass FROM x")
            .is_some_and(|r| r.contains("max(kiln_regclass_c.oid)"))
    );
    // Another pattern, or a literal, is not this rewrite's.
    for other in [
        "SELECT CAST(format('%I', t) AS regclass) FROM x",
        "SELECT 'pg_class'::regclass",
    ] {
        assert_eq!(rewritten(other), None, "{other}");
    }
}

#[test]
fn a_table_kiln_adds_to_pg_catalog_is_found_there_when_named_bare() {
    assert!(may_rewrite("select * from pg_stat_activity"));
    assert_eq!(
        rewritten("SELECT pid FROM pg_stat_activity AS a WHERE a.state = 'idle'").as_deref(),
        Some("SELECT pid FROM pg_catalog.pg_stat_activity AS a WHERE a.state = 'idle'")
    );
    assert_eq!(
        rewritten("SELECT count(*) FROM PG_STAT_ACTIVITY").as_deref(),
        Some("SELECT count(*) FROM pg_catalog.PG_STAT_ACTIVITY")
    );
    assert_eq!(
        rewritten("SELECT pid FROM pg_catalog.pg_stat_activity"),
        None
    );
    assert_eq!(rewritten("SELECT pid FROM public.pg_stat_activity"), None);
}
