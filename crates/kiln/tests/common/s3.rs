//! A real S3-compatible server for the object-storage tests: moto's server
//! mode (PyPI `moto[server]`, installed by `scripts/test.sh`), on a free
//! loopback port, one per test that asks for it. It honours conditional
//! puts (`If-None-Match: *`), which Kiln's commits rely on.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
}

impl S3Server {
    /// Starts the server and creates `bucket`. Moto binds port 0 itself and
    /// its log names the port it got, so no other process (a `kiln serve`
    /// of a test running beside this one) can take the port between its
    /// choice and the bind.
    pub fn start(bucket: &str) -> S3Server {
        let mut child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 -m moto.server (pip install 'moto[server]')");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            // Keep draining after the port line so moto never blocks on a
            // full pipe.
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("Running on http://").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("moto did not report its port within 60 s");
        let server = S3Server {
            child,
            endpoint: format!("http://{addr}"),
        };
        let (status, body) = super::request(&addr, "PUT", &format!("/{bucket}"), &[], b"");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        server
    }

    /// The `kiln serve` flags that put its storage at `s3://bucket/prefix`.
    pub fn flags(&self, bucket: &str, prefix: &str) -> Vec<String> {
        Self::flags_for(&self.endpoint, bucket, prefix)
    }

    /// The same flags with another endpoint (a proxy in front of it).
    pub fn flags_for(endpoint: &str, bucket: &str, prefix: &str) -> Vec<String> {
        [
            "--storage",
            &format!("s3://{bucket}/{prefix}"),
            "--s3-endpoint",
            endpoint,
            "--s3-allow-http",
            "--s3-access-key-id",
            "test",
            "--s3-secret-access-key",
            "test",
        ]
        .map(String::from)
        .to_vec()
    }

    /// The keys under `prefix` in `bucket` (listed with boto3, which moto
    /// brings).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let script = "import boto3,sys\n\
            s3=boto3.client('s3',endpoint_url=sys.argv[1],aws_access_key_id='test',\
            aws_secret_access_key='test',region_name='us-east-1')\n\
            for p in s3.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[2],Prefix=sys.argv[3]):\n\
            \x20for o in p.get('Contents',[]): print(o['Key'])\n";
        let out = Command::new("python3")
            .args(["-c", script, &self.endpoint, bucket, prefix])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What [`FaultProxy`] does with the requests it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwards them to the server.
    None = 0,
    /// Answers `503 Slow Down`, as S3 does when throttling or failing.
    Unavailable = 1,
    /// Reads them and never answers.
    Stall = 2,
}

/// A TCP proxy in front of the S3 server that injects faults on demand.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    mode: std::sync::Arc<std::sync::atomic::AtomicU8>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

impl FaultProxy {
    pub fn start(upstream: &str) -> FaultProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let mode = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let upstream = upstream.trim_start_matches("http://").to_string();
        let (m, c) = (mode.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                c.lock().unwrap().push(client.try_clone().unwrap());
                match m.load(Ordering::SeqCst) {
                    0 => {
                        let Ok(server) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        c.lock().unwrap().push(server.try_clone().unwrap());
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    1 => {
                        std::thread::spawn(move || slow_down(client));
                    }
                    _ => {} // kept open, never answered
                }
            }
        });
        FaultProxy {
            endpoint,
            mode,
            conns,
        }
    }

    /// Switches the fault; connections already open are cut, so every
    /// request from now on sees the new behaviour.
    pub fn set(&self, fault: Fault) {
        self.mode
            .store(fault as u8, std::sync::atomic::Ordering::SeqCst);
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// Reads one request head and answers 503 Slow Down.
fn slow_down(mut s: TcpStream) {
    use std::io::{Read, Write};
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
                <Message>Please reduce your request rate.</Message></Error>";
    let _ = write!(
        s,
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
}
