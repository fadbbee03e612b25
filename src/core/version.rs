//! HAProxy versions as the validator and the pods report them, compared by major.minor
//! (issue 16): a render checked by `haproxy -c` of another release may be rejected although the
//! fleet accepts it (3.x keywords on a 2.6 validator), or accepted although the fleet rejects it.
//!
//! Pure: text in, values out.

use std::fmt;

/// A HAProxy release line, `major.minor` (patch and distribution suffixes are ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HaproxyVersion {
    /// Major version (2, 3).
    pub major: u32,
    /// Minor version (6, 0, 2).
    pub minor: u32,
}

impl HaproxyVersion {
    /// Parses the first `N.M` of `text`: `haproxy -v`'s first line (`HAProxy version 2.6.12-1+deb12u4
    /// 2026/10/17 - https://haproxy.org/`) or `show info`'s `Version` (`3.0.11-1`). `None` when
    /// there is none.
    #[must_use]
    pub fn parse(text: &str) -> Option<HaproxyVersion> {
        let rest = text
            .trim()
            .strip_prefix("HAProxy version ")
            .unwrap_or(text.trim());
        let token = rest.split_whitespace().next()?;
        let mut parts = token.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(HaproxyVersion { major, minor })
    }

    /// The Debian suite whose `haproxy` package is this release line, for the images the
    /// Dockerfile builds (`--build-arg DEBIAN_SUITE=...`): bookworm 2.6, trixie 3.0.
    #[must_use]
    pub fn debian_suite(self) -> Option<&'static str> {
        match (self.major, self.minor) {
            (2, 6) => Some("bookworm"),
            (3, 0) => Some("trixie"),
            _ => None,
        }
    }
}

impl fmt::Display for HaproxyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How to fix a validator of another release line than the pods' `pods`: the image to run.
#[must_use]
pub fn fix_for(pods: HaproxyVersion) -> String {
    match pods.debian_suite() {
        Some(suite) => format!(
            "run the controller image built for HAProxy {pods} (Dockerfile --build-arg \
             DEBIAN_SUITE={suite}), or point --haproxy-bin at a haproxy {pods}"
        ),
        None => format!(
            "run a controller image whose haproxy -v is {pods}, or point --haproxy-bin at a \
             haproxy {pods}"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_haproxy_and_the_dataplane_api_print() {
        let v = |major, minor| Some(HaproxyVersion { major, minor });
        assert_eq!(
            HaproxyVersion::parse(
                "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"
            ),
            v(2, 6)
        );
        assert_eq!(HaproxyVersion::parse("3.0.11-1"), v(3, 0));
        assert_eq!(HaproxyVersion::parse("3.2-dev4"), v(3, 2));
        assert_eq!(HaproxyVersion::parse(""), None);
        assert_eq!(HaproxyVersion::parse("unknown"), None);
        assert_eq!(v(3, 2).unwrap().to_string(), "3.2");
        assert!(fix_for(v(3, 0).unwrap()).contains("DEBIAN_SUITE=trixie"));
        assert!(fix_for(v(3, 2).unwrap()).contains("haproxy -v is 3.2"));
    }
}
