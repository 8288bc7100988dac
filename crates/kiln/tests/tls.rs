//! TLS on both ports, with real clients against the real binary: psql,
//! psycopg and pgjdbc (`sslmode=require` and `verify-full`, SSLRequest and
//! direct TLS), curl and Python's urllib over https, plaintext refused with
//! `--tls-required`, the certificate reloaded on SIGHUP while a connection
//! stays open. Each test makes its own CA and server certificate (CN and
//! SAN `localhost`, SAN 127.0.0.1).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A test CA and the files of a server certificate it signed.
struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    ca_pem: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    /// A CA named `name` and a first server certificate (serial `0x015A`).
    fn new(dir: &Path, name: &str) -> Pki {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Kiln test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_pem, params.self_signed(&key).unwrap().pem()).unwrap();
        let pki = Pki {
            dir: dir.to_path_buf(),
            ca: Issuer::new(params, key),
            ca_pem,
            cert: dir.join(format!("{name}-server.pem")),
            key: dir.join(format!("{name}-server.key")),
        };
        pki.issue(1);
        pki
    }

    /// Writes a new server certificate with serial `0x{n:02X}5A` over the
    /// server's files (written aside, then renamed, as deploy tools do).
    fn issue(&self, n: u8) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.serial_number = Some(vec![n, 0x5A].into());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (c, k) = (self.dir.join("next.pem"), self.dir.join("next.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        std::fs::rename(&c, &self.cert).unwrap();
        std::fs::rename(&k, &self.key).unwrap();
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
        ]
    }

    fn start(&self, data: &Path, extra: &[&str]) -> Server {
        let mut args = self.args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start(data, &args)
    }
}

fn http_port(s: &Server) -> &str {
    s.http.rsplit(':').next().unwrap()
}

/// Runs psql with a connection string; returns (success, stdout, stderr).
fn psql(conninfo: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("psql")
        .arg(conninfo)
        .args(["-At"])
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGSSLMODE")
        .output()
        .expect("psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn conninfo(s: &Server, host: &str, mode: &str, ca: &Path) -> String {
    format!(
        "host={host} port={} user=kiln dbname=kiln sslmode={mode} sslrootcert={}",
        s.pg_port,
        ca.display()
    )
}

/// The TLS metric `name` with labels `labels` (as written in /metrics),
/// read over https.
fn tls_metric(s: &Server, ca: &Path, series: &str) -> f64 {
    let text = curl(s, ca, &["https://localhost:PORT/metrics"]).1;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// Waits until the TLS metric `series` reads `want` (counters move when
/// the server has processed what a client already finished with).
fn wait_metric(s: &Server, ca: &Path, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = tls_metric(s, ca, series);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{series} is {got}, want {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs curl with the CA; `PORT` in arguments is the HTTP port. Returns
/// (success, stdout, stderr).
fn curl(s: &Server, ca: &Path, args: &[&str]) -> (bool, String, String) {
    let port = http_port(s);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(args.iter().map(|a| a.replace("PORT", port)))
        .output()
        .expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tls_check(args: &[&str]) -> std::process::Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/tls_check.py");
    Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 (scripts/test.sh installs psycopg)")
}

#[test]
fn psql_negotiates_tls_with_require_verify_full_and_prefer() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let other = Pki::new(tmp.path(), "other");
    let s = pki.start(&tmp.path().join("data"), &[]);
    for (host, mode) in [
        ("127.0.0.1", "require"),
        ("localhost", "verify-full"),
        ("127.0.0.1", "verify-full"),
        ("localhost", "prefer"),
    ] {
        let (ok, out, err) = psql(
            &conninfo(&s, host, mode, &pki.ca_pem),
            &["-c", "SELECT 40 + 2", "-c", "\\conninfo"],
        );
        assert!(ok, "{mode}: {err}");
        assert!(out.starts_with("42\n"), "{mode}: {out}");
        assert!(
            out.contains("SSL connection (protocol: TLSv1.3"),
            "{mode}: {out}"
        );
    }
    // TLS is optional: a plaintext client still gets in.
    let (ok, out, err) = psql(
        &conninfo(&s, "localhost", "disable", &pki.ca_pem),
        &["-c", "\\conninfo"],
    );
    assert!(ok, "{err}");
    assert!(!out.contains("SSL connection"), "{out}");
    // verify-full checks the chain: another CA's trust is refused.
    let (ok, _, err) = psql(
        &conninfo(&s, "localhost", "verify-full", &other.ca_pem),
        &["-c", "SELECT 1"],
    );
    assert!(!ok);
    assert!(err.contains("certificate verify failed"), "{err}");
    let series = |outcome: &str| {
        format!("kiln_tls_handshakes_total{{outcome=\"{outcome}\",protocol=\"pg\"}}")
    };
    wait_metric(&s, &pki.ca_pem, &series("ok"), 4.0);
    wait_metric(&s, &pki.ca_pem, &series("failed"), 1.0);
}

#[test]
fn psycopg_and_pgjdbc_connect_over_tls() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let other = Pki::new(tmp.path(), "other");
    let s = pki.start(&tmp.path().join("data"), &[]);
    let ca = pki.ca_pem.display().to_string();
    let out = tls_check(&["psycopg", &s.pg_port.to_string(), &ca]);
    common::assert_ok(&s, "tls_check.py psycopg", &out);

    let (dir, classpath) = common::jdbc_classpath();
    let out = Command::new("java")
        .args(["-cp", &classpath, "src/main/java/TlsCheck.java"])
        .arg(s.pg_port.to_string())
        .arg(&pki.ca_pem)
        .arg(&other.ca_pem)
        .current_dir(dir)
        .output()
        .expect("java (scripts/test.sh installs a JDK)");
    common::assert_ok(&s, "TlsCheck.java", &out);
}

#[test]
fn https_with_curl_and_python_and_plain_http_on_the_same_port() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let s = pki.start(&tmp.path().join("data"), &[]);
    // Clients that stall before or inside their handshake hold up no one.
    let silent = std::net::TcpStream::connect(&s.http).unwrap();
    let mut stalled = std::net::TcpStream::connect(&s.http).unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let started = Instant::now();
    let (ok, out, err) = curl(
        &s,
        &pki.ca_pem,
        &[
            "-H",
            "Content-Type: application/json",
            "--data",
            r#"{"sql": "SELECT 40 + 2 AS x"}"#,
            "https://localhost:PORT/v1/sql",
        ],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["rows"], serde_json::json!([[42]]));
    assert!(started.elapsed() < Duration::from_secs(5));
    drop((silent, stalled));
    let out = tls_check(&["https", http_port(&s), &pki.ca_pem.display().to_string()]);
    common::assert_ok(&s, "tls_check.py https", &out);
    // TLS is optional: plain http on the same port.
    assert_eq!(s.rows("SELECT 7"), serde_json::json!([[7]]));
    let handshakes = tls_metric(
        &s,
        &pki.ca_pem,
        "kiln_tls_handshakes_total{outcome=\"ok\",protocol=\"http\"}",
    );
    // curl, urllib, and the scrape itself.
    assert_eq!(handshakes, 3.0);
    // The client that failed the name check, and the one that left
    // inside its handshake.
    wait_metric(
        &s,
        &pki.ca_pem,
        "kiln_tls_handshakes_total{outcome=\"failed\",protocol=\"http\"}",
        2.0,
    );
    // Graceful shutdown still works with the TLS listener.
    assert!(s.terminate().success());
}

/// The fields of the first ErrorResponse a plaintext startup gets.
fn plaintext_startup_error(port: u16) -> Vec<(u8, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let params = b"user\0kiln\0database\0kiln\0\0";
    let mut startup = ((params.len() + 8) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196608u32.to_be_bytes());
    startup.extend_from_slice(params);
    s.write_all(&startup).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.first(), Some(&b'E'), "{reply:?}");
    reply[5..]
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| (f[0], String::from_utf8_lossy(&f[1..]).into_owned()))
        .collect()
}

