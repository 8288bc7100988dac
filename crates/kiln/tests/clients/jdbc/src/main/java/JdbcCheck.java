// pgjdbc (the driver of Metabase, Tableau, DBeaver) against Kiln: the
// DatabaseMetaData calls BI tools make, ResultSetMetaData types, prepared
// statements with parameters of several types, batches' update counts,
// transactions (autocommit off), streaming with a fetch size, cancel and
// SQLSTATEs. Every check asserts results; all run, failures are listed.
//
// Usage: java -cp <postgresql.jar> JdbcCheck.java PG_PORT   (prints "ok")

import java.sql.*;
import java.util.*;

public class JdbcCheck {
    interface Check {
        void run(Connection c) throws Exception;
    }

    static String url;
    static final List<String> failures = new ArrayList<>();

    static void check(String name, Check body) {
        try (Connection c = DriverManager.getConnection(url, "kiln", "")) {
            body.run(c);
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

    /** Column labels of a result set. */
    static List<String> labels(ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<String> out = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) out.add(md.getColumnLabel(i).toLowerCase());
        return out;
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

    /** The column `label` of every row. */
    static List<String> column(ResultSet rs, String label) throws SQLException {
        List<String> out = new ArrayList<>();
        while (rs.next()) out.add(rs.getString(label));
        rs.close();
        return out;
    }

    static long count(Connection c, String table) throws SQLException {
        try (Statement s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT count(*) FROM " + table)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    static String sqlstate(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute(sql);
        } catch (SQLException e) {
            return e.getSQLState();
        }
        throw new AssertionError("accepted: " + sql);
    }

    public static void main(String[] args) throws Exception {
        url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/kiln";
        try (Connection c = DriverManager.getConnection(url, "kiln", "");
             Statement s = c.createStatement()) {
            s.execute("CREATE TABLE jt (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR, v DOUBLE)");
            s.execute("CREATE TABLE jbig (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL)");
            s.execute("INSERT INTO jbig SELECT TIMESTAMP '2026-01-01 00:00:00', value FROM generate_series(1, 5000)");
        }

        check("connection metadata", c -> {
            DatabaseMetaData md = c.getMetaData();
            eq("PostgreSQL", md.getDatabaseProductName(), "product");
            truth(md.getDatabaseMajorVersion() >= 9, "major version");
            eq("kiln", c.getCatalog(), "catalog");
        });

        check("getTables", c -> {
            DatabaseMetaData md = c.getMetaData();
            List<String> names = column(md.getTables(null, "public", "j%", new String[] {"TABLE"}), "TABLE_NAME");
            eq(List.of("jbig", "jt"), names, "tables");
        });

        check("getColumns", c -> {
            DatabaseMetaData md = c.getMetaData();
            ResultSet rs = md.getColumns(null, "public", "jt", null);
            Map<String, Integer> types = new LinkedHashMap<>();
            Map<String, String> names = new LinkedHashMap<>();
            Map<String, Integer> nullable = new LinkedHashMap<>();
            while (rs.next()) {
                types.put(rs.getString("COLUMN_NAME"), rs.getInt("DATA_TYPE"));
                names.put(rs.getString("COLUMN_NAME"), rs.getString("TYPE_NAME"));
                nullable.put(rs.getString("COLUMN_NAME"), rs.getInt("NULLABLE"));
            }
            eq(List.of("ts", "id", "name", "v"), new ArrayList<>(types.keySet()), "columns in order");
            eq(Types.TIMESTAMP, types.get("ts"), "ts type");
            eq(Types.BIGINT, types.get("id"), "id type");
            eq(Types.VARCHAR, types.get("name"), "name type");
            eq(Types.DOUBLE, types.get("v"), "v type");
            eq("timestamp", names.get("ts"), "ts type name");
            eq("int8", names.get("id"), "id type name");
            eq(DatabaseMetaData.columnNoNulls, nullable.get("id"), "id not null");
            eq(DatabaseMetaData.columnNullable, nullable.get("name"), "name nullable");
        });

        check("getSchemas", c -> {
            List<String> schemas = column(c.getMetaData().getSchemas(), "TABLE_SCHEM");
            truth(schemas.contains("public"), "public in " + schemas);
        });

        check("getCatalogs", c -> {
            List<String> catalogs = column(c.getMetaData().getCatalogs(), "TABLE_CAT");
            truth(catalogs.contains("kiln"), "kiln in " + catalogs);
        });

        check("getTableTypes", c -> {
            List<String> types = column(c.getMetaData().getTableTypes(), "TABLE_TYPE");
            truth(types.contains("TABLE"), "TABLE in " + types);
        });

        // Kiln has no keys, indexes or privileges: these answer no rows, with
        // the columns JDBC specifies.
        check("getPrimaryKeys", c -> {
            ResultSet rs = c.getMetaData().getPrimaryKeys(null, "public", "jt");
            truth(labels(rs).contains("pk_name"), "pk_name column");
            eq(0, rows(rs).size(), "no primary keys");
        });
        check("getIndexInfo", c -> {
            ResultSet rs = c.getMetaData().getIndexInfo(null, "public", "jt", false, true);
            truth(labels(rs).contains("index_name"), "index_name column");
            eq(0, rows(rs).size(), "no indexes");
        });
        check("getBestRowIdentifier", c -> {
            ResultSet rs = c.getMetaData().getBestRowIdentifier(null, "public", "jt",
                    DatabaseMetaData.bestRowSession, true);
            truth(labels(rs).contains("column_name"), "column_name column");
            eq(0, rows(rs).size(), "no row identifier");
        });
        check("getImportedKeys", c -> {
            ResultSet rs = c.getMetaData().getImportedKeys(null, "public", "jt");
            truth(labels(rs).contains("fk_name"), "fk_name column");
            eq(0, rows(rs).size(), "no imported keys");
        });
        check("getExportedKeys", c -> {
            ResultSet rs = c.getMetaData().getExportedKeys(null, "public", "jt");
            truth(labels(rs).contains("fk_name"), "fk_name column");
            eq(0, rows(rs).size(), "no exported keys");
        });
        check("getTablePrivileges", c -> {
            ResultSet rs = c.getMetaData().getTablePrivileges(null, "public", "jt");
            truth(labels(rs).contains("privilege"), "privilege column");
            eq(0, rows(rs).size(), "no privileges (relacl is NULL)");
        });
        check("getUDTs", c -> {
            ResultSet rs = c.getMetaData().getUDTs(null, "public", "%", null);
            truth(labels(rs).contains("type_name"), "type_name column");
            eq(0, rows(rs).size(), "no user-defined types");
        });
        check("getFunctions", c -> {
            ResultSet rs = c.getMetaData().getFunctions(null, "public", "%");
            truth(labels(rs).contains("function_name"), "function_name column");
            eq(0, rows(rs).size(), "no functions in public");
            List<String> builtin = column(c.getMetaData().getFunctions(null, "pg_catalog", "array_%"), "FUNCTION_NAME");
            truth(builtin.contains("array_length"), "array_length in " + builtin);
        });
        check("getProcedures", c -> {
            ResultSet rs = c.getMetaData().getProcedures(null, "public", "%");
            truth(labels(rs).contains("procedure_name"), "procedure_name column");
            rows(rs);
        });
        check("getTypeInfo", c -> {
            ResultSet rs = c.getMetaData().getTypeInfo();
            Map<String, Integer> types = new HashMap<>();
            while (rs.next()) types.put(rs.getString("TYPE_NAME"), rs.getInt("DATA_TYPE"));
            eq(Types.BIGINT, types.get("int8"), "int8");
            eq(Types.VARCHAR, types.get("varchar"), "varchar");
            eq(Types.TIMESTAMP, types.get("timestamp"), "timestamp");
            eq(Types.DOUBLE, types.get("float8"), "float8");
        });

        check("ResultSetMetaData of literals", c -> {
            try (Statement s = c.createStatement();
                 ResultSet rs = s.executeQuery("SELECT 'a' AS a, NULL AS n, 1 AS i, 2.5 AS d, now() AS t, true AS b")) {
                ResultSetMetaData md = rs.getMetaData();
                eq(Types.VARCHAR, md.getColumnType(1), "'a' type");
                truth(md.getColumnType(2) != Types.OTHER, "NULL column type is " + md.getColumnTypeName(2));
                // DataFusion types an integer literal as int8 (PostgreSQL: int4).
                truth(md.getColumnType(3) == Types.INTEGER || md.getColumnType(3) == Types.BIGINT, "1 type");
                truth(md.getColumnType(4) == Types.NUMERIC || md.getColumnType(4) == Types.DOUBLE, "2.5 type");
                truth(md.getColumnType(5) == Types.TIMESTAMP, "now() type " + md.getColumnTypeName(5));
                eq(Types.BIT, md.getColumnType(6), "true type");
                rs.next();
                eq("a", rs.getString(1), "'a'");
                eq(null, rs.getString(2), "NULL");
                eq(1, rs.getInt(3), "1");
                eq(2.5, rs.getDouble(4), "2.5");
                eq(true, rs.getBoolean(6), "true");
            }
            try (PreparedStatement p = c.prepareStatement("SELECT 'a', NULL")) {
                ResultSetMetaData md = p.getMetaData();
                eq(Types.VARCHAR, md.getColumnType(1), "prepared 'a' type");
                truth(md.getColumnType(2) != Types.OTHER, "prepared NULL type " + md.getColumnTypeName(2));
            }
        });

        check("PreparedStatement parameters", c -> {
            Timestamp ts = Timestamp.valueOf("2026-03-01 12:30:00");
            try (PreparedStatement p = c.prepareStatement("INSERT INTO jt VALUES (?, ?, ?, ?)")) {
                p.setTimestamp(1, ts);
                p.setLong(2, 7L);
                p.setString(3, "seven");
                p.setDouble(4, 7.5);
                eq(1, p.executeUpdate(), "insert count");
                p.setTimestamp(1, ts);
                p.setLong(2, 8L);
                p.setNull(3, Types.VARCHAR);
                p.setNull(4, Types.DOUBLE);
                eq(1, p.executeUpdate(), "insert count with nulls");
            }
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT id, name, v, ts FROM jt WHERE id >= ? AND id < ? AND v > ? AND ts = ? ORDER BY id")) {
                p.setInt(1, 7);
                p.setLong(2, 9L);
                p.setDouble(3, 1.0);
                p.setTimestamp(4, ts);
                ResultSet rs = p.executeQuery();
                truth(rs.next(), "a row");
                eq(7L, rs.getLong(1), "id");
                eq("seven", rs.getString(2), "name");
                eq(7.5, rs.getDouble(3), "v");
                eq(ts, rs.getTimestamp(4), "ts");
                truth(!rs.next(), "one row");
            }
            try (PreparedStatement p = c.prepareStatement("SELECT count(*) FROM jt WHERE name = ? OR name IS NULL")) {
                p.setString(1, "seven");
                ResultSet rs = p.executeQuery();
                rs.next();
                eq(2L, rs.getLong(1), "count by string");
            }
            // Past prepareThreshold (5), pgjdbc switches to a named server-side statement.
            try (PreparedStatement p = c.prepareStatement("SELECT name FROM jt WHERE id = ?")) {
                for (int i = 0; i < 8; i++) {
                    p.setLong(1, 7L);
                    ResultSet rs = p.executeQuery();
                    truth(rs.next(), "row at execution " + i);
                    eq("seven", rs.getString(1), "name at execution " + i);
                }
            }
        });

        check("executeBatch update counts", c -> {
            c.createStatement().execute("CREATE TABLE jbatch (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL)");
            try (PreparedStatement p = c.prepareStatement("INSERT INTO jbatch VALUES (?, ?)")) {
                for (long i = 0; i < 3; i++) {
                    p.setTimestamp(1, Timestamp.valueOf("2026-01-01 00:00:00"));
                    p.setLong(2, i);
                    p.addBatch();
                }
                eq("[1, 1, 1]", Arrays.toString(p.executeBatch()), "prepared batch counts");
            }
            try (Statement s = c.createStatement()) {
                s.addBatch("INSERT INTO jbatch VALUES ('2026-01-02', 10), ('2026-01-02', 11)");
                s.addBatch("INSERT INTO jbatch VALUES ('2026-01-03', 12)");
                eq("[2, 1]", Arrays.toString(s.executeBatch()), "statement batch counts");
                eq(3, s.executeUpdate("INSERT INTO jbatch VALUES ('2026-01-04', 13), ('2026-01-04', 14), ('2026-01-04', 15)"),
                        "executeUpdate count");
            }
            eq(9L, count(c, "jbatch"), "rows after batches");
        });

        check("transactions with autocommit off", c -> {
            c.createStatement().execute("CREATE TABLE jtx (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL)");
            c.setAutoCommit(false);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO jtx VALUES (?, ?)")) {
                p.setTimestamp(1, Timestamp.valueOf("2026-01-01 00:00:00"));
                p.setLong(2, 1);
                p.executeUpdate();
                c.rollback();
                p.setTimestamp(1, Timestamp.valueOf("2026-01-01 00:00:00"));
                p.setLong(2, 2);
                p.executeUpdate();
                c.commit();
            }
            c.setAutoCommit(true);
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT id FROM jtx")) {
                eq(List.of(List.of("2")), rows(rs), "only the committed row");
            }
        });

