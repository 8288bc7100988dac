//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL does it, server side.
//!
//! Why Kiln's own rather than pgwire's: pgwire's SCRAM server needs the
//! *salted password*, which is as good as the password to a SCRAM client,
//! so a copy of Kiln's user file would let anyone log in. Kiln keeps what
//! PostgreSQL keeps, the [`Verifier`] (salt, iterations, StoredKey and
//! ServerKey): it checks a client's proof and proves itself to the client,
//! but cannot be used to log in. The same verifier checks HTTP Basic
//! passwords ([`Verifier::matches`]).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};

/// PBKDF2 iterations for new passwords (PostgreSQL's default).
pub const ITERATIONS: u32 = 4096;

/// What a password is kept as: enough to check a SCRAM proof or a
/// password, not enough to log in.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verifier {
    /// Base64 of the random salt.
    pub salt: String,
    pub iterations: u32,
    /// Base64 of SHA-256(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: String,
    /// Base64 of HMAC(SaltedPassword, "Server Key").
    pub server_key: String,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(..)")
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, data).as_ref().to_vec()
}

fn sha256(data: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA256, data).as_ref().to_vec()
}

/// Hi(password, salt, i) of RFC 5802: PBKDF2-HMAC-SHA-256.
fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    let iterations = std::num::NonZeroU32::new(iterations.max(1)).expect("at least one");
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password.as_bytes(),
        &mut out,
    );
    out
}

/// Constant-time equality (a proof or key compared byte by byte would
/// tell an attacker how many leading bytes were right).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Verifier {
    /// The verifier of `password` with `salt`.
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Self {
            salt: B64.encode(salt),
            iterations,
            stored_key: B64.encode(sha256(&client_key)),
            server_key: B64.encode(hmac_sha256(&salted, b"Server Key")),
        }
    }

    /// Whether `password` is the password this verifier was made from.
    pub fn matches(&self, password: &str) -> bool {
        let Ok(salt) = B64.decode(&self.salt) else {
            return false;
        };
        let candidate = Self::new(password, &salt, self.iterations);
        same(candidate.stored_key.as_bytes(), self.stored_key.as_bytes())
    }
}

/// A SCRAM message the server cannot use.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// The client's first message, parsed.
#[derive(Debug)]
pub struct ClientFirst {
    /// The message without its GS2 header (`n=...,r=...`).
    bare: String,
    /// The GS2 header (`n,,`), echoed base64-encoded in the final message.
    gs2: String,
    nonce: String,
}

impl ClientFirst {
    /// Parses `n,,n=user,r=nonce`. Channel binding (`p=`) is not offered,
    /// so a client asking for it is refused; `y,,` (the client could bind
    /// but thinks the server cannot) is accepted, as PostgreSQL does
    /// without TLS channel binding.
    pub fn parse(message: &[u8]) -> Result<Self, Malformed> {
        let text = std::str::from_utf8(message).map_err(|_| Malformed("not UTF-8"))?;
        let (flag, rest) = text.split_once(',').ok_or(Malformed("no GS2 header"))?;
        if !matches!(flag, "n" | "y") {
            return Err(Malformed("channel binding is not supported"));
        }
        let (authzid, bare) = rest.split_once(',').ok_or(Malformed("no GS2 header"))?;
        let nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(Malformed("no client nonce"))?;
        Ok(Self {
            gs2: format!("{flag},{authzid},"),
            bare: bare.to_string(),
            nonce: nonce.to_string(),
        })
    }
}

/// The exchange after the server's first message: waits for the client's
/// proof.
#[derive(Debug)]
pub struct Exchange {
    client_first_bare: String,
    server_first: String,
    gs2: String,
    nonce: String,
    verifier: Verifier,
}

impl Exchange {
    /// Answers `first` for a user whose password `verifier` keeps, with
    /// `server_nonce` (random, printable, no comma) appended to the
    /// client's. Returns the exchange and the server-first message.
    pub fn start(first: ClientFirst, verifier: Verifier, server_nonce: &str) -> (Self, String) {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!("r={nonce},s={},i={}", verifier.salt, verifier.iterations);
        let exchange = Self {
            client_first_bare: first.bare,
            server_first: server_first.clone(),
            gs2: first.gs2,
            nonce,
            verifier,
        };
        (exchange, server_first)
    }

    /// Checks the client's final message (`c=...,r=...,p=proof`): `Ok` with
    /// the server-final message (`v=signature`) when the proof is right,
    /// `Err` when it is wrong or malformed.
    pub fn finish(&self, message: &[u8]) -> Result<String, Malformed> {
        let text = std::str::from_utf8(message).map_err(|_| Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(Malformed("no client proof"))?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                binding = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            }
        }
        if binding != Some(B64.encode(&self.gs2).as_str()) {
            return Err(Malformed("channel binding mismatch"));
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(Malformed("nonce mismatch"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| Malformed("proof is not base64"))?;
        let stored_key = B64
            .decode(&self.verifier.stored_key)
            .map_err(|_| Malformed("stored key"))?;
        let server_key = B64
            .decode(&self.verifier.server_key)
            .map_err(|_| Malformed("server key"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(Malformed("wrong proof"));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !same(&sha256(&client_key), &stored_key) {
            return Err(Malformed("wrong proof"));
        }
        let server_signature = hmac_sha256(&server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange (user "user", password "pencil").
    #[test]
    fn rfc_7677_exchange() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let verifier = Verifier::new("pencil", &salt, 4096);
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let (exchange, server_first) =
            Exchange::start(first, verifier.clone(), "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let final_msg = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            exchange.finish(final_msg.as_bytes()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        // One bit of the proof wrong: refused.
        let wrong = final_msg.replace("p=dHz", "p=dHy");
        assert!(exchange.finish(wrong.as_bytes()).is_err());
        // The verifier checks plain passwords too (HTTP Basic).
        assert!(verifier.matches("pencil"));
        assert!(!verifier.matches("pencil "));
    }

    #[test]
    fn channel_binding_and_bad_messages_are_refused() {
        assert!(ClientFirst::parse(b"p=tls-server-end-point,,n=u,r=x").is_err());
        assert!(ClientFirst::parse(b"n,,n=u").is_err());
        assert!(ClientFirst::parse(&[0xff, 0xfe]).is_err());
        let verifier = Verifier::new("pw", b"salt", 16);
        let first = ClientFirst::parse(b"n,,n=u,r=abc").unwrap();
        let (exchange, _) = Exchange::start(first, verifier, "def");
        assert!(exchange.finish(b"c=biws,r=abcXXX,p=AAAA").is_err());
        assert!(exchange.finish(b"c=biws,r=abcdef").is_err());
    }
}
