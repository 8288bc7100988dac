use super::*;

/// A self-signed certificate for `localhost` with serial `serial`, and its key,
/// written as PEM files in `dir`.
fn write_cert(dir: &Path, name: &str, serial: u64) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    params.serial_number = Some(serial.into());
    let cert = params.self_signed(&key).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn config(cert: Option<&Path>, key: Option<&Path>, required: bool) -> TlsConfig {
    TlsConfig {
        tls_cert: cert.map(Path::to_path_buf),
        tls_key: key.map(Path::to_path_buf),
        tls_required: required,
    }
}

fn error(config: &TlsConfig) -> String {
    Tls::from_config(config).unwrap_err().to_string()
}

#[test]
fn without_flags_there_is_no_tls() {
    assert!(
        Tls::from_config(&config(None, None, false))
            .unwrap()
            .is_none()
    );
}

#[test]
fn cert_and_key_go_together_and_required_needs_them() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_cert(dir.path(), "a", 1);
    assert!(error(&config(Some(&cert), None, false)).contains("--tls-cert needs --tls-key"));
    assert!(error(&config(None, Some(&key), false)).contains("--tls-key needs --tls-cert"));
    assert!(error(&config(None, None, true)).contains("--tls-required needs --tls-cert"));
    let tls = Tls::from_config(&config(Some(&cert), Some(&key), true))
        .unwrap()
        .unwrap();
    assert!(tls.required);
}

#[test]
fn unreadable_or_invalid_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_cert(dir.path(), "a", 1);
    let (_, other_key) = write_cert(dir.path(), "b", 2);
    let missing = dir.path().join("missing.pem");
    let e = error(&config(Some(&missing), Some(&key), false));
    assert!(
        e.starts_with(&format!("--tls-cert {}:", missing.display())),
        "{e}"
    );

    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let e = error(&config(Some(&garbage), Some(&key), false));
    assert!(
        e.contains(&format!("--tls-cert {}", garbage.display())),
        "{e}"
    );
    // A certificate where the key should be.
    let e = error(&config(Some(&cert), Some(&cert), false));
    assert!(e.contains(&format!("--tls-key {}", cert.display())), "{e}");
    let e = error(&config(Some(&cert), Some(&other_key), false));
    assert!(e.contains("does not match"), "{e}");
    // Key bytes never appear in an error.
    let pem = std::fs::read_to_string(&other_key).unwrap();
    let body = pem.lines().nth(1).unwrap();
    assert!(!e.contains(body));
}

#[test]
fn reload_swaps_the_certificate_and_a_failed_one_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_cert(dir.path(), "live", 1);
    let tls = Tls::from_config(&config(Some(&cert), Some(&key), false))
        .unwrap()
        .unwrap();
    let first = tls.current_chain();

    let (new_cert, new_key) = write_cert(dir.path(), "next", 2);
    std::fs::rename(&new_cert, &cert).unwrap();
    std::fs::rename(&new_key, &key).unwrap();
    tls.reload().unwrap();
    let second = tls.current_chain();
    assert_ne!(first, second);

    std::fs::write(&key, "broken").unwrap();
    let e = tls.reload().unwrap_err().to_string();
    assert!(e.contains("--tls-key"), "{e}");
    assert_eq!(tls.current_chain(), second);
}
