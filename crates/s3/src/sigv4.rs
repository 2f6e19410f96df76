//! AWS Signature Version 4 for S3 requests (header form, the payload's SHA-256 signed).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::macros::format_description;

/// An access key. `Debug` never shows the secret or the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// URI-encodes as SigV4 wants: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX`, and `/` too
/// unless `keep_slash`.
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char);
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// What is signed of one request.
pub struct Request<'a> {
    pub method: &'a str,
    /// The path as sent (already URI-encoded, starting with `/`).
    pub path: &'a str,
    /// Query parameters, not encoded.
    pub query: &'a [(String, String)],
    /// Headers besides the ones signing adds (`x-amz-date`, `x-amz-content-sha256`,
    /// `x-amz-security-token`); `host` among them. Lowercase names.
    pub headers: &'a [(String, String)],
    pub payload_sha256: &'a str,
}

/// The canonical query string of `query`.
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The headers to send: `request`'s and the signing ones, with `authorization`.
pub fn sign(
    request: &Request<'_>,
    credentials: &Credentials,
    region: &str,
    now: OffsetDateTime,
) -> Vec<(String, String)> {
    let amz_date = now
        .format(format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_default();
    let date = &amz_date[..8];
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    headers.push((
        "x-amz-content-sha256".into(),
        request.payload_sha256.to_string(),
    ));
    headers.push(("x-amz-date".into(), amz_date.clone()));
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token".into(), token.clone()));
    }
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed_headers = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        request.path,
        canonical_query(request.query),
        canonical_headers,
        signed_headers,
        request.payload_sha256
    );
    let scope = format!("{date}/{region}/s3/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let key = ["aws4_request", "s3", region, date].iter().rev().fold(
        format!("AWS4{}", credentials.secret_access_key).into_bytes(),
        |key, part| hmac(&key, part.as_bytes()),
    );
    let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    headers.push((
        "authorization".into(),
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    headers
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn example() -> Credentials {
        // The example key of AWS's Signature Version 4 documentation.
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    fn signature(headers: &[(String, String)]) -> String {
        let auth = &headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .unwrap()
            .1;
        auth.rsplit("Signature=").next().unwrap().to_string()
    }

    // The examples of "Signature Calculations for the Authorization Header" (S3 API
    // reference, "Examples: Signature Calculations").
    #[test]
    fn get_object_signs_as_the_documentation_example() {
        let headers = sign(
            &Request {
                method: "GET",
                path: "/test.txt",
                query: &[],
                headers: &[
                    ("host".into(), "examplebucket.s3.amazonaws.com".into()),
                    ("range".into(), "bytes=0-9".into()),
                ],
                payload_sha256: &sha256_hex(b""),
            },
            &example(),
            "us-east-1",
            datetime!(2013-05-24 00:00:00 UTC),
        );
        assert_eq!(
            signature(&headers),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn list_objects_signs_as_the_documentation_example() {
        let headers = sign(
            &Request {
                method: "GET",
                path: "/",
                query: &[
                    ("max-keys".into(), "2".into()),
                    ("prefix".into(), "J".into()),
                ],
                headers: &[("host".into(), "examplebucket.s3.amazonaws.com".into())],
                payload_sha256: &sha256_hex(b""),
            },
            &example(),
            "us-east-1",
            datetime!(2013-05-24 00:00:00 UTC),
        );
        assert_eq!(
            signature(&headers),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        );
        let auth = &headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .unwrap()
            .1;
        assert!(auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        ));
    }

    #[test]
    fn secrets_stay_out_of_debug_and_names_are_encoded() {
        let mut c = example();
        c.session_token = Some("s3cr3t-session".into());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("EXAMPLEKEY") && !shown.contains("s3cr3t"),
            "{shown}"
        );
        assert_eq!(uri_encode("a b/c~d:e", true), "a%20b/c~d%3Ae");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
    }
}
