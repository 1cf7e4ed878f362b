//! Who may read `/metrics`: the pure half. A caller's `Authorization` header becomes a
//! bearer token or an answer at once; a TokenReview's status becomes the SubjectAccessReview
//! to ask or an answer; a SubjectAccessReview's status becomes the answer. The cluster
//! decides, as for the API server's own `/metrics`: the caller must be authenticated and
//! allowed `get` on the non-resource URL `/metrics`. `review.rs` does the asking.

use axum::http::{HeaderValue, StatusCode};
use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};

/// The path and verb a scraper must be allowed (a ClusterRole's `nonResourceURLs`).
pub const PATH: &str = "/metrics";
const VERB: &str = "get";

/// A longer bearer token is refused without a review: service account tokens are about
/// 1 KiB, and a review of a megabyte of junk would cost the API server for nothing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// What `/metrics` answers a caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The cluster authorises the caller: the metrics.
    Allowed,
    /// 401: no bearer token, a malformed or oversized one, or one the cluster does not
    /// authenticate.
    Unauthenticated(&'static str),
    /// 403: the cluster knows the caller (this user) and does not allow it `get /metrics`.
    Forbidden(String),
    /// 503: the cluster could not be asked (too many reviews at once, or a review failed);
    /// never the metrics.
    Unavailable(&'static str),
}

impl Verdict {
    pub fn status(&self) -> StatusCode {
        match self {
            Verdict::Allowed => StatusCode::OK,
            Verdict::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Verdict::Forbidden(_) => StatusCode::FORBIDDEN,
            Verdict::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The response body: why, in one line (never the token).
    pub fn message(&self) -> String {
        match self {
            Verdict::Allowed => "ok".into(),
            Verdict::Unauthenticated(why) => format!("{why}\n"),
            Verdict::Forbidden(user) => {
                format!("{user} is not allowed to {VERB} {PATH}\n")
            }
            Verdict::Unavailable(why) => format!("{why}\n"),
        }
    }

    /// Whether the verdict may be reused for the same token: the cluster's answers, not a
    /// failure to ask.
    pub fn cacheable(&self) -> bool {
        !matches!(self, Verdict::Unavailable(_))
    }
}

const NO_TOKEN: &str = "a bearer token is required (Authorization: Bearer <token>)";
pub(super) const BAD_TOKEN: &str = "the bearer token is not valid";

/// The bearer token of an `Authorization` header, or the answer without one.
pub fn bearer(header: Option<&HeaderValue>) -> Result<&str, Verdict> {
    let header = header.ok_or(Verdict::Unauthenticated(NO_TOKEN))?;
    if header.len() > MAX_TOKEN_BYTES.saturating_add("Bearer ".len()) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    let text = header
        .to_str()
        .map_err(|_| Verdict::Unauthenticated(BAD_TOKEN))?;
    let (scheme, token) = text
        .split_once(' ')
        .ok_or(Verdict::Unauthenticated(NO_TOKEN))?;
    // The scheme is case-insensitive (RFC 9110), the token one word.
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Verdict::Unauthenticated(NO_TOKEN));
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES || token.contains(char::is_whitespace) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    Ok(token)
}

/// After the TokenReview: the SubjectAccessReview to ask about the user it names, or 401.
pub fn access_review(status: Option<&TokenReviewStatus>) -> Result<SubjectAccessReview, Verdict> {
    let status = status.ok_or(Verdict::Unauthenticated(BAD_TOKEN))?;
    let user = match (status.authenticated, &status.user) {
        (Some(true), Some(user)) => user,
        _ => return Err(Verdict::Unauthenticated(BAD_TOKEN)),
    };
    let username = user.username.clone().filter(|u| !u.is_empty());
    if username.is_none() && user.groups.as_ref().is_none_or(Vec::is_empty) {
        return Err(Verdict::Unauthenticated(BAD_TOKEN));
    }
    Ok(SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: username,
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(PATH.into()),
                verb: Some(VERB.into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// After the SubjectAccessReview of `review`: allowed, or 403 naming the user.
pub fn verdict(
    review: &SubjectAccessReview,
    status: Option<&SubjectAccessReviewStatus>,
) -> Verdict {
    if status.is_some_and(|s| s.allowed && s.denied != Some(true)) {
        return Verdict::Allowed;
    }
    let user = review
        .spec
        .user
        .clone()
        .unwrap_or_else(|| "the caller".into());
    Verdict::Forbidden(crate::text::clean(&user, 256))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    fn header(text: &str) -> HeaderValue {
        HeaderValue::from_str(text).unwrap()
    }

    #[test]
    fn the_bearer_token_of_the_header_or_401() {
        assert_eq!(bearer(Some(&header("Bearer abc.def"))), Ok("abc.def"));
        assert_eq!(bearer(Some(&header("bearer  abc "))), Ok("abc"));
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Basic dXNlcjpwdw==",
            "abc",
            "Bearer a b",
        ] {
            let verdict = bearer(Some(&header(bad))).unwrap_err();
            assert_eq!(verdict.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
        }
        assert_eq!(bearer(None).unwrap_err().status(), StatusCode::UNAUTHORIZED);
        let not_text = HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
        assert_eq!(
            bearer(Some(&not_text)).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn an_oversized_token_is_refused_without_a_review() {
        let at_bound = "a".repeat(MAX_TOKEN_BYTES);
        assert_eq!(
            bearer(Some(&header(&format!("Bearer {at_bound}")))),
            Ok(at_bound.as_str())
        );
        let over = format!("Bearer {at_bound}a");
        assert_eq!(
            bearer(Some(&header(&over))),
            Err(Verdict::Unauthenticated(BAD_TOKEN))
        );
        let huge = format!("Bearer {}", "a".repeat(1 << 20));
        assert_eq!(
            bearer(Some(&header(&huge))),
            Err(Verdict::Unauthenticated(BAD_TOKEN))
        );
    }

    fn authenticated(user: UserInfo) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(true),
            user: Some(user),
            ..Default::default()
        }
    }

    #[test]
    fn an_authenticated_user_is_asked_about_get_metrics_with_all_it_is() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            uid: Some("u-1".into()),
            extra: Some([("scope".to_string(), vec!["a".to_string()])].into()),
        };
        let review = access_review(Some(&authenticated(user.clone()))).unwrap();
        assert_eq!(review.spec.user, user.username);
        assert_eq!(review.spec.groups, user.groups);
        assert_eq!(review.spec.uid, user.uid);
        assert_eq!(review.spec.extra, user.extra);
        assert_eq!(review.spec.resource_attributes, None);
        let attributes = review.spec.non_resource_attributes.unwrap();
        assert_eq!(attributes.path.as_deref(), Some("/metrics"));
        assert_eq!(attributes.verb.as_deref(), Some("get"));
    }

    #[test]
    fn a_token_the_cluster_does_not_authenticate_is_401() {
        let user = UserInfo {
            username: Some("someone".into()),
            ..Default::default()
        };
        let unauthenticated = [
            None,
            Some(TokenReviewStatus::default()),
            Some(TokenReviewStatus {
                authenticated: Some(false),
                user: Some(user.clone()),
                error: Some("token expired".into()),
                ..Default::default()
            }),
            // Authenticated as nobody: nothing to ask about.
            Some(authenticated(UserInfo::default())),
        ];
        for status in unauthenticated {
            let verdict = access_review(status.as_ref()).unwrap_err();
            assert_eq!(verdict.status(), StatusCode::UNAUTHORIZED, "{status:?}");
        }
    }

    #[test]
    fn only_an_allowed_review_is_200_and_a_refusal_names_the_user() {
        let user = UserInfo {
            username: Some("system:serviceaccount:tenant:default".into()),
            ..Default::default()
        };
        let review = access_review(Some(&authenticated(user))).unwrap();
        let status = |allowed, denied| SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        };
        assert_eq!(
            verdict(&review, Some(&status(true, None))),
            Verdict::Allowed
        );
        for answer in [
            None,
            Some(status(false, None)),
            Some(status(false, Some(true))),
            Some(status(true, Some(true))),
        ] {
            let v = verdict(&review, answer.as_ref());
            assert_eq!(v.status(), StatusCode::FORBIDDEN, "{answer:?}");
            assert!(
                v.message().contains(
                    "system:serviceaccount:tenant:default is not allowed to get /metrics"
                ),
                "{}",
                v.message()
            );
        }
    }
}
