//! Shared harness of the end-to-end tests: spawns the real `kiln serve` on
//! free ports, speaks HTTP with a few lines over `TcpStream` (one request per
//! connection, so no HTTP client crate), and runs `psql`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod s3;

pub struct Server {
    pub child: Child,
    pub http: String,
    pub pg_port: u16,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let child = serve_command(dir)
            .args(extra)
            .env("KILN_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kiln serve");
        Self::adopt(child)
    }

    /// A `kiln serve` spawned with its stderr piped: waits for its
    /// `kiln listening` line.
    pub fn adopt(mut child: Child) -> Server {
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("kiln listening ") {
                    let _ = tx.send(rest.to_string());
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no 'kiln listening' line; log:\n{}", log.lock().unwrap()));
        let mut http = String::new();
        let mut pg_port = 0;
        for part in line.split_whitespace() {
            if let Some(a) = part.strip_prefix("http=") {
                http = a.to_string();
            } else if let Some(a) = part.strip_prefix("pg=") {
                pg_port = a.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
        Server {
            child,
            http,
            pg_port,
            log,
        }
    }

    /// One request; returns status and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        request(&self.http, method, path, headers, body)
    }

    pub fn sql(&self, q: &str) -> Value {
        let (status, body) = self.request(
            "POST",
            "/v1/sql",
            &[("Content-Type", "text/plain")],
            q.as_bytes(),
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 200, "{q}: {v}");
        v
    }

    pub fn rows(&self, q: &str) -> Value {
        self.sql(q)["rows"].clone()
    }

    /// The value of the unlabelled metric `name` in `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.request("GET", "/metrics", &[], b"");
        let text = String::from_utf8(body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    }

    pub fn write(&self, table: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
        let (status, body) = self.request("POST", &format!("/v1/write/{table}"), headers, body);
        let v = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
        (status, v)
    }

    /// `psql -At` against the server, to be given its arguments.
    pub fn psql_command(&self) -> Command {
        let mut psql = Command::new("psql");
        psql.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.pg_port.to_string(),
            "-U",
            "postgres",
            "-At",
        ])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGSSLMODE", "disable");
        psql
    }

    /// Runs `psql -At` with `args` against the server.
    pub fn psql_output(&self, args: &[&str]) -> std::process::Output {
        self.psql_command().args(args).output().expect("run psql")
    }

    /// Runs one command with psql; it must succeed. Returns its output.
    pub fn psql(&self, q: &str) -> String {
        let out = self.psql_output(&["-c", q]);
        assert!(
            out.status.success(),
            "psql {q}: {}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log.lock().unwrap()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "kiln did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `kiln serve` on `dir` with both listeners on free loopback ports (its
/// storage on the test S3 server when the suites run on one).
pub fn serve_command(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.envs(kiln_storage::testing::test_store_env(dir));
    c.args([
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--pg-addr",
        "127.0.0.1:0",
    ])
    .arg("--data-dir")
    .arg(dir);
    c
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 4 + n..];
    }
}

/// One HTTP/1.1 request to `addr` on a new connection; returns status and
/// body. Requests to `/v1/` carry `X-Kiln-Request: 1`, as every client
/// must (see docs/security.md); [`request_raw`] sends only `headers`.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut all = headers.to_vec();
    if path.starts_with("/v1/")
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-kiln-request"))
    {
        all.push(("X-Kiln-Request", "1"));
    }
    request_raw(addr, method, path, &all, body)
}

/// Status and lower-cased head of a request without a body.
pub fn request_head(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let (status, head, _) = exchange(addr, method, path, headers, b"");
    (status, head)
}

/// One HTTP/1.1 request with exactly `headers`; returns status and body.
pub fn request_raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let (status, _, body) = exchange(addr, method, path, headers, body);
    (status, body)
}

fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    // Generous: 200 heavy queries admitted together (robustness tests)
    // share two cores for about 40 s on a quiet machine, longer on a
    // loaded one; a hung server still fails the test, only later.
    s.set_read_timeout(Some(Duration::from_secs(150))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        addr,
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // The server may answer (413) before reading everything: ignore write errors.
    let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(body));
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("bad response: {}", String::from_utf8_lossy(&resp)));
    let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let mut body = resp[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

/// psql's answer to `sql` over the simple protocol: "" or the SQLSTATE.
pub fn psql_sqlstate(s: &Server, sql: &str) -> String {
    sqlstate_of(&s.psql_output(&["-v", "VERBOSITY=verbose", "-c", sql]))
}

/// The SQLSTATE of a psql run with `VERBOSITY=verbose` ("" when it
/// succeeded).
pub fn sqlstate_of(out: &std::process::Output) -> String {
    if out.status.success() {
        return String::new();
    }
    // Verbose errors read "ERROR:  42P01: ...".
    let err = String::from_utf8_lossy(&out.stderr);
    err.split("ERROR:")
        .nth(1)
        .and_then(|rest| rest.trim().split(':').next())
        .unwrap_or_else(|| panic!("no SQLSTATE in: {err}"))
        .to_string()
}

/// Runs the client script `tests/clients/{script}` with `s`'s PostgreSQL
/// and HTTP ports as arguments; it must print `ok`.
pub fn client_check(s: &Server, script: &str) {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let http_port = s.http.rsplit(':').next().expect("host:port");
    let out = Command::new("python3")
        .arg(&path)
        .arg(s.pg_port.to_string())
        .arg(http_port)
        .output()
        .expect("python3 (scripts/test.sh installs the client libraries)");
    assert_ok(s, script, &out);
}

/// A client check's run must succeed and print `ok`; else its output and
/// `s`'s log are shown.
pub fn assert_ok(s: &Server, check: &str, out: &std::process::Output) {
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{check} failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.log.lock().unwrap()
    );
}

/// A raw PostgreSQL connection past startup (trust on loopback): sends
/// `frame`, returns every byte the server answers until it closes.
pub fn raw_pg(port: u16, frame: &[u8]) -> Vec<u8> {
    raw_pg_waiting(port, frame, Duration::from_secs(10))
}

