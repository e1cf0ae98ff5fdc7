//! Authentication (R-A2): bearer API keys stored hashed, each bound to one principal;
//! optional JWT verification for platforms that already issue tokens.
//!
//! An API key reads `berth_<key id>_<secret>`: the key id (8 random bytes, hex) is the
//! public half used to find the row; the secret (32 random bytes, hex) is stored only as
//! its SHA-256 and compared in constant time. Keys live in their own small SQLite file
//! (`keys.sqlite` in the data directory), never in the Catalog seam: they are the
//! server's concern, not the session store's. The tenant of every request comes from
//! the key (or the token's claims), never from the path or the body.

use berth_core::{Error, ProjectId, Result, TenantId, UserId};
use berth_service::{Principal, Role};
use rand::RngCore;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

/// The key file's name inside a data directory.
pub const KEYS_FILE: &str = "keys.sqlite";
/// Every API key starts with this.
pub const KEY_PREFIX: &str = "berth_";
const KEY_ID_BYTES: usize = 8;
const KEY_SECRET_BYTES: usize = 32;
const LABEL_BYTES_MAX: usize = 200;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    secret_sha256 TEXT NOT NULL,
    tenant TEXT NOT NULL,
    user_id TEXT NOT NULL,
    project TEXT,
    role TEXT NOT NULL,
    label TEXT,
    created_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
) STRICT;
";

/// What `berth keys list` shows: never the secret or its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    pub key_id: String,
    pub principal: Principal,
    pub label: Option<String>,
    pub created_at_ms: u64,
    pub revoked_at_ms: Option<u64>,
}

/// The API keys of one server, in a SQLite file (or in memory for tests).
#[derive(Clone)]
pub struct KeyStore {
    connection: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyStore")
    }
}

