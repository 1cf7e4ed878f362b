use super::*;

#[test]
fn a_final_401_says_whether_the_credentials_or_their_token_fell_short() {
    use super::super::Refusal::*;
    assert_eq!(refusal(false, false), NoCredentials);
    assert_eq!(refusal(false, true), NoCredentials);
    assert_eq!(refusal(true, false), CredentialsRefused);
    assert_eq!(refusal(true, true), NotGranted);
    let e = PullError::Unauthorized {
        repo: "r.io/a/b".into(),
        why: NotGranted,
    };
    assert_eq!(
        e.to_string(),
        "401 unauthorized for r.io/a/b (the registry's token for the credentials of imagePullSecrets does not grant pulling it)"
    );
}

#[test]
fn a_token_realm_must_be_https_or_the_insecure_registry_itself() {
    let url = |s: &str| reqwest::Url::parse(s).unwrap();
    assert!(realm_allowed(&url("https://auth.example/token"), "https://r.example").is_ok());
    assert!(realm_allowed(&url("https://auth.example/token"), "http://r.example").is_ok());
    assert!(realm_allowed(&url("http://r.example:5000/token"), "http://r.example:5000").is_ok());
    for (realm, origin) in [
        // Plain HTTP elsewhere: Basic credentials would go in clear.
        ("http://auth.example/token", "https://r.example"),
        ("http://auth.example/token", "http://r.example"),
        ("http://r.example:5001/token", "http://r.example:5000"),
        ("ftp://r.example/token", "http://r.example"),
        ("file:///etc/passwd", "http://r.example"),
    ] {
        let e = realm_allowed(&url(realm), origin).unwrap_err();
        assert!(e.contains("not an https:// URL"), "{realm}: {e}");
    }
}

#[test]
fn a_tls_error_is_found_inside_nested_io_errors() {
    let unknown = || rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
    // As the connector of reqwest returns a refused certificate.
    let nested = std::io::Error::other(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        unknown(),
    ));
    assert_eq!(tls_error(&nested), Some(&unknown()));
    assert_eq!(tls_error(&unknown()), Some(&unknown()));
    let plain = std::io::Error::other(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert_eq!(tls_error(&plain), None);
}