/// [`raw_pg`], waiting up to `wait` for each of the server's answers.
pub fn raw_pg_waiting(port: u16, frame: &[u8], wait: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let params = b"user\0kiln\0database\0kiln\0\0";
    let mut startup = ((8 + params.len()) as i32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608_i32.to_be_bytes());
    startup.extend_from_slice(params);
    s.write_all(&startup).unwrap();
    s.write_all(frame).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// One PostgreSQL message: its type, length and body.
pub fn pg_message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// psycopg's answers over the extended protocol, one per statement.
pub fn pg_extended(s: &Server, statements: &[&str]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/doors_check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(s.pg_port.to_string())
        .args(statements)
        .output()
        .expect("python3 with psycopg (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The pgjdbc checks' directory and the driver's classpath. Maven fetches
/// the driver once and writes its classpath to the checks' `target/`
/// (ignored by git).
pub fn jdbc_classpath() -> (&'static str, String) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/jdbc");
    let classpath_file = format!("{dir}/target/classpath.txt");
    let fetched = std::fs::read_to_string(&classpath_file).is_ok_and(|cp| {
        cp.trim()
            .split(':')
            .all(|j| std::path::Path::new(j).exists())
    });
    if !fetched {
        let out = Command::new("mvn")
            .args(["-q", "-B", "dependency:build-classpath"])
            .arg(format!("-Dmdep.outputFile={classpath_file}"))
            .current_dir(dir)
            .output()
            .expect("mvn (scripts/test.sh installs maven and a JDK)");
        assert!(
            out.status.success(),
            "mvn failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let classpath = std::fs::read_to_string(&classpath_file).unwrap();
    (dir, classpath.trim().to_string())
}

/// An Arrow stream of `rows` rows of a table `(ts TIMESTAMP, user_id
/// BIGINT, url VARCHAR)` whose `url` is a dictionary of the one value `url`.
pub fn dictionary_ipc(url: String, rows: usize) -> Vec<u8> {
    ipc(&dictionary_batch(url, rows))
}

/// The rows of [`dictionary_ipc`] as a Parquet file whose `url` pages are
/// dictionary-encoded and which stores no Arrow schema, as writers other
/// than Arrow's write it: nothing says to read `url` as a dictionary.
pub fn dictionary_parquet(url: String, rows: usize) -> Vec<u8> {
    use parquet::arrow::{ArrowWriter, arrow_writer::ArrowWriterOptions};
    let batch = dictionary_batch(url, rows);
    let opts = ArrowWriterOptions::new().with_skip_arrow_metadata(true);
    let mut file = vec![];
    let mut w = ArrowWriter::try_new_with_options(&mut file, batch.schema(), opts).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    file
}

/// A Parquet file of one `amount` column in one GZIP data page, whose
/// header declares the size of the random values it was written with,
/// and whose bytes are then replaced by gzip members of zeros that
/// inflate to at least `inflated` bytes: a reader that inflates the page
/// whole allocates them all.
pub fn gzip_bomb_parquet(inflated: usize) -> Vec<u8> {
    use arrow::array::Float64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, GzipLevel};
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    const MEMBER: usize = 16 << 20;
    let mut gz = flate2::write::GzEncoder::new(vec![], flate2::Compression::best());
    gz.write_all(&vec![0; MEMBER]).unwrap();
    let bomb = gz.finish().unwrap().repeat(inflated.div_ceil(MEMBER));
    // Random values do not compress: the page takes more than the bomb.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let values = (0..bomb.len() / 8 + 4096).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f64::from_bits(x >> 2)
    });
    let schema = Arc::new(Schema::new(vec![Field::new(
        "amount",
        DataType::Float64,
        false,
    )]));
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(values.collect::<Float64Array>())],
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::GZIP(GzipLevel::default()))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_data_page_size_limit(usize::MAX)
        .set_data_page_row_count_limit(usize::MAX)
        .build();
    let mut file = vec![];
    let mut w = ArrowWriter::try_new(&mut file, schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    let meta = w.close().unwrap().row_group(0).column(0).clone();
    let header = meta.data_page_offset() as usize;
    let page = header
        + file[header..]
            .windows(3)
            .position(|w| w == b"\x1f\x8b\x08")
            .unwrap();
    let end = header + meta.compressed_size() as usize;
    assert!(end - page >= bomb.len(), "{} < {}", end - page, bomb.len());
    file[page..page + bomb.len()].copy_from_slice(&bomb);
    file
}

fn dictionary_batch(url: String, rows: usize) -> arrow::array::RecordBatch {
    use arrow::array::{DictionaryArray, Int32Array, Int64Array, StringArray};
    use arrow::array::{TimestampMicrosecondArray, types::Int32Type};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let url_type = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
        Field::new("user_id", DataType::Int64, false),
        Field::new("url", url_type, true),
    ]));
    let urls = DictionaryArray::<Int32Type>::new(
        Int32Array::from(vec![0; rows]),
        std::sync::Arc::new(StringArray::from(vec![url])),
    );
    arrow::array::RecordBatch::try_new(
        schema,
        vec![
            std::sync::Arc::new(TimestampMicrosecondArray::from(vec![
                1_777_680_000_000_000;
                rows
            ])),
            std::sync::Arc::new(Int64Array::from(vec![2; rows])),
            std::sync::Arc::new(urls),
        ],
    )
    .unwrap()
}

/// An Arrow stream of one column, `amount`, of `rows` rows and no values.
pub fn null_ipc(rows: usize) -> Vec<u8> {
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
        "amount",
        DataType::Null,
        true,
    )]));
    let column = arrow::array::new_null_array(&DataType::Null, rows);
    ipc(&arrow::array::RecordBatch::try_new(schema, vec![column]).unwrap())
}

/// `batch` as an Arrow IPC stream.
pub fn ipc(batch: &arrow::array::RecordBatch) -> Vec<u8> {
    let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    w.into_inner().unwrap()
}
