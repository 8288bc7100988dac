// pgjdbc over TLS: sslmode=verify-full against the test's CA (through an
// SSLRequest and, as PostgreSQL 17 allows, direct TLS), and a CA that did
// not sign the server's certificate refused.
//
// Usage: java -cp <postgresql.jar> TlsCheck.java PG_PORT CA_PEM OTHER_CA_PEM
// (prints "ok")

import java.sql.*;

public class TlsCheck {
    static String url(String port, String ca, String extra) {
        return "jdbc:postgresql://localhost:" + port + "/kiln?ssl=true&sslmode=verify-full&sslrootcert="
                + ca + extra;
    }

    static int selectOne(String url) throws SQLException {
        try (Connection c = DriverManager.getConnection(url, "kiln", "");
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT 41 + 1")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    public static void main(String[] args) throws Exception {
        String port = args[0], ca = args[1], otherCa = args[2];
        if (selectOne(url(port, ca, "")) != 42) throw new AssertionError("verify-full");
        if (selectOne(url(port, ca, "&sslNegotiation=direct")) != 42) {
            throw new AssertionError("direct TLS");
        }
        try {
            selectOne(url(port, otherCa, ""));
            throw new AssertionError("a certificate the CA did not sign was accepted");
        } catch (SQLException expected) {
            // The server's certificate is not trusted: the handshake fails.
        }
        System.out.println("ok");
    }
}
