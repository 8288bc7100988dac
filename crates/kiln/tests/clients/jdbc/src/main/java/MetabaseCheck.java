// Metabase's PostgreSQL driver replayed through pgjdbc, the driver it
// ships: what its connection pool sends at every checkout, the SQL of a
// database sync (schemas, tables, table privileges, fields, keys,
// indexes; the per-table DatabaseMetaData calls of 0.48-0.50 and the bulk
// catalog queries of later releases), the fingerprint and field-value
// scans, and query-builder questions (count by day, by week, sum by month
// over relative date ranges), with their `-- Metabase` comments, row
// limits and parameters as Metabase sends them. The statement texts are
// Metabase's own, rendered as its driver renders them; every check
// asserts the answer. All run; failures are listed.
//
// Usage: java -cp <postgresql.jar> MetabaseCheck.java PG_PORT   (prints "ok")

import java.sql.*;
import java.time.*;
import java.util.*;

public class MetabaseCheck {
    interface Check {
        void run(Connection c) throws Exception;
    }

    static String url;
    static final List<String> failures = new ArrayList<>();

    /** Runs `body` on a connection set up and given back as Metabase's
     *  pool (c3p0) and driver do it. */
    static void check(String name, Check body) {
        try (Connection c = DriverManager.getConnection(url, "kiln", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("SHOW TRANSACTION ISOLATION LEVEL");
            }
            truth(c.isValid(5), "isValid");
            c.setTransactionIsolation(Connection.TRANSACTION_READ_UNCOMMITTED);
            eq(Connection.TRANSACTION_READ_UNCOMMITTED, c.getTransactionIsolation(), "isolation");
            c.setReadOnly(true);
            c.setAutoCommit(true);
            c.setHoldability(ResultSet.CLOSE_CURSORS_AT_COMMIT);
            try (Statement s = c.createStatement()) {
                s.execute("SET SESSION TIMEZONE TO 'UTC'");
            }
            body.run(c);
            c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
        } catch (Throwable e) {
            failures.add(name + ": " + e);
        }
    }

    static void eq(Object want, Object got, String what) {
        if (!Objects.equals(want, got)) {
            throw new AssertionError(what + ": want " + want + ", got " + got);
        }
    }

    static void truth(boolean b, String what) {
        if (!b) throw new AssertionError(what);
    }