/// SQLite failures become `Unavailable` without the SQL text or the file path.
fn db_error(operation: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |error| {
        tracing::error!(operation, %error, "key store error");
        Error::Unavailable { reason: format!("key store: {operation} failed") }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|duration| duration.as_millis() as u64)
        .unwrap_or(0)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl KeyStore {
    /// Opens (creating, mode 0600) the key file at `path`.
    pub fn open(path: &Path) -> Result<KeyStore> {
        if !path.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .or_else(|error| match error.kind() {
                    std::io::ErrorKind::AlreadyExists => std::fs::File::open(path),
                    _ => Err(error),
                })
                .map_err(|error| Error::io("create key file", &error))?;
        }
        let connection = Connection::open(path).map_err(db_error("open"))?;
        KeyStore::init(connection)
    }

    /// A key store that lives only as long as the process (tests, `memory:` stores).
    pub fn in_memory() -> Result<KeyStore> {
        KeyStore::init(Connection::open_in_memory().map_err(db_error("open"))?)
    }

    fn init(connection: Connection) -> Result<KeyStore> {
        connection.busy_timeout(std::time::Duration::from_secs(5)).map_err(db_error("configure"))?;
        connection.pragma_update(None, "journal_mode", "WAL").map_err(db_error("configure"))?;
        connection.pragma_update(None, "synchronous", "FULL").map_err(db_error("configure"))?;
        connection.execute_batch(SCHEMA).map_err(db_error("create schema"))?;
        Ok(KeyStore { connection: Arc::new(Mutex::new(connection)) })
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates a key for `principal`; returns its info and the token (shown once).
    pub fn create(&self, principal: &Principal, label: Option<&str>) -> Result<(KeyInfo, String)> {
        if let Some(label) = label {
            if label.len() > LABEL_BYTES_MAX || label.chars().any(char::is_control) {
                return Err(Error::invalid("label", format!("at most {LABEL_BYTES_MAX} bytes, no control characters")));
            }
        }
        let mut id_bytes = [0u8; KEY_ID_BYTES];
        let mut secret = [0u8; KEY_SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut id_bytes);
        rand::rngs::OsRng.fill_bytes(&mut secret);
        let key_id = hex::encode(id_bytes);
        let secret_hex = hex::encode(secret);
        let info = KeyInfo {
            key_id: key_id.clone(),
            principal: principal.clone(),
            label: label.map(str::to_owned),
            created_at_ms: now_ms(),
            revoked_at_ms: None,
        };
        self.connection()
            .execute(
                "INSERT INTO api_keys (key_id, secret_sha256, tenant, user_id, project, role, label, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    key_id,
                    sha256_hex(secret_hex.as_bytes()),
                    principal.tenant.as_str(),
                    principal.user.as_str(),
                    principal.project.as_ref().map(|p| p.as_str().to_owned()),
                    principal.role.as_str(),
                    info.label,
                    info.created_at_ms as i64,
                ],
            )
            .map_err(db_error("insert key"))?;
        Ok((info, format!("{KEY_PREFIX}{key_id}_{secret_hex}")))
    }

    pub fn list(&self, tenant: Option<&TenantId>) -> Result<Vec<KeyInfo>> {
        let connection = self.connection();
        let mut statement = connection
            .prepare(
                "SELECT key_id, tenant, user_id, project, role, label, created_at_ms, revoked_at_ms
                 FROM api_keys WHERE ?1 IS NULL OR tenant = ?1 ORDER BY created_at_ms, key_id",
            )
            .map_err(db_error("list keys"))?;
        let rows = statement
            .query_map(params![tenant.map(|t| t.as_str().to_owned())], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                    row.get::<_, String>(4)?,
                    row.get::<_, Option<String>>(5)?,
                    row.get::<_, i64>(6)?,
                    row.get::<_, Option<i64>>(7)?,
                ))
            })
            .map_err(db_error("list keys"))?;
        let mut keys = Vec::new();
        for row in rows {
            let (key_id, tenant, user, project, role, label, created, revoked) = row.map_err(db_error("list keys"))?;
            keys.push(KeyInfo {
                key_id,
                principal: principal_of(&tenant, &user, project.as_deref(), &role)?,
                label,
                created_at_ms: created as u64,
                revoked_at_ms: revoked.map(|ms| ms as u64),
            });
        }
        Ok(keys)
    }

    /// Revokes a key; `false` if no such (unrevoked) key exists.
    pub fn revoke(&self, key_id: &str) -> Result<bool> {
        let changed = self
            .connection()
            .execute(
                "UPDATE api_keys SET revoked_at_ms = ?2 WHERE key_id = ?1 AND revoked_at_ms IS NULL",
                params![key_id, now_ms() as i64],
            )
            .map_err(db_error("revoke key"))?;
        Ok(changed == 1)
    }

    /// No key at all (revoked ones count): the first start of a server.
    pub fn is_empty(&self) -> Result<bool> {
        let count: i64 = self
            .connection()
            .query_row("SELECT COUNT(*) FROM api_keys", [], |row| row.get(0))
            .map_err(db_error("count keys"))?;
        Ok(count == 0)
    }

    /// The principal of a valid, unrevoked API key; `None` for anything else. One
    /// indexed SQLite lookup with a cached statement (microseconds).
    pub fn verify(&self, token: &str) -> Result<Option<Principal>> {
        let Some((key_id, secret)) = split_token(token) else {
            return Ok(None);
        };
        let connection = self.connection();
        let row = connection
            .prepare_cached(
                "SELECT secret_sha256, tenant, user_id, project, role, revoked_at_ms
                 FROM api_keys WHERE key_id = ?1",
            )
            .and_then(|mut statement| {
                statement
                    .query_row(params![key_id], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, Option<String>>(3)?,
                            row.get::<_, String>(4)?,
                            row.get::<_, Option<i64>>(5)?,
                        ))
                    })
                    .optional()
            })
            .map_err(db_error("verify key"))?;
        drop(connection);
        let presented = sha256_hex(secret.as_bytes());
        let Some((stored, tenant, user, project, role, revoked)) = row else {
            // Same work as a hit, so a miss is not faster.
            let _ = presented.as_bytes().ct_eq(&[0u8; 64][..]);
            return Ok(None);
        };
        let matches: bool = presented.as_bytes().ct_eq(stored.as_bytes()).into();
        if !matches || revoked.is_some() {
            return Ok(None);
        }
        principal_of(&tenant, &user, project.as_deref(), &role).map(Some)
    }
}