#[test]
fn tls_required_refuses_plaintext_on_both_ports() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let s = pki.start(&tmp.path().join("data"), &["--tls-required"]);

    let fields = plaintext_startup_error(s.pg_port);
    assert!(fields.contains(&(b'S', "FATAL".into())), "{fields:?}");
    assert!(fields.contains(&(b'C', "28000".into())), "{fields:?}");
    assert!(
        fields.contains(&(b'M', "this server requires TLS (sslmode=require)".into())),
        "{fields:?}"
    );
    let (ok, _, err) = psql(
        &conninfo(&s, "localhost", "disable", &pki.ca_pem),
        &["-c", "SELECT 1"],
    );
    assert!(!ok);
    assert!(
        err.contains("FATAL:  this server requires TLS (sslmode=require)"),
        "{err}"
    );
    // prefer negotiates TLS and gets in.
    let (ok, out, err) = psql(
        &conninfo(&s, "localhost", "prefer", &pki.ca_pem),
        &["-c", "\\conninfo"],
    );
    assert!(ok && out.contains("SSL connection"), "{out}{err}");

    let (ok, out, err) = curl(
        &s,
        &pki.ca_pem,
        &["-i", "http://127.0.0.1:PORT/v1/sql", "--data", "SELECT 1"],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("this server requires https"), "{out}");
    let (ok, out, err) = curl(&s, &pki.ca_pem, &["https://localhost:PORT/health"]);
    assert!(ok, "{err}");
    assert!(!out.contains("requires"), "{out}");

    for (door, n) in [("pg", 2.0), ("http", 1.0)] {
        let series = format!("kiln_tls_plaintext_refused_total{{protocol=\"{door}\"}}");
        wait_metric(&s, &pki.ca_pem, &series, n);
    }
}

