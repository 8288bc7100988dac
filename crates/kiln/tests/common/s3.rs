//! A real S3-compatible server for the object-storage tests: moto's server
//! mode (PyPI `moto[server]`, installed by `scripts/test.sh`), on a free
//! loopback port, one per test that asks for it. It honours conditional
//! puts (`If-None-Match: *`), which Kiln's commits rely on.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
}

impl S3Server {
    /// Starts the server and creates `bucket`.
    pub fn start(bucket: &str) -> S3Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m moto.server (pip install 'moto[server]')");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "moto did not start on {addr}");
            std::thread::sleep(Duration::from_millis(100));
        }
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
        [
            "--storage",
            &format!("s3://{bucket}/{prefix}"),
            "--s3-endpoint",
            &self.endpoint,
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