impl KeyStore {
    /// The principal of the unrevoked key `key_id` (no secret: for a caller that already
    /// verified the whole key once, such as an inspector session re-checking revocation).
    pub fn live_key_principal(&self, key_id: &str) -> Result<Option<Principal>> {
        let connection = self.connection();
        let row = connection
            .prepare_cached(
                "SELECT tenant, user_id, project, role FROM api_keys WHERE key_id = ?1 AND revoked_at_ms IS NULL",
            )
            .and_then(|mut statement| {
                statement
                    .query_row(params![key_id], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, Option<String>>(2)?,
                            row.get::<_, String>(3)?,
                        ))
                    })
                    .optional()
            })
            .map_err(db_error("look up key"))?;
        drop(connection);
        row.map(|(tenant, user, project, role)| principal_of(&tenant, &user, project.as_deref(), &role)).transpose()
    }
}

/// The key id (public half) of a well-formed API key.
pub fn key_id_of(token: &str) -> Option<&str> {
    split_token(token).map(|(key_id, _)| key_id)
}

fn split_token(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(KEY_PREFIX)?;
    let (key_id, secret) = rest.split_once('_')?;
    let hex_of = |text: &str, bytes: usize| text.len() == bytes * 2 && text.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_of(key_id, KEY_ID_BYTES) && hex_of(secret, KEY_SECRET_BYTES)).then_some((key_id, secret))
}

fn principal_of(tenant: &str, user: &str, project: Option<&str>, role: &str) -> Result<Principal> {
    Ok(Principal {
        tenant: TenantId::parse(tenant)?,
        user: UserId::parse(user)?,
        project: project.map(ProjectId::parse).transpose()?,
        role: Role::parse(role)?,
    })
}

/// JWT verification settings (`berth serve --jwt-…`).
#[derive(Clone, Debug, Default)]
pub struct JwtConfig {
    /// HS256 shared secret.
    pub hs256_secret: Option<Vec<u8>>,
    /// RS256 public key (PEM).
    pub rs256_public_pem: Option<Vec<u8>>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

/// The claims berth reads. `tenant` and `sub` are required; `role` defaults to `user`.
#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    tenant: String,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    project: Option<String>,
}

#[derive(Clone)]
pub struct JwtVerifier {
    key: jsonwebtoken::DecodingKey,
    validation: jsonwebtoken::Validation,
}

impl JwtVerifier {
    pub fn new(config: &JwtConfig) -> Result<Option<JwtVerifier>> {
        use jsonwebtoken::{Algorithm, DecodingKey, Validation};
        let (key, algorithm) = match (&config.hs256_secret, &config.rs256_public_pem) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(Error::invalid("jwt", "give either an HS256 secret or an RS256 public key, not both"))
            }
            (Some(secret), None) => (DecodingKey::from_secret(secret), Algorithm::HS256),
            (None, Some(pem)) => (
                DecodingKey::from_rsa_pem(pem).map_err(|error| Error::invalid("jwt public key", error.to_string()))?,
                Algorithm::RS256,
            ),
        };
        let mut validation = Validation::new(algorithm);
        // A configured issuer or audience is required, not merely checked when present: a
        // token the identity provider minted for another audience, with `aud` left out,
        // must not pass. `nbf` is checked with the same leeway as `exp`.
        let mut required = vec!["exp", "sub"];
        required.extend(config.issuer.as_ref().map(|_| "iss"));
        required.extend(config.audience.as_ref().map(|_| "aud"));
        validation.set_required_spec_claims(&required);
        validation.validate_nbf = true;
        match &config.issuer {
            Some(issuer) => validation.set_issuer(&[issuer]),
            None => validation.iss = None,
        }
        match &config.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        Ok(Some(JwtVerifier { key, validation }))
    }

    /// The principal a valid token names; `None` for an invalid or expired token.
    pub fn verify(&self, token: &str) -> Option<Principal> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).ok()?;
        let claims = data.claims;
        principal_of(&claims.tenant, &claims.sub, claims.project.as_deref(), claims.role.as_deref().unwrap_or("user"))
            .ok()
    }
}