    /** Rows of a result set, each as a list of strings. */
    static List<List<String>> rows(ResultSet rs) throws SQLException {
        int n = rs.getMetaData().getColumnCount();
        List<List<String>> out = new ArrayList<>();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            for (int i = 1; i <= n; i++) row.add(rs.getString(i));
            out.add(row);
        }
        rs.close();
        return out;
    }

    /** Rows of a prepared statement run with `params`, as Metabase runs
     *  its catalog queries (clojure.java.jdbc: a PreparedStatement). */
    static List<List<String>> query(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
            return rows(ps.executeQuery());
        }
    }

    /** A query-builder question: a plain Statement with a row limit. */
    static ResultSet question(Connection c, String sql, int maxRows) throws SQLException {
        Statement s = c.createStatement();
        s.setMaxRows(maxRows);
        s.closeOnCompletion();
        String hash = "5f0e8d9d3c1a7b2e4f6a8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b4c6d8e0f";
        return s.executeQuery("-- Metabase:: userID: 1 queryType: MBQL queryHash: " + hash + "\n" + sql);
    }

    /** The Sunday on or before `d` (Metabase's weeks start on Sunday). */
    static LocalDate sunday(LocalDate d) {
        return d.minusDays(d.getDayOfWeek().getValue() % 7);
    }

    static final String PRIV_048 =
            "with table_privileges as (\n"
            + " select\n"
            + "   NULL as role,\n"
            + "   t.schemaname as schema,\n"
            + "   t.objectname as table,\n"
            + "   pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'UPDATE') as update,\n"
            + "   pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'SELECT') as select,\n"
            + "   pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'INSERT') as insert,\n"
            + "   pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'DELETE') as delete\n"
            + " from (\n"
            + "   select schemaname, tablename as objectname from pg_catalog.pg_tables\n"
            + "   union\n"
            + "   select schemaname, viewname as objectname from pg_catalog.pg_views\n"
            + "   union\n"
            + "   select schemaname, matviewname as objectname from pg_catalog.pg_matviews\n"
            + " ) t\n"
            + " where t.schemaname !~ '^pg_'\n"
            + "   and t.schemaname <> 'information_schema'\n"
            + "   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'USAGE')\n"
            + ")\n"
            + "select t.*\n"
            + "from table_privileges t";

    static final String PRIV_050 =
            "with table_privileges as (\n"
            + " select\n"
            + "   NULL as role,\n"
            + "   t.schemaname as schema,\n"
            + "   t.objectname as table,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'update') as update,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'select') as select,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'insert') as insert,\n"
            + "   pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname || '\"' || '.' || '\"' || t.objectname || '\"',  'delete') as delete\n"
            + " from (\n"
            + "   select schemaname, tablename as objectname from pg_catalog.pg_tables\n"
            + "   union\n"
            + "   select schemaname, viewname as objectname from pg_catalog.pg_views\n"
            + "   union\n"
            + "   select schemaname, matviewname as objectname from pg_catalog.pg_matviews\n"
            + " ) t\n"
            + " where t.schemaname !~ '^pg_'\n"
            + "   and t.schemaname <> 'information_schema'\n"
            + "   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')\n"
            + ")\n"
            + "select t.*\n"
            + "from table_privileges t";

    static final String PRIV_MASTER =
            "with table_privileges as (\n"
            + " select\n"
            + "   NULL as role,\n"
            + "   t.schemaname as schema,\n"
            + "   t.objectname as table,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'update') as update,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'select') as select,\n"
            + "   pg_catalog.has_any_column_privilege(current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'insert') as insert,\n"
            + "   pg_catalog.has_table_privilege(     current_user, '\"' || replace(t.schemaname, '\"', '\"\"') || '\"' || '.' || '\"' || replace(t.objectname, '\"', '\"\"') || '\"',  'delete') as delete\n"
            + " from (\n"
            + "   select schemaname, tablename as objectname from pg_catalog.pg_tables\n"
            + "   union\n"
            + "   select schemaname, viewname as objectname from pg_catalog.pg_views\n"
            + "   union\n"
            + "   select schemaname, matviewname as objectname from pg_catalog.pg_matviews\n"
            + " ) t\n"
            + " where t.schemaname !~ '^pg_'\n"
            + "   and t.schemaname <> 'information_schema'\n"
            + "   and pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage')\n"
            + ")\n"
            + "select t.*\n"
            + "from table_privileges t";

    static final String DESCRIBE_FIELDS =
            "SELECT \"c\".\"column_name\" AS \"name\", CASE WHEN \"c\".\"udt_schema\" IN ('public', 'pg_catalog') THEN FORMAT('%s', \"c\".\"udt_name\") ELSE FORMAT('\"%s\".\"%s\"', \"c\".\"udt_schema\", \"c\".\"udt_name\") END AS \"database-type\", \"c\".\"ordinal_position\" - 1 AS \"database-position\", \"c\".\"table_schema\" AS \"table-schema\", \"c\".\"table_name\" AS \"table-name\", \"pk\".\"column_name\" IS NOT NULL AS \"pk?\", COL_DESCRIPTION(CAST(CAST(FORMAT('%I.%I', CAST(\"c\".\"table_schema\" AS TEXT), CAST(\"c\".\"table_name\" AS TEXT)) AS REGCLASS) AS OID), \"c\".\"ordinal_position\") AS \"field-comment\", ((\"column_default\" IS NULL) OR (LOWER(\"column_default\") = 'null')) AND (\"is_nullable\" = 'NO') AND NOT (((\"column_default\" IS NOT NULL) AND (\"column_default\" LIKE '%nextval(%')) OR (\"is_identity\" <> 'NO')) AS \"database-required\", ((\"column_default\" IS NOT NULL) AND (\"column_default\" LIKE '%nextval(%')) OR (\"is_identity\" <> 'NO') AS \"database-is-auto-increment\" FROM \"information_schema\".\"columns\" AS \"c\" LEFT JOIN (SELECT \"tc\".\"table_schema\", \"tc\".\"table_name\", \"kc\".\"column_name\" FROM \"information_schema\".\"table_constraints\" AS \"tc\" INNER JOIN \"information_schema\".\"key_column_usage\" AS \"kc\" ON (\"tc\".\"constraint_name\" = \"kc\".\"constraint_name\") AND (\"tc\".\"table_schema\" = \"kc\".\"table_schema\") AND (\"tc\".\"table_name\" = \"kc\".\"table_name\") WHERE \"tc\".\"constraint_type\" = 'PRIMARY KEY') AS \"pk\" ON (\"c\".\"table_schema\" = \"pk\".\"table_schema\") AND (\"c\".\"table_name\" = \"pk\".\"table_name\") AND (\"c\".\"column_name\" = \"pk\".\"column_name\") WHERE c.table_schema !~ '^information_schema|catalog_history|pg_' AND (\"c\".\"table_schema\" IN (?)) UNION ALL SELECT \"pa\".\"attname\" AS \"name\", CASE WHEN \"ptn\".\"nspname\" IN ('public', 'pg_catalog') THEN FORMAT('%s', \"pt\".\"typname\") ELSE FORMAT('\"%s\".\"%s\"', \"ptn\".\"nspname\", \"pt\".\"typname\") END AS \"database-type\", \"pa\".\"attnum\" - 1 AS \"database-position\", \"pn\".\"nspname\" AS \"table-schema\", \"pc\".\"relname\" AS \"table-name\", FALSE AS \"pk?\", NULL AS \"field-comment\", FALSE AS \"database-required\", FALSE AS \"database-is-auto-increment\" FROM \"pg_catalog\".\"pg_class\" AS \"pc\" INNER JOIN \"pg_catalog\".\"pg_namespace\" AS \"pn\" ON \"pn\".\"oid\" = \"pc\".\"relnamespace\" INNER JOIN \"pg_catalog\".\"pg_attribute\" AS \"pa\" ON \"pa\".\"attrelid\" = \"pc\".\"oid\" INNER JOIN \"pg_catalog\".\"pg_type\" AS \"pt\" ON \"pt\".\"oid\" = \"pa\".\"atttypid\" INNER JOIN \"pg_catalog\".\"pg_namespace\" AS \"ptn\" ON \"ptn\".\"oid\" = \"pt\".\"typnamespace\" WHERE (\"pc\".\"relkind\" = 'm') AND (\"pa\".\"attnum\" >= 1) AND (\"pn\".\"nspname\" IN (?)) ORDER BY \"table-schema\" ASC, \"table-name\" ASC, \"database-position\" ASC";

    static final String DESCRIBE_FKS =
            "SELECT \"fk_ns\".\"nspname\" AS \"fk-table-schema\", \"fk_table\".\"relname\" AS \"fk-table-name\", \"fk_column\".\"attname\" AS \"fk-column-name\", \"pk_ns\".\"nspname\" AS \"pk-table-schema\", \"pk_table\".\"relname\" AS \"pk-table-name\", \"pk_column\".\"attname\" AS \"pk-column-name\" FROM \"pg_constraint\" AS \"c\" INNER JOIN \"pg_class\" AS \"fk_table\" ON \"c\".\"conrelid\" = \"fk_table\".\"oid\" INNER JOIN \"pg_namespace\" AS \"fk_ns\" ON \"c\".\"connamespace\" = \"fk_ns\".\"oid\" INNER JOIN \"pg_attribute\" AS \"fk_column\" ON \"c\".\"conrelid\" = \"fk_column\".\"attrelid\" INNER JOIN \"pg_class\" AS \"pk_table\" ON \"c\".\"confrelid\" = \"pk_table\".\"oid\" INNER JOIN \"pg_namespace\" AS \"pk_ns\" ON \"pk_table\".\"relnamespace\" = \"pk_ns\".\"oid\" INNER JOIN \"pg_attribute\" AS \"pk_column\" ON \"c\".\"confrelid\" = \"pk_column\".\"attrelid\" WHERE fk_ns.nspname !~ '^information_schema|catalog_history|pg_' AND (\"c\".\"contype\" = 'f'::char) AND (\"fk_column\".\"attnum\" = ANY(c.conkey)) AND (\"pk_column\".\"attnum\" = ANY(c.confkey)) AND (\"fk_ns\".\"nspname\" IN (?)) ORDER BY \"fk-table-schema\" ASC, \"fk-table-name\" ASC";

    static final String TABLE_LIST =
            "SELECT \"n\".\"nspname\" AS \"schema\", \"c\".\"relname\" AS \"name\", CASE \"c\".\"relkind\" WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'v' THEN 'VIEW' WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE NULL END AS \"type\", \"d\".\"description\" AS \"description\", \"stat\".\"n_live_tup\" AS \"estimated_row_count\" FROM \"pg_catalog\".\"pg_class\" AS \"c\" INNER JOIN \"pg_catalog\".\"pg_namespace\" AS \"n\" ON \"c\".\"relnamespace\" = \"n\".\"oid\" LEFT JOIN \"pg_catalog\".\"pg_description\" AS \"d\" ON (\"c\".\"oid\" = \"d\".\"objoid\") AND (\"d\".\"objsubid\" = ?) AND (\"d\".\"classoid\" = 'pg_class'::regclass) LEFT JOIN \"pg_stat_user_tables\" AS \"stat\" ON (\"n\".\"nspname\" = \"stat\".\"schemaname\") AND (\"c\".\"relname\" = \"stat\".\"relname\") WHERE (\"c\".\"relnamespace\" = \"n\".\"oid\") AND (\"n\".\"nspname\" !~ ?) AND (\"n\".\"nspname\" <> ?) AND c.relkind in ('r', 'p', 'v', 'f', 'm') AND (\"n\".\"nspname\" IN (?)) ORDER BY \"type\" ASC, \"schema\" ASC, \"name\" ASC";

    public static void main(String[] args) throws Exception {
        url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/postgres?ApplicationName=Metabase%20v0.50.0";
        LocalDate today = LocalDate.now(ZoneOffset.UTC);

        // Two months of orders, one to three a day at noon.
        record Order(LocalDate day, LocalDateTime at, long id, double total, String name) {}
        List<Order> orders = new ArrayList<>();
        long id = 0;
        for (int d = 0; d < 60; d++) {
            for (int k = 0; k <= d % 3; k++) {
                LocalDate day = today.minusDays(d);
                orders.add(new Order(day, day.atTime(12, k), ++id, d + k * 0.25, "n" + (d % 7)));
            }
        }
        try (Connection c = DriverManager.getConnection(url, "kiln", "")) {
            c.createStatement().execute("CREATE TABLE orders (created_at TIMESTAMP NOT NULL, "
                    + "id BIGINT NOT NULL, total DOUBLE, name VARCHAR)");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO orders VALUES (?, ?, ?, ?)")) {
                for (Order o : orders) {
                    ps.setTimestamp(1, Timestamp.valueOf(o.at()));
                    ps.setLong(2, o.id());
                    ps.setDouble(3, o.total());
                    ps.setString(4, o.name());
                    ps.addBatch();
                }
                ps.executeBatch();
            }
        }

        // Connect (`can-connect?`) and sync the time zone.
        check("connect", c -> eq(List.of(List.of("1")), query(c, "SELECT 1"), "SELECT 1"));
        check("sync timezone", c -> eq(List.of(List.of("UTC")), query(c, "show timezone"), "show timezone"));

        // describe-database: schemas, table privileges, tables.
        check("getSchemas", c -> {
            List<String> schemas = new ArrayList<>();
            for (List<String> r : rows(c.getMetaData().getSchemas())) schemas.add(r.get(0));
            truth(schemas.contains("public"), "schemas " + schemas);
        });
        for (String[] v : new String[][] {{"0.48", PRIV_048}, {"0.50", PRIV_050}, {"later", PRIV_MASTER}}) {
            check("table privileges " + v[0], c -> {
                // Kiln's `system` tables are listed too (they are queryable).
                List<List<String>> got = query(c, v[1]);
                truth(got.stream().map(r -> r.stream().map(x -> x == null ? "" : x).toList()).toList()
                        .contains(List.of("", "public", "orders", "t", "t", "t", "t")),
                        "privileges (role, schema, table, update, select, insert, delete): " + got);
            });
        }
        check("foreign table probe", c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT TRUE AS \"_\" FROM \"public\".\"orders\" WHERE 1 <> 1 LIMIT 0")) {
                ps.setMaxRows(0);
                eq(0, rows(ps.executeQuery()).size(), "rows");
            }
        });
        check("table list (0.50 and later)", c -> {
            List<List<String>> got = query(c, TABLE_LIST, 0L, "^pg_", "information_schema", "public");
            eq(1, got.size(), "tables " + got);
            eq(List.of("public", "orders", "TABLE"), got.get(0).subList(0, 3), "table");
        });
        check("getTables (0.48)", c -> {
            String[] types = {"TABLE", "PARTITIONED TABLE", "VIEW", "FOREIGN TABLE", "MATERIALIZED VIEW",
                    "EXTERNAL TABLE", "DYNAMIC_TABLE"};
            List<String> got = new ArrayList<>();
            try (ResultSet rs = c.getMetaData().getTables(null, "public", "%", types)) {
                while (rs.next()) got.add(rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
            }
            eq(List.of("orders:TABLE"), got, "tables");
        });

        // describe-table (0.48-0.50): enum types (a named statement from
        // the fifth run on), columns, primary key; then foreign keys and
        // indexes.
        check("enum types, repeated", c -> {
            String sql = "SELECT nspname, typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
                    + "WHERE t.oid IN (SELECT DISTINCT enumtypid FROM pg_enum e)";
            try (PreparedStatement ps = c.prepareStatement(sql)) {
                for (int i = 0; i < 7; i++) eq(0, rows(ps.executeQuery()).size(), "enum types, run " + i);
            }
        });
        check("getColumns", c -> {
            List<String> got = new ArrayList<>();
            try (ResultSet rs = c.getMetaData().getColumns(null, "public", "orders", null)) {
                while (rs.next()) {
                    got.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":"
                            + rs.getString("IS_NULLABLE") + ":" + rs.getInt("ORDINAL_POSITION"));
                }
            }
            eq(List.of("created_at:timestamp:NO:1", "id:int8:NO:2", "total:float8:YES:3", "name:text:YES:4"),
                    got, "columns");
        });
        check("getPrimaryKeys", c -> eq(0, rows(c.getMetaData().getPrimaryKeys(null, "public", "orders")).size(), "keys"));
        check("getImportedKeys", c -> eq(0, rows(c.getMetaData().getImportedKeys(null, "public", "orders")).size(), "keys"));
        check("getIndexInfo", c -> eq(0, rows(c.getMetaData().getIndexInfo(null, "public", "orders", false, false)).size(), "indexes"));

        // Later releases: one bulk query for the fields and one for the
        // foreign keys of every synced schema.
        check("describe-fields (bulk)", c -> {
            List<List<String>> got = query(c, DESCRIBE_FIELDS, "public", "public");
            List<String> summary = new ArrayList<>();
            for (List<String> r : got) {
                // name, database-type, position, schema, table, pk?, comment, required, auto-increment
                summary.add(String.join(":", r.get(0), r.get(1), r.get(2), r.get(4), r.get(5), r.get(7), r.get(8)));
            }
            eq(List.of("created_at:timestamp:0:orders:f:t:f", "id:int8:1:orders:f:t:f",
                    "total:float8:2:orders:f:f:f", "name:varchar:3:orders:f:f:f"), summary, "fields");
        });
        check("describe-fks (bulk)", c -> eq(0, query(c, DESCRIBE_FKS, "public").size(), "foreign keys"));

        // Fingerprints and field values.
        check("fingerprint", c -> {
            ResultSet rs = question(c, "SELECT \"public\".\"orders\".\"created_at\" AS \"created_at\", "
                    + "\"public\".\"orders\".\"id\" AS \"id\", \"public\".\"orders\".\"total\" AS \"total\", "
                    + "SUBSTRING(\"public\".\"orders\".\"name\", 1, 1234) AS \"substring36541\" "
                    + "FROM \"public\".\"orders\" LIMIT 10000", 0);
            List<List<String>> got = rows(rs);
            eq(orders.size(), got.size(), "rows");
            truth(got.stream().allMatch(r -> r.get(3).matches("n[0-6]")), "substring " + got.get(0));
        });
        check("field values", c -> {
            ResultSet rs = question(c, "SELECT \"public\".\"orders\".\"name\" AS \"name\" FROM \"public\".\"orders\" "
                    + "GROUP BY \"public\".\"orders\".\"name\" ORDER BY \"public\".\"orders\".\"name\" ASC LIMIT 1000", 0);
            eq(List.of("n0", "n1", "n2", "n3", "n4", "n5", "n6"), rows(rs).stream().map(r -> r.get(0)).toList(),
                    "values");
        });

        // Questions over relative date ranges.
        check("count by day, previous 30 days", c -> {
            ResultSet rs = question(c, "SELECT CAST(\"public\".\"orders\".\"created_at\" AS date) AS \"created_at\", "
                    + "COUNT(*) AS \"count\" FROM \"public\".\"orders\" WHERE (\"public\".\"orders\".\"created_at\" >= "
                    + "CAST((NOW() + INTERVAL '-30 day') AS date)) AND (\"public\".\"orders\".\"created_at\" < "
                    + "CAST(NOW() AS date)) GROUP BY CAST(\"public\".\"orders\".\"created_at\" AS date) "
                    + "ORDER BY CAST(\"public\".\"orders\".\"created_at\" AS date) ASC", 10000);
            eq("date", rs.getMetaData().getColumnTypeName(1), "type of the day");
            List<String> got = new ArrayList<>();
            while (rs.next()) got.add(rs.getObject(1, LocalDate.class) + "=" + rs.getLong(2));
            List<String> want = new ArrayList<>();
            for (int d = 30; d >= 1; d--) want.add(today.minusDays(d) + "=" + (d % 3 + 1));
            eq(want, got, "count by day");
        });
        check("count today", c -> {
            ResultSet rs = question(c, "SELECT COUNT(*) AS \"count\" FROM \"public\".\"orders\" WHERE "
                    + "(\"public\".\"orders\".\"created_at\" >= CAST(NOW() AS date)) AND "
                    + "(\"public\".\"orders\".\"created_at\" < CAST((NOW() + INTERVAL '1 day') AS date))", 10000);
            truth(rs.next(), "a row");
            eq(1L, rs.getLong(1), "today's orders");
        });
        check("count by week, previous 12 weeks", c -> {
            String week = "(DATE_TRUNC('week', (\"public\".\"orders\".\"created_at\" + INTERVAL '1 day')) + INTERVAL '-1 day')";
            ResultSet rs = question(c, "SELECT " + week + " AS \"created_at\", COUNT(*) AS \"count\" FROM "
                    + "\"public\".\"orders\" WHERE (\"public\".\"orders\".\"created_at\" >= (DATE_TRUNC('week', "
                    + "((NOW() + INTERVAL '-12 week') + INTERVAL '1 day')) + INTERVAL '-1 day')) AND "
                    + "(\"public\".\"orders\".\"created_at\" < (DATE_TRUNC('week', (NOW() + INTERVAL '1 day')) + "
                    + "INTERVAL '-1 day')) GROUP BY " + week + " ORDER BY " + week + " ASC", 10000);
            List<String> got = new ArrayList<>();
            while (rs.next()) got.add(rs.getTimestamp(1).toLocalDateTime() + "=" + rs.getLong(2));
            TreeMap<LocalDate, Long> want = new TreeMap<>();
            for (Order o : orders) {
                if (o.day().isBefore(sunday(today))) want.merge(sunday(o.day()), 1L, Long::sum);
            }
            eq(want.entrySet().stream().map(e -> e.getKey().atStartOfDay() + "=" + e.getValue()).toList(), got,
                    "count by week");
        });
        check("sum by month, previous 12 months", c -> {
            ResultSet rs = question(c, "SELECT DATE_TRUNC('month', \"public\".\"orders\".\"created_at\") AS "
                    + "\"created_at\", SUM(\"public\".\"orders\".\"total\") AS \"sum\" FROM \"public\".\"orders\" "
                    + "WHERE (\"public\".\"orders\".\"created_at\" >= DATE_TRUNC('month', (NOW() + INTERVAL "
                    + "'-12 month'))) AND (\"public\".\"orders\".\"created_at\" < DATE_TRUNC('month', NOW())) "
                    + "GROUP BY DATE_TRUNC('month', \"public\".\"orders\".\"created_at\") ORDER BY "
                    + "DATE_TRUNC('month', \"public\".\"orders\".\"created_at\") ASC", 10000);
            List<String> got = new ArrayList<>();
            while (rs.next()) got.add(rs.getTimestamp(1).toLocalDateTime() + "=" + rs.getDouble(2));
            TreeMap<LocalDate, Double> want = new TreeMap<>();
            for (Order o : orders) {
                if (o.day().isBefore(today.withDayOfMonth(1))) want.merge(o.day().withDayOfMonth(1), o.total(), Double::sum);
            }
            eq(want.entrySet().stream().map(e -> e.getKey().atStartOfDay() + "=" + e.getValue()).toList(), got,
                    "sum by month");
        });
        check("rows of a table, limited", c -> {
            ResultSet rs = question(c, "SELECT \"public\".\"orders\".\"id\" AS \"id\" FROM \"public\".\"orders\" "
                    + "ORDER BY \"public\".\"orders\".\"id\" DESC LIMIT 2000", 2000);
            List<List<String>> got = rows(rs);
            eq(orders.size(), got.size(), "rows");
            eq(String.valueOf(orders.size()), got.get(0).get(0), "first id");
        });

        if (failures.isEmpty()) {
            System.out.println("ok");
        } else {
            failures.forEach(System.out::println);
            System.exit(1);
        }
    }
}
