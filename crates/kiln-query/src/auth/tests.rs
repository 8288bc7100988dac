use std::sync::Arc;

use kiln_storage::ManualClock;

use super::*;

fn open(dir: &Path) -> (Auth, Arc<ManualClock>) {
    let clock = ManualClock::new(1_000_000_000_000_000_000);
    (Auth::open(dir, clock.clone()).unwrap(), clock)
}

fn run(auth: &Auth, by: Option<&str>, sql: &str) -> Result<AccountOutput> {
    let stmt = statement::parse(sql).expect("an account statement")?;
    auth.execute(by, stmt)
}

#[test]
fn statements_parse_and_passwords_are_redacted() {
    assert!(statement::parse("SELECT 1").is_none());
    assert!(statement::parse("CREATE TABLE t (a INT)").is_none());
    assert!(statement::parse("show timezone").is_none());
    let s = statement::parse("create user Bob with password 'pw''s' superuser;")
        .unwrap()
        .unwrap();
    assert_eq!(
        s,
        Account::CreateUser {
            name: "bob".into(),
            if_not_exists: false,
            password: Some(Secret("pw's".into())),
            admin: Some(true),
        }
    );
    let s = statement::parse("GRANT SELECT, INSERT ON TABLE public.events, \"Logs\" TO bob, ann")
        .unwrap()
        .unwrap();
    assert_eq!(
        s,
        Account::Grant {
            grant: true,
            privileges: Privileges::ALL,
            on: Target::Tables(vec!["events".into(), "Logs".into()]),
            users: vec!["bob".into(), "ann".into()],
        }
    );
    let s = statement::parse("REVOKE ALL PRIVILEGES ON ALL TABLES IN SCHEMA public FROM bob")
        .unwrap()
        .unwrap();
    assert!(matches!(
        s,
        Account::Grant {
            grant: false,
            on: Target::AllTables,
            ..
        }
    ));
    let s = statement::parse("CREATE TOKEN ci FOR bob EXPIRES IN '2 days'")
        .unwrap()
        .unwrap();
    assert!(
        matches!(s, Account::CreateToken { expires: Some(Expiry::In(d)), .. } if d.as_secs() == 172_800)
    );

    let redacted = statement::redact("ALTER USER bob PASSWORD 'hunter2'");
    assert!(!redacted.contains("hunter2"), "{redacted}");
    assert!(redacted.contains("'***'"), "{redacted}");
    assert_eq!(statement::redact("SELECT 'hunter2'"), "SELECT 'hunter2'");

    // No error quotes the password it could not use.
    let e = statement::parse("CREATE USER bob PASSWORD 'hunter2' 'again'")
        .unwrap()
        .unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(e.to_string().contains("a string"), "{e}");
    let e = statement::parse("CREATE USER bob PASSWORD 'x'; SELECT 1")
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("sent alone"), "{e}");
}

#[test]
fn privileges_are_checked_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, _) = open(dir.path());
    // Without a password there is no admin to turn authentication on with.
    assert!(auth.enable(None).is_err());
    auth.enable(Some("admin-pw")).unwrap();
    assert!(auth.enabled());
    run(&auth, Some(ADMIN), "CREATE USER reader PASSWORD 'r-pw'").unwrap();
    run(&auth, Some(ADMIN), "GRANT SELECT ON events TO reader").unwrap();

    auth.authorize("reader", Access::Read("events")).unwrap();
    let e = auth.authorize("reader", Access::Read("other")).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::PermissionDenied);
    assert!(auth.authorize("reader", Access::Write("events")).is_err());
    assert!(
        auth.authorize("reader", Access::Admin("CREATE TABLE"))
            .is_err()
    );
    // A reader may not manage users, but may change their own password.
    let e = run(&auth, Some("reader"), "CREATE USER x PASSWORD 'y'").unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::PermissionDenied);
    assert!(run(&auth, Some("reader"), "ALTER USER reader SUPERUSER").is_err());
    run(&auth, Some("reader"), "ALTER USER reader PASSWORD 'new-pw'").unwrap();
    assert_eq!(auth.counters.denied.load(Ordering::Relaxed), 5);

    assert!(auth.login_password("reader", "r-pw").is_err());
    assert_eq!(&*auth.login_password("reader", "new-pw").unwrap(), "reader");
    let e = auth.login_password("nobody", "x").unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::AuthFailed);

    // The last admin cannot be dropped or demoted.
    assert!(run(&auth, Some(ADMIN), "ALTER USER admin NOSUPERUSER").is_err());
    assert!(run(&auth, None, "DROP USER admin").is_err());

    // Everything is in the file, and the file holds no password.
    let text = std::fs::read_to_string(dir.path().join(USERS_FILE)).unwrap();
    assert!(
        !text.contains("new-pw") && !text.contains("admin-pw"),
        "{text}"
    );
    drop(auth);
    let (auth, _) = open(dir.path());
    auth.enable(None).unwrap();
    auth.authorize("reader", Access::Read("events")).unwrap();
    assert!(auth.login_password("reader", "new-pw").is_ok());
    run(&auth, Some(ADMIN), "REVOKE SELECT ON events FROM reader").unwrap();
    assert!(auth.authorize("reader", Access::Read("events")).is_err());
    run(&auth, Some(ADMIN), "GRANT ALL ON ALL TABLES TO reader").unwrap();
    auth.authorize("reader", Access::Write("anything")).unwrap();
}

#[test]
fn tokens_expire_and_are_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, clock) = open(dir.path());
    auth.enable(Some("pw")).unwrap();
    run(&auth, None, "CREATE USER bot PASSWORD 'b'").unwrap();
    let token = |out: AccountOutput| match out {
        AccountOutput::Rows(b) => b
            .column(2)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .value(0)
            .to_string(),
        other => panic!("{other:?}"),
    };
    let short = token(run(&auth, None, "CREATE TOKEN short FOR bot EXPIRES IN '1h'").unwrap());
    let long = token(run(&auth, None, "CREATE TOKEN long FOR bot").unwrap());
    assert!(short.starts_with(TOKEN_PREFIX));
    assert_eq!(&*auth.login_token(&short).unwrap(), "bot");
    clock.advance(3_600_000_000_001);
    let e = auth.login_token(&short).unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");
    assert!(auth.login_token(&long).is_ok());
    run(&auth, None, "DROP TOKEN long").unwrap();
    assert!(auth.login_token(&long).is_err());
    assert!(auth.login_token("kiln_made_up").is_err());
    // The file keeps hashes only.
    let text = std::fs::read_to_string(dir.path().join(USERS_FILE)).unwrap();
    assert!(!text.contains(&short[5..]), "{text}");
    // A dropped user's tokens go with them.
    let again = token(run(&auth, None, "CREATE TOKEN again FOR bot").unwrap());
    run(&auth, None, "DROP USER bot").unwrap();
    assert!(auth.login_token(&again).is_err());
}

#[test]
fn unknown_users_get_a_stable_salt_and_no_match() {
    let dir = tempfile::tempdir().unwrap();
    let (auth, _) = open(dir.path());
    let (a, exists) = auth.scram_verifier("ghost");
    assert!(!exists);
    assert_eq!(auth.scram_verifier("ghost").0.salt, a.salt);
    assert_ne!(auth.scram_verifier("other").0.salt, a.salt);
    assert!(!a.matches(""));
}
