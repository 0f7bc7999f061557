//! The mount prefix: where the router is nested, so every link is right.

use axum::extract::{FromRequestParts, NestedPath};
use axum::http::request::Parts;

/// The path the router is mounted under (`""` at the root, `/limits` when
/// nested there), so that every link is absolute and right under any
/// prefix.
#[derive(Clone, Debug)]
pub(super) struct Base(pub(super) String);

impl Base {
    /// `path` (starting with `/`) under the mount prefix. The overview
    /// (`/`) nested under `/limits` is `/limits` itself: axum's nested
    /// root does not answer `/limits/`.
    pub(super) fn to(&self, path: &str) -> String {
        match path.strip_prefix('/') {
            Some(rest) if !self.0.is_empty() && (rest.is_empty() || rest.starts_with('?')) => {
                format!("{}{rest}", self.0)
            }
            _ => format!("{}{path}", self.0),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let nested = parts
            .extensions
            .get::<NestedPath>()
            .map(|n| n.as_str().trim_end_matches('/').to_owned());
        Ok(Base(nested.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::Base;

    #[test]
    fn links_follow_the_mount_prefix() {
        let nested = Base("/limits".into());
        assert_eq!(nested.to("/"), "/limits");
        assert_eq!(nested.to("/?refresh=1"), "/limits?refresh=1");
        assert_eq!(nested.to("/limiters"), "/limits/limiters");
        let root = Base(String::new());
        assert_eq!(root.to("/"), "/");
        assert_eq!(root.to("/limiters"), "/limiters");
    }
}
