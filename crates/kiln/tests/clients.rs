//! Client conformance: the libraries BI tools and services use, driven
//! against the real binary (scripts in `tests/clients/`, installed by
//! `scripts/test.sh`). Each script asserts results, not only the absence
//! of errors.

mod common;

use common::Server;

fn check(script: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("data"), &[]);
    common::client_check(&s, script);
}

#[test]
fn transactions_commit_roll_back_and_abort_as_postgresql_does() {
    check("transactions_check.py");
}

#[test]
fn sqlalchemy_connects_pools_and_commits() {
    check("sqlalchemy_check.py");
}

#[test]
fn errors_have_postgresql_sqlstates_on_every_door() {
    check("errors_check.py");
}

#[test]
fn server_side_cursors_describe_and_fetch_in_chunks() {
    check("cursors_check.py");
}