        check("streaming with setFetchSize", c -> {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(100);
                ResultSet rs = s.executeQuery("SELECT id FROM jbig ORDER BY id");
                long n = 0, sum = 0;
                while (rs.next()) {
                    n++;
                    sum += rs.getLong(1);
                }
                eq(5000L, n, "rows streamed");
                eq(5000L * 5001 / 2, sum, "sum streamed");
            }
            try (PreparedStatement p = c.prepareStatement("SELECT id FROM jbig WHERE id > ? ORDER BY id")) {
                p.setFetchSize(7);
                p.setLong(1, 4980);
                ResultSet rs = p.executeQuery();
                long n = 0;
                while (rs.next()) n++;
                eq(20L, n, "prepared rows streamed");
            }
            c.commit();
        });

        check("SQLSTATEs", c -> {
            eq("42601", sqlstate(c, "SELEC 1"), "syntax error");
            eq("42P01", sqlstate(c, "SELECT * FROM nope"), "unknown table");
            eq("42703", sqlstate(c, "SELECT nope FROM jt"), "unknown column");
            eq("22012", sqlstate(c, "SELECT 1/0"), "division by zero");
            try (PreparedStatement p = c.prepareStatement("SELECT id / ? FROM jbig")) {
                p.setLong(1, 0);
                p.executeQuery();
                throw new AssertionError("prepared division by zero accepted");
            } catch (SQLException e) {
                eq("22012", e.getSQLState(), "prepared division by zero");
            }
        });

        check("setQueryTimeout and cancel", c -> {
            String slow = "SELECT count(*) FROM jbig a, jbig b, jbig c";
            try (Statement s = c.createStatement()) {
                s.setQueryTimeout(1);
                long t0 = System.nanoTime();
                try {
                    s.executeQuery(slow);
                    throw new AssertionError("slow query finished");
                } catch (SQLException e) {
                    eq("57014", e.getSQLState(), "timeout");
                }
                truth(System.nanoTime() - t0 < 20_000_000_000L, "timed out promptly");
            }
            try (Statement s = c.createStatement()) {
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(500);
                        s.cancel();
                    } catch (Exception ignored) {
                    }
                });
                t.start();
                try {
                    s.executeQuery(slow);
                    throw new AssertionError("cancelled query finished");
                } catch (SQLException e) {
                    eq("57014", e.getSQLState(), "cancel");
                }
                t.join();
            }
            // The connection is usable afterwards.
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 1")) {
                rs.next();
                eq(1, rs.getInt(1), "after cancel");
            }
        });

        if (!failures.isEmpty()) {
            for (String f : failures) System.out.println("FAIL " + f);
            System.exit(1);
        }
        System.out.println("ok");
    }
}