/// Turns an `Authorization` header into a principal.
#[derive(Clone)]
pub struct Authenticator {
    keys: KeyStore,
    jwt: Option<JwtVerifier>,
}

impl Authenticator {
    pub fn new(keys: KeyStore, jwt: Option<JwtVerifier>) -> Authenticator {
        Authenticator { keys, jwt }
    }

    pub fn keys(&self) -> &KeyStore {
        &self.keys
    }

    /// `Ok(None)` when the token is not valid (unknown, revoked, expired, malformed).
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>> {
        if token.starts_with(KEY_PREFIX) {
            // On the calling thread: a point read of a small table in WAL mode, shorter
            // than the two thread hops of the blocking pool (one per request).
            return self.keys.verify(token);
        }
        Ok(self.jwt.as_ref().and_then(|jwt| jwt.verify(token)))
    }
}

/// The bearer token of an `Authorization` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Principal {
        Principal::user(TenantId::parse("acme").unwrap(), UserId::parse("alice").unwrap(), None)
    }

    #[test]
    fn created_keys_verify_and_revoked_ones_do_not() {
        let store = KeyStore::in_memory().unwrap();
        assert!(store.is_empty().unwrap());
        let (info, token) = store.create(&alice(), Some("laptop")).unwrap();
        assert_eq!(store.verify(&token).unwrap(), Some(alice()));
        let mut wrong = token.clone();
        wrong.pop();
        wrong.push(if token.ends_with('0') { '1' } else { '0' });
        assert_eq!(store.verify(&wrong).unwrap(), None);
        assert_eq!(store.verify("berth_x_y").unwrap(), None);
        assert!(store.revoke(&info.key_id).unwrap());
        assert_eq!(store.verify(&token).unwrap(), None);
        assert!(!store.revoke(&info.key_id).unwrap());
        assert!(!store.is_empty().unwrap());
        let listed = store.list(None).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].revoked_at_ms.is_some());
    }

    #[test]
    fn only_the_hash_of_the_secret_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEYS_FILE);
        let store = KeyStore::open(&path).unwrap();
        let (_, token) = store.create(&alice(), None).unwrap();
        drop(store);
        let secret = token.rsplit('_').next().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
        }
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn jwt_hs256_claims_become_the_principal() {
        use jsonwebtoken::{encode, EncodingKey, Header};
        let config = JwtConfig {
            hs256_secret: Some(b"s3cret".to_vec()),
            issuer: Some("idp".into()),
            audience: Some("berth".into()),
            ..JwtConfig::default()
        };
        let verifier = JwtVerifier::new(&config).unwrap().unwrap();
        let exp = now_ms() / 1000 + 600;
        let claims = serde_json::json!({"sub": "alice", "tenant": "acme", "iss": "idp", "aud": "berth", "exp": exp});
        let token = encode(&Header::default(), &claims, &EncodingKey::from_secret(b"s3cret")).unwrap();
        assert_eq!(verifier.verify(&token), Some(alice()));
        let wrong_aud = serde_json::json!({"sub": "alice", "tenant": "acme", "iss": "idp", "aud": "other", "exp": exp});
        let token = encode(&Header::default(), &wrong_aud, &EncodingKey::from_secret(b"s3cret")).unwrap();
        assert_eq!(verifier.verify(&token), None);
        let token = encode(&Header::default(), &claims, &EncodingKey::from_secret(b"other")).unwrap();
        assert_eq!(verifier.verify(&token), None);
    }
}