#[test]
fn sighup_reloads_the_certificate_and_open_connections_survive() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let s = pki.start(&tmp.path().join("data"), &[]);
    let ca = pki.ca_pem.display().to_string();
    let pg = s.pg_port.to_string();
    let serial = |port: &str, door: &str| {
        let out = tls_check(&["serial", port, &ca, door]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(serial(http_port(&s), "http"), "015A");
    // Direct TLS (no SSLRequest) on the PostgreSQL port.
    assert_eq!(serial(&pg, "pg"), "015A");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/tls_check.py");
    let mut held = Command::new("python3")
        .args([script, "hold", &pg, &ca])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(held.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");

    let hup = || {
        let ok = Command::new("kill")
            .args(["-HUP", &s.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    let reloads = |outcome: &str| {
        tls_metric(
            &s,
            &pki.ca_pem,
            &format!("kiln_tls_cert_reloads_total{{outcome=\"{outcome}\"}}"),
        )
    };
    let wait_for = |outcome: &str, n: f64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while reloads(outcome) < n {
            assert!(Instant::now() < deadline, "no {outcome} reload");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    pki.issue(2);
    hup();
    wait_for("ok", 1.0);
    assert_eq!(serial(http_port(&s), "http"), "025A");
    assert_eq!(serial(&pg, "pg"), "025A");

    // The connection opened before the reload still answers.
    writeln!(held.stdin.as_mut().unwrap()).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "2");
    assert!(held.wait().unwrap().success());

    // A broken key: logged, the running certificate kept.
    std::fs::write(&pki.key, "not a key\n").unwrap();
    hup();
    wait_for("failed", 1.0);
    assert_eq!(serial(http_port(&s), "http"), "025A");
    let log = s.log.lock().unwrap().clone();
    assert!(
        log.contains("TLS certificate not reloaded, keeping the old one: --tls-key"),
        "{log}"
    );
    assert_eq!(reloads("ok"), 1.0);
}

#[test]
fn a_tls_client_killed_mid_statement_cancels_its_query() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let s = pki.start(&tmp.path().join("data"), &[]);
    let mut client = Command::new("psql")
        .arg(conninfo(&s, "localhost", "verify-full", &pki.ca_pem))
        .args([
            "-c",
            "SELECT count(*) FROM generate_series(1, 1000000000000) g(v) WHERE v % 7 = 3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = "SELECT status FROM system.queries WHERE query LIKE '%v % 7 = 3%' AND query NOT LIKE '%system.queries%'";
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.rows(running) != serde_json::json!([["running"]]) {
        assert!(Instant::now() < deadline, "{}", s.rows(running));
        std::thread::sleep(Duration::from_millis(50));
    }
    client.kill().unwrap();
    client.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.rows(running) != serde_json::json!([["cancelled"]]) {
        assert!(Instant::now() < deadline, "{}", s.rows(running));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bad_tls_flags_are_clear_startup_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let missing = tmp.path().join("missing.pem");
    let key = pki.key.display().to_string();
    let cases: [(Vec<&str>, String); 3] = [
        (
            vec!["--tls-cert", missing.to_str().unwrap(), "--tls-key", &key],
            format!("--tls-cert {}: No such file", missing.display()),
        ),
        (
            vec!["--tls-cert", pki.cert.to_str().unwrap()],
            "--tls-cert needs --tls-key".into(),
        ),
        (
            vec!["--tls-required"],
            "--tls-required needs --tls-cert".into(),
        ),
    ];
    for (args, want) in cases {
        let out = common::serve_command(&tmp.path().join("data"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(&want), "{args:?}: {err}");
        assert!(!err.contains("kiln listening"), "{err}");
    }
}

#[test]
fn scram_and_basic_logins_over_tls() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path(), "main");
    let s = pki.start(
        &tmp.path().join("data"),
        &["--auth", "on", "--admin-password", "tls admin pw"],
    );
    let info = |password: &str| {
        format!(
            "host=localhost port={} user=admin password='{password}' dbname=kiln sslmode=verify-full sslrootcert={}",
            s.pg_port,
            pki.ca_pem.display()
        )
    };
    // libpq over TLS sends the SCRAM flag for "could bind, server cannot".
    let (ok, out, err) = psql(
        &info("tls admin pw"),
        &["-c", "SELECT 6 * 7", "-c", "\\conninfo"],
    );
    assert!(ok, "{err}");
    assert!(
        out.starts_with("42\n") && out.contains("SSL connection"),
        "{out}"
    );
    let (ok, _, err) = psql(&info("wrong"), &["-c", "SELECT 1"]);
    assert!(!ok);
    assert!(err.contains("password authentication failed"), "{err}");
    let sql = [
        "https://localhost:PORT/v1/sql",
        "-H",
        "Content-Type: application/sql",
        "-d",
        "SELECT 5",
    ];
    let (_, body, _) = curl(
        &s,
        &pki.ca_pem,
        &[&sql[..], &["-u", "admin:tls admin pw"]].concat(),
    );
    assert!(body.contains("\"rows\":[[5]]"), "{body}");
    let (_, body, _) = curl(&s, &pki.ca_pem, &sql);
    assert!(body.contains("unauthenticated"), "{body}");
}
